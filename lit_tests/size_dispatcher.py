# RUN: %PYTHON %s | FileCheck %s
# A size dispatcher on the rows of %x: the work that depends on the argument moves into one
# private copy per size range, each copy's linalg ops tagged with its branch; the weight's
# transpose (no argument in it) stays in the entry, computed once; the entry picks the copy
# by a chain of conditional branches on tensor.dim: blocks of the entry (not scf.if regions,
# out of which IREE does not hoist constant work such as the weights' packing).
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])

from mlir_ansor.dialect_helpers.size_dispatch import branch_by_size

MODEL = """func.func @main(%x: tensor<?x64xf32>) -> tensor<?x32xf32> {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %w = arith.constant dense<1.0> : tensor<32x64xf32>
  %e0 = tensor.empty() : tensor<64x32xf32>
  %wt = linalg.transpose ins(%w : tensor<32x64xf32>) outs(%e0 : tensor<64x32xf32>) permutation = [1, 0]
  %m = tensor.dim %x, %c0 : tensor<?x64xf32>
  %e = tensor.empty(%m) : tensor<?x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<?x32xf32>) -> tensor<?x32xf32>
  %r = linalg.matmul ins(%x, %wt : tensor<?x64xf32>, tensor<64x32xf32>) outs(%f : tensor<?x32xf32>) -> tensor<?x32xf32>
  return %r : tensor<?x32xf32>
}"""
print(branch_by_size(MODEL, 0, 0, [9, 60]))
# CHECK: func.func @main(%[[X:.*]]: tensor<?x64xf32>)
# CHECK: %[[WT:.*]] = linalg.transpose
# CHECK-NOT: ansor_kernel
# CHECK: %[[M:.*]] = tensor.dim %[[X]], %{{.*}} : tensor<?x64xf32>
# CHECK: %[[C9:.*]] = arith.constant 9 : index
# CHECK: %[[LT9:.*]] = arith.cmpi ult, %[[M]], %[[C9]] : index
# CHECK: cf.cond_br %[[LT9]], ^[[B0:.*]], ^[[T1:.*]]
# CHECK: ^[[B0]]:
# CHECK: %[[R0:.*]] = call @ansor_size_branch_0(%[[X]], {{.*}}%[[WT]]
# CHECK: cf.br ^[[EXIT:.*]](%[[R0]] : tensor<?x32xf32>)
# CHECK: ^[[T1]]:
# CHECK: %[[C60:.*]] = arith.constant 60 : index
# CHECK: %[[LT60:.*]] = arith.cmpi ult, %[[M]], %[[C60]]
# CHECK: cf.cond_br %[[LT60]], ^[[B1:.*]], ^[[B2:.*]]
# CHECK: ^[[B1]]:
# CHECK: call @ansor_size_branch_1(
# CHECK: cf.br ^[[EXIT]](
# CHECK: ^[[B2]]:
# CHECK: call @ansor_size_branch_2(
# CHECK: cf.br ^[[EXIT]](
# CHECK: ^[[EXIT]](%[[OUT:.*]]: tensor<?x32xf32>):
# CHECK: return %[[OUT]] : tensor<?x32xf32>
# CHECK: func.func private @ansor_size_branch_0(
# CHECK: linalg.fill {ansor_kernel = "b0"}
# CHECK: linalg.matmul {ansor_kernel = "b0"}
# CHECK: func.func private @ansor_size_branch_1(
# CHECK: linalg.matmul {ansor_kernel = "b1"}
# CHECK: func.func private @ansor_size_branch_2(
# CHECK: linalg.matmul {ansor_kernel = "b2"}
