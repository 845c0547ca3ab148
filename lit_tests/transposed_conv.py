# RUN: %PYTHON %s | FileCheck %s
# A transposed conv as torch-mlir imports it (ConvTranspose2d 2 -> 3, kernel 4, stride 2,
# padding 1 on 3x3: the input spread with zeros into 9x9, then a 4x4 conv) becomes four
# phase convs with 2x2 kernels over the unspread input; their outputs interleave back.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from helpers import payload

from mlir_ansor.dialect_helpers.transposed_conv import decompose_transposed_convs

text, n = decompose_transposed_convs(payload("conv_transpose_k4s2"))
print("// decomposed:", n)
print(text)
# Nothing of another form is touched.
print("// again:", decompose_transposed_convs(text)[1])

# CHECK: // decomposed: 1
# CHECK: func.func @main(%[[X:.*]]: tensor<1x2x3x3xf32>) -> tensor<1x3x6x6xf32>
# The kernel taps by phase: [sy, sx, F, C, Jy, Jx], computed from the weight once.
# CHECK: tensor.expand_shape {{.*}} into tensor<3x2x2x2x2x2xf32>
# CHECK: linalg.transpose {{.*}} permutation = [3, 5, 0, 1, 2, 4]
# Phase (0, 0) (outputs 0, 2, 4 per dim): the spread put X[i] at 2 + 2i, so taps k = 0, 2
# meet it, reading X[q - 1 + j] (padded low by 1).
# CHECK: tensor.pad %[[X]] low[0, 0, 1, 1] high[0, 0, 0, 0]
# CHECK: tensor.extract_slice {{.*}}[0, 0, 0, 0, 0, 0] [1, 1, 3, 2, 2, 2] [1, 1, 1, 1, 1, 1] : tensor<2x2x3x2x2x2xf32> to tensor<3x2x2x2xf32>
# CHECK: linalg.conv_2d_nchw_fchw {{.*}} ins({{.*}} : tensor<1x2x4x4xf32>, tensor<3x2x2x2xf32>) outs({{.*}} : tensor<1x3x3x3xf32>)
# CHECK: tensor.insert_slice {{.*}}[0, 0, 0, 0, 0, 0] [1, 1, 1, 3, 3, 3] [1, 1, 1, 1, 1, 1] : tensor<1x3x3x3xf32> into tensor<2x2x1x3x3x3xf32>
# CHECK-COUNT-3: linalg.conv_2d_nchw_fchw {{.*}} tensor<3x2x2x2xf32>
# CHECK-NOT: linalg.conv_2d_nchw_fchw
# The phases interleave: [sy, sx, N, F, Qy, Qx] -> [N, F, Qy, sy, Qx, sx] -> 6x6.
# CHECK: linalg.transpose {{.*}} permutation = [2, 3, 4, 0, 5, 1]
# CHECK: tensor.collapse_shape {{.*}} into tensor<1x3x6x6xf32>
# CHECK: // again: 0
