from __future__ import annotations

from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.analysis import has_data_reuse, has_fusible_consumer
from mlir_ansor.sketch_passes.sketch import Decision, State, add_rule


class AddCacheWrite:
    """Rule 5: a reuse op with no fusible consumer may accumulate into a local tile
    (its init fused into the inner tile) and write back once. Both variants are kept."""

    name = "AddCacheWrite"

    def condition(self, ops: Sequence[OpInfo], state: State) -> Decision:
        i = state.index
        if has_data_reuse(ops[i]) and not state.sketch.root and not has_fusible_consumer(ops, i):
            return Decision.APPLY  # MultiLevelTiling still adds the variant without it
        return Decision.SKIP

    def apply(self, ops: Sequence[OpInfo], state: State) -> list[State]:
        sk = add_rule(state.sketch, self.name, cache_write=True)
        sk = add_rule(sk, "MultiLevelTiling", root=ops[state.index].name)
        return [State(sk, state.index - 1)]
