# RUN: %PYTHON %s | FileCheck %s
# A dynamic row loop (`?` rows, read at a nominal 97): a micro-kernel of 6 rows in
# workgroups of 4 kernels (24 rows); the partial last kernel is peeled and cut to rows of
# one (a dynamic size cannot be vectorized), and the consumer runs unfused in rows.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from dataclasses import replace

from iree.compiler import ir

from mlir_ansor.dialect_helpers.linalg_info import analyze_task
from mlir_ansor.sketch_passes.program import (ParallelStep, PeelStep, Program, SplitStep,
                                              UnrollStep, VectorizeStep)
from mlir_ansor.sketch_passes.rules import MultiLevelTile
from mlir_ansor.sketch_passes.sketch import Sketch
from mlir_ansor.transform_scripts.emitter import emit_standalone

MM = """func.func @main(%a: tensor<97x256xf32>, %b: tensor<256x384xf32>, %bias: tensor<384xf32>) -> tensor<97x384xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<97x384xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<97x384xf32>) -> tensor<97x384xf32>
  %r = linalg.matmul ins(%a, %b : tensor<97x256xf32>, tensor<256x384xf32>) outs(%f : tensor<97x384xf32>) -> tensor<97x384xf32>
  %o = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%r, %bias : tensor<97x384xf32>, tensor<384xf32>) outs(%e : tensor<97x384xf32>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<97x384xf32>
  return %o : tensor<97x384xf32>
}"""
ops = [replace(o, dynamic_loops=(0,)) for o in analyze_task(MM)]
R, A = "op1_matmul", "op2_generic"
sketch = Sketch(anchor=A, structure=(MultiLevelTile(R),), rules=("MultiLevelTiling",))
prog = Program(sketch, (SplitStep(R, 0, (4, 1, 6)), SplitStep(R, 1, (1, 2, 16)),
                        PeelStep(R, 0), SplitStep(R, 2, (64, 4)), ParallelStep(R, (0, 1)),
                        UnrollStep(R, 4), VectorizeStep(R)))
with ir.Context(), ir.Location.unknown():
    print(emit_standalone(ops, prog))
# S0: workgroups of 24 rows (even though 24 does not divide the nominal 97) x 32 columns.
# CHECK: tile_using_forall {{.*}} tile_sizes [24, 32]
# The forall's bounds resolved to the loads' sizes before the workgroup count is read from
# them (a bound read off a loaded binding cannot be lowered into the count).
# CHECK-NEXT: transform.apply_patterns to
# CHECK-NEXT: transform.apply_patterns.memref.resolve_ranked_shaped_type_result_dims
# CHECK: transform.iree.populate_workgroup_count_region_using_num_threads_slice
# S1 keeps the rows whole (the workgroup's): only the columns and k are tiled.
# CHECK: tile_using_for {{.*}} tile_sizes [0, 32, 0]
# CHECK: tile_using_for {{.*}} tile_sizes [0, 0, 64]
# S2: kernels of 6 rows x 16 columns; the row loop is peeled.
# CHECK: %[[T:.*]], %[[L:.*]]:2 = transform.structured.tile_using_for {{.*}} tile_sizes [6, 16, 0]
# CHECK: %[[C:.*]] = transform.cast %[[L]]#0 : !transform.any_op to !transform.op<"scf.for">
# CHECK: %[[MAIN:.*]], %[[REST:.*]] = transform.loop.peel %[[C]]
# The partial kernel (a dynamic number of rows) in rows of one.
# CHECK: %[[B:.*]] = transform.structured.match ops{["linalg.matmul"]} in %[[REST]]
# CHECK: %[[ROWS:.*]], %{{.*}} = transform.structured.tile_using_for %[[B]] tile_sizes [1, 0, 0]
# CHECK: %[[A:.*]] = transform.structured.match ops{["linalg.matmul"]} in %[[MAIN]]
# CHECK: %[[BOTH:.*]] = transform.merge_handles %[[A]], %[[ROWS]]
# CHECK: tile_using_for %[[BOTH]] tile_sizes [0, 0, 4]
