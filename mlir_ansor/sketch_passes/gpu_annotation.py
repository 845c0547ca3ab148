"""Random annotation of GPU sketches.

Root ("SSSRRSRS") sketches: every parallel loop of the root gets lengths
(threads, vthread, inner); the outermost level (extent / product) is the grid, so the
block tile is threads * vthread * inner and one thread computes vthread * inner. Reduction
loops get (shared tile, inner) (window loops: (shared tile,)). Plain sketches: every
parallel loop of the anchor gets (threads, inner).

Cross-thread reduction sketches (`rfactor` on GPU): every parallel loop of the root gets
(rows,), the outputs one block reduces (at most MAX_BLOCK_ROWS in all); the innermost
reduction loop gets (threads, vector): the threads splitting each row (threadIdx.x) and the
vector each thread reads per step of its slice.

A block has at most the target's max_threads_per_block threads (at least a warp where the
loops allow) over at most three loops (threadIdx.x/y/z), the grid spans at most three loops
(blockIdx), one thread's tile holds at most MAX_THREAD_TILE elements, and cache reads fit
the target's shared_memory_per_block. Without a target: `targets.DEFAULT_GPU` (sm_80).
"""
from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass
from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.loops import divisors, op_by_name, window_loops
from mlir_ansor.sketch_passes.program import (ParallelStep, Program, SplitStep, UnrollStep,
                                              VectorizeStep)
from mlir_ansor.sketch_passes.rules import CacheReadShared, CrossThreadReduction
from mlir_ansor.sketch_passes.sketch import Sketch
from mlir_ansor.targets import DEFAULT_GPU, Target, TargetError

# Search-space caps (the same on every GPU):
MAX_THREAD_TILE = 64
MAX_INNER = 8
MAX_VTHREAD = 4
MAX_SHARED_K = 64  # reduction elements per shared-memory tile
MAX_BLOCK_ROWS = 4  # outputs one block reduces across its threads
MAX_THREAD_VECTOR = 4  # elements a thread reads per step of a cross-thread reduction
MAX_GRID_DIMS = 3  # blockIdx x, y, z: CUDA's, every architecture


@dataclass(frozen=True)
class GpuLimits:
    """The caps of a cuda target's search space that follow from its machine facts."""

    max_threads: int  # threads of a block
    min_threads: int  # one warp: fewer threads leave lanes of it idle
    max_shared_bytes: int  # workgroup memory of the cache reads (the static limit)

    @staticmethod
    def of(target: Target) -> "GpuLimits":
        if target.backend != "cuda":
            raise TargetError(f"GPU annotation needs a cuda target, not {target.name} "
                              f"({target.backend})")
        return GpuLimits(max_threads=target.max_threads_per_block, min_threads=target.warp_size,
                         max_shared_bytes=target.shared_memory_per_block)


DEFAULT_GPU_LIMITS = GpuLimits.of(DEFAULT_GPU)
# Those of the default target, for callers that check programs made without one.
MAX_THREADS = DEFAULT_GPU_LIMITS.max_threads
MIN_THREADS = DEFAULT_GPU_LIMITS.min_threads
MAX_SHARED_BYTES = DEFAULT_GPU_LIMITS.max_shared_bytes


@functools.lru_cache(maxsize=None)
def _limits_of(target: Target) -> GpuLimits:
    return GpuLimits.of(target)


def gpu_limits(target: Target | None = None) -> GpuLimits:
    """The limits of `target` (DEFAULT_GPU's when None)."""
    return DEFAULT_GPU_LIMITS if target is None else _limits_of(target)


def _pick(rng: random.Random, n: int, limit: int) -> int:
    return rng.choice([d for d in divisors(n) if d <= limit])


def _sample_parallel(rng: random.Random, op: OpInfo, with_vthread: bool, lim: GpuLimits
                     ) -> dict[int, tuple[int, ...]] | None:
    loops = list(op.parallel_dims)
    threaded = set(rng.sample(loops[-3:], k=min(len(loops), rng.choice([1, 2, 3]))))
    out = {}
    for l in loops:
        ext = op.extents[l]
        inner = _pick(rng, ext, MAX_INNER)
        vt = _pick(rng, ext // inner, MAX_VTHREAD) if with_vthread else 1
        th = _pick(rng, ext // (inner * vt), lim.max_threads) if l in threaded else 1
        out[l] = (th, vt, inner) if with_vthread else (th, inner)
    threads = math.prod(v[0] for v in out.values())
    tile = math.prod(math.prod(v[1:]) for v in out.values())
    grid = [l for l in loops if op.extents[l] // math.prod(out[l]) > 1]
    if threads > lim.max_threads or tile > MAX_THREAD_TILE or len(grid) > MAX_GRID_DIMS:
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


def annotate_gpu(ops: Sequence[OpInfo], sketch: Sketch, rng: random.Random, *,
                 target: Target | None = None) -> Program:
    """One random complete program of a GPU sketch (cache-read sketches: one whose shared
    tiles fit the target's shared memory, if any of 100 draws does)."""
    lim = gpu_limits(target)
    prog = _annotate_gpu(ops, sketch, rng, lim)
    base = op_by_name(ops, sketch.root or sketch.anchor)
    for _ in range(100):
        if not sketch.has(CacheReadShared) or shared_bytes(base, prog) <= lim.max_shared_bytes:
            break
        prog = _annotate_gpu(ops, sketch, rng, lim)
    return prog


def reduction_threads(extent: int, lim: GpuLimits) -> list[int]:
    """Thread counts that can split a row of `extent`: divisors from a warp to the block's
    limit (the largest divisor below a warp if the row has none)."""
    ok = [d for d in divisors(extent) if lim.min_threads <= d <= lim.max_threads]
    return ok or [max(d for d in divisors(extent) if d <= lim.max_threads)]


def _grid_loops(op: OpInfo, rows: dict[int, int]) -> tuple[int, ...]:
    """The (last three) loops whose rows split over blocks; other loops stay whole."""
    return tuple([l for l in op.parallel_dims if op.extents[l] // rows[l] > 1][-MAX_GRID_DIMS:])


def _annotate_cross_thread(ops: Sequence[OpInfo], sketch: Sketch, rng: random.Random,
                           lim: GpuLimits) -> Program:
    root = op_by_name(ops, sketch.root)
    prog = Program(sketch)
    budget = MAX_BLOCK_ROWS
    rows = {}
    for l in reversed(root.parallel_dims):
        rows[l] = _pick(rng, root.extents[l], budget)
        budget //= rows[l]
    grid = _grid_loops(root, rows)
    for l in root.parallel_dims:
        # A loop outside the grid stays whole in each block.
        prog = prog.with_step(SplitStep(root.name, l,
                                        (rows[l] if l in grid else root.extents[l],)))
    last = root.reduction_dims[-1]
    threads = rng.choice(reduction_threads(root.extents[last], lim))
    vec = _pick(rng, root.extents[last] // threads, MAX_THREAD_VECTOR)
    prog = prog.with_step(SplitStep(root.name, last, (threads, vec)))
    prog = prog.with_step(ParallelStep(root.name, grid))
    prog = prog.with_step(UnrollStep(root.name, 1))
    return prog.with_step(VectorizeStep(root.name))


def gpu_violations(ops: Sequence[OpInfo], prog: Program, *,
                   target: Target | None = None) -> list[str]:
    """Why a GPU program is not one `annotate_gpu` could have produced for `target`
    ([] = valid)."""
    lim = gpu_limits(target)
    sk = prog.sketch
    base = op_by_name(ops, sk.root or sk.anchor)
    errs: list[str] = []
    u = prog.find(UnrollStep, base.name)
    if u is not None and u.factor != 1:
        errs.append("GPU strategies do not unroll")  # the emitter has no unroll step
    if sk.has(CrossThreadReduction):
        last = base.reduction_dims[-1]
        total = 1
        for l in base.parallel_dims:
            s = prog.split(base.name, l)
            if s is None or len(s.lengths) != 1 or base.extents[l] % s.lengths[0]:
                errs.append(f"loop {l}: needs one level dividing {base.extents[l]}")
            elif s.lengths[0] != base.extents[l]:
                total *= s.lengths[0]
        if total > MAX_BLOCK_ROWS:
            errs.append(f"{total} rows per block > {MAX_BLOCK_ROWS}")
        s = prog.split(base.name, last)
        if s is None or len(s.lengths) != 2 or s.lengths[0] not in \
                reduction_threads(base.extents[last], lim) or \
                (base.extents[last] // s.lengths[0]) % s.lengths[1] or \
                s.lengths[1] > MAX_THREAD_VECTOR:
            errs.append("reduction loop: bad (threads, vector) split")
        par = prog.find(ParallelStep, base.name)
        if not errs and (par is None or tuple(par.loops) != _split_grid(base, prog)
                         or len(par.loops) > MAX_GRID_DIMS):
            errs.append("the grid must span every split loop, at most three")
        return errs
    levels = 3 if sk.root else 2
    threads = tile = 1
    for l in base.parallel_dims:
        s = prog.split(base.name, l)
        if s is None or len(s.lengths) != levels or base.extents[l] % math.prod(s.lengths):
            errs.append(f"loop {l}: needs {levels} levels dividing {base.extents[l]}")
            continue
        threads *= s.lengths[0]
        tile *= math.prod(s.lengths[1:])
        if s.lengths[-1] > MAX_INNER or (sk.root and s.lengths[1] > MAX_VTHREAD):
            errs.append(f"loop {l}: inner or vthread tile too large")
    if errs:
        return errs
    threaded = [l for l in base.parallel_dims if prog.split(base.name, l).lengths[0] > 1]
    if any(l not in base.parallel_dims[-3:] for l in threaded):
        errs.append("threads map to the last three loops only")
    if threads > lim.max_threads or tile > MAX_THREAD_TILE:
        errs.append(f"{threads} threads or a {tile}-element thread tile: too many")
    if sk.root:
        window = window_loops(base) or set()
        for l in base.reduction_dims:
            s = prog.split(base.name, l)
            want = 1 if l in window else 2
            if s is None or len(s.lengths) != want or base.extents[l] % s.lengths[0] or \
                    s.lengths[0] > MAX_SHARED_K or (want == 2 and (
                        s.lengths[0] % s.lengths[1] or s.lengths[1] > MAX_INNER)):
                errs.append(f"reduction loop {l}: bad shared/inner split")
        if sk.has(CacheReadShared) and not errs and \
                shared_bytes(base, prog) > lim.max_shared_bytes:
            errs.append("cache reads exceed the workgroup memory")
    par = prog.find(ParallelStep, base.name)
    grid = _split_grid(base, prog)
    if par is None or tuple(par.loops) != grid or len(grid) > MAX_GRID_DIMS:
        errs.append("the grid must span every split loop, at most three")
    return errs


def _split_grid(base: OpInfo, prog: Program) -> tuple[int, ...]:
    """The parallel loops of `base` whose splits leave more than one block."""
    return tuple(l for l in base.parallel_dims if prog.split(base.name, l) is not None and
                 base.extents[l] // math.prod(prog.split(base.name, l).lengths) > 1)


def repair_gpu(ops: Sequence[OpInfo], prog: Program) -> Program:
    """After an edit of the tile sizes: the grid spans the loops that still split."""
    base = op_by_name(ops, prog.sketch.root or prog.sketch.anchor)
    grid = _split_grid(base, prog)
    return Program(prog.sketch, tuple(
        ParallelStep(s.op, grid) if isinstance(s, ParallelStep) and s.op == base.name else s
        for s in prog.steps))


def _annotate_gpu(ops: Sequence[OpInfo], sketch: Sketch, rng: random.Random,
                  lim: GpuLimits) -> Program:
    if sketch.has(CrossThreadReduction):
        return _annotate_cross_thread(ops, sketch, rng, lim)
    base = op_by_name(ops, sketch.root or sketch.anchor)
    splits = None
    for attempt in range(400):  # resample until the block is legal (and a warp, if it can be)
        cand = _sample_parallel(rng, base, bool(sketch.root), lim)
        if cand is None:
            continue
        splits = cand
        if math.prod(v[0] for v in cand.values()) >= lim.min_threads or attempt > 200:
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
