from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.analysis import is_strict_inlinable
from mlir_ansor.sketch_passes.sketch import Decision, State, StructureStep, add_rule


@dataclass(frozen=True)
class Inline(StructureStep):
    """The op is computed inside its consumer's tile (fused with the anchor's tiles)."""

    kind = "inline"
    legacy_field = "inlined"
    rank = 10
    feature = "sk_inlined"


class AlwaysInline:
    """Rule 2: a strictly inlinable op (elementwise, padding) is computed inside its consumer."""

    name = "AlwaysInline"

    def condition(self, ops: Sequence[OpInfo], state: State) -> Decision:
        if is_strict_inlinable(ops, state.index):
            return Decision.APPLY_AND_SKIP_REST
        return Decision.SKIP

    def apply(self, ops: Sequence[OpInfo], state: State) -> list[State]:
        op = ops[state.index]
        sk = state.sketch
        if op.op_name == "linalg.fill":  # the init of an accumulator: no rule name noise
            return [State(sk, state.index - 1)]
        sk = add_rule(sk, self.name, Inline(op.name))
        return [State(sk, state.index - 1)]
