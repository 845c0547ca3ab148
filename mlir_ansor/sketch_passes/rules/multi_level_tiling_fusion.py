from __future__ import annotations

from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.analysis import has_data_reuse, has_fusible_consumer
from mlir_ansor.sketch_passes.sketch import Decision, State, add_rule


class MultiLevelTilingWithFusion:
    """Rule 4: SSRSRS tiling with the elementwise consumer fused into the root's tiles."""

    name = "MultiLevelTilingWithFusion"

    def condition(self, ops: Sequence[OpInfo], state: State) -> Decision:
        i = state.index
        if has_data_reuse(ops[i]) and not state.sketch.root and has_fusible_consumer(ops, i):
            return Decision.APPLY_AND_SKIP_REST
        return Decision.SKIP

    def apply(self, ops: Sequence[OpInfo], state: State) -> list[State]:
        sk = add_rule(state.sketch, self.name, root=ops[state.index].name, fuse_consumer=True)
        return [State(sk, state.index - 1)]
