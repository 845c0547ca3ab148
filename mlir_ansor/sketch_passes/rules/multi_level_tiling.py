from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.analysis import has_data_reuse
from mlir_ansor.sketch_passes.sketch import Decision, State, StructureStep, add_rule


@dataclass(frozen=True)
class MultiLevelTile(StructureStep):
    """The op is the root: tiled "SSRSRS" (workgroups, S1, R0, S2 register tiles, R1, S3
    vector) with its accumulator in registers."""

    kind = "multi_level_tile"
    legacy_field = "root"
    rank = 20
    makes_root = True


class MultiLevelTiling:
    """Rule 3: "SSRSRS" tiling of an op with data reuse (one such root per sketch)."""

    name = "MultiLevelTiling"

    def condition(self, ops: Sequence[OpInfo], state: State) -> Decision:
        if has_data_reuse(ops[state.index]) and not state.sketch.root:
            return Decision.APPLY_AND_SKIP_REST
        return Decision.SKIP

    def apply(self, ops: Sequence[OpInfo], state: State) -> list[State]:
        sk = add_rule(state.sketch, self.name, MultiLevelTile(ops[state.index].name))
        return [State(sk, state.index - 1)]
