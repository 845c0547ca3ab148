"""DietCode's adaptation term f_adapt: how well a micro-kernel fits a size, analytically.

A dynamic task's program is a micro-kernel: its dynamic loop is cut into workgroups of k*c
rows and kernels of c rows, and the partial last kernel runs as rows of one. At a size s:
- the peeled remainder costs more per row than a kernel row (no reuse of the other
  operand's registers across rows): rows efficiency = s / (full kernels' rows +
  REMAINDER_ROW_COST * remainder rows);
- the workgroups (ceil(s / (k*c)) times those of the static distributed loops) are
  spread over the cores: parallel efficiency = workgroups / (rounds * cores).
The cost model learns the micro-kernel's speed shape-independently (f_MK, from the
program's features at the task's nominal size) on labels divided by this term, and
predicts f_MK times it, so a kernel of 64 rows is not ranked first for a range of 1..16.
"""
from __future__ import annotations

import math
from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.program import ParallelStep, Program

# A peeled row of one against a row of a c-row kernel: an assumed ratio (a row of one
# reloads the other operand's vectors for every row), not fitted to measurements.
REMAINDER_ROW_COST = 1.5


def size_scales(samples, nominal) -> tuple[tuple[float, float], ...]:
    """(scale against the nominal sample, weight) of each size sample: the geometric mean
    of the ratios of its sizes (one dynamic symbol: the size ratio)."""
    base = nominal.dims
    out = []
    for s in samples:
        ratios = [n / base[k] for k, n in s.dims.items() if base.get(k)]
        scale = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else 1.0
        out.append((scale, s.weight))
    return tuple(out)


def size_efficiency(extent: int, k: int, c: int, other_workgroups: int,
                    threads: int) -> float:
    """Share of the cores' time doing useful kernel rows at one extent of the dynamic loop."""
    extent = max(extent, 1)
    full = extent // c
    rem = extent - full * c
    rows = extent / (full * c + REMAINDER_ROW_COST * rem)
    wg = math.ceil(extent / (k * c)) * other_workgroups
    return rows * wg / (math.ceil(wg / threads) * threads)


def _root(ops: Sequence[OpInfo], program: Program) -> OpInfo | None:
    name = program.sketch.root or program.sketch.anchor
    return next((o for o in ops if o.name == name), None)


def efficiency(ops: Sequence[OpInfo], program: Program, scale: float,
               threads: int = 2) -> float:
    """The program's efficiency with its dynamic loops at `scale` times their nominal
    extents (1.0 for a program with no dynamic loop)."""
    op = _root(ops, program)
    if op is None or not op.dynamic_loops:
        return 1.0
    par = program.find(ParallelStep, op.name)
    distributed = set(par.loops) if par else set()
    other = 1
    for l, ext in enumerate(op.extents):
        if l in op.dynamic_loops or l not in distributed:
            continue
        step = program.split(op.name, l)
        other *= math.ceil(ext / math.prod(step.lengths)) if step else 1
    eff = 1.0
    for l in op.dynamic_loops:
        step = program.split(op.name, l)
        k, c = (step.lengths[0], step.lengths[-1]) if step and l in program.peeled(op.name) \
            else (1, 1)
        eff *= size_efficiency(round(op.extents[l] * scale), k, c, other, threads)
    return eff


def adaptation(ops: Sequence[OpInfo], program: Program,
               scales: Sequence[tuple[float, float]], threads: int = 2) -> float:
    """f_adapt over the size samples ((scale, weight) each): the inverse of the weighted
    mean of 1/efficiency, the factor a program's time over the samples carries (1.0 for a
    static task)."""
    if not scales:
        return 1.0
    total = sum(w for _, w in scales) or 1.0
    inv = sum(w / efficiency(ops, program, s, threads) for s, w in scales) / total
    return 1.0 / inv
