from __future__ import annotations

from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.sketch import Decision, State


class Skip:
    """Rule 1: leave the op as it is (it is tiled with its consumer's outer level)."""

    name = "Skip"

    def condition(self, ops: Sequence[OpInfo], state: State) -> Decision:
        return Decision.APPLY_AND_SKIP_REST

    def apply(self, ops: Sequence[OpInfo], state: State) -> list[State]:
        return [State(state.sketch, state.index - 1)]
