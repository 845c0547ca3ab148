// nn.Linear(64, 32) then x @ y of two activations, as torch-mlir imports them: the weight is
// a constant read through a transpose (packable); the second matmul has no constant operand.
func.func @main(%x: tensor<8x64xf32>, %y: tensor<32x48xf32>) -> tensor<8x48xf32> {
  %w = arith.constant dense<0.25> : tensor<32x64xf32>
  %c0 = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<64x32xf32>
  %wt = linalg.transpose ins(%w : tensor<32x64xf32>) outs(%et : tensor<64x32xf32>) permutation = [1, 0]
  %e = tensor.empty() : tensor<8x32xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<8x32xf32>) -> tensor<8x32xf32>
  %h = linalg.matmul ins(%x, %wt : tensor<8x64xf32>, tensor<64x32xf32>) outs(%f : tensor<8x32xf32>) -> tensor<8x32xf32>
  %e2 = tensor.empty() : tensor<8x48xf32>
  %f2 = linalg.fill ins(%c0 : f32) outs(%e2 : tensor<8x48xf32>) -> tensor<8x48xf32>
  %o = linalg.matmul ins(%h, %y : tensor<8x32xf32>, tensor<32x48xf32>) outs(%f2 : tensor<8x48xf32>) -> tensor<8x48xf32>
  return %o : tensor<8x48xf32>
}
