# RUN: %PYTHON %s | FileCheck %s
# Plain sketch: elementwise chain, producer fused into the consumer's workgroup tile,
# rows vectorized.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from helpers import print_strategy

EW = """func.func @main(%a: tensor<32x64xf32>) -> tensor<32x64xf32> {
  %e = tensor.empty() : tensor<32x64xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
      iterator_types = ["parallel", "parallel"]} ins(%a : tensor<32x64xf32>) outs(%e : tensor<32x64xf32>) {
    ^bb0(%x: f32, %o: f32):
      %v = math.exp %x : f32
      linalg.yield %v : f32 } -> tensor<32x64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
      iterator_types = ["parallel", "parallel"]} ins(%s : tensor<32x64xf32>) outs(%e : tensor<32x64xf32>) {
    ^bb0(%x: f32, %o: f32):
      %v = arith.mulf %x, %x : f32
      linalg.yield %v : f32 } -> tensor<32x64xf32>
  return %r : tensor<32x64xf32>
}"""
print_strategy(EW, 0, seed=0)
# CHECK: // sketch: AlwaysInline
# CHECK: %[[H:.*]]:2 = transform.split_handle
# No division and no reduction: no fastmath annotation.
# CHECK-NOT: fastmath
# CHECK: transform.structured.tile_using_forall %[[H]]#1
# CHECK: transform.structured.fuse_into_containing_op %[[H]]#0
# CHECK-COUNT-2: transform.structured.vectorize
# CHECK-NOT: transform.loop.unroll
# CHECK-NOT: fastmath
