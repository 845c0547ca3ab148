#map = affine_map<(d0, d1) -> (d0)>
#map1 = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @main(%arg0: tensor<1000x64xf32>, %arg1: tensor<64xi64>, %arg2: tensor<64x64xf32>) -> tensor<64x64xf32> {
    %0 = tensor.empty() : tensor<64x64xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%arg1, %arg2 : tensor<64xi64>, tensor<64x64xf32>) outs(%0 : tensor<64x64xf32>) {
    ^bb0(%in: i64, %in_0: f32, %out: f32):
      %2 = linalg.index 1 : index
      %3 = arith.index_cast %in : i64 to index
      %extracted = tensor.extract %arg0[%3, %2] : tensor<1000x64xf32>
      %4 = arith.mulf %extracted, %in_0 : f32
      linalg.yield %4 : f32
    } -> tensor<64x64xf32>
    return %1 : tensor<64x64xf32>
  }
}
