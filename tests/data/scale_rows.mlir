func.func @main(%a: tensor<64x256xf32>) -> tensor<64x256xf32> {
  %c = arith.constant 3.0 : f32
  %e = tensor.empty() : tensor<64x256xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<64x256xf32>) outs(%e : tensor<64x256xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.mulf %x, %c : f32
    linalg.yield %y : f32
  } -> tensor<64x256xf32>
  return %r : tensor<64x256xf32>
}
