#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
module {
  func.func @main(%a: tensor<4x64x32xf32>, %b: tensor<4x32x48xf32>) -> tensor<4x64x48xf32> {
    %c0 = arith.constant 0.0 : f32
    %c8 = arith.constant 8.0 : f32
    %e = tensor.empty() : tensor<4x64x48xf32>
    %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x64x48xf32>) -> tensor<4x64x48xf32>
    %r = linalg.batch_matmul ins(%a, %b : tensor<4x64x32xf32>, tensor<4x32x48xf32>) outs(%f : tensor<4x64x48xf32>) -> tensor<4x64x48xf32>
    %s = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%r : tensor<4x64x48xf32>) outs(%e : tensor<4x64x48xf32>) {
    ^bb0(%in: f32, %out: f32):
      %d = arith.divf %in, %c8 : f32
      linalg.yield %d : f32
    } -> tensor<4x64x48xf32>
    return %s : tensor<4x64x48xf32>
  }
}
