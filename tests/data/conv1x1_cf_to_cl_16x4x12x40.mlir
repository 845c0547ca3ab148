#in = affine_map<(h, w, co, ci) -> (ci, h, w)>
#wt = affine_map<(h, w, co, ci) -> (ci, co)>
#out = affine_map<(h, w, co, ci) -> (h, w, co)>
module {
  // A 1x1 conv reading a channels-first input into a channels-last output (ShuffleNet's
  // first conv after a channel split of its NCHW input): the broadcast operand is read by
  // columns (its contiguous dim is the row loop w), the lanes (co = 40) are no whole
  // number of vectors.
  // padded for a 3x3 depthwise conv after it (IREE stores it into the padded buffer, so the
  // dispatch keeps h and w apart).
  func.func @main(%x: tensor<16x4x12xf32>, %w: tensor<16x40xf32>) -> tensor<6x14x40xf32> {
    %c0 = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<4x12x40xf32>
    %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x12x40xf32>) -> tensor<4x12x40xf32>
    %r = linalg.generic {indexing_maps = [#in, #wt, #out],
                         iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%x, %w : tensor<16x4x12xf32>, tensor<16x40xf32>) outs(%f : tensor<4x12x40xf32>) {
    ^bb0(%a: f32, %b: f32, %acc: f32):
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %acc, %m : f32
      linalg.yield %s : f32
    } -> tensor<4x12x40xf32>
    %p = tensor.pad %r low[1, 1, 0] high[1, 1, 0] {
    ^bb0(%i: index, %j: index, %c: index):
      tensor.yield %c0 : f32
    } : tensor<4x12x40xf32> to tensor<6x14x40xf32>
    return %p : tensor<6x14x40xf32>
  }
}
