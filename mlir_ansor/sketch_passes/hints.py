"""User hints for one workload's annotation: restrict the space (sketches, unroll factors,
innermost tile sizes) or bias it (a preferred innermost tile). The search only ever
proposes programs the hints allow; preferred tiles are proposed more often."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.loops import op_by_name
from mlir_ansor.sketch_passes.program import Program, SplitStep, UnrollStep


@dataclass(frozen=True)
class AnnotationHints:
    sketches: tuple[str, ...] = ()  # sketch names to keep (empty: all)
    unroll: tuple[int, ...] = ()  # allowed unroll factors (empty: any)
    max_inner: int = 0  # largest innermost tile of any parallel loop (0: no limit)
    inner: tuple[tuple[int, int], ...] = ()  # (loop, innermost tile) pairs the tile must equal
    prefer_inner: tuple[tuple[int, int], ...] = ()  # (loop, tile) pairs proposed more often
    prefer_weight: float = 0.8  # share of proposals kept only if they follow prefer_inner

    def __post_init__(self) -> None:
        if any(f < 1 for f in self.unroll) or self.max_inner < 0:
            raise ValueError("hints: unroll factors and max_inner must be positive")
        if not 0.0 <= self.prefer_weight <= 1.0:
            raise ValueError("hints: prefer_weight must be in [0, 1]")

    def keeps_sketch(self, name: str) -> bool:
        return not self.sketches or name in self.sketches

    def _inner_tiles(self, ops: Sequence[OpInfo], prog: Program) -> dict[int, int]:
        base = op_by_name(ops, prog.sketch.root or prog.sketch.anchor)
        return {s.loop: s.lengths[-1] for s in prog.steps
                if isinstance(s, SplitStep) and s.op == base.name
                and base.iterators[s.loop] == "parallel"}

    def allows(self, ops: Sequence[OpInfo], prog: Program) -> bool:
        """Whether `prog` obeys the restrictions."""
        if not self.keeps_sketch(prog.sketch.name):
            return False
        unroll = [s.factor for s in prog.steps if isinstance(s, UnrollStep)]
        if self.unroll and any(f not in self.unroll for f in unroll):
            return False
        tiles = self._inner_tiles(ops, prog)
        if self.max_inner and any(t > self.max_inner for t in tiles.values()):
            return False
        return all(tiles.get(l) == t for l, t in self.inner)

    def follows_preference(self, ops: Sequence[OpInfo], prog: Program) -> bool:
        tiles = self._inner_tiles(ops, prog)
        return all(tiles.get(l) == t for l, t in self.prefer_inner)

    def accept(self, ops: Sequence[OpInfo], prog: Program, rng: random.Random) -> bool:
        """`allows`, and the bias: a program off the preference passes with probability
        1 - prefer_weight."""
        if not self.allows(ops, prog):
            return False
        if not self.prefer_inner or self.follows_preference(ops, prog):
            return True
        return rng.random() >= self.prefer_weight
