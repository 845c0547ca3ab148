func.func @main(%a: tensor<8x32x32xf32>) -> tensor<8x64x64xf32> {
  %e = tensor.empty() : tensor<8x64x64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
      iterator_types = ["parallel", "parallel", "parallel"]} outs(%e : tensor<8x64x64xf32>) {
    ^bb0(%out: f32):
      %i0 = linalg.index 0 : index
      %i1 = linalg.index 1 : index
      %i2 = linalg.index 2 : index
      %c2 = arith.constant 2 : index
      %h = arith.divui %i1, %c2 : index
      %w = arith.divui %i2, %c2 : index
      %x = tensor.extract %a[%i0, %h, %w] : tensor<8x32x32xf32>
      linalg.yield %x : f32 } -> tensor<8x64x64xf32>
  return %r : tensor<8x64x64xf32>
}
