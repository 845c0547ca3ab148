// A 3x3x3 conv over a depth of 4 with one plane of zero padding around (as torch-mlir
// imports Conv3d(2, 3, 3, padding=1)), the weight an argument.
func.func @main(%x: tensor<1x2x4x5x5xf32>, %w: tensor<3x2x3x3x3xf32>) -> tensor<1x3x4x5x5xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %padded = tensor.pad %x low[0, 0, 1, 1, 1] high[0, 0, 1, 1, 1] {
  ^bb0(%a: index, %b: index, %c: index, %d: index, %e: index):
    tensor.yield %cst : f32
  } : tensor<1x2x4x5x5xf32> to tensor<1x2x6x7x7xf32>
  %0 = tensor.empty() : tensor<1x3x4x5x5xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<1x3x4x5x5xf32>) -> tensor<1x3x4x5x5xf32>
  %2 = linalg.conv_3d_ncdhw_fcdhw {dilations = dense<1> : vector<3xi64>, strides = dense<1> : vector<3xi64>} ins(%padded, %w : tensor<1x2x6x7x7xf32>, tensor<3x2x3x3x3xf32>) outs(%1 : tensor<1x3x4x5x5xf32>) -> tensor<1x3x4x5x5xf32>
  return %2 : tensor<1x3x4x5x5xf32>
}
