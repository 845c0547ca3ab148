# RUN: %PYTHON %s | FileCheck %s
# Two micro-kernel loops (PeelStep on both): 197 x 197 (attention scores over 197 tokens).
# With both whole at S1 the cache write's local tile would be the whole 197 x 197 plane, so
# the outer one is peeled at S1 (S1 tiles of its register tile, 8 rows) and the inner one
# at S2; the copies the first peel made are matched one by one (a match takes one target).
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from iree.compiler import ir

from mlir_ansor.dialect_helpers.linalg_info import analyze_task
from mlir_ansor.sketch_passes.program import (ParallelStep, PeelStep, Program, SplitStep,
                                              UnrollStep, VectorizeStep)
from mlir_ansor.sketch_passes.rules import CacheWrite, MultiLevelTile
from mlir_ansor.sketch_passes.sketch import Sketch
from mlir_ansor.transform_scripts.emitter import emit_standalone

MM = """func.func @main(%a: tensor<197x64xf32>, %b: tensor<64x197xf32>) -> tensor<197x197xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<197x197xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<197x197xf32>) -> tensor<197x197xf32>
  %r = linalg.matmul ins(%a, %b : tensor<197x64xf32>, tensor<64x197xf32>) outs(%f : tensor<197x197xf32>) -> tensor<197x197xf32>
  return %r : tensor<197x197xf32>
}"""
ops = analyze_task(MM)
R = "op1_matmul"
sketch = Sketch(anchor=R, structure=(CacheWrite(R), MultiLevelTile(R)),
                rules=("AddCacheWrite", "MultiLevelTiling"))
prog = Program(sketch, (SplitStep(R, 0, (1, 1, 8)), SplitStep(R, 1, (1, 1, 32)),
                        PeelStep(R, 0), PeelStep(R, 1), SplitStep(R, 2, (64, 1)),
                        ParallelStep(R, ()), UnrollStep(R, 1), VectorizeStep(R)))
with ir.Context(), ir.Location.unknown():
    print(emit_standalone(ops, prog))
# S0: one workgroup (both loops whole).
# CHECK: tile_using_forall {{.*}} tile_sizes [197, 0, 0]
# S1 (cache write): 8 rows, every column; that loop is peeled.
# CHECK: %[[F:.*]], %[[S1:.*]] = transform.structured.fuse {{.*}} tile_sizes [8, 0, 0]
# CHECK: %[[C1:.*]] = transform.cast %[[S1]] : !transform.any_op to !transform.op<"scf.for">
# CHECK: %[[M1:.*]], %[[R1:.*]] = transform.loop.peel %[[C1]]
# CHECK-DAG: transform.structured.match interface{TilingInterface} in %[[M1]]
# CHECK-DAG: transform.structured.match interface{TilingInterface} in %[[R1]]
# S2: the columns in tiles of 32 (the rows are the S1 tile), then their peel in both copies.
# CHECK: %[[T:.*]], %[[L:.*]] = transform.structured.tile_using_for {{.*}} tile_sizes [0, 32, 0]
# CHECK: %[[C2:.*]] = transform.cast %[[L]] : !transform.any_op to !transform.op<"scf.for">
# CHECK: %[[M2:.*]], %[[R2:.*]] = transform.loop.peel %[[C2]]
# CHECK: transform.foreach %[[R2]]
# CHECK: transform.structured.match ops{["linalg.matmul"]}
# CHECK: transform.foreach %[[M2]]
# CHECK: transform.structured.match ops{["linalg.matmul"]}
