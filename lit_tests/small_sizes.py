# RUN: %PYTHON %s | FileCheck %s
# RUN: %PYTHON %s | FileCheck --check-prefixes=CLEAN %s
# Static branches for the smallest sizes: the rows of %x are the size; in the branch of
# sizes up to 4 the matmul's rows are zero-padded to 4 (its accumulator a fresh static
# fill), the op runs on the static shape through tensor.cast (which IREE folds into it),
# and its result is cut back to the size. The branch of the rest keeps the dynamic op.
# No marker attribute and no branch tag is left.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])

from mlir_ansor.dialect_helpers.small_sizes import SmallSizes, with_small_sizes

MODEL = """func.func @main(%x: tensor<?x64xf32>) -> tensor<?x32xf32> {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %w = arith.constant dense<1.0> : tensor<64x32xf32>
  %m = tensor.dim %x, %c0 : tensor<?x64xf32>
  %e = tensor.empty(%m) : tensor<?x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<?x32xf32>) -> tensor<?x32xf32>
  %r = linalg.matmul ins(%x, %w : tensor<?x64xf32>, tensor<64x32xf32>) outs(%f : tensor<?x32xf32>) -> tensor<?x32xf32>
  return %r : tensor<?x32xf32>
}"""
print(with_small_sizes(MODEL, SmallSizes(0, 0, (4,), ((0, 0),))))
# CLEAN-NOT: ansor_pad_dims
# CLEAN-NOT: ansor_kernel
# CHECK: func.func @main(%[[X:.*]]: tensor<?x64xf32>)
# CHECK: %[[C5:.*]] = arith.constant 5 : index
# CHECK: cf.cond_br %{{.*}}, ^[[SMALL:.*]], ^[[REST:.*]]
# CHECK: call @ansor_size_branch_0(
# CHECK: call @ansor_size_branch_1(
# CHECK: func.func private @ansor_size_branch_0(%[[A:.*]]: tensor<?x64xf32>,
# CHECK: %[[SIZE:.*]] = tensor.dim %{{.*}} : tensor<?x32xf32>
# CHECK: %[[ROWS:.*]] = tensor.dim %[[A]], %{{.*}} : tensor<?x64xf32>
# CHECK: %[[Z:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<4x64xf32>)
# CHECK: %[[IN:.*]] = tensor.insert_slice %[[A]] into %[[Z]][0, 0] [%[[ROWS]], 64] [1, 1] : tensor<?x64xf32> into tensor<4x64xf32>
# CHECK: %[[CIN:.*]] = tensor.cast %[[IN]] : tensor<4x64xf32> to tensor<?x64xf32>
# CHECK: %[[ACC:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<4x32xf32>)
# CHECK: %[[CACC:.*]] = tensor.cast %[[ACC]] : tensor<4x32xf32> to tensor<?x32xf32>
# CHECK: %[[MM:.*]] = linalg.matmul ins(%[[CIN]], %{{.*}} : tensor<?x64xf32>, tensor<64x32xf32>) outs(%[[CACC]] : tensor<?x32xf32>)
# CHECK: %[[CUT:.*]] = tensor.extract_slice %[[MM]][0, 0] [%[[SIZE]], 32] [1, 1]
# CHECK: return %[[CUT]]
# CHECK: func.func private @ansor_size_branch_1(
# CHECK-NOT: insert_slice
# CHECK: linalg.matmul ins(%{{.*}} : tensor<?x64xf32>, tensor<64x32xf32>) outs(%{{.*}} : tensor<?x32xf32>)
# CHECK-NOT: extract_slice
# CHECK: return
