# RUN: %PYTHON %s | FileCheck %s
# A batch contraction's register tile has a unit batch dim: the tiled named op is
# generalized and its unit dims folded before vectorizing (vectorized as it is, the
# contraction lowers element by element). With a fused consumer, the consumer is
# vectorized before the fold (its handle is not used afterwards, so the fold may rewrite
# it). A plain matmul keeps its named form.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from helpers import payload, print_strategy

print_strategy(payload("batch_matmul_4x64x48x32"), 1, seed=0)
# CHECK: // sketch: MultiLevelTiling
# CHECK: transform.named_sequence @strategy
# CHECK: transform.structured.tile_using_forall
# CHECK: %[[G:.*]] = transform.structured.generalize
# CHECK-NEXT: transform.apply_patterns to
# CHECK-NEXT: transform.apply_patterns.linalg.fold_unit_extent_dims_via_slices
# CHECK: transform.structured.vectorize %[[G]]
# (Seed 1: a program without a packed operand, whose copy is vectorized after the fold.)
print_strategy(payload("batch_matmul_transposed_out_4x64x48x32"), 0, seed=1)
# CHECK: // sketch: MultiLevelTilingWithFusion
# CHECK: transform.structured.fuse %
# CHECK: transform.structured.vectorize
# CHECK: %[[G2:.*]] = transform.structured.generalize
# CHECK-NEXT: transform.apply_patterns to
# CHECK-NEXT: transform.apply_patterns.linalg.fold_unit_extent_dims_via_slices
# CHECK: transform.structured.vectorize %[[G2]]
# CHECK-NOT: transform.structured.vectorize
# CHECK: transform.iree.bufferize
print_strategy(payload("mm_128x256x64"), 1, seed=2)
# CHECK: // sketch: MultiLevelTiling
# CHECK-NOT: transform.structured.generalize
# CHECK: transform.annotate %{{.*}} "translation_info"
