"""Random annotation of GPU sketches.

Root ("SSSRRSRS") sketches: every parallel loop of the root gets lengths
(threads, vthread, inner); the outermost level (extent / product) is the grid, so the
block tile is threads * vthread * inner and one thread computes vthread * inner. Reduction
loops get (shared tile, inner) (window loops: (shared tile,)). Plain sketches: every
parallel loop of the anchor gets (threads, inner).

A block has at most MAX_THREADS threads (at least MIN_THREADS where the loops allow) over
at most three loops (threadIdx.x/y/z), the grid spans at most three loops (blockIdx), and
one thread's tile holds at most MAX_THREAD_TILE elements.
"""
from __future__ import annotations

import math
import random
from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.annotation import divisors, op_by_name, window_loops
from mlir_ansor.sketch_passes.program import (ParallelStep, Program, SplitStep, UnrollStep,
                                              VectorizeStep)
from mlir_ansor.sketch_passes.sketch import Sketch

MAX_THREADS = 1024
MIN_THREADS = 32  # one warp
MAX_THREAD_TILE = 64
MAX_INNER = 8
MAX_VTHREAD = 4
MAX_GRID_DIMS = 3
MAX_SHARED_K = 64  # reduction elements per shared-memory tile
MAX_SHARED_BYTES = 48 * 1024  # workgroup memory of the cache reads (the static limit)


def _pick(rng: random.Random, n: int, limit: int) -> int:
    return rng.choice([d for d in divisors(n) if d <= limit])


def _sample_parallel(rng: random.Random, op: OpInfo, with_vthread: bool
                     ) -> dict[int, tuple[int, ...]] | None:
    loops = list(op.parallel_dims)
    threaded = set(rng.sample(loops[-3:], k=min(len(loops), rng.choice([1, 2, 3]))))
    out = {}
    for l in loops:
        ext = op.extents[l]
        inner = _pick(rng, ext, MAX_INNER)
        vt = _pick(rng, ext // inner, MAX_VTHREAD) if with_vthread else 1
        th = _pick(rng, ext // (inner * vt), MAX_THREADS) if l in threaded else 1
        out[l] = (th, vt, inner) if with_vthread else (th, inner)
    threads = math.prod(v[0] for v in out.values())
    tile = math.prod(math.prod(v[1:]) for v in out.values())
    grid = [l for l in loops if op.extents[l] // math.prod(out[l]) > 1]
    if threads > MAX_THREADS or tile > MAX_THREAD_TILE or len(grid) > MAX_GRID_DIMS:
        return None
    return out


def shared_bytes(op: OpInfo, prog: Program) -> int:
    """Workgroup memory the cache reads of `op`'s inputs take: per input, its block tile
    over the parallel loops times its shared tile over the reduction loops."""
    tile = {}
    for l in range(len(op.extents)):
        s = prog.split(op.name, l)
        if s is None:
            tile[l] = op.extents[l]
        elif op.iterators[l] == "parallel":
            tile[l] = math.prod(s.lengths)
        else:
            tile[l] = s.lengths[0]
    total = 0
    for o in op.operands:
        if o.is_output:
            continue
        elems = math.prod(sum((tile[d] - 1) * abs(c) for d, c in terms) + 1
                          for terms in o.map_results)
        total += elems * o.elem_bytes
    return total


def annotate_gpu(ops: Sequence[OpInfo], sketch: Sketch, rng: random.Random) -> Program:
    """One random complete program of a GPU sketch (cache-read sketches: one whose shared
    tiles fit MAX_SHARED_BYTES, if any of 100 draws does)."""
    prog = _annotate_gpu(ops, sketch, rng)
    base = op_by_name(ops, sketch.root or sketch.anchor)
    for _ in range(100):
        if not sketch.cache_read or shared_bytes(base, prog) <= MAX_SHARED_BYTES:
            break
        prog = _annotate_gpu(ops, sketch, rng)
    return prog


def _annotate_gpu(ops: Sequence[OpInfo], sketch: Sketch, rng: random.Random) -> Program:
    base = op_by_name(ops, sketch.root or sketch.anchor)
    splits = None
    for attempt in range(400):  # resample until the block is legal (and a warp, if it can be)
        cand = _sample_parallel(rng, base, bool(sketch.root))
        if cand is None:
            continue
        splits = cand
        if math.prod(v[0] for v in cand.values()) >= MIN_THREADS or attempt > 200:
            break
    if splits is None:  # tiny loops: one thread per block, one element per thread
        splits = {l: (1, 1, 1) if sketch.root else (1, 1) for l in base.parallel_dims}
    prog = Program(sketch)
    for l in base.parallel_dims:
        prog = prog.with_step(SplitStep(base.name, l, splits[l]))
    if sketch.root:
        window = window_loops(base) or set()
        for l in base.reduction_dims:
            shared = _pick(rng, base.extents[l], MAX_SHARED_K)
            if l in window:
                prog = prog.with_step(SplitStep(base.name, l, (shared,)))
            else:
                prog = prog.with_step(SplitStep(base.name, l, (shared,
                                                               _pick(rng, shared, MAX_INNER))))
    grid = [l for l in base.parallel_dims if base.extents[l] // math.prod(splits[l]) > 1]
    prog = prog.with_step(ParallelStep(base.name, tuple(grid)))
    prog = prog.with_step(UnrollStep(base.name, 1))
    return prog.with_step(VectorizeStep(base.name))
