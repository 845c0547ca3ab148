# RUN: %PYTHON %s | FileCheck %s
# A softmax over a dynamic row (`?` x `?`, read at a nominal 97) without a root: rows of one
# per workgroup, the row kept whole in it (its max and sum are fused in), and every op's
# innermost loop cut into chunks of 32 elements. The full chunks are static vectors; the
# partial last chunk (a dynamic size) is peeled and cut to single elements. The two row
# reductions accumulate 32 partial results (rfactor) in the full chunks.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from dataclasses import replace

from iree.compiler import ir

from mlir_ansor.dialect_helpers.linalg_info import analyze_task
from mlir_ansor.sketch_passes.annotation import violations
from mlir_ansor.sketch_passes.program import ParallelStep, Program, SplitStep, VectorizeStep
from mlir_ansor.sketch_passes.sketch import Sketch
from mlir_ansor.transform_scripts.emitter import emit_standalone

SOFTMAX = """func.func @main(%x: tensor<12x97x97xf32>) -> tensor<12x97x97xf32> {
  %ninf = arith.constant 0xFFC00000 : f32
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<12x97x97xf32>
  %er = tensor.empty() : tensor<12x97xf32>
  %fm = linalg.fill ins(%ninf : f32) outs(%er : tensor<12x97xf32>) -> tensor<12x97xf32>
  %m = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x : tensor<12x97x97xf32>) outs(%fm : tensor<12x97xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.maxnumf %in, %out : f32
    linalg.yield %0 : f32
  } -> tensor<12x97xf32>
  %fs = linalg.fill ins(%zero : f32) outs(%er : tensor<12x97xf32>) -> tensor<12x97xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %m : tensor<12x97x97xf32>, tensor<12x97xf32>) outs(%fs : tensor<12x97xf32>) {
  ^bb0(%in: f32, %mx: f32, %out: f32):
    %0 = arith.subf %in, %mx : f32
    %1 = math.exp %0 : f32
    %2 = arith.addf %1, %out : f32
    linalg.yield %2 : f32
  } -> tensor<12x97xf32>
  %o = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %m, %s : tensor<12x97x97xf32>, tensor<12x97xf32>, tensor<12x97xf32>) outs(%e : tensor<12x97x97xf32>) {
  ^bb0(%in: f32, %mx: f32, %sm: f32, %out: f32):
    %0 = arith.subf %in, %mx : f32
    %1 = math.exp %0 : f32
    %2 = arith.divf %1, %sm : f32
    linalg.yield %2 : f32
  } -> tensor<12x97x97xf32>
  return %o : tensor<12x97x97xf32>
}"""
ops = [replace(o, dynamic_loops=tuple(l for l in (1, 2) if l < len(o.extents)))
       for o in analyze_task(SOFTMAX)]
A = "op4_generic"
prog = Program(Sketch(anchor=A), (SplitStep(A, 0, (4,)), SplitStep(A, 1, (1,)),
                                   SplitStep(A, 2, (97, 32)), ParallelStep(A, (1, 0)),
                                   VectorizeStep(A)))
assert violations(ops, prog) == [], violations(ops, prog)
with ir.Context(), ir.Location.unknown():
    print(emit_standalone(ops, prog))
# S0: 4 heads x one row per workgroup; the row (a dynamic extent) stays whole.
# CHECK: tile_using_forall {{.*}} tile_sizes [4, 1, 0]
# The row maximum: rows of one, then 32 partial maxima over the row's chunks, the loop
# peeled, the partial chunk's op cut to single elements.
# CHECK: tile_using_for {{.*}} tile_sizes [1, 1, 0]
# CHECK: %{{.*}}, %{{.*}}, %{{.*}}, %[[RL:.*]] = transform.structured.tile_reduction_using_for {{.*}} by tile_sizes = [0, 0, 32]
# CHECK: %[[RC:.*]] = transform.cast %[[RL]] : !transform.any_op to !transform.op<"scf.for">
# CHECK: %[[RMAIN:.*]], %[[RREST:.*]] = transform.loop.peel %[[RC]]
# CHECK: %[[RB:.*]] = transform.structured.match ops{["linalg.generic"]} in %[[RREST]]
# CHECK: tile_using_for %[[RB]] tile_sizes [0, 0, 1]
# CHECK: transform.structured.match ops{["linalg.generic"]} in %[[RMAIN]]
# The sum of exponentials: the same kernel.
# CHECK: tile_reduction_using_for {{.*}} by tile_sizes = [0, 0, 32]
# CHECK: transform.loop.peel
# The normalised output: chunks of 32, peeled, the partial chunk in single elements.
# CHECK: %{{.*}}, %[[L:.*]] = transform.structured.tile_using_for {{.*}} tile_sizes [0, 0, 32]
# CHECK: %[[C:.*]] = transform.cast %[[L]] : !transform.any_op to !transform.op<"scf.for">
# CHECK: %[[MAIN:.*]], %[[REST:.*]] = transform.loop.peel %[[C]]
# CHECK: %[[B:.*]] = transform.structured.match ops{["linalg.generic"]} in %[[REST]]
# CHECK: tile_using_for %[[B]] tile_sizes [0, 0, 1]
# The full chunks' accumulators stay in registers (hoisted out of the peeled loops).
# CHECK: transform.loop.hoist_loop_invariant_subsets %[[RMAIN]]
