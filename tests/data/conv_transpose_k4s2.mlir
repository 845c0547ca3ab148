#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func @main(%arg0: tensor<1x2x3x3xf32>) -> tensor<1x3x6x6xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant dense_resource<torch_tensor_2_3_4_4_torch.float32> : tensor<2x3x4x4xf32>
    %c3 = arith.constant 3 : index
    %0 = tensor.empty() : tensor<3x2x4x4xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<3x2x4x4xf32>) -> tensor<3x2x4x4xf32>
    %2 = linalg.generic {indexing_maps = [#map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} outs(%1 : tensor<3x2x4x4xf32>) {
    ^bb0(%out: f32):
      %8 = linalg.index 0 : index
      %9 = linalg.index 1 : index
      %10 = linalg.index 2 : index
      %11 = linalg.index 3 : index
      %12 = arith.subi %c3, %10 : index
      %13 = arith.subi %c3, %11 : index
      %extracted = tensor.extract %cst_0[%9, %8, %12, %13] : tensor<2x3x4x4xf32>
      linalg.yield %extracted : f32
    } -> tensor<3x2x4x4xf32>
    %3 = tensor.empty() : tensor<1x2x9x9xf32>
    %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<1x2x9x9xf32>) -> tensor<1x2x9x9xf32>
    %inserted_slice = tensor.insert_slice %arg0 into %4[0, 0, 2, 2] [1, 2, 3, 3] [1, 1, 2, 2] : tensor<1x2x3x3xf32> into tensor<1x2x9x9xf32>
    %5 = tensor.empty() : tensor<1x3x6x6xf32>
    %6 = linalg.fill ins(%cst : f32) outs(%5 : tensor<1x3x6x6xf32>) -> tensor<1x3x6x6xf32>
    %7 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%inserted_slice, %2 : tensor<1x2x9x9xf32>, tensor<3x2x4x4xf32>) outs(%6 : tensor<1x3x6x6xf32>) -> tensor<1x3x6x6xf32>
    return %7 : tensor<1x3x6x6xf32>
  }
}

{-#
  dialect_resources: {
    builtin: {
      torch_tensor_2_3_4_4_torch.float32: "0x04000000E8A38DBA13939E3D7E4BF3BDC98BD9BDB1B463BD53891E3D406B3BBB7A61EA3D42DD51BCD2701C3D9EAB32BDEA6BE8BCBD330DBED6C5C3BD84B573BD0834AF3B8DB9693D665EB13DD266C8BD69B980BD83BC563D2777F53D4357F3BC1534DD3DDA95BEBC653B7A3CB5D4053E791C09BEF017BABD48AC15BDCC7366BDCA66FF3DA49ABFBD701388BD3C85CEBDDF6C0ABE3E8EACBD9D19FE3D55E7833D54458F3D67BDF83B0B8D97BDD50BC83C6B000ABECE97D5BD736498BDE281BA3D8A51AD3D3F1983BD3DA8AABB680EBD3D3DEF123EAFA36A3D50BC9F3CB032C63D4B0DAEBDEE55DC3CD22EE5BDEAE0CCBD2EB498BDA6C0853D8AC26D3DF419AFBD949B323D2847A23DB83D95BCE195B43B41FC083DA962B73D15EB0D3E84CCE3BDCBA858BD9E59683D06ECF43D3B9E003EEF69023E4451EB3C998600BEDB8B593C58EEB8BD8FBE09BE1752033ECFC3E03DB16F13BE9250DD3C7A30C7BC4D94C2BC805087BD285A633D3F16AFBD33BB583D2F7D953D319DD33D0B0F5D3DD64812BEC8C1BFBD"
    }
  }
#-}
