from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.analysis import has_data_reuse, has_fusible_consumer
from mlir_ansor.sketch_passes.rules.multi_level_tiling import MultiLevelTile
from mlir_ansor.sketch_passes.sketch import Decision, State, StructureStep, add_rule


@dataclass(frozen=True)
class CacheWrite(StructureStep):
    """The root (op) accumulates into a local S1 tile (its init fused into that tile) that
    is written back once."""

    kind = "cache_write"
    legacy_field = "cache_write"
    rank = 31
    local_tile = True
    feature = "sk_cache_write"

    def s1_fusion(self, plan):
        return plan.root, plan.base_sizes(1)


class AddCacheWrite:
    """Rule 5: a reuse op with no fusible consumer may accumulate into a local tile
    (its init fused into the inner tile) and write back once. Both variants are kept."""

    name = "AddCacheWrite"

    def condition(self, ops: Sequence[OpInfo], state: State) -> Decision:
        i = state.index
        # (Not over a dynamic loop: a dynamically sized local tile, see
        # MultiLevelTilingWithFusion.)
        if has_data_reuse(ops[i]) and not state.sketch.root and \
                not has_fusible_consumer(ops, i) and not ops[i].dynamic_loops:
            return Decision.APPLY  # MultiLevelTiling still adds the variant without it
        return Decision.SKIP

    def apply(self, ops: Sequence[OpInfo], state: State) -> list[State]:
        op = ops[state.index].name
        sk = add_rule(state.sketch, self.name, CacheWrite(op))
        sk = add_rule(sk, "MultiLevelTiling", MultiLevelTile(op))
        return [State(sk, state.index - 1)]
