func.func @main(%a: tensor<128x256xf32>, %b: tensor<256x64xf32>) -> tensor<128x64xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<128x64xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<128x64xf32>) -> tensor<128x64xf32>
  %r = linalg.matmul ins(%a, %b : tensor<128x256xf32>, tensor<256x64xf32>) outs(%f : tensor<128x64xf32>) -> tensor<128x64xf32>
  return %r : tensor<128x64xf32>
}
