// BERT attention (IREE 3.13 flow level): a 12x128x64x128 batch matmul whose consumer transposes
// its output to 128x12x64. Strategies that folded unit dims here failed to compile.
#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2) -> (d1, d0, d2)>
module {
  flow.executable private @main_dispatch_9 {
    flow.executable.export public @main_dispatch_9_batch_matmul_12x128x64x128_f32 workgroups() -> (index, index, index) {
      %x, %y, %z = iree_tensor_ext.dispatch.workgroup_count_from_slice()
      flow.return %x, %y, %z : index, index, index
    }
    builtin.module {
      func.func @main_dispatch_9_batch_matmul_12x128x64x128_f32(%arg0: !iree_tensor_ext.dispatch.tensor<readonly:tensor<12x128x128xf32>>, %arg1: !iree_tensor_ext.dispatch.tensor<readonly:tensor<12x128x64xf32>>, %arg2: !iree_tensor_ext.dispatch.tensor<writeonly:tensor<128x12x64xf32>>) {
        %cst = arith.constant 0.000000e+00 : f32
        %0 = iree_tensor_ext.dispatch.tensor.load %arg0, offsets = [0, 0, 0], sizes = [12, 128, 128], strides = [1, 1, 1] : !iree_tensor_ext.dispatch.tensor<readonly:tensor<12x128x128xf32>> -> tensor<12x128x128xf32>
        %1 = iree_tensor_ext.dispatch.tensor.load %arg1, offsets = [0, 0, 0], sizes = [12, 128, 64], strides = [1, 1, 1] : !iree_tensor_ext.dispatch.tensor<readonly:tensor<12x128x64xf32>> -> tensor<12x128x64xf32>
        %2 = tensor.empty() : tensor<128x12x64xf32>
        %3 = tensor.empty() : tensor<12x128x64xf32>
        %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<12x128x64xf32>) -> tensor<12x128x64xf32>
        %5 = linalg.batch_matmul ins(%0, %1 : tensor<12x128x128xf32>, tensor<12x128x64xf32>) outs(%4 : tensor<12x128x64xf32>) -> tensor<12x128x64xf32>
        %6 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%5 : tensor<12x128x64xf32>) outs(%2 : tensor<128x12x64xf32>) {
        ^bb0(%in: f32, %out: f32):
          linalg.yield %in : f32
        } -> tensor<128x12x64xf32>
        iree_tensor_ext.dispatch.tensor.store %6, %arg2, offsets = [0, 0, 0], sizes = [128, 12, 64], strides = [1, 1, 1] : tensor<128x12x64xf32> -> !iree_tensor_ext.dispatch.tensor<writeonly:tensor<128x12x64xf32>>
        return
      }
    }
  }
  func.func @main(%arg0: tensor<12x128x128xf32>, %arg1: tensor<12x128x64xf32>) -> tensor<128x12x64xf32> {
    %0 = flow.dispatch @main_dispatch_9::@main_dispatch_9_batch_matmul_12x128x64x128_f32(%arg0, %arg1) : (tensor<12x128x128xf32>, tensor<12x128x64xf32>) -> tensor<128x12x64xf32>
    return %0 : tensor<128x12x64xf32>
  }
}
