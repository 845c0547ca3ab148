func.func @main(%a: tensor<4x64x32xf32>, %b: tensor<4x32x48xf32>) -> tensor<4x64x48xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x64x48xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x64x48xf32>) -> tensor<4x64x48xf32>
  %r = linalg.batch_matmul ins(%a, %b : tensor<4x64x32xf32>, tensor<4x32x48xf32>) outs(%f : tensor<4x64x48xf32>) -> tensor<4x64x48xf32>
  return %r : tensor<4x64x48xf32>
}
