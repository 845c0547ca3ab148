# RUN: %PYTHON %s | FileCheck %s
# A transpose (48x4096 -> 4096x48) without a root: its vector rows run along the loop of
# the output's last dim (d0 here), every other loop in steps of one. Rows along the last
# loop kept the input's 4096-long row whole in a one-row workgroup: one vector of 4096
# elements, 40 s of compile.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])

from iree.compiler import ir

from mlir_ansor.dialect_helpers.linalg_info import analyze_task
from mlir_ansor.sketch_passes.annotation import violations
from mlir_ansor.sketch_passes.program import ParallelStep, Program, SplitStep, VectorizeStep
from mlir_ansor.sketch_passes.sketch import Sketch
from mlir_ansor.transform_scripts.emitter import emit_standalone

TRANSPOSE = """func.func @main(%x: tensor<48x4096xf32>) -> tensor<4096x48xf32> {
  %e = tensor.empty() : tensor<4096x48xf32>
  %t = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1, d0)>], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<48x4096xf32>) outs(%e : tensor<4096x48xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<4096x48xf32>
  return %t : tensor<4096x48xf32>
}"""
ops = analyze_task(TRANSPOSE)
A = "op0_generic"
for d0, d1, par in ((1, 2, (0,)), (16, 16, (0, 1))):
    prog = Program(Sketch(anchor=A), (SplitStep(A, 0, (d0,)), SplitStep(A, 1, (d1,)),
                                       ParallelStep(A, par), VectorizeStep(A)))
    assert violations(ops, prog) == [], violations(ops, prog)
    with ir.Context(), ir.Location.unknown():
        print(emit_standalone(ops, prog))
# One row of d0 per workgroup (the whole d1 in it): the rows are that d0 element, d1 in
# steps of one.
# CHECK: tile_using_forall {{.*}} tile_sizes [1, 0]
# CHECK: tile_using_for {{.*}} tile_sizes [0, 1]
# CHECK: transform.structured.vectorize
# 16 x 16 per workgroup: output rows of its 16 d0 elements (whole), one d1 at a time.
# CHECK: tile_using_forall {{.*}} tile_sizes [16, 16]
# CHECK: tile_using_for {{.*}} tile_sizes [0, 1]
# CHECK: transform.structured.vectorize
