"""The dispatcher's decision (DietCode): per dynamic task, which micro-kernel serves which
sizes. Each candidate and IREE's default were re-timed side by side at every size sample;
at each sample a task takes its overall winner unless another candidate (or IREE's
default) is clearly faster there. Where any task's choice changes between two adjacent
samples the model is cut at the geometric middle of the two sizes; each range between
cuts becomes one tagged branch of the model (`size_dispatch.branch_by_size`).

With several dynamic symbols the samples walk their sizes side by side (`dynamic.
tune_samples`), so one symbol orders them all: the plan cuts along the first symbol whose
sampled sizes tell every sample apart (`plan_axis`); the others vary within each branch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from mlir_ansor.sketch_passes.program import Program
from mlir_ansor.tuner.tasks import SizeSample


@dataclass(frozen=True)
class SizeTimes:
    """One dynamic task re-timed: IREE's default and candidates (s), per size sample: keyed
    by the samples' labels as measured, by a size once `along` an axis."""

    default_at: Mapping
    candidates: tuple[tuple[Program, Mapping], ...]
    winner: Program | None  # the program chosen over the whole range (None: the default)

    def along(self, size_of: Mapping[str, int]) -> "SizeTimes":
        """Keyed by each sample's size along the plan's axis (`size_of`: label -> size)."""
        def keyed(at: Mapping[str, float]) -> dict[int, float]:
            return {size_of[label]: t for label, t in at.items() if label in size_of}

        return SizeTimes(keyed(self.default_at),
                         tuple((p, keyed(a)) for p, a in self.candidates), self.winner)


def plan_axis(samples: Sequence[SizeSample], symbols: Sequence[str],
              specs: Sequence[tuple[str, tuple[int, int]]]
              ) -> tuple[str, tuple[int, int], dict[str, int]] | None:
    """The symbol a dispatcher cuts along: the first whose sampled sizes tell every sample
    apart; its first (input position, dim), and each sample's size there by label.
    `specs`: (symbol, (input position, dim)) per --dynamic spec. None when no symbol
    does."""
    for sym in symbols:
        spec = next(sd for s, sd in specs if s == sym)
        size_of = {smp.label: smp.dims[spec] for smp in samples}
        if len(set(size_of.values())) == len(samples):
            return sym, spec, size_of
    return None


@dataclass(frozen=True)
class SizePlan:
    """A model's dispatcher: branch i serves cuts[i-1] <= size < cuts[i] of one dimension
    of one entry argument; per task key, the program of each branch (None: IREE's default);
    `size_of`: each size sample's size along that dimension, by label (`plan_axis`)."""

    symbol: str
    arg: int
    dim: int
    cuts: tuple[int, ...]
    choices: Mapping[str, tuple[Program | None, ...]]
    size_of: Mapping[str, int] = field(default_factory=dict, compare=False)

    def ranges(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """(first, last) size of each branch within lo..hi."""
        edges = [lo, *self.cuts, hi + 1]
        return [(a, b - 1) for a, b in zip(edges, edges[1:])]

    def branch_of(self, size: int) -> int:
        return sum(1 for c in self.cuts if size >= c)


def per_size_choice(times: SizeTimes, margin: float) -> dict[int, Program | None]:
    """Size -> the program to run there (None: IREE's default). The overall winner stays
    unless another option is faster by `margin` at that size (noise must not flip it)."""
    out: dict[int, Program | None] = {}
    for size, d in times.default_at.items():
        opts: list[tuple[float, Program | None]] = [(d, None)]
        opts += [(at[size], p) for p, at in times.candidates if size in at]
        base = next((t for t, p in opts if p == times.winner), d)
        best_t, best = min(opts, key=lambda x: x[0])
        out[size] = best if best_t * margin < base else times.winner
    return out


def cut_between(a: int, b: int) -> int:
    """The first size of the upper branch between sampled sizes a < b: their geometric
    middle (sizes spread geometrically), strictly above a."""
    return min(max(math.ceil(math.sqrt(a * b)), a + 1), b)


def plan_sizes(choices: Mapping[str, Mapping[int, Program | None]]
               ) -> tuple[tuple[int, ...], dict[str, tuple[Program | None, ...]]]:
    """Cuts and per-task branch programs from each task's choice per sampled size. No cut
    (empty tuple) when every task makes one choice over the whole range."""
    sizes = sorted({s for c in choices.values() for s in c})
    cuts = []
    for a, b in zip(sizes, sizes[1:]):
        if any(_key(c.get(a)) != _key(c.get(b)) for c in choices.values()
               if a in c and b in c):
            cuts.append(cut_between(a, b))
    per: dict[str, tuple[Program | None, ...]] = {}
    for key, c in choices.items():
        branches: list[Program | None] = []
        for i in range(len(cuts) + 1):
            lo = cuts[i - 1] if i else 0
            hi = cuts[i] if i < len(cuts) else math.inf
            inside = [c[s] for s in sorted(c) if lo <= s < hi]
            branches.append(inside[0] if inside else None)
        per[key] = tuple(branches)
    return tuple(cuts), per


def _key(p: Program | None) -> str:
    return p.key if p is not None else ""


def describe(plan: SizePlan, lo: int, hi: int, names: Mapping[str, str],
             kernel: Mapping[str, str] | None = None) -> list[list[str]]:
    """Rows of the decision table: task, size range, what runs there."""
    rows = []
    for key, progs in plan.choices.items():
        for (a, b), p in zip(plan.ranges(lo, hi), progs):
            what = "IREE default" if p is None else (kernel or {}).get(p.key, p.key[:10])
            rows.append([names.get(key, key), f"{a}..{b}", what])
    return rows

