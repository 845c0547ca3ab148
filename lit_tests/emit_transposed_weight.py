# RUN: %PYTHON %s | FileCheck %s
# A matmul reading its weight transposed (nn.Linear: B[n, k]). Register tiles of 16 lanes x
# 16 reduction elements take the 16x16 shuffle transpose; any other shape the 1-D shuffle.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from iree.compiler import ir

from mlir_ansor.dialect_helpers.linalg_info import analyze_task
from mlir_ansor.sketch_passes.program import (ParallelStep, Program, SplitStep, UnrollStep,
                                              VectorizeStep)
from mlir_ansor.sketch_passes.rules import MultiLevelTile
from mlir_ansor.sketch_passes.sketch import Sketch
from mlir_ansor.transform_scripts.emitter import emit_standalone

MMT = """func.func @main(%a: tensor<128x512xf32>, %b: tensor<256x512xf32>) -> tensor<128x256xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<128x256xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<128x256xf32>) -> tensor<128x256xf32>
  %r = linalg.matmul indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>]
       ins(%a, %b : tensor<128x512xf32>, tensor<256x512xf32>) outs(%f : tensor<128x256xf32>) -> tensor<128x256xf32>
  return %r : tensor<128x256xf32>
}"""
ops = analyze_task(MMT)
R = "op1_matmul"
sketch = Sketch(anchor=R, structure=(MultiLevelTile(R),), rules=("MultiLevelTiling",))


def emit(lanes, v):
    prog = Program(sketch, (SplitStep(R, 0, (2, 2, 8)), SplitStep(R, 1, (2, 1, lanes)),
                            SplitStep(R, 2, (64, v)), ParallelStep(R, (0, 1)),
                            UnrollStep(R, 1), VectorizeStep(R)))
    with ir.Context(), ir.Location.unknown():
        text = str(emit_standalone(ops, prog))
    print(f"// lanes={lanes} v={v}")
    print("\n".join(l for l in text.splitlines() if "lower_transpose" in l or "tile_using_for" in l))


emit(16, 16)
# CHECK-LABEL: // lanes=16 v=16
# CHECK: tile_using_for {{.*}} tile_sizes [0, 0, 64]
# CHECK: tile_using_for {{.*}} tile_sizes [0, 0, 16]
# CHECK: lower_transpose lowering_strategy = shuffle_16x16
emit(16, 8)
# CHECK-LABEL: // lanes=16 v=8
# CHECK: lower_transpose lowering_strategy = shuffle_1d
emit(8, 16)
# CHECK-LABEL: // lanes=8 v=16
# CHECK: lower_transpose lowering_strategy = shuffle_1d
