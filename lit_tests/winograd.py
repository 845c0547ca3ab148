# RUN: %PYTHON %s marks | FileCheck --check-prefix=MARKS %s
# RUN: %PYTHON %s flow | FileCheck --check-prefix=FLOW %s
# Winograd sites: the 3x3 stride-1 convolution is marked, the stride-2 one and the 1x1 are
# not; with the marks and WINOGRAD_FLAGS IREE forms the input transform, a batch matmul
# over the 64 positions of the 8x8 tile (4 x 4 tiles of 6x6 cover the 24x24 output) and
# the output transform, and leaves the other convolutions direct (the strided one a
# generic with its window map).
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, __file__.rsplit("/", 1)[0])

from mlir_ansor.dialect_helpers.winograd import (WINOGRAD_FLAGS, winograd_sites,
                                                 with_winograd)
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
if sys.argv[1] == "marks":
    print(f"sites {[s.index for s in sites]}")
    print(marked)
else:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "m.mlir"
        src.write_text(marked)
        res = subprocess.run([Toolchain.find().compile, str(src),
                              *get_target("x86_64-avx2").compile_flags(), *WINOGRAD_FLAGS,
                              "--compile-to=flow"], capture_output=True, text=True)
        print(res.stdout if res.returncode == 0 else res.stderr)

# MARKS: sites [1]
# MARKS: linalg.conv_2d_nhwc_hwcf {__winograd_conv, dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%{{.*}} : tensor<1x26x26x16xf32>, tensor<3x3x16x32xf32>)
# MARKS-NOT: __winograd_conv
# MARKS: strides = dense<2>
# MARKS-NOT: __winograd_conv

# FLOW-DAG: iree_linalg_ext.winograd.input_transform output_tile_size(6) kernel_size(3) image_dimensions([1, 2]) ins(%{{.*}} : tensor<1x26x26x16xf32>) outs(%{{.*}} : tensor<8x8x1x4x4x16xf32>)
# FLOW-DAG: linalg.batch_matmul ins(%{{.*}}, %{{.*}} : tensor<64x16x16xf32>, tensor<64x16x32xf32>)
# FLOW-DAG: iree_linalg_ext.winograd.output_transform output_tile_size(6) kernel_size(3) image_dimensions([1, 2])
# FLOW-DAG: linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0 * 2 + d3, d1 * 2 + d4, d5)>
# FLOW-NOT: __winograd_conv
