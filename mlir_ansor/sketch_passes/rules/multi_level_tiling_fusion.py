from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.analysis import has_data_reuse, has_fusible_consumer
from mlir_ansor.sketch_passes.rules.multi_level_tiling import MultiLevelTile
from mlir_ansor.sketch_passes.sketch import Decision, State, StructureStep, add_rule


@dataclass(frozen=True)
class FuseConsumer(StructureStep):
    """The root (op) is computed in S1 tiles of its elementwise consumer, the anchor: the
    root's tile is a local buffer the consumer reads before it is written out."""

    kind = "fuse_consumer"
    legacy_field = "fuse_consumer"
    rank = 30
    local_tile = True
    consumer_fused = True
    feature = "sk_fuse_consumer"

    def s1_fusion(self, plan):
        return plan.anchor, plan.anchor_sizes(1)


class MultiLevelTilingWithFusion:
    """Rule 4: SSRSRS tiling with the elementwise consumer fused into the root's tiles."""

    name = "MultiLevelTilingWithFusion"

    def condition(self, ops: Sequence[OpInfo], state: State) -> Decision:
        i = state.index
        # Over a dynamic loop the root's S1 tile (the loop stays whole there) would be a
        # dynamically sized local buffer, which IREE cannot place on the stack: plain
        # MultiLevelTiling then, the consumer in its own rows.
        if has_data_reuse(ops[i]) and not state.sketch.root and has_fusible_consumer(ops, i) \
                and not ops[i].dynamic_loops:
            return Decision.APPLY_AND_SKIP_REST
        return Decision.SKIP

    def apply(self, ops: Sequence[OpInfo], state: State) -> list[State]:
        op = ops[state.index].name
        sk = add_rule(state.sketch, self.name, MultiLevelTile(op), FuseConsumer(op))
        return [State(sk, state.index - 1)]
