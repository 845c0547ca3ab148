"""Features of a program for the cost model (paper §5.2), derived exactly from the Program.

The emitter is a pure function of (ops, program), so the loop nest each statement ends up in
is known without compiling: the tile of every loop at every level follows from the steps.
Deriving features here is exact for our strategies and fast (the evolutionary search scores
thousands of programs per round); applying the strategy with the transform interpreter
would cost ~0.5 s a program.

One row per statement (each tileable op of the task); a program's score is the sum of its
rows' predictions. The columns (`FEATURE_NAMES`), all log2(1 + x) unless marked:

- role (one-hot, raw): root of multi-level tiling / fused consumer / plain anchor / other
- sketch (raw 0/1): fuse_consumer, cache_write, rfactor; number of inlined ops
- arithmetic: total flops of the statement; per-iteration count of add/sub, mul, fma, div,
  math functions (exp, tanh, ...), compare/select/min/max, casts
- loop nest: trip count of each level (workgroups S0, S1, R0, S2, R1, register tile S3,
  inner vector reduction), vector lanes (innermost tile of the contiguous output dim),
  register tile elements, unroll factor, unrolled body size
- parallelism: number of workgroups, workgroups per thread rounded up / exact (raw ratio:
  load imbalance), iterations per workgroup
- per buffer (up to 4: inputs in order, output last): unique bytes touched at the register,
  R1, S2, S1 and workgroup levels; reuse (iterations / unique elements) at the register and
  S2 levels; stride of the vectorized loop; cache lines per register tile; total bytes
- per buffer: packed (raw 0/1: a PackStep copies its reduction-step slice to a local buffer)
- allocation: bytes of the local accumulator tile (cache write / fused consumer), register
  accumulator bytes, packed buffer bytes
- arithmetic intensity (flops per unique byte) at the register, R1, S2 and workgroup levels
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mlir_ansor.dialect_helpers.linalg_info import OpInfo, OperandInfo
from mlir_ansor.sketch_passes.annotation import inner_limit
from mlir_ansor.sketch_passes.loops import (column_read_loop, footprint, op_by_name,
                                            parallel_tiles, reuse_rows, span, window_loops)
from mlir_ansor.sketch_passes.program import ParallelStep, Program, UnrollStep

CACHE_LINE = 64
MAX_BUFFERS = 4
LEVELS = ("reg", "r1", "s2", "s1", "wg")

_KINDS = {
    "addsub": ("arith.addf", "arith.subf", "arith.addi", "arith.subi"),
    "mul": ("arith.mulf", "arith.muli"),
    "fma": ("math.fma",),
    "div": ("arith.divf", "arith.divsi", "arith.divui", "arith.remf"),
    "cmp": ("arith.cmpf", "arith.cmpi", "arith.select", "arith.maximumf", "arith.minimumf",
            "arith.maxnumf", "arith.minnumf"),
    "cast": ("arith.extf", "arith.truncf", "arith.sitofp", "arith.fptosi", "arith.bitcast"),
}


def _names() -> list[str]:
    names = ["role_root", "role_consumer", "role_plain", "role_other",
             "sk_fuse_consumer", "sk_cache_write", "sk_rfactor", "sk_inlined", "flops"]
    names += [f"ops_{k}" for k in _KINDS] + ["ops_math"]
    names += [f"trip_{l}" for l in ("s0", "s1", "r0", "s2", "r1", "s3", "rv")]
    names += ["lanes", "reg_tile", "unroll", "unrolled_body", "workgroups", "wg_imbalance",
              "iters_per_wg"]
    for b in range(MAX_BUFFERS):
        names += [f"b{b}_bytes_{l}" for l in LEVELS]
        names += [f"b{b}_reuse_reg", f"b{b}_reuse_s2", f"b{b}_stride", f"b{b}_lines_reg",
                  f"b{b}_total_bytes", f"b{b}_packed"]
    names += ["alloc_local_bytes", "alloc_acc_bytes", "alloc_pack_bytes"]
    names += [f"intensity_{l}" for l in ("reg", "r1", "s2", "wg")]
    return names


FEATURE_NAMES: tuple[str, ...] = tuple(_names())
_INDEX = {n: i for i, n in enumerate(FEATURE_NAMES)}
# Columns kept as they are (one-hot, counts, 0/1, the imbalance ratio); all others are
# log2(1 + x).
_RAW = tuple(n for n in FEATURE_NAMES if n.startswith(("role_", "sk_")) or
             n.endswith("_packed") or n == "wg_imbalance")
_LOG = np.array([n not in _RAW for n in FEATURE_NAMES])


def _lines(o: OperandInfo, tile: dict[int, int]) -> int:
    if not o.shape:
        return 1
    outer = math.prod(min(s, span(t, tile)) for s, t in zip(o.shape[:-1], o.map_results[:-1]))
    last = min(o.shape[-1], span(o.map_results[-1], tile))
    return outer * math.ceil(last * o.elem_bytes / CACHE_LINE)


def _stride(o: OperandInfo, loop: int | None) -> int:
    """Elements between consecutive iterations of `loop` in this buffer (0: invariant)."""
    if loop is None:
        return 0
    stride, inner = 0, 1
    for size, terms in reversed(list(zip(o.shape, o.map_results))):
        stride += sum(c for d, c in terms if d == loop) * inner
        inner *= size
    return abs(stride)


class _Nest:
    """Trip counts and per-level tiles of one statement's loops."""

    def __init__(self, n_loops: int):
        self.trip = {k: 1 for k in ("s0", "s1", "r0", "s2", "r1", "s3", "rv")}
        self.tiles: dict[str, dict[int, int]] = {l: {} for l in LEVELS}
        self.lanes = 1
        self.vector_loop: int | None = None
        self.n_loops = n_loops


def _root_nest(op: OpInfo, program: Program) -> _Nest:
    """The root's nest, computed once per program (pruning and the features both read it;
    a _Nest is not changed after this)."""
    key = ("root_nest", op.name, op.extents)
    nest = program.memo.get(key)
    if nest is None:
        nest = program.memo[key] = _build_root_nest(op, program)
    return nest


def _build_root_nest(op: OpInfo, program: Program) -> _Nest:
    nest = _Nest(len(op.extents))
    par = program.find(ParallelStep, op.name)
    distributed = set(par.loops) if par else set()
    peeled = program.peeled(op.name)
    last_out = len(op.output.shape) - 1
    for l, ext in enumerate(op.extents):
        step = program.split(op.name, l)
        lengths = step.lengths if step else ()
        if op.iterators[l] == "parallel" or l in peeled:
            wg, s1, s2, c = parallel_tiles(op, program, l, l in distributed)
            nest.trip["s0"] *= ext // wg
            nest.trip["s1"] *= -(-wg // s1)  # (a loop peeled at S1 has a partial last tile)
            nest.trip["s2"] *= s2
            nest.trip["s3"] *= c
            for lvl, t in zip(LEVELS, (c, c, s1, s1, wg)):
                nest.tiles[lvl][l] = t
            if op.output_dim_of_loop(l) == last_out:
                nest.lanes, nest.vector_loop = c, l
        else:
            r1 = lengths[0] if lengths else ext
            v = lengths[1] if len(lengths) > 1 else 1
            nest.trip["r0"] *= ext // r1
            nest.trip["r1"] *= r1 // v
            nest.trip["rv"] *= v
            for lvl, t in zip(LEVELS, (v, r1, r1, ext, ext)):
                nest.tiles[lvl][l] = t
    return nest


def _row_nest(op: OpInfo, wg_tile: dict[int, int]) -> _Nest:
    """An op tiled by the workgroup tile, then to rows of its last loop (elementwise path)."""
    nest = _Nest(len(op.extents))
    last = len(op.extents) - 1
    for l, ext in enumerate(op.extents):
        t = wg_tile.get(l, ext)
        nest.trip["s0"] *= ext // t
        if l == last:
            lanes = max(d for d in range(1, min(t, 64) + 1) if t % d == 0)
            nest.trip["s1"] *= t // lanes
            nest.trip["s3"] *= lanes
            nest.lanes, nest.vector_loop = lanes, l
            reg = lanes
        else:
            nest.trip["s1"] *= t
            reg = 1
        for lvl in LEVELS:
            nest.tiles[lvl][l] = t if lvl == "wg" else (t if lvl == "s1" else reg)
    return nest


def _output_tile(op: OpInfo, dim_tile: dict[int, int]) -> dict[int, int]:
    """Loop tile of `op` from a tile given per output dim."""
    out = {}
    for l, ext in enumerate(op.extents):
        p = op.output_dim_of_loop(l)
        out[l] = dim_tile.get(p, ext) if p is not None else ext
    return out


def _anchor_wg_tile(ops: Sequence[OpInfo], program: Program) -> dict[int, int]:
    """The workgroup tile per output dim (shared by every op of the dispatch)."""
    sk = program.sketch
    base = op_by_name(ops, sk.root or sk.anchor)
    par = program.find(ParallelStep, base.name)
    distributed = set(par.loops) if par else set()
    tile = {}
    for l in base.parallel_dims:
        p = base.output_dim_of_loop(l)
        step = program.split(base.name, l)
        if p is not None:
            # (A dynamic row without a root is (W, V): W per workgroup.)
            wg = step.lengths[0] if step and not sk.root and l in base.dynamic_loops \
                else math.prod(step.lengths) if step else 0
            tile[p] = wg if (step and l in distributed) else base.extents[l]
    return tile


def _row(op: OpInfo, nest: _Nest, program: Program, role: str, threads: int) -> np.ndarray:
    # Values go into a list and the log2(1 + x) of the non-raw columns is taken once, in
    # numpy: the search computes rows for thousands of programs per batch.
    f = [0.0] * len(FEATURE_NAMES)

    def put(name: str, value: float) -> None:
        f[_INDEX[name]] = value

    sk = program.sketch
    put(f"role_{role}", 1)
    for s in sk.structure:  # each step names the column that counts it
        if s.feature:
            f[_INDEX[s.feature]] += 1
    iters = math.prod(op.extents)
    put("flops", op.flops)
    known = set()
    for k, names in _KINDS.items():
        n = sum(1 for b in op.body_kinds if b in names)
        known.update(names)
        put(f"ops_{k}", n)
    put("ops_math", sum(1 for b in op.body_kinds if b.startswith("math.") and b not in known))
    for k, v in nest.trip.items():
        put(f"trip_{k}", v)
    reg_tile = nest.trip["s3"]
    unroll = program.find(UnrollStep, op.name)
    u = unroll.factor if unroll else 1
    put("lanes", nest.lanes)
    put("reg_tile", reg_tile)
    put("unroll", u)
    put("unrolled_body", u * reg_tile * nest.trip["rv"] * max(op.body_ops, 1))
    wgs = nest.trip["s0"]
    put("workgroups", wgs)
    wgs = max(wgs, 1)
    put("wg_imbalance", math.ceil(wgs / threads) * threads / wgs)
    put("iters_per_wg", iters / wgs)
    level_iters = {lvl: math.prod(nest.tiles[lvl].get(l, 1) for l in range(nest.n_loops))
                   for lvl in LEVELS}
    buffers = [o for o in op.operands if not o.is_output][:MAX_BUFFERS - 1] + [op.output]
    packed = [op.operands[i] for i in program.packed(op.name)] if role == "root" else []
    unique = {lvl: 0 for lvl in LEVELS}
    for b, o in enumerate(buffers):
        slot = b if b < len(buffers) - 1 else MAX_BUFFERS - 1
        fp = {lvl: footprint(o, nest.tiles[lvl]) for lvl in LEVELS}
        for lvl in LEVELS:
            unique[lvl] += fp[lvl] * o.elem_bytes
            put(f"b{slot}_bytes_{lvl}", fp[lvl] * o.elem_bytes)
        put(f"b{slot}_reuse_reg", level_iters["reg"] / fp["reg"])
        put(f"b{slot}_reuse_s2", level_iters["s2"] / fp["s2"])
        put(f"b{slot}_stride", _stride(o, nest.vector_loop))
        put(f"b{slot}_lines_reg", _lines(o, nest.tiles["reg"]))
        put(f"b{slot}_total_bytes", math.prod(o.shape) * o.elem_bytes if o.shape else 0)
        if any(o is q for q in packed):
            put(f"b{slot}_packed", 1)
            put("alloc_pack_bytes", fp["s2"] * o.elem_bytes)
    output_fp = fp  # the output is the last buffer
    if role == "root" and sk.local_tile:
        put("alloc_local_bytes", output_fp["s1"] * op.output.elem_bytes)
    if role == "root":
        put("alloc_acc_bytes", reg_tile * op.output.elem_bytes)
    body = max(op.body_ops, 1) if op.is_linalg else 0
    for lvl in ("reg", "r1", "s2", "wg"):
        put(f"intensity_{lvl}", level_iters[lvl] * body / max(unique[lvl], 1))
    row = np.array(f, dtype=np.float64)
    row[_LOG] = np.log2(1 + np.maximum(row[_LOG], 0))
    return row.astype(np.float32)


def program_features(ops: Sequence[OpInfo], program: Program, threads: int = 2,
                     rows_seen: dict | None = None) -> np.ndarray:
    """(statements x features) matrix of one program. `rows_seen`: a cache of the rows of
    ops other than the root, shared by programs of the same `ops` (one task): such a row
    depends on the program only through the workgroup tile, the sketch's structure and the
    op's unroll factor, which most programs of a population share (two thirds of the rows
    a proposal computed on a ResNet-50 conv task)."""
    sk = program.sketch
    wg = _anchor_wg_tile(ops, program)
    rows = []
    for op in ops:
        if sk.root and op.name == sk.root:
            rows.append(_row(op, _root_nest(op, program), program, "root", threads))
            continue
        if not sk.root and op.name == sk.anchor:
            role = "plain"
        elif sk.consumer_fused and op.name == sk.anchor:
            role = "consumer"
        else:
            role = "other"
        key = None
        if rows_seen is not None:
            unroll = program.find(UnrollStep, op.name)
            key = (op.name, role, threads, tuple(sorted(wg.items())),
                   tuple(st.feature for st in sk.structure), unroll.factor if unroll else 1)
            row = rows_seen.get(key)
            if row is not None:
                rows.append(row)
                continue
        row = _row(op, _row_nest(op, _output_tile(op, wg)), program, role, threads)
        if key is not None:
            rows_seen[key] = row
        rows.append(row)
    return np.stack(rows)


@dataclass(frozen=True)
class RootNest:
    """The root's loop nest in numbers (pruning reads it)."""

    lanes: int  # innermost tile of the contiguous output dim
    lane_extent: int  # that loop's extent
    workgroups: int
    parallel_iterations: int  # product of the parallel extents
    reg_tile: int  # accumulator elements
    # Rows an outer-product register tile could have: the product of the extents (each at
    # most its `inner_limit`: a column read has rows along the column only) of the loops
    # whose rows reuse the loaded vectors (`reuse_rows`); 1 when no input is broadcast
    # across the lanes (a depthwise conv: nothing is reused).
    row_room: int = 1
    # Whether the lanes are capped at one vector (a column read: annotation.inner_limit).
    one_vector: bool = False
    # Reduction steps (R0) the window loops are cut into (1: each step holds whole windows,
    # or no reduction but the window's).
    window_steps: int = 1


def root_nest(ops: Sequence[OpInfo], program: Program) -> RootNest | None:
    """The multi-level-tiled root's nest (None for a sketch without a root)."""
    if not program.sketch.root:
        return None
    op = op_by_name(ops, program.sketch.root)
    nest = _root_nest(op, program)
    lane_extent = op.extents[nest.vector_loop] if nest.vector_loop is not None else 1
    row_room = math.prod(min(op.extents[l], inner_limit(op, l))
                         for l in reuse_rows(op, nest.vector_loop))
    window = [l for l in window_loops(op) or () if l in op.reduction_dims]
    # Only where a reduction runs beside the window (input channels): a depthwise conv's
    # every product loads its own input, so its steps add little (pruning's window-cut).
    window_steps = math.prod(op.extents[l] // nest.tiles["r1"][l] for l in window) \
        if len(window) < len(op.reduction_dims) else 1
    return RootNest(nest.lanes, lane_extent, nest.trip["s0"],
                    math.prod(op.extents[l] for l in op.parallel_dims), nest.trip["s3"],
                    row_room, column_read_loop(op) is not None, window_steps)
