# RUN: %PYTHON %s | FileCheck %s
# A blocked micro-kernel loop (BlockPeelStep) with a packed operand (PackStep): the AVX2
# BLAS-style kernel of a 1024^3 matmul. Rows in workgroups of one 128-row block, register
# tiles of 6 (which divide no power of two: each block's last 2 rows peeled); columns in
# workgroups of 128, S1 tiles of 32; the B panel of each k step of 256 is copied to a
# contiguous buffer before the register-tile loops read it.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from iree.compiler import ir

from mlir_ansor.dialect_helpers.linalg_info import analyze_task
from mlir_ansor.sketch_passes.program import (BlockPeelStep, PackStep, ParallelStep, Program,
                                              SplitStep, UnrollStep, VectorizeStep)
from mlir_ansor.sketch_passes.rules import MultiLevelTile
from mlir_ansor.sketch_passes.sketch import Sketch
from mlir_ansor.transform_scripts.emitter import emit_standalone

T = "tensor<1024x1024xf32>"
MM = f"""func.func @main(%a: {T}, %b: {T}) -> {T} {{
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : {T}
  %f = linalg.fill ins(%c0 : f32) outs(%e : {T}) -> {T}
  %r = linalg.matmul ins(%a, %b : {T}, {T}) outs(%f : {T}) -> {T}
  return %r : {T}
}}"""
ops = analyze_task(MM)
R = "op1_matmul"
sketch = Sketch(anchor=R, structure=(MultiLevelTile(R),), rules=("MultiLevelTiling",))
prog = Program(sketch, (SplitStep(R, 0, (1, 1, 6)), SplitStep(R, 1, (4, 2, 16)),
                        BlockPeelStep(R, 0, 128), SplitStep(R, 2, (256, 1)),
                        ParallelStep(R, (0, 1)), UnrollStep(R, 4), PackStep(R, 1),
                        VectorizeStep(R)))
with ir.Context(), ir.Location.unknown():
    print(emit_standalone(ops, prog))
# S0: workgroups of one 128-row block x 128 columns.
# CHECK: tile_using_forall {{.*}} tile_sizes [128, 128, 0]
# S1: the block x 32 columns; R0: k steps of 256.
# CHECK: tile_using_for {{.*}} tile_sizes [128, 32, 0]
# CHECK: %[[R0:.*]], %{{.*}} = transform.structured.tile_using_for {{.*}} tile_sizes [0, 0, 256]
# The B operand of the k step (operand 1) copied, the copy moved in rows of 32.
# CHECK: %[[CP:.*]] = transform.iree.copy_tensor_operand %[[R0]][1]
# CHECK: tile_using_for %[[CP]] tile_sizes [1, 0]
# S2: 6 x 16 register tiles on the matmul that now reads the copy; the row loop peeled.
# CHECK: %{{.*}}, %[[L:.*]]:2 = transform.structured.tile_using_for %[[R0]] tile_sizes [6, 16, 0]
# CHECK: %[[C:.*]] = transform.cast %[[L]]#0 : !transform.any_op to !transform.op<"scf.for">
# CHECK: transform.loop.peel %[[C]]
# CHECK: transform.merge_handles
# CHECK: tile_using_for {{.*}} tile_sizes [0, 0, 1]
