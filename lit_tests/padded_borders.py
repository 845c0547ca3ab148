# RUN: %PYTHON %s | FileCheck %s
# A 3x3x3 conv over a depth of 4 with one plane of zero padding: the rule splits the depth
# (a sixth of its taps read padding) into three convs. The first output plane reads image
# planes 0-1 with the taps 1-2, the interior planes 1-2 read all four planes with every tap,
# the last plane reads planes 2-3 with the taps 0-1; each into its rows of one output.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from helpers import payload

from mlir_ansor.dialect_helpers.padded_borders import border_sites, with_border_split

text = payload("conv3d_padded_depth")
sites = border_sites(text)
print("// sites:", [(s.index, [a.image_dim for a in s.axes], s.regions) for s in sites])
print(with_border_split(text, [s.index for s in sites]))

# CHECK: // sites: [(1, [2], 3)]
# CHECK: func.func @main(%[[X:.*]]: tensor<1x2x4x5x5xf32>, %[[W:.*]]: tensor<3x2x3x3x3xf32>)
# CHECK: %[[P:.*]] = tensor.pad %[[X]] low[0, 0, 1, 1, 1] high[0, 0, 1, 1, 1]
# CHECK: %[[OUT:.*]] = tensor.empty() : tensor<1x3x4x5x5xf32>
# CHECK: %[[I0:.*]] = tensor.extract_slice %[[P]][0, 0, 1, 0, 0] [1, 2, 2, 7, 7]
# CHECK: %[[W0:.*]] = tensor.extract_slice %[[W]][0, 0, 1, 0, 0] [3, 2, 2, 3, 3]
# CHECK: %[[C0:.*]] = linalg.conv_3d_ncdhw_fcdhw {{.*}} ins(%[[I0]], %[[W0]] : {{.*}}) outs({{.*}} : tensor<1x3x1x5x5xf32>)
# CHECK: %[[R0:.*]] = tensor.insert_slice %[[C0]] into %[[OUT]][0, 0, 0, 0, 0] [1, 3, 1, 5, 5]
# CHECK: %[[I1:.*]] = tensor.extract_slice %[[P]][0, 0, 1, 0, 0] [1, 2, 4, 7, 7]
# CHECK: %[[C1:.*]] = linalg.conv_3d_ncdhw_fcdhw {{.*}} ins(%[[I1]], %[[W]] : {{.*}}) outs({{.*}} : tensor<1x3x2x5x5xf32>)
# CHECK: %[[R1:.*]] = tensor.insert_slice %[[C1]] into %[[R0]][0, 0, 1, 0, 0] [1, 3, 2, 5, 5]
# CHECK: %[[I2:.*]] = tensor.extract_slice %[[P]][0, 0, 3, 0, 0] [1, 2, 2, 7, 7]
# CHECK: %[[W2:.*]] = tensor.extract_slice %[[W]][0, 0, 0, 0, 0] [3, 2, 2, 3, 3]
# CHECK: %[[C2:.*]] = linalg.conv_3d_ncdhw_fcdhw {{.*}} ins(%[[I2]], %[[W2]] : {{.*}}) outs({{.*}} : tensor<1x3x1x5x5xf32>)
# CHECK: %[[R2:.*]] = tensor.insert_slice %[[C2]] into %[[R1]][0, 0, 3, 0, 0] [1, 3, 1, 5, 5]
# CHECK: return %[[R2]]
