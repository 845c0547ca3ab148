# RUN: %PYTHON %s | FileCheck %s
# AddRfactor: a row sum with 8 outputs and 4096-long rows. The innermost reduction loop
# becomes v partial sums (tile_reduction_using_for), vectorized with their init and merge;
# the partial-sum loop's accumulator is hoisted into registers.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from helpers import payload, print_strategy

ROW_SUM = payload("row_sum")
print_strategy(ROW_SUM, 0, seed=4)
# CHECK: // sketch: AddRfactor
# CHECK: // step: SplitStep(op='op1_reduce', loop=1, lengths=({{[0-9]+}}, [[V:[0-9]+]])
# CHECK: transform.structured.tile_using_forall
# CHECK: %[[INIT:.*]], %[[PART:.*]], %[[MERGE:.*]], %[[LOOP:.*]] = transform.structured.tile_reduction_using_for %{{.*}} by tile_sizes = [0, [[V]]]
# CHECK-DAG: transform.structured.vectorize %[[PART]]
# CHECK-DAG: transform.structured.vectorize %[[INIT]]
# CHECK-DAG: transform.structured.vectorize %[[MERGE]]
# CHECK: transform.loop.hoist_loop_invariant_subsets %[[LOOP]]
# CHECK: transform.apply_patterns.vector.multi_reduction_unrolling lowering_strategy = innerreduction
