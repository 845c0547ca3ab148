from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.analysis import has_more_reduction_parallel
from mlir_ansor.sketch_passes.sketch import Decision, State, StructureStep, add_rule


@dataclass(frozen=True)
class Rfactor(StructureStep):
    """The op is the root, and the innermost tile of its last reduction loop holds that
    many independent partial sums (at least two, at most a wide vector's lanes), merged
    once after the loop."""

    kind = "rfactor"
    legacy_field = "rfactor"
    rank = 20
    makes_root = True
    feature = "sk_rfactor"

    def partial_sum_loop(self, root, inner):
        last = root.reduction_dims[-1]
        return last if inner[last] > 1 else None  # one partial sum is a plain loop

    def inner_reduction_lanes(self, vector_lanes):
        return 2, vector_lanes


class AddRfactor:
    """Rule 6: a reduction with a small parallel space and a long reduction accumulates
    into `v` independent partial sums (a new parallel loop the vectorizer maps to lanes),
    merged once at the end. The sketches without rfactor are kept too, except for a
    reduction to a scalar: with no parallel loop, partial sums are all there is to split
    (without them the whole reduction would be one vector)."""

    name = "AddRfactor"

    def condition(self, ops: Sequence[OpInfo], state: State) -> Decision:
        op = ops[state.index]
        # (Partial sums need a combiner the tiling recognizes: not for an op left scalar.)
        if op.is_linalg and not op.scalar and not state.sketch.root \
                and has_more_reduction_parallel(op):
            return Decision.APPLY if op.parallel_dims else Decision.APPLY_AND_SKIP_REST
        return Decision.SKIP

    def apply(self, ops: Sequence[OpInfo], state: State) -> list[State]:
        sk = add_rule(state.sketch, self.name, Rfactor(ops[state.index].name))
        return [State(sk, state.index - 1)]
