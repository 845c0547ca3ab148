func.func @main(%a: tensor<65536xf32>) -> tensor<f32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>],
                       iterator_types = ["reduction"]} ins(%a : tensor<65536xf32>) outs(%f : tensor<f32>) {
  ^bb0(%x: f32, %acc: f32):
    %m = arith.mulf %x, %x : f32
    %s = arith.addf %m, %acc : f32
    linalg.yield %s : f32
  } -> tensor<f32>
  return %r : tensor<f32>
}
