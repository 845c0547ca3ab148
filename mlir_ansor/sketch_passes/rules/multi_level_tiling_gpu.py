from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.analysis import has_data_reuse, has_fusible_consumer
from mlir_ansor.sketch_passes.rules.multi_level_tiling_fusion import FuseConsumer
from mlir_ansor.sketch_passes.sketch import Decision, State, StructureStep, add_rule


@dataclass(frozen=True)
class MultiLevelTileGPU(StructureStep):
    """The op is the root: tiled "SSSRRSRS" (blocks, virtual threads, threads, per-thread
    tiles; reduction into a shared tile and an inner tile)."""

    kind = "multi_level_tile_gpu"
    legacy_field = "root"
    rank = 20
    makes_root = True


@dataclass(frozen=True)
class CacheReadShared(StructureStep):
    """GPU: the root's (op's) input tiles of each reduction step are copied into workgroup
    memory by all threads of the block."""

    kind = "cache_read_shared"
    legacy_field = "cache_read"
    rank = 32


class MultiLevelTilingGPU:
    """GPU rule: "SSSRRSRS" tiling of an op with data reuse: spatial loops split into
    blockIdx, virtual thread, threadIdx and per-thread levels, the reduction into a
    shared-memory tile and an inner tile. Two sketches: the inputs' reduction tiles cache-read
    into workgroup memory (copied by all threads of the block), or read from global memory. A
    fusible elementwise consumer is computed in the same block."""

    name = "MultiLevelTilingGPU"

    def condition(self, ops: Sequence[OpInfo], state: State) -> Decision:
        if has_data_reuse(ops[state.index]) and not state.sketch.root:
            return Decision.APPLY_AND_SKIP_REST
        return Decision.SKIP

    def apply(self, ops: Sequence[OpInfo], state: State) -> list[State]:
        i = state.index
        op = ops[i].name
        tiling = (MultiLevelTileGPU(op),) + ((FuseConsumer(op),)
                                              if has_fusible_consumer(ops, i) else ())
        shared = add_rule(state.sketch, "AddCacheReadShared", CacheReadShared(op))
        shared = add_rule(shared, self.name, *tiling)
        plain = add_rule(state.sketch, self.name, *tiling)
        return [State(shared, i - 1), State(plain, i - 1)]
