"""Loop facts of an op that the annotation, the mutations, the seeds and the emitter share:
divisors, window and batch loops, the loops a workgroup level can parallelize."""
from __future__ import annotations

import math
from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.analysis import strided_window_loops
from mlir_ansor.sketch_passes.program import Program


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of `n` that is at most `limit` (1 when `limit` < 1)."""
    return max(d for d in range(1, min(n, max(limit, 1)) + 1) if n % d == 0)


def op_by_name(ops: Sequence[OpInfo], name: str) -> OpInfo:
    for o in ops:
        if o.name == name:
            return o
    raise KeyError(f"no op named {name}")


def window_loops(op: OpInfo) -> set[int] | None:
    """Loops that appear in a compound (window) index expression; None if there is none."""
    loops = {d for o in op.operands for t in o.map_results if len(t) > 1 for d, _ in t}
    return loops or None


def window_rows(op: OpInfo) -> set[int]:
    """Output loops of all window expressions but the last (e.g. the output row of a 2-D
    convolution): their innermost tile is 1 so the convolution decomposes to 1-D."""
    rows: list[int] = []
    for o in op.operands:
        for t in o.map_results:
            if len(t) > 1:
                par = [d for d, _ in t if op.iterators[d] == "parallel"]
                rows.extend(par[:1])
    return set(rows[:-1])


def batch_loops(op: OpInfo) -> set[int]:
    """Parallel loops every operand is indexed by (the batch of a batch matmul)."""
    used = [{d for t in o.map_results for d, _ in t} for o in op.operands if o.shape]
    return {l for l in op.parallel_dims if all(l in u for u in used)} if used else set()


def unit_loops(op: OpInfo) -> set[int]:
    """Loops whose register tile is 1: window rows (see window_rows) and, for ops with a
    reduction, batch loops (a batch dim in the register tile turns the vector contraction
    into one the outer-product lowering unrolls for minutes), and loops read with a stride
    by a folded window op (see strided_window_loops)."""
    return (window_rows(op) | strided_window_loops(op) |
            (batch_loops(op) if op.reduction_dims else set()))


def eligible_parallel(op: OpInfo, prog: Program) -> list[int]:
    """Parallel loops whose outermost (workgroup) level has more than one iteration (a
    peeled loop stays whole there)."""
    out = []
    peeled = prog.peeled(op.name)
    for l in op.parallel_dims:
        s = prog.split(op.name, l)
        # A dynamic loop always may have several workgroups (its extent is no extent);
        # first, so that a parallel step of any depth keeps it.
        if s is not None and l in op.dynamic_loops:
            out.insert(0, l)
        elif s is not None and l not in peeled and op.extents[l] // math.prod(s.lengths) > 1:
            out.append(l)
    return out
