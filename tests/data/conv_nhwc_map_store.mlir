// The codegen view of a channels-last conv + bias + ReLU whose output IREE writes into the
// next conv's padded input through an iree_linalg_ext.map_store (IREE 3.13).
#map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1 + d4, d2 + d5, d6)>
#map1 = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d4, d5, d6, d3)>
#map2 = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>
#map3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map4 = affine_map<(d0, d1, d2, d3) -> (d3)>
module {
  func.func @main(%arg0: tensor<16xf32>, %arg1: tensor<3x3x8x16xf32>, %arg2: tensor<1x18x18x8xf32>) -> tensor<16x16x16xf32> {
    %true = arith.constant true
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<1x16x16x16xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<1x16x16x16xf32>) -> tensor<1x16x16x16xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map1, #map2], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]} ins(%arg2, %arg1 : tensor<1x18x18x8xf32>, tensor<3x3x8x16xf32>) outs(%1 : tensor<1x16x16x16xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %7 = arith.mulf %in, %in_0 : f32
      %8 = arith.addf %out, %7 : f32
      linalg.yield %8 : f32
    } -> tensor<1x16x16x16xf32>
    %3 = tensor.empty() : tensor<1x16x16x16xf32>
    %4 = linalg.generic {indexing_maps = [#map3, #map4, #map3], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%2, %arg0 : tensor<1x16x16x16xf32>, tensor<16xf32>) outs(%3 : tensor<1x16x16x16xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %7 = arith.addf %in, %in_0 : f32
      %8 = arith.cmpf ugt, %7, %cst : f32
      %9 = arith.select %8, %7, %cst : f32
      linalg.yield %9 : f32
    } -> tensor<1x16x16x16xf32>
    %5 = tensor.empty() : tensor<16x16x16xf32>
    %6 = iree_linalg_ext.map_store %4 into %5 {
    ^bb0(%arg3: index, %arg4: index, %arg5: index, %arg6: index):
      %7 = affine.linearize_index disjoint [%arg3, %arg4] by (1, 16) : index
      iree_linalg_ext.yield %7, %arg5, %arg6, %true : index, index, index, i1
    } : tensor<1x16x16x16xf32> into tensor<16x16x16xf32> -> tensor<16x16x16xf32>
    return %6 : tensor<16x16x16xf32>
  }
}
