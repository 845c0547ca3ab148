"""Edits of a Program for the evolutionary search (paper §5.1): mutations and crossover.

Every edit replaces whole steps (the genes) and keeps the step order, so identical programs
keep identical keys; derived steps are re-derived (`repair`) and the child is checked
(`violations`). An edit that cannot produce a valid child returns None.
"""
from __future__ import annotations

import math
import random
from typing import Callable, Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.annotation import (DYNAMIC_WORKGROUP_KERNELS, MAX_WORKGROUP_DIMS,
                                                 annotation_limits, block_candidates,
                                                 block_choices, block_tiles, dynamic_row_splits,
                                                 pack_candidates, packs_fit, peel_sizes, repair,
                                                 unroll_choices, violations, whole_row_loops)
from mlir_ansor.sketch_passes.loops import divisors, eligible_parallel, lane_loop, op_by_name
from mlir_ansor.sketch_passes.program import (BlockPeelStep, PackStep, ParallelStep, Program,
                                              SplitStep, Step, UnrollStep, VectorizeStep)
from mlir_ansor.targets import Target


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def split_levels(op: OpInfo, step: SplitStep) -> list[int]:
    """Trip counts of the loop's levels, outermost first. Parallel lengths are separate
    levels; a reduction's (r1, v) is nested (v tiles r1)."""
    ext = op.extents[step.loop]
    if op.iterators[step.loop] == "parallel":
        return [ext // math.prod(step.lengths), *step.lengths]
    ls = step.lengths
    return [ext // ls[0]] + [a // b for a, b in zip(ls, ls[1:])] + [ls[-1]]


def from_levels(op: OpInfo, step: SplitStep, levels: list[int]) -> SplitStep:
    if op.iterators[step.loop] == "parallel":
        return SplitStep(step.op, step.loop, tuple(levels[1:]))
    inner = [math.prod(levels[i:]) for i in range(1, len(levels))]
    return SplitStep(step.op, step.loop, tuple(inner))


def _replace(prog: Program, old: Step, new: Step) -> Program:
    return Program(prog.sketch, tuple(new if s is old else s for s in prog.steps))


def _base(ops: Sequence[OpInfo], prog: Program) -> OpInfo:
    return op_by_name(ops, prog.sketch.root or prog.sketch.anchor)


def _checked(ops: Sequence[OpInfo], prog: Program, target: Target | None) -> Program | None:
    prog = repair(ops, prog)
    return None if violations(ops, prog, target=target) else prog


def mutate_tile_size(ops: Sequence[OpInfo], prog: Program, rng: random.Random, *,
                     target: Target | None = None) -> Program | None:
    """Move one prime factor of a split loop from one level to another (the outermost,
    implicit level = extent / product of the lengths, included)."""
    base = _base(ops, prog)
    splits = [s for s in prog.steps if isinstance(s, SplitStep) and s.op == base.name]
    if not splits:
        return None
    step = rng.choice(splits)
    if not prog.sketch.root and step.loop in base.dynamic_loops:
        # Rows of one, or another chunk / workgroup of a dynamic contiguous loop.
        choices = [c for c in dynamic_row_splits(base, step.loop,
                                                 whole_row_loops(ops, prog.sketch),
                                                 target=target) if c != step.lengths]
        if not choices:
            return None
        return _checked(ops, _replace(prog, step, SplitStep(step.op, step.loop,
                                                            rng.choice(choices))), target)
    blocks = prog.blocks(base.name)
    if step.loop in blocks:  # another register tile, block or number of blocks
        return _mutate_block(ops, prog, base, step, blocks[step.loop], rng, target)
    if step.loop in prog.peeled(base.name):  # a micro-kernel loop: another register tile
        k, one, c = step.lengths
        if step.loop in base.dynamic_loops and rng.random() < 0.5:
            # ... or, on a dynamic loop, another number of kernels per workgroup.
            ks = [x for x in DYNAMIC_WORKGROUP_KERNELS if x != k]
            new = SplitStep(step.op, step.loop, (rng.choice(ks), one, c))
            return _checked(ops, _replace(prog, step, new), target)
        sizes = [x for x in peel_sizes(base.extents[step.loop], c * 2,
                                       step.loop in base.dynamic_loops) if x != c]
        lanes = annotation_limits(target).f32_lanes
        if c % lanes == 0 and step.loop == lane_loop(base):
            # Whole vectors stay whole (annotate's full_vectors draws only those).
            sizes = [x for x in sizes if x % lanes == 0]
        if not sizes:
            return None
        new = SplitStep(step.op, step.loop, (k, one, rng.choice(sizes)))
        return _checked(ops, _replace(prog, step, new), target)
    # Blocked register tiles are a CPU micro-kernel form; GPU sketches have none.
    if prog.sketch.root and not prog.sketch.gpu and not prog.peeled(base.name) and \
            rng.random() < BLOCK_SWITCH and \
            step.loop in block_candidates(base, prog.sketch, target=target):
        return _block(ops, prog, base, step, rng, target)
    levels = split_levels(base, step)
    src = rng.choice([i for i, v in enumerate(levels) if v > 1] or [0])
    if levels[src] == 1:
        return None
    p = rng.choice(_prime_factors(levels[src]))
    dst = rng.choice([i for i in range(len(levels)) if i != src])
    levels[src] //= p
    levels[dst] *= p
    return _checked(ops, _replace(prog, step, from_levels(base, step, levels)), target)


# Share of tile-size mutations of a blockable loop that switch it between a dividing
# register tile and a blocked one (the workgroup and S1 tiles kept): without it the search
# could not walk from 4x16 to 6x16 on a power-of-two matmul.
BLOCK_SWITCH = 0.2


def _block(ops: Sequence[OpInfo], prog: Program, base: OpInfo, step: SplitStep,
           rng: random.Random, target: Target | None) -> Program | None:
    """Split (a, b, c) -> blocked (a, 1, c') with block b*c and a c' that leaves a partial
    tile in it."""
    a, b, c = step.lengths
    block, ext = b * c, base.extents[step.loop]
    cs = [x for x in block_tiles(ext, c * 2) if block % x and x < block]
    if not cs:
        return None
    new = _replace(prog, step, SplitStep(step.op, step.loop, (a, 1, rng.choice(cs))))
    # Where annotation puts it: after the splits of the parallel loops.
    last = max(i for i, s in enumerate(new.steps) if isinstance(s, SplitStep) and
               s.op == base.name and base.iterators[s.loop] == "parallel")
    steps = list(new.steps)
    steps.insert(last + 1, BlockPeelStep(base.name, step.loop, block))
    return _checked(ops, Program(prog.sketch, tuple(steps)), target)


def _mutate_block(ops: Sequence[OpInfo], prog: Program, base: OpInfo, step: SplitStep,
                  block: int, rng: random.Random, target: Target | None) -> Program | None:
    """One decision of a blocked loop (a, 1, c) with its block: c, the block (a kept if it
    still divides) or a; or (BLOCK_SWITCH) back to a register tile dividing the block."""
    a, _, c = step.lengths
    ext = base.extents[step.loop]
    old_peel = next(s for s in prog.steps
                    if isinstance(s, BlockPeelStep) and s.op == base.name and s.loop == step.loop)
    if rng.random() < BLOCK_SWITCH:
        ds = [d for d in divisors(block) if 1 < d <= c * 2]
        if not ds:
            return None
        d = rng.choice(ds)
        new = _replace(prog, step, SplitStep(step.op, step.loop, (a, block // d, d)))
        return _checked(ops, Program(prog.sketch, tuple(x for x in new.steps
                                                        if x is not old_peel)), target)
    what = rng.choice(("c", "block", "a"))
    if what == "c":
        cs = [x for x in block_tiles(ext, c * 2) if x != c and block % x]
        c = rng.choice(cs) if cs else c
    elif what == "block":
        bs = [b for b in block_choices(ext, c) if b != block]
        block = rng.choice(bs) if bs else block
    else:
        as_ = [x for x in divisors(ext // block) if x != a]
        a = rng.choice(as_) if as_ else a
    if (ext // block) % a:
        a = 1
    new = _replace(prog, step, SplitStep(step.op, step.loop, (a, 1, c)))
    new = _replace(new, old_peel, BlockPeelStep(base.name, step.loop, block))
    return _checked(ops, new, target)


def mutate_parallel(ops: Sequence[OpInfo], prog: Program, rng: random.Random, *,
                    target: Target | None = None) -> Program | None:
    """Change how many outer loops are distributed over workgroups (parallel granularity)."""
    base = _base(ops, prog)
    par = prog.find(ParallelStep, base.name)
    eligible = eligible_parallel(base, prog, rows=whole_row_loops(ops, prog.sketch))
    choices = [k for k in range(1, min(len(eligible), MAX_WORKGROUP_DIMS) + 1)
               if par is None or k != len(par.loops)]
    if par is None or not choices:
        return None
    new = ParallelStep(par.op, tuple(eligible[:rng.choice(choices)]))
    prog = _replace(prog, par, new)
    return None if violations(ops, prog, target=target) else prog


def mutate_unroll(ops: Sequence[OpInfo], prog: Program, rng: random.Random, *,
                  target: Target | None = None) -> Program | None:
    base = _base(ops, prog)
    u = prog.find(UnrollStep, base.name)
    choices = [f for f in unroll_choices(base, prog) if u is not None and f != u.factor]
    if not choices:
        return None
    prog = _replace(prog, u, UnrollStep(u.op, rng.choice(choices)))
    return None if violations(ops, prog, target=target) else prog


def with_pack(prog: Program, op: str, operand: int | None) -> Program:
    """`prog` packing `operand` of `op` (None: nothing), the PackStep where annotation puts
    it (before the op's VectorizeStep), so equal programs keep equal keys."""
    steps = [s for s in prog.steps if not (isinstance(s, PackStep) and s.op == op)]
    if operand is not None:
        at = next((i for i, s in enumerate(steps)
                   if isinstance(s, VectorizeStep) and s.op == op), len(steps))
        steps.insert(at, PackStep(op, operand))
    return Program(prog.sketch, tuple(steps))


def mutate_pack(ops: Sequence[OpInfo], prog: Program, rng: random.Random, *,
                target: Target | None = None) -> Program | None:
    """Pack another operand of the root, or stop / start packing."""
    if not prog.sketch.root:
        return None
    base = _base(ops, prog)
    now = prog.packed(base.name)
    choices = [i for i in pack_candidates(base, prog.sketch)
               if (i,) != now and packs_fit(ops, prog, base, [i])]
    choices += [None] if now else []
    if not choices:
        return None
    prog = with_pack(prog, base.name, rng.choice(choices))
    return None if violations(ops, prog, target=target) else prog


Mutation = Callable[..., "Program | None"]  # (ops, program, rng, *, target)
# Ansor's weights (TVM: tile size 0.90, unroll 0.04, compute location 0.05, parallel 0.01).
# Our sketches have no flexible compute-location node yet; its share goes to packing (where
# an operand's copy is made is its own kind of compute location).
MUTATIONS: dict[str, tuple[Mutation, float]] = {
    "tile_size": (mutate_tile_size, 0.90),
    "pack": (mutate_pack, 0.05),
    "unroll": (mutate_unroll, 0.04),
    "parallel": (mutate_parallel, 0.01),
}


def mutate(ops: Sequence[OpInfo], prog: Program, rng: random.Random, tries: int = 8, *,
           target: Target | None = None) -> Program | None:
    """One random mutation (by the weights above) that yields a valid, different program."""
    names = list(MUTATIONS)
    weights = [MUTATIONS[n][1] for n in names]
    for _ in range(tries):
        fn = MUTATIONS[rng.choices(names, weights)[0]][0]
        child = fn(ops, prog, rng, target=target)
        if child is not None and child.key != prog.key:
            return child
    return None


def _genes(prog: Program) -> dict[tuple, Step]:
    """Steps by what they decide: (op, kind, loop); a PackStep is no gene here (a program
    may have none): crossover takes it from either parent."""
    return {(s.op, s.kind, getattr(s, "loop", None)): s for s in prog.steps
            if not isinstance(s, PackStep)}


def crossover(ops: Sequence[OpInfo], a: Program, b: Program, rng: random.Random,
              tries: int = 8, *, target: Target | None = None) -> Program | None:
    """Node-based crossover: for each DAG node (op) with steps, take all of that node's steps
    from one parent. When only one node carries steps (our multi-level tiled root), the
    node's own decisions are crossed per loop instead: each loop's split from either parent.
    The child keeps parent `a`'s step order and must be valid."""
    if a.sketch != b.sketch:
        return None
    ga, gb = _genes(a), _genes(b)
    if set(ga) != set(gb):
        return None
    nodes = sorted({k[0] for k in ga})
    root = a.sketch.root
    for _ in range(tries):
        if len(nodes) > 1:
            pick = {n: rng.random() < 0.5 for n in nodes}
            take_b = {k for k in ga if pick[k[0]]}
            pack_b = pick.get(root, False)
        else:
            take_b = {k for k in ga if rng.random() < 0.5}
            pack_b = rng.random() < 0.5
        raw = Program(a.sketch, tuple(gb[k] if k in take_b else ga[k] for k in ga))
        if root:  # the packed operand (or none) of the parent the root's node came from
            packed = (b if pack_b else a).packed(root)
            raw = with_pack(raw, root, packed[0] if packed else None)
        # Keep the parents' own parallel/unroll genes where they still fit the tiles.
        child = raw if not violations(ops, raw, target=target) else _checked(ops, raw, target)
        if child is not None and child.key not in (a.key, b.key):
            return child
    return None
