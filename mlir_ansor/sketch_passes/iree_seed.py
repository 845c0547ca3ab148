"""Seed programs from IREE's own tile sizes.

IREE's default codegen picks one tiling per dispatch (the root op's `lowering_config`:
`distribution` = workgroup tile, `vector_common_parallel` = register tile,
`vector_reduction` = innermost reduction tile). With `--iree-seeds` the first batch of a
task measures, per sketch, our program closest to that choice: the search starts next to
the anchor it is out to beat, and evolution mutates from there. (Random sampling alone left
many ResNet-50 1x1 convs at 0.2-0.9x of IREE's default after 4-48 trials; with seeds most
reached 0.85-1.1x, but the model end to end did not get faster: see TuneOptions.)
"""
from __future__ import annotations

import re
from typing import Sequence

from iree.compiler import ir

from mlir_ansor.dialect_helpers.dispatch import walk_ops
from mlir_ansor.dialect_helpers.linalg_info import OpInfo, tileable_ops
from mlir_ansor.sketch_passes.annotation import (MAX_WORKGROUP_DIMS, inner_limit,
                                                 inner_reduction_range, map_store_fits,
                                                 violations, whole_row_loops)
from mlir_ansor.sketch_passes.loops import (divisors, eligible_parallel, largest_divisor,
                                            op_by_name, unit_loops, window_loops)
from mlir_ansor.sketch_passes.program import (ParallelStep, Program, SplitStep, UnrollStep,
                                              VectorizeStep)
from mlir_ansor.sketch_passes.sketch import Sketch
from mlir_ansor.targets import Target

# Tile levels of one op: (level name, sizes per loop), e.g. ("distribution", (4, 28, 64, 0)).
Levels = tuple[tuple[str, tuple[int, ...]], ...]

_LEVEL = re.compile(r"(\w+) = \[([-\d, ]*)\]")


def iree_tile_levels(configured: str) -> tuple[Levels, ...]:
    """Tile levels of every tileable op of a configuration dump
    (`--iree-hal-dump-executable-configurations-to`), in payload order; () for an op
    without a lowering_config."""
    with ir.Context() as ctx:
        module = ir.Module.parse(configured, ctx)
        funcs = walk_ops(module.operation, "func.func")
        if len(funcs) != 1:
            return ()
        out: list[Levels] = []
        for op in tileable_ops(funcs[0]):
            if "lowering_config" not in op.attributes:
                out.append(())
                continue
            # The attribute has no Python accessors for its levels: read its text form.
            text = str(op.attributes["lowering_config"])
            out.append(tuple((name, tuple(int(v) for v in vals.split(",") if v.strip()))
                             for name, vals in _LEVEL.findall(text)))
        return tuple(out)


def _fit_map_store(ops: Sequence[OpInfo], sketch: Sketch, base: OpInfo,
                   splits: dict[int, tuple[int, ...]]) -> dict[int, tuple[int, ...]]:
    """Shrink the workgroup tile (largest count of register tiles first) until an output
    written through a map_store fits our stack rule: IREE's own pipeline keeps less on the
    stack than a strategy does, so its workgroup tile may be too large for us."""
    splits = dict(splits)
    while not map_store_fits(ops, sketch, base, splits):
        l = max(base.parallel_dims, key=lambda d: splits[d][0])
        n = splits[l][0]
        if n == 1:
            break  # register tiles alone overflow: violations rejects the program
        splits[l] = (max(d for d in divisors(n) if d < n),) + splits[l][1:]
    return splits


def seed_program(ops: Sequence[OpInfo], sketch: Sketch, levels: Levels, *,
                 target: Target | None = None) -> Program | None:
    """The program of `sketch` whose tiles follow IREE's levels of its root (or, for a plain
    sketch, its anchor), rounded down to the sizes our annotation allows; None when the op
    carries no workgroup tiling or the result breaks a rule (`violations`)."""
    if sketch.gpu:
        return None
    base = op_by_name(ops, sketch.root or sketch.anchor)
    cfg = dict(levels)
    dist = cfg.get("distribution")
    if not dist:
        return None
    vec = cfg.get("vector_common_parallel", ())
    red = cfg.get("vector_reduction", ())

    def at(xs: Sequence[int], l: int) -> int:
        return xs[l] if l < len(xs) else 0

    prog = Program(sketch)
    if sketch.root:
        unit = unit_loops(base)
        splits: dict[int, tuple[int, ...]] = {}
        for l in base.parallel_dims:
            ext = base.extents[l]
            wg = largest_divisor(ext, at(dist, l) or ext)
            limit = 1 if l in unit else inner_limit(base, l, target=target)
            reg = largest_divisor(wg, min(at(vec, l) or 1, limit))
            # Workgroup tile -> register tiles directly (IREE's two parallel levels).
            splits[l] = (wg // reg, 1, reg)
        splits = _fit_map_store(ops, sketch, base, splits)
        for l in base.parallel_dims:
            prog = prog.with_step(SplitStep(base.name, l, splits[l]))
        window = window_loops(base) or set()
        for l in base.reduction_dims:
            ext = base.extents[l]
            if l in window:
                prog = prog.with_step(SplitStep(base.name, l, (largest_divisor(
                    ext, at(red, l) or ext),)))
            else:
                v = largest_divisor(ext, min(at(red, l) or ext,
                                              inner_reduction_range(sketch, target=target)[1]))
                prog = prog.with_step(SplitStep(base.name, l, (ext, v)))
    else:
        whole = whole_row_loops(ops, sketch)
        for l in base.parallel_dims:
            ext = base.extents[l]
            tile = ext if l in whole else largest_divisor(
                ext, min(at(dist, l) or ext, inner_limit(base, l, target=target)))
            prog = prog.with_step(SplitStep(base.name, l, (tile,)))
    eligible = eligible_parallel(base, prog, rows=whole_row_loops(ops, sketch))
    prog = prog.with_step(ParallelStep(base.name, tuple(eligible[:MAX_WORKGROUP_DIMS])))
    if sketch.root:
        prog = prog.with_step(UnrollStep(base.name, 1))
    prog = prog.with_step(VectorizeStep(base.name))
    return None if violations(ops, prog, target=target) else prog


def seed_programs(ops: Sequence[OpInfo], sketches: Sequence[Sketch],
                  levels: Sequence[Levels], *, target: Target | None = None) -> list[Program]:
    """One seed per sketch that admits one, in sketch order, without duplicates."""
    if len(levels) != len(ops):
        return []  # the payload was rewritten before analysis (e.g. a decomposed softmax)
    out: list[Program] = []
    for sk in sketches:
        p = seed_program(ops, sk, levels[op_by_name(ops, sk.root or sk.anchor).index],
                         target=target)
        if p is not None and p not in out:
            out.append(p)
    return out

