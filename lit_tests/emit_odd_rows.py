# RUN: %PYTHON %s | FileCheck %s
# A softmax over rows of 197 (no chunk of at least 16 divides it): its reductions
# accumulate 16-wide partial sums over the full chunks and a peeled partial last chunk (one
# static vector of 5), and its elementwise ops run in rows of 64 with the same peeled tail,
# rather than the whole row as one vector (its horizontal add a chain of 197 scalar adds)
# or 197 single elements.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from helpers import payload, print_strategy

print_strategy(payload("softmax_197"), 0, seed=0)
# CHECK: // sketch: Plain
# Its division by the row's sum may multiply by the reciprocal.
# CHECK: %[[DIV:.*]] = transform.structured.match ops{["arith.divf"]}
# CHECK: %[[ARCP:.*]] = transform.param.constant #arith.fastmath<arcp>
# CHECK: transform.annotate %[[DIV]] "fastmath" = %[[ARCP]]
# CHECK: transform.structured.tile_using_forall
# The row max, then the sum of exponentials: partial results, the partial last chunk peeled.
# CHECK: %{{.*}}, %{{.*}}, %{{.*}}, %[[L1:.*]] = transform.structured.tile_reduction_using_for %{{.*}} by tile_sizes = [0, 16]
# CHECK: %[[C1:.*]] = transform.cast %[[L1]]
# CHECK: %[[F1:.*]], %{{.*}} = transform.loop.peel %[[C1]]
# CHECK: %{{.*}}, %{{.*}}, %{{.*}}, %[[L2:.*]] = transform.structured.tile_reduction_using_for %{{.*}} by tile_sizes = [0, 16]
# CHECK: %[[C2:.*]] = transform.cast %[[L2]]
# CHECK: %[[F2:.*]], %{{.*}} = transform.loop.peel %[[C2]]
# The normalization: rows of 64 and the peeled 5.
# CHECK: %{{.*}}, %[[E:.*]]:2 = transform.structured.tile_using_for %{{.*}} tile_sizes [1, 64]
# CHECK: %[[C3:.*]] = transform.cast %[[E]]#1
# CHECK: transform.loop.peel %[[C3]]
# The partial sums climb out of the full chunks' loops.
# CHECK: transform.loop.hoist_loop_invariant_subsets %[[F1]]
# CHECK: transform.loop.hoist_loop_invariant_subsets %[[F2]]
# Once lowered, a vector's horizontal reduction may reassociate (a tree, not 16 chained adds):
# the multi-reductions are lowered to vector.reduction ops first.
# CHECK: transform.apply_patterns.vector.multi_reduction_unrolling
# CHECK: %[[RED:.*]] = transform.structured.match ops{["vector.reduction"]}
# CHECK: %[[REASSOC:.*]] = transform.param.constant #arith.fastmath<reassoc>
# CHECK: transform.annotate %[[RED]] "fastmath" = %[[REASSOC]]
# CHECK: transform.annotate %{{.*}} "translation_info"
