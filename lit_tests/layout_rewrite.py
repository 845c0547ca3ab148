# RUN: %PYTHON %s | FileCheck %s
# Layout rewrite of a constant weight: the linear layer's weight (read through a transpose)
# is packed to [n / 16, k, 16]; the output pack folds into reshapes (no unpack is left). The
# matmul of two activations (%h x %y) has no constant operand and keeps its layout.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from helpers import payload

from mlir_ansor.dialect_helpers.layout_rewrite import find_sites, rewrite

model = payload("linear_const")
sites = find_sites(model)
for s in sites:
    print("// site:", s)
print(rewrite(model, sites))

# CHECK: // site: PackSite(index=2, op_name='linalg.matmul', loops=3, operand=1, loop=1, tile=16, outer_perm=(1, 0))
# CHECK-NOT: // site:
# CHECK: func.func @main
# A splat weight: the transpose and the pack fold into a packed constant here already.
# CHECK: %[[W:.*]] = arith.constant dense<2.500000e-01> : tensor<2x64x16xf32>
# CHECK: %[[P:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction", "parallel"]} ins(%arg0, %[[W]] : tensor<8x64xf32>, tensor<2x64x16xf32>) outs(%{{.*}} : tensor<8x2x16xf32>)
# CHECK: tensor.collapse_shape %[[P]] {{.*}} : tensor<8x2x16xf32> into tensor<8x32xf32>
# CHECK: linalg.matmul ins(%{{.*}}, %arg1 : tensor<8x32xf32>, tensor<32x48xf32>)
# CHECK-NOT: linalg.unpack
