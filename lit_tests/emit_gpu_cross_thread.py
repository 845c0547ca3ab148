# RUN: %PYTHON %s | FileCheck %s
# GPU cross-thread reduction (AddCrossThreadReduction) on a row sum of 8 rows of 4096:
# blocks over rows, the row split over the block's threads (tile_reduction_using_forall on
# threadIdx.x), each thread's slot initialized by its own thread, the slice reduced
# `vector` elements per step, the slots combined by one thread per row after the barrier,
# and the kernel's workgroup size equal to the thread count.
import random

from iree.compiler import ir

from mlir_ansor.dialect_helpers.linalg_info import analyze_task
from mlir_ansor.sketch_passes.annotation import annotate
from mlir_ansor.sketch_passes.rules import default_gpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from mlir_ansor.transform_scripts.gpu_emitter import build_gpu_strategy
from helpers import payload

ops = analyze_task(payload("row_sum"))
sketches = generate_sketches(ops, default_gpu_rules(), gpu=True)
print("// sketches:", [s.name for s in sketches])
# CHECK: // sketches: ['AddCrossThreadReduction', 'Plain']

prog = annotate(ops, sketches[0], random.Random(0))
for s in prog.steps:
    print("// step:", s)
with ir.Context(), ir.Location.unknown():
    module = ir.Module.create()
    module.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
    with ir.InsertionPoint(module.body):
        build_gpu_strategy(ops, prog, "gpu_strategy")
    assert module.operation.verify()
    print(module)
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
