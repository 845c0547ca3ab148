# RUN: %PYTHON %s | FileCheck %s
# MultiLevelTiling alone (SSRSRS accumulating in place, sketch 2 of a matmul): no local
# accumulator, so the matmul is tiled (S1) rather than fused with its fill.
# Skip alone (the plain sketch of a row sum): rows one at a time, each accumulated in
# chunk-wide partial sums (256 lanes) that are reduced once per row.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from helpers import print_strategy

MM = """func.func @main(%a: tensor<128x256xf32>, %b: tensor<256x64xf32>) -> tensor<128x64xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<128x64xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<128x64xf32>) -> tensor<128x64xf32>
  %r = linalg.matmul ins(%a, %b : tensor<128x256xf32>, tensor<256x64xf32>) outs(%f : tensor<128x64xf32>) -> tensor<128x64xf32>
  return %r : tensor<128x64xf32>
}"""
ROW_SUM = """func.func @main(%a: tensor<8x4096xf32>) -> tensor<8xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  %r = linalg.reduce ins(%a : tensor<8x4096xf32>) outs(%f : tensor<8xf32>) dimensions = [1]
    (%x: f32, %acc: f32) { %s = arith.addf %x, %acc : f32
      linalg.yield %s : f32 }
  return %r : tensor<8xf32>
}"""
print_strategy(MM, 1, seed=2)
# CHECK: // sketch: MultiLevelTiling
# CHECK: transform.named_sequence @strategy
# CHECK: transform.structured.tile_using_forall
# CHECK: transform.structured.fuse_into_containing_op
# CHECK-NOT: transform.structured.fuse %
# CHECK: transform.structured.vectorize
# CHECK: transform.annotate %{{.*}} "translation_info"
print_strategy(ROW_SUM, 1, seed=0)
# CHECK: // sketch: Plain
# CHECK: transform.named_sequence @strategy
# CHECK: transform.structured.tile_using_forall
# CHECK: transform.structured.fuse_into_containing_op
# CHECK: transform.structured.tile_using_for %{{.*}} tile_sizes [1, 0]
# CHECK: %[[I:.*]], %[[P:.*]], %[[M:.*]], %[[L:.*]] = transform.structured.tile_reduction_using_for %{{.*}} by tile_sizes = [0, 256]
# CHECK-DAG: transform.structured.vectorize %[[P]]
# CHECK-DAG: transform.structured.vectorize %[[M]]
# CHECK: transform.loop.hoist_loop_invariant_subsets %[[L]]
# CHECK: transform.annotate %{{.*}} "translation_info"
