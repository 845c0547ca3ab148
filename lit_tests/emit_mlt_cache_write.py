# RUN: %PYTHON %s | FileCheck %s
# AddCacheWrite + MultiLevelTiling on a matmul: forall on the matmul, fill fused into the
# S1 tile (local accumulator), R0 / S2 / R1 tiling, vectorize, hoist, bufferize.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from helpers import payload, print_strategy

MM = payload("mm_128x256x64")
print_strategy(MM, 0, seed=1)
# CHECK: // sketch: AddCacheWrite+MultiLevelTiling
# CHECK: // step: SplitStep(op='op1_matmul', loop=0
# CHECK: // step: SplitStep(op='op1_matmul', loop=2
# CHECK: transform.named_sequence @strategy(%[[M:.*]]: !transform.any_op {transform.readonly})
# CHECK: transform.structured.match ops{["func.func"]} in %[[M]]
# CHECK: "iree-eliminate-empty-tensors"
# CHECK: %[[ALL:.*]] = transform.structured.match interface{TilingInterface}
# CHECK: %[[H:.*]]:2 = transform.split_handle %[[ALL]]
# CHECK: transform.structured.tile_using_forall %[[H]]#1 tile_sizes
# CHECK-SAME: mapping = [#gpu.block
# CHECK: transform.iree.populate_workgroup_count_region_using_num_threads_slice
# CHECK: transform.structured.fuse_into_containing_op %[[H]]#0
# CHECK: transform.structured.fuse %{{.*}} tile_sizes
# CHECK: transform.structured.tile_using_for %{{.*}} tile_sizes [0, 0,
# CHECK: transform.structured.vectorize
# CHECK: transform.loop.hoist_loop_invariant_subsets
# CHECK: transform.iree.bufferize
# CHECK: transform.iree.forall_to_workgroup
# CHECK: transform.apply_patterns.vector.lower_contraction
# CHECK: transform.annotate %{{.*}} "translation_info"
