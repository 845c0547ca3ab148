from __future__ import annotations

from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.analysis import has_data_reuse, has_fusible_consumer
from mlir_ansor.sketch_passes.sketch import Decision, State, add_rule


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
        fuse = has_fusible_consumer(ops, i)
        shared = add_rule(state.sketch, "AddCacheReadShared", cache_read=True)
        shared = add_rule(shared, self.name, root=ops[i].name, fuse_consumer=fuse)
        plain = add_rule(state.sketch, self.name, root=ops[i].name, fuse_consumer=fuse)
        return [State(shared, i - 1), State(plain, i - 1)]
