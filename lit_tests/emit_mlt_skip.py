# RUN: %PYTHON %s | FileCheck %s
# MultiLevelTiling alone (SSRSRS accumulating in place, sketch 2 of a matmul): no local
# accumulator, so the matmul is tiled (S1) rather than fused with its fill.
# Skip alone (the plain sketch of a row sum): rows one at a time, each accumulated in
# chunk-wide partial sums (64 lanes for a row of 4096) that are reduced once per row.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from helpers import payload, print_strategy

MM = payload("mm_128x256x64")
ROW_SUM = payload("row_sum")
print_strategy(MM, 1, seed=2)
# CHECK: // sketch: MultiLevelTiling
# CHECK: transform.named_sequence @strategy
# CHECK: transform.structured.tile_using_forall
# CHECK: transform.structured.fuse_into_containing_op
# CHECK-NOT: transform.structured.fuse %
# CHECK: transform.structured.vectorize
# CHECK: transform.annotate %{{.*}} "translation_info"
print_strategy(ROW_SUM, 1, seed=0)
# CHECK: // sketch: Plain
# CHECK: transform.named_sequence @strategy
# CHECK: transform.structured.tile_using_forall
# CHECK: transform.structured.fuse_into_containing_op
# CHECK: transform.structured.tile_using_for %{{.*}} tile_sizes [1, 0]
# CHECK: %[[I:.*]], %[[P:.*]], %[[M:.*]], %[[L:.*]] = transform.structured.tile_reduction_using_for %{{.*}} by tile_sizes = [0, 64]
# CHECK-DAG: transform.structured.vectorize %[[P]]
# CHECK-DAG: transform.structured.vectorize %[[M]]
# CHECK: transform.loop.hoist_loop_invariant_subsets %[[L]]
# CHECK: transform.annotate %{{.*}} "translation_info"
