# RUN: %PYTHON %s | FileCheck %s
# GPU cross-thread reduction (AddCrossThreadReduction) on a row sum of 8 rows of 4096:
# blocks over rows, the row split over the block's threads (tile_reduction_using_forall on
# threadIdx.x), each thread's slot initialized by its own thread, the slice reduced
# `vector` elements per step, the slots combined by one thread per row after the barrier,
# and the kernel's workgroup size equal to the thread count.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])

from mlir_ansor.dialect_helpers.linalg_info import analyze_task
from mlir_ansor.sketch_passes.rules import default_gpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from helpers import payload, print_gpu_strategy

ops = analyze_task(payload("row_sum"))
sketches = generate_sketches(ops, default_gpu_rules(), gpu=True)
print("// sketches:", [s.name for s in sketches])
# CHECK: // sketches: ['AddCrossThreadReduction', 'Plain']

print_gpu_strategy(ops, sketches[0], seed=0)
# CHECK: // sketch: AddCrossThreadReduction
# CHECK: // step: SplitStep(op='op1_reduce', loop=0, lengths=([[ROWS:[0-9]+]],), kind='split')
# CHECK: // step: SplitStep(op='op1_reduce', loop=1, lengths=([[T:[0-9]+]], [[V:[0-9]+]]), kind='split')
# CHECK: // step: ParallelStep(op='op1_reduce', loops=(0,), kind='parallel')
# CHECK: #iree_codegen.translation_info<pipeline = #iree_codegen.no_pipeline workgroup_size = [[[T]], 1, 1] subgroup_size = 32>
# CHECK: transform.structured.tile_using_forall %{{.*}} tile_sizes [[[ROWS]], 0](mapping = [#gpu.block<x>])
# CHECK: %[[FILL:.*]], %[[SPLIT:.*]], %[[COMBINE:.*]], %{{.*}} = transform.structured.tile_reduction_using_forall %{{.*}} by num_threads = [0, [[T]]] mapping = [#gpu.thread<x>]
# CHECK: transform.structured.tile_using_forall %[[FILL]] tile_sizes [0, 1](mapping = [#gpu.thread<x>])
# CHECK: transform.structured.tile_using_for %[[SPLIT]] tile_sizes [0, [[V]]]
# CHECK: transform.structured.tile_using_forall %[[COMBINE]] tile_sizes [1, 0](mapping = [#gpu.thread<x>])
# CHECK: transform.structured.vectorize
# CHECK: transform.iree.bufferize <target_gpu>
# CHECK: transform.iree.map_nested_forall_to_gpu_threads %{{.*}} workgroup_dims = [[[T]], 1, 1]
