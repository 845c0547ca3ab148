# RUN: %PYTHON %s | FileCheck %s
# A gather (nearest upsampling: tensor.extract at computed indices) is tiled but not
# vectorized: it becomes scalar loops after bufferization (vectorized, its n-D
# vector.gather ops failed to vectorize or to lower to LLVM for most tile shapes).
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from helpers import payload, print_strategy

print_strategy(payload("upsample_gather"), 0, seed=0)
# CHECK: // sketch: Plain
# CHECK: transform.structured.tile_using_forall
# CHECK-NOT: transform.structured.vectorize
# CHECK: transform.iree.bufferize
# CHECK: transform.structured.convert_to_loops
