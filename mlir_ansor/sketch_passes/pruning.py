"""Rules that recognise programs which cannot be fast on a target, before the cost model
ranks them (read from the target description: vector width, vector registers, cores).

Annotation already keeps every program inside hard limits (the register tile fits the
vector registers, tiles divide their loops: `annotation.violations`); these rules name soft
defects. A flagged program is demoted, not dropped: its predicted score is lowered by
(1 - `DEMOTE`) of its magnitude in the evolutionary search, and random sampling prefers unflagged programs (a
model that has not learned yet still skips the obvious losers). Each rule is named in the
report with the share of candidates it flagged.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.annotation import VECTORS_PER_ROW, most_rows
from mlir_ansor.sketch_passes.program import Program
from mlir_ansor.targets import Target
from mlir_ansor.tuner.cost_model import Workload
from mlir_ansor.tuner.features import RootNest, root_nest

DEMOTE = 0.5


@dataclass(frozen=True)
class PruneRule:
    name: str
    why: str  # one line for the docs and the report
    flags: Callable[[RootNest, Target], bool]


def _vector_not_filled(n: RootNest, t: Target) -> bool:
    # A full vector was possible: the contiguous loop divides into whole vectors.
    return n.lanes < t.f32_lanes and n.lane_extent % t.f32_lanes == 0


def _idle_cores(n: RootNest, t: Target) -> bool:
    # Fewer workgroups than cores although the output has enough whole vectors for each.
    return n.workgroups < t.cores and n.parallel_iterations >= t.cores * t.f32_lanes * 4


def _most_accumulators(n: RootNest, t: Target) -> int:
    # The largest outer-product register tile, in vectors, that the loops and the register
    # file admit: rows x v accumulators, v row vectors and a broadcast (AnnotationLimits).
    # Rows of a power-of-two count of vectors only (`_odd_vector_row`).
    vectors = 1 if n.one_vector else min(-(-n.lane_extent // t.f32_lanes), VECTORS_PER_ROW)
    return max(v * min(n.row_room, most_rows(v, t.vector_registers))
               for v in range(1, vectors + 1) if v & (v - 1) == 0)


def accumulators(n: RootNest, t: Target) -> int:
    """Vector registers the register tile accumulates in: rows x vectors per row. A row
    narrower than a vector (7 output columns of 16 lanes) still takes a whole register,
    so counting elements would undercount it."""
    return n.reg_tile // max(n.lanes, 1) * -(-n.lanes // t.f32_lanes)


def _small_register_tile(n: RootNest, t: Target) -> bool:
    # Under a quarter of the register file in accumulators, where the loops admit twice
    # that: each loaded operand feeds too few FMAs (load-bound). Measured, 62 tasks of this
    # project's runs on AVX2: such programs ran at a median 0.20 of their task's best, the
    # others at 0.52; 5 of the 62 bests had such a tile. Not without an outer product
    # (depthwise: every row loads its own input vector, more rows reuse nothing).
    need = t.vector_registers // 4
    return (accumulators(n, t) < need
            and _most_accumulators(n, t) >= 2 * need
            and n.parallel_iterations >= 4 * need * t.f32_lanes * t.cores)


def _odd_vector_row(n: RootNest, t: Target) -> bool:
    # A row of whole vectors of no power-of-two count (3, 5, 6, 7, ...) is one LLVM vector
    # of no power-of-two length, which lowered badly where a power-of-two row divides the
    # loop: BERT's 768-wide projection, 8 rows x 48 lanes 3.0-19.6 ms, x 64 lanes
    # 0.71-0.79 (AVX-512; kernel_seed keeps to 1, 2 or 4 vectors for the same reason).
    v, rest = divmod(n.lanes, t.f32_lanes)
    return rest == 0 and v & (v - 1) != 0 and n.lane_extent % t.f32_lanes == 0


def _window_cut(n: RootNest, t: Target) -> bool:
    # The window loops split across reduction steps: every step reloads and stores the
    # register tile's accumulators for a part of each window. Measured on this project's
    # records (Zen 4, 24 conv tasks of ResNet-50, MobileNet-V2, the ResNet and MBConv
    # blocks, and 1000 random programs of ResNet-50's last conv): in 23 the best
    # whole-window program was within 5% of the task's best; on the last conv the best
    # whole-window program ran 145.5 GFLOP/s, the best with both window loops cut 112.6.
    # The exception was a strided depthwise conv (0.47; searched under the rule, 0.52x of
    # IREE's default against 0.86x without it): no depthwise conv is judged
    # (RootNest.window_steps).
    return n.window_steps > 1


# No cache-size rule: "the innermost reduction loop's working set exceeds L1" and "the
# register-tile loops' working set exceeds L2" flagged fast programs. Of 1000 random
# programs each (Zen 4), the first flagged 11% of the conv's and 14% of the matmul's,
# 26% / 19% of those in their pool's top 10%, the pool's best among them; the second was
# neutral (7% / 13% in the top 10%). Streamed operands need no cache residency.
RULES: tuple[PruneRule, ...] = (
    PruneRule("vector-not-filled", "the vector tile is narrower than one register although "
              "the loop allows a full one", _vector_not_filled),
    PruneRule("idle-cores", "fewer workgroups than cores on an output large enough for all",
              _idle_cores),
    PruneRule("small-register-tile", "the register tile holds under a quarter of the "
              "vector registers in accumulators although the loops admit twice that",
              _small_register_tile),
    PruneRule("odd-vector-row", "the vector tile is a row of whole vectors of no power-of-"
              "two count (3, 5, 6, 7, ...) although one vector divides the loop",
              _odd_vector_row),
    PruneRule("window-cut", "a convolution window is split across reduction steps",
              _window_cut),
)


def flagged(ops: Sequence[OpInfo], program: Program, target: Target) -> list[str]:
    """Names of the rules that flag `program` ([] = none; GPU programs are not judged)."""
    if target.backend != "llvm-cpu":
        return []
    nest = root_nest(ops, program)
    if nest is None:
        return []
    return [r.name for r in RULES if r.flags(nest, target)]


def demote(scores: np.ndarray, factors: Sequence[float]) -> np.ndarray:
    """Scores lowered by `1 - factor` of their magnitude (a pack-sum prediction may be
    negative: scaling alone would raise those)."""
    f = np.asarray(factors, dtype=np.float64)
    return scores - (1.0 - f) * np.abs(scores)


class Pruner:
    """Flags candidates of a search and counts, per rule, how many it saw and flagged."""

    def __init__(self, target: Target):
        self.target = target
        self.seen = 0
        self.counts: Counter[str] = Counter()
        # Evolution scores the same programs in several generations: judge each once.
        self._cache: dict[tuple[str, str], list[str]] = {}

    def judge(self, task: Workload, program: Program) -> list[str]:
        """The rules that flag a candidate of `task` (counted for the report)."""
        if len(self._cache) > 200_000:
            self._cache.clear()
        names = self._cache.get((task.key, program.key))
        if names is None:
            names = self._cache[(task.key, program.key)] = flagged(task.ops, program,
                                                                   self.target)
        self.seen += 1
        self.counts.update(names)
        return names

    def demotions(self, task: Workload, programs: Sequence[Program]) -> list[float]:
        """Per program of `task`: 1.0, or DEMOTE when any rule flags it."""
        return [DEMOTE if self.judge(task, p) else 1.0 for p in programs]

    def line(self) -> str:
        """The report's line: the share of candidates each rule flagged."""
        if not self.seen:
            return "pruning: no candidates judged"
        parts = [f"{r.name} {self.counts[r.name] / self.seen:.0%}" for r in RULES]
        return (f"pruning (candidates demoted x{DEMOTE} before ranking, of {self.seen} "
                f"judged): " + ", ".join(parts))
