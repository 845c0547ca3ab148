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

# A reduction to a scalar (65536 squares summed): no parallel loop for workgroups, so the
# reduction becomes one partial result in a one-workgroup forall (mapped to blocks),
# merged after it; inside, the same rfactor into vector lanes.
print_strategy(payload("sum_squares_65536"), 0, seed=0)
# CHECK: // sketch: AddRfactor
# CHECK-NOT: transform.structured.tile_using_forall
# CHECK: %[[FINIT:.*]], %[[FPART:.*]], %[[FMERGE:.*]], %[[FORALL:.*]] = transform.structured.tile_reduction_using_forall %{{.*}} by num_threads = [1] mapping = [#gpu.block<x>]
# CHECK-NEXT: transform.iree.populate_workgroup_count_region_using_num_threads_slice %[[FORALL]]
# CHECK: transform.structured.tile_using_for %[[FPART]]
# CHECK: transform.structured.tile_reduction_using_for
# CHECK-DAG: transform.structured.vectorize %[[FINIT]]
# CHECK-DAG: transform.structured.vectorize %[[FMERGE]]
# CHECK: transform.iree.forall_to_workgroup
