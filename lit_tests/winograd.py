# RUN: %PYTHON %s rewrite | FileCheck --check-prefix=REWRITE %s
# RUN: %PYTHON %s flow | FileCheck --check-prefix=FLOW %s
# Winograd sites: the 3x3 stride-1 convolution is rewritten, the stride-2 one and the 1x1
# are not. The rewrite: the input padded to 5 x 5 blocks of 6x6 (4 x 4 tiles of 6x6 cover
# the 24x24 output, plus the last tile's next block), the row and column transforms (each
# summing a block's and its neighbour's terms), the filter transform, a batch matmul over
# the 64 positions of the 8x8 tile, and the output transforms. IREE makes dispatches of
# the input transforms, the batch matmul and the output transforms (the filter transform
# is folded on the constant weight) and leaves the other convolutions direct (the strided
# one a generic with its window map).
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, __file__.rsplit("/", 1)[0])

from mlir_ansor.dialect_helpers.winograd import winograd_sites, with_winograd
from mlir_ansor.targets import get_target
from mlir_ansor.tuner.toolchain import Toolchain

MODEL = """func.func @main(%x: tensor<1x26x26x16xf32>) -> (tensor<1x24x24x32xf32>, tensor<1x12x12x32xf32>, tensor<1x26x26x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %w = arith.constant dense<0.5> : tensor<3x3x16x32xf32>
  %w1 = arith.constant dense<0.25> : tensor<1x1x16x32xf32>
  %e = tensor.empty() : tensor<1x24x24x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x24x24x32xf32>) -> tensor<1x24x24x32xf32>
  %c = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%x, %w : tensor<1x26x26x16xf32>, tensor<3x3x16x32xf32>) outs(%f : tensor<1x24x24x32xf32>) -> tensor<1x24x24x32xf32>
  %e2 = tensor.empty() : tensor<1x12x12x32xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<1x12x12x32xf32>) -> tensor<1x12x12x32xf32>
  %s = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>} ins(%x, %w : tensor<1x26x26x16xf32>, tensor<3x3x16x32xf32>) outs(%f2 : tensor<1x12x12x32xf32>) -> tensor<1x12x12x32xf32>
  %e3 = tensor.empty() : tensor<1x26x26x32xf32>
  %f3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<1x26x26x32xf32>) -> tensor<1x26x26x32xf32>
  %p = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%x, %w1 : tensor<1x26x26x16xf32>, tensor<1x1x16x32xf32>) outs(%f3 : tensor<1x26x26x32xf32>) -> tensor<1x26x26x32xf32>
  return %c, %s, %p : tensor<1x24x24x32xf32>, tensor<1x12x12x32xf32>, tensor<1x26x26x32xf32>
}"""

sites = winograd_sites(MODEL)
marked = with_winograd(MODEL, [s.index for s in sites])
if sys.argv[1] == "rewrite":
    print(f"sites {[s.index for s in sites]}")
    print(marked)
else:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "m.mlir"
        src.write_text(marked)
        res = subprocess.run([Toolchain.find().compile, str(src),
                              *get_target("x86_64-avx2").compile_flags(),
                              "--compile-to=flow"], capture_output=True, text=True)
        print(res.stdout if res.returncode == 0 else res.stderr)

# REWRITE: sites [1]
# REWRITE: tensor.pad %arg0 low[0, 0, 0, 0] high[0, 4, 4, 0]
# REWRITE: tensor.expand_shape %{{.*}} {{\[\[}}0], [1, 2], [3, 4], [5]] output_shape [1, 5, 6, 5, 6, 16]
# REWRITE: linalg.generic {{.*}} ins(%{{.*}} : tensor<8x6xf32>, tensor<1x4x6x5x6x16xf32>, tensor<8x6xf32>, tensor<1x4x6x5x6x16xf32>) outs(%{{.*}} : tensor<1x4x8x5x6x16xf32>) attrs = {__winograd}
# REWRITE: arith.mulf
# REWRITE-NEXT: arith.mulf
# REWRITE-NEXT: arith.addf
# REWRITE-NEXT: arith.addf
# REWRITE: linalg.generic {{.*}} outs(%{{.*}} : tensor<8x8x1x4x4x16xf32>) attrs = {__winograd}
# REWRITE: tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2, 3, 4], [5]] : tensor<8x8x1x4x4x16xf32> into tensor<64x16x16xf32>
# REWRITE: linalg.generic {{.*}} ins(%{{.*}} : tensor<8x3xf32>, tensor<3x3x16x32xf32>) outs(%{{.*}} : tensor<8x3x16x32xf32>)
# REWRITE: linalg.generic {{.*}} outs(%{{.*}} : tensor<8x8x16x32xf32>)
# REWRITE: linalg.batch_matmul {__winograd} ins(%{{.*}} : tensor<64x16x16xf32>, tensor<64x16x32xf32>) outs(%{{.*}} : tensor<64x16x32xf32>)
# REWRITE: linalg.generic {{.*}} ins(%{{.*}} : tensor<6x8xf32>, tensor<8x8x1x4x4x32xf32>) outs(%{{.*}} : tensor<1x4x6x4x8x32xf32>)
# REWRITE: linalg.generic {{.*}} ins(%{{.*}} : tensor<1x4x6x4x8x32xf32>, tensor<6x8xf32>) outs(%{{.*}} : tensor<1x4x6x4x6x32xf32>)
# REWRITE: %[[Y:.*]] = tensor.collapse_shape %{{.*}} {{\[\[}}0], [1, 2], [3, 4], [5]] : tensor<1x4x6x4x6x32xf32> into tensor<1x24x24x32xf32>
# REWRITE: linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
# REWRITE: linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%arg0, %{{.*}} : tensor<1x26x26x16xf32>, tensor<1x1x16x32xf32>)
# REWRITE: return %[[Y]],

# FLOW: func.func @main_dispatch_{{[0-9]+}}_{{.*}}(%{{.*}}: !iree_tensor_ext.dispatch.tensor<readonly:tensor<1x5x6x5x6x16xf32>>, %{{.*}}: !iree_tensor_ext.dispatch.tensor<writeonly:tensor<4x8x5x6x16xf32>>)
# FLOW: func.func @main_dispatch_{{[0-9]+}}_{{.*}}(%{{.*}}: !iree_tensor_ext.dispatch.tensor<readonly:tensor<1x4x8x5x6x16xf32>>, %{{.*}}: !iree_tensor_ext.dispatch.tensor<writeonly:tensor<8x8x4x4x16xf32>>)
# FLOW: func.func @main_dispatch_{{[0-9]+}}_batch_matmul_64x16x32x16_f32
# FLOW: func.func @main_dispatch_{{[0-9]+}}_{{.*}}(%{{.*}}: !iree_tensor_ext.dispatch.tensor<readonly:tensor<8x8x4x4x32xf32>>, %{{.*}}: !iree_tensor_ext.dispatch.tensor<writeonly:tensor<4x6x4x8x32xf32>>)
# FLOW: func.func @main_dispatch_{{[0-9]+}}_{{.*}}(%{{.*}}: !iree_tensor_ext.dispatch.tensor<readonly:tensor<96x8x32xf32>>, %{{.*}}: !iree_tensor_ext.dispatch.tensor<writeonly:tensor<96x6x32xf32>>)
# FLOW-DAG: linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0 * 2 + d3, d1 * 2 + d4, d5)>
# FLOW-NOT: iree_linalg_ext.winograd
