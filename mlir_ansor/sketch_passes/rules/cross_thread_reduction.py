from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.analysis import has_data_reuse
from mlir_ansor.sketch_passes.sketch import Decision, State, StructureStep, add_rule


@dataclass(frozen=True)
class CrossThreadReduction(StructureStep):
    """GPU: the op is the root; each block's rows run with its threads splitting the
    innermost reduction loop, partial results combined in workgroup memory."""

    kind = "cross_thread_reduction"
    legacy_field = "rfactor"  # the GPU form of rfactor (stored as the rfactor flag)
    rank = 20
    makes_root = True
    feature = "sk_rfactor"


MIN_REDUCTION = 32  # a warp: a shorter row is not worth a block of threads


class AddCrossThreadReduction:
    """GPU rule: a reduction without data reuse whose rows are longer than its parallel
    space is small (a norm, a softmax row sum, a global pooling) runs each block's rows with
    the threads splitting the innermost reduction loop; each thread reduces its slice, the
    partial results meet in workgroup memory and are combined after a barrier (the GPU form
    of rfactor: `rfactor` marks it). The plain sketch (a thread per output) is kept too."""

    name = "AddCrossThreadReduction"

    def condition(self, ops: Sequence[OpInfo], state: State) -> Decision:
        op = ops[state.index]
        if not (state.sketch.gpu and op.is_linalg and op.reduction_dims and op.parallel_dims) \
                or state.sketch.root:
            return Decision.SKIP
        par = 1
        for d in op.parallel_dims:
            par *= op.extents[d]
        red = 1
        for d in op.reduction_dims:
            red *= op.extents[d]
        if has_data_reuse(op) or red <= par or op.extents[op.reduction_dims[-1]] < MIN_REDUCTION:
            return Decision.SKIP
        return Decision.APPLY

    def apply(self, ops: Sequence[OpInfo], state: State) -> list[State]:
        sk = add_rule(state.sketch, self.name, CrossThreadReduction(ops[state.index].name))
        return [State(sk, state.index - 1)]
