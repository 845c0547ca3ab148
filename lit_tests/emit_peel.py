# RUN: %PYTHON %s | FileCheck %s
# A micro-kernel loop (PeelStep): 197 rows (a prime) in register tiles of 8. The row loop
# stays whole at the workgroup and S1 levels, is tiled by 8 at S2, and the partial last
# tile is peeled; the root's copies in both loops are matched and go on together.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from iree.compiler import ir

from mlir_ansor.dialect_helpers.linalg_info import analyze_task
from mlir_ansor.sketch_passes.program import (ParallelStep, PeelStep, Program, SplitStep,
                                              UnrollStep, VectorizeStep)
from mlir_ansor.sketch_passes.rules import CacheWrite, MultiLevelTile
from mlir_ansor.sketch_passes.sketch import Sketch
from mlir_ansor.transform_scripts.emitter import emit_standalone

MM = """func.func @main(%a: tensor<197x256xf32>, %b: tensor<256x384xf32>) -> tensor<197x384xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<197x384xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<197x384xf32>) -> tensor<197x384xf32>
  %r = linalg.matmul ins(%a, %b : tensor<197x256xf32>, tensor<256x384xf32>) outs(%f : tensor<197x384xf32>) -> tensor<197x384xf32>
  return %r : tensor<197x384xf32>
}"""
ops = analyze_task(MM)
R = "op1_matmul"
sketch = Sketch(anchor=R, structure=(CacheWrite(R), MultiLevelTile(R)),
                rules=("AddCacheWrite", "MultiLevelTiling"))
prog = Program(sketch, (SplitStep(R, 0, (1, 1, 8)), SplitStep(R, 1, (4, 2, 16)),
                        PeelStep(R, 0), SplitStep(R, 2, (64, 4)), ParallelStep(R, (1,)),
                        UnrollStep(R, 4), VectorizeStep(R)))
with ir.Context(), ir.Location.unknown():
    print(emit_standalone(ops, prog))
# S0: workgroups over the columns only (the row loop is whole).
# CHECK: tile_using_forall {{.*}} tile_sizes [0, 128, 0]
# S1 (cache write): the whole rows, 32 columns.
# CHECK: transform.structured.fuse {{.*}} tile_sizes [0, 32, 0]
# CHECK: tile_using_for {{.*}} tile_sizes [0, 0, 64]
# S2: 8 rows x 16 columns, then the peel of the row loop.
# CHECK: %[[T:.*]], %[[L:.*]]:2 = transform.structured.tile_using_for {{.*}} tile_sizes [8, 16, 0]
# CHECK: %[[C:.*]] = transform.cast %[[L]]#0 : !transform.any_op to !transform.op<"scf.for">
# CHECK: %[[MAIN:.*]], %[[REST:.*]] = transform.loop.peel %[[C]]
# CHECK-DAG: %[[A:.*]] = transform.structured.match ops{["linalg.matmul"]} in %[[MAIN]]
# CHECK-DAG: %[[B:.*]] = transform.structured.match ops{["linalg.matmul"]} in %[[REST]]
# CHECK: %[[BOTH:.*]] = transform.merge_handles %[[A]], %[[B]]
# R1 on both copies.
# CHECK: tile_using_for %[[BOTH]] tile_sizes [0, 0, 4]
