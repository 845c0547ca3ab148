"""Seed programs from the target's register file, the micro-kernel a BLAS library would
pick: per sketch with a multi-level-tiled root, an outer-product register tile (rows of
one loop that reuses the loaded vectors, by whole vectors of the output's contiguous dim,
or one partial vector of a dim shorter than a vector) with enough accumulators to hide
the FMA latency and the most FMAs per loaded register, in about WORKGROUPS_PER_CORE
workgroups per core; one S1 tile per register tile, and (`_blocked`) a block of them
sharing an L1-sized reduction chunk; a block of rows sweeping a packed panel that fills
the stack (`_packed_block`, GotoBLAS's shape); and once per task the first sketch's plain
seed in FINE_WORKGROUPS_PER_CORE workgroups per core. A task's first batch measures them
(on by default; `--no-kernel-seeds` turns them off); evolution mutates from there. A
hand-picked program of this shape ran a ResNet 3x3 conv 1.4-1.7x faster than what 48-96
trials of search had found (results.md).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.annotation import (MAX_OTHER_INNER, VECTORS_PER_ROW,
                                                 inner_limit, most_rows, pack_candidates,
                                                 packs_fit, peel_candidates, violations)
from mlir_ansor.sketch_passes.iree_seed import Levels, seed_program
from mlir_ansor.sketch_passes.loops import (divisors, footprint, lane_loop, op_by_name,
                                            panel_loop, reduction_tile, reuse_rows,
                                            SQUARE_TRANSPOSE, transposed_inputs,
                                            window_loops)
from mlir_ansor.sketch_passes.program import (PackStep, ParallelStep, PeelStep, Program,
                                              SplitStep, VectorizeStep)
from mlir_ansor.sketch_passes.sketch import Sketch
from mlir_ansor.targets import Target

WORKGROUPS_PER_CORE = 8  # 16 workgroups beat 112 and 448 on 2 cores (measurement.md)
# One more seed per task: the first sketch's plain seed cut into this many workgroups per
# core. Small dispatches balance better over IREE's workers in many small workgroups,
# larger ones did not (above): the seeds' plain kernels side by side at 8 / 32 / 96 per
# core, Xeon VM 2026-11-29: attention scores (25 MFLOP) 0.163 / 0.167 / 0.144 ms, batch
# matmuls of 269 and 67 MFLOP 0.956 / 0.856 / 0.846 and 0.270 / 0.274 / 0.258, a 3x3
# conv (231 MFLOP) 0.697 / 0.692 / 0.693.
FINE_WORKGROUPS_PER_CORE = 96
REDUCTION_TILE = 8  # innermost reduction tile (unrolled with the register tile)
REDUCTION_CHUNK = 256  # reduction elements per R0 step (the packed-B recipe's k block)
CHUNKS = (REDUCTION_CHUNK, REDUCTION_CHUNK // 2, REDUCTION_CHUNK // 4, REDUCTION_CHUNK // 8)


def seed_panel(op: OpInfo, target: Target) -> int | None:
    """The panel loop (`loops.panel_loop`) where the lanes are one vector long on `target`:
    the seed's vectors are then panels (none where the lanes hold several vectors, e.g.
    32-wide packed panels)."""
    lane = lane_loop(op)
    return (panel_loop(op) if lane is not None and op.extents[lane] == target.f32_lanes
            else None)


def row_loop(op: OpInfo, target: Target) -> int | None:
    """The loop whose iterations are the register tile's rows: the innermost of the loops
    that reuse the loaded vectors (`reuse_rows`) where the search allows rows (a column
    read has them along its column only); None without one."""
    vloop = lane_loop(op)
    if vloop is None:
        return None
    rows_loops = [l for l in reuse_rows(op, vloop)
                  if op.extents[l] > 1 and inner_limit(op, l, target=target) > 1]
    if not rows_loops:
        return None
    return max(rows_loops, key=lambda l: op.output_dim_of_loop(l) or 0)


def register_tile(op: OpInfo, target: Target, peel_rows: bool = False,
                  vectors: int = VECTORS_PER_ROW) -> dict[int, int] | None:
    """Loop -> register tile of the outer-product micro-kernel for `op` on `target`: `v`
    whole vectors of the contiguous output loop (one partial vector where that loop is
    shorter than a vector) times `rows` of `row_loop`; None when the op has no such pair
    (no broadcast operand, or a contiguous loop that no whole vector divides).
    Where the lanes are one vector long and a panel loop stands beside them (a packed
    weight, `panel_loop`), the `v` vectors are `v` panels of one vector each. Rows divide
    the row loop, or with `peel_rows` need not (its partial last tile peeled: 197 tokens);
    at most `vectors` vectors."""
    vloop, row = lane_loop(op), row_loop(op, target)
    if vloop is None or row is None:
        return None
    lanes, regs = target.f32_lanes, target.vector_registers
    panel = seed_panel(op, target)
    hide = regs // 2  # independent accumulators that keep both FMA pipes busy
    best, choice = None, None
    if panel is None:
        most_vectors = max(1, inner_limit(op, vloop, target=target) // lanes)
        # Powers of two: a row of 3 vectors is one 48-lane LLVM vector, which lowered badly
        # (BERT's 128x768x768 projection: 8 x 48 lanes 3.0-19.6 ms, 8 x 64 0.71-0.79).
        # A contiguous dim shorter than a vector is one partial vector (an NCHW conv's 7
        # columns), else no whole vector would divide it and the op would get no seed.
        widths = ({1: {vloop: op.extents[vloop]}} if op.extents[vloop] < lanes else
                  {v: {vloop: v * lanes} for v in (1, 2, 4)
                   if v <= min(vectors, most_vectors) and op.extents[vloop] % (v * lanes) == 0})
    else:
        most_vectors = min(vectors, inner_limit(op, panel, target=target))
        widths = {v: {vloop: lanes, panel: v} for v in range(1, most_vectors + 1)
                  if op.extents[panel] % v == 0}
    row_choices = (range(1, min(MAX_OTHER_INNER, op.extents[row]) + 1) if peel_rows
                   else divisors(op.extents[row]))
    # Registers LLVM keeps beside the tile: on ViT's packed MLP (197 tokens, 2 panels)
    # 14 rows, 31 of 32 registers, ran 1.02-1.11 ms, 12 rows 0.83-0.89, 8 rows 0.85.
    free = regs - regs // 8
    for v, width in widths.items():
        for rows in row_choices:
            if rows > min(MAX_OTHER_INNER, most_rows(v, free)):
                continue
            acc = rows * v
            score = (min(acc, hide), acc / (rows + v))
            if best is None or score > best:
                best, choice = score, {**width, row: rows}
    return choice


def input_traffic(op: OpInfo, wg: dict[int, int], cached: int = 0) -> int:
    """Bytes the workgroups of tile `wg` read from memory for the inputs: each input once
    per workgroup along the loops that do not index it (they re-read the same slice), once
    in all where it fits in `cached` bytes (a core's L2 keeps it between workgroups)."""
    total = 0
    for o in op.operands:
        if o.is_output or not o.shape:
            continue
        size = math.prod(o.shape) * o.elem_bytes
        reads = math.prod(op.extents[l] // wg[l] for l in wg if l not in o.loops)
        total += size * (1 if size <= cached else reads)
    return total


def workgroup_tile(op: OpInfo, reg: dict[int, int], workgroups: int,
                   cached: int = 0) -> dict[int, int]:
    """Loop -> workgroup tile: whole loops cut, at divisors that are multiples of its
    register tile, until there are at least `workgroups` (or nothing is left to cut). Each
    cut is the one that adds the least input traffic (`input_traffic`, `cached`: bytes an
    input may have to stay in cache), then the loop with the most register tiles per
    workgroup: cutting a loop re-reads every input it does not index, so a large weight is
    streamed once by workgroups along its own loop while the small activation is re-read
    (BERT's 128-row MLP, 3072 x 768 weight: rows whole and 16 workgroups along n ran
    1.89 ms, 2 x 8 workgroups 2.00)."""
    wg = {l: op.extents[l] for l in op.parallel_dims}
    while math.prod(op.extents[l] // wg[l] for l in wg) < workgroups:
        cuts = {l: [d for d in divisors(op.extents[l]) if d < wg[l] and d % reg.get(l, 1) == 0]
                for l in wg}
        cuts = {l: c[-1] for l, c in cuts.items() if c}
        if not cuts:
            break
        l = min(cuts, key=lambda l: (input_traffic(op, {**wg, l: cuts[l]}, cached),
                                     -(wg[l] // reg.get(l, 1)), l))
        wg[l] = cuts[l]
    return wg


def kernel_levels(op: OpInfo, target: Target, peel_rows: bool = False,
                  vectors: int = VECTORS_PER_ROW,
                  per_core: int = WORKGROUPS_PER_CORE) -> Levels | None:
    """IREE-style tile levels (iree_seed.Levels) of the micro-kernel seed of `op` (rows
    that need not divide their loop with `peel_rows`: that loop is then never cut; at
    most `vectors` vectors; about `per_core` workgroups per core)."""
    reg = register_tile(op, target, peel_rows, vectors)
    if reg is None:
        return None
    wg = workgroup_tile(op, reg, per_core * target.cores, target.l2_bytes)
    n = len(op.extents)
    return (("distribution", tuple(wg.get(l, 0) for l in range(n))),
            ("vector_common_parallel", tuple(reg.get(l, 1) if l in wg else 0
                                             for l in range(n))),
            ("vector_reduction", tuple(reduction_tile_of(op, target)
                                       if l in op.reduction_dims else 0 for l in range(n))))


def reduction_tile_of(op: OpInfo, target: Target) -> int:
    """The seed's innermost reduction tile: REDUCTION_TILE, but 1 over packed panels
    (BERT's packed MLP weights: 8 ran 2.75 ms, 4 2.61, 1 2.03; on a 3x3 conv and a batch
    matmul 1, 4 and 8 were within 4%) and where the root sums several products
    (`sums_products`), and 16 where the tiles of a transposed input are square
    (`_square_transposes`)."""
    if seed_panel(op, target) is not None or sums_products(op):
        return 1
    if _square_transposes(op, target):
        return target.f32_lanes
    return REDUCTION_TILE


def sums_products(op: OpInfo) -> bool:
    """Whether `op` reduces a sum of several products (more than two inputs, as the
    Winograd input transforms' own-block and next-block terms): no single vector.contract
    takes it, so its products are vectorized over the whole reduction tile before they are
    summed, and a tile of k multiplies the registers the register tile needs by k.
    resnet_block's input transforms (reduction 6, 4 x 64 register tiles) side by side, Zen 4,
    2026-12-07: reduction tiles 6 / 3 / 2 / 1 ran 0.61 / 0.82 / 0.89 / 0.11 ms (rows) and
    0.75 / - / - / 0.19 (columns), IREE's default 0.53 / 0.65; a two-input contraction keeps
    REDUCTION_TILE (the output transforms, reduction 8: tile 8 0.35 ms, 1 0.78)."""
    return sum(not o.is_output for o in op.operands) > 2


def _square_transposes(op: OpInfo, target: Target) -> bool:
    """Whether the seed takes square register tiles for `op`'s transposed inputs
    (`transposed_inputs`): one vector of lanes by a reduction tile of one vector, which
    the emitter lowers with a shuffle network (`SQUARE_TRANSPOSE` wide: only on targets of
    that many f32 lanes; on others the emitter moves a transposed tile element by element
    whatever its shape) and over one reduction loop that a vector divides. Attention
    scores with the keys' transpose propagated, 12 x 128 x 128 x 64, side by side: lanes x
    reduction 64 x 4 (4 rows) 0.327 ms, 16 x 16 with 4 / 8 / 16 rows 0.248 / 0.215 /
    0.185; the seeds before, 64 x 8, 0.36-0.42 (Xeon VM, 2026-11-29)."""
    lanes = target.f32_lanes
    return (lanes == SQUARE_TRANSPOSE and bool(transposed_inputs(op))
            and len(op.reduction_dims) == 1 and op.extents[op.reduction_dims[0]] % lanes == 0)


def kernel_seed_programs(ops: Sequence[OpInfo], sketches: Sequence[Sketch],
                         target: Target) -> list[Program]:
    """Micro-kernel seeds per sketch with a multi-level-tiled root (packed, in a block of
    rows where one forms; plain; blocked; after the first sketch's, its plain one in finer
    workgroups), without duplicates (none for a GPU target or an op without an
    outer-product register tile)."""
    if target.backend != "llvm-cpu":
        return []
    out: list[Program] = []
    for sk in sketches:
        if not sk.root or sk.gpu:
            continue
        root = op_by_name(ops, sk.root)
        p = _seed(ops, sk, root, target, WORKGROUPS_PER_CORE)
        if p is None:
            continue
        plain = _chunked(ops, root, p, target, REDUCTION_CHUNK)
        first = plain is not None and not out
        # The packed panel must fit the stack: smaller reduction chunks until it does. It
        # is swept by a block of rows (`_packed_block`) where one forms, else by one
        # register tile.
        packed = plain and _packed_block(ops, sk, root, plain, target)
        if packed is None:
            for chunk in CHUNKS[:3]:
                q = plain if chunk == REDUCTION_CHUNK else _chunked(ops, root, p, target, chunk)
                packed = q and _packed(ops, sk, root, q, target)
                if packed is not None:
                    break
        fine = None
        if first:
            q = _seed(ops, sk, root, target, FINE_WORKGROUPS_PER_CORE)
            fine = q and _chunked(ops, root, q, target, REDUCTION_CHUNK)
        # The fine seed right after its sketch's: a first batch of 4 still measures it,
        # ahead of the second sketch's packed seed (the slowest seed of the batch matmuls
        # and attention scores above).
        for q in (packed, plain, plain and _blocked(ops, root, plain, target), fine):
            if q is not None and q not in out:
                out.append(q)
    return out


def _seed(ops: Sequence[OpInfo], sk: Sketch, root: OpInfo, target: Target,
          per_core: int) -> Program | None:
    """The micro-kernel program of `root` in about `per_core` workgroups per core, its
    rows peeled where they need not divide their loop."""
    row = row_loop(root, target)
    peel = row is not None and row in peel_candidates(root, sk, target=target)
    # One vector of lanes where the tiles of a transposed input are square
    # (reduction_tile_of). Peeled rows stay whole in a workgroup: fewer vectors until
    # its local tile fits.
    most = 1 if _square_transposes(root, target) else VECTORS_PER_ROW
    for vectors in range(most, 0, -1) if peel else (most,):
        levels = kernel_levels(root, target, peel, vectors, per_core)
        p = None if levels is None else seed_program(ops, sk, levels, target=target)
        if p is not None and peel:
            rows = dict(levels)["vector_common_parallel"][row]
            p = _peeled_rows(ops, root, p, row, rows, target)
        if p is not None:
            return p
    return None


BLOCKS_TRIED = 64  # S1 blocks checked against the rules, largest first


def _blocked(ops: Sequence[OpInfo], root: OpInfo, prog: Program,
             target: Target) -> Program | None:
    """`prog` with its S1 tile a block of register tiles, the largest within the workgroup
    tile that the rules allow (a fused consumer's tile is a local buffer), so that they
    read the same reduction chunk (R0) while it is in cache, and the plain reduction
    loops cut into the largest chunks (of 256 down to 32) whose slices under one register
    tile fit half of L1 (a BLAS kernel's blocking). On the 1024^3 matmul the seed with one
    register tile per S1 ran 22.8-25.8 ms: each 4 x 64 tile swept all of k, re-reading a
    256 KB panel of B from L2; with S1 the whole 256 x 256 workgroup and k chunks of 32 /
    64 / 128 / 256, 9.3 / 8.1-8.7 / 8.7-8.9 / 8.7 ms on a 48 KiB L1 (the search's best
    after 200 trials 7.9-8.3). None where no block forms, no chunk fits or a rule breaks."""
    splits = _parallel_splits(prog, root)
    grow = {l: st for l, st in splits.items() if st.lengths[1] == 1 and st.lengths[0] > 1}
    if not grow:
        return None
    inputs = [o for o in root.operands if not o.is_output]

    def under_one_tile(q: Program) -> int:
        # The inputs' slices one register tile reads per R0 step (window loops at their
        # R0 chunk, as the emitter tiles them).
        tile = {**reduction_tile(root, q), **{l: st.lengths[2] for l, st in splits.items()}}
        return sum(footprint(o, tile) * o.elem_bytes for o in inputs)

    for b in _blocks({l: st.lengths[0] for l, st in grow.items()}):
        block = _resplit(prog, root, {l: (grow[l].lengths[0] // d, d, grow[l].lengths[2])
                                      for l, d in b.items()})
        for chunk in CHUNKS:
            q = _chunked(ops, root, block, target, chunk)
            if q is not None and under_one_tile(q) <= target.l1d_bytes // 2:
                return q
    return None


def _parallel_splits(prog: Program, root: OpInfo) -> dict[int, SplitStep]:
    """The root's parallel loops split at every level (workgroup, S1, register tile)."""
    return {st.loop: st for st in prog.steps
            if isinstance(st, SplitStep) and st.op == root.name
            and st.loop in root.parallel_dims and len(st.lengths) == 3}


def _blocks(tiles: dict[int, int]) -> list[dict[int, int]]:
    """Blocks of register tiles (loop -> tiles per S1, a divisor of its `tiles`; a loop may
    stay at one), the most tiles first, at most BLOCKS_TRIED, none of one tile alone."""
    blocks: list[dict[int, int]] = [{}]
    for l, n in tiles.items():
        blocks = [{**b, l: d} for b in blocks for d in divisors(n)]
    return sorted((b for b in blocks if math.prod(b.values()) > 1),
                  key=lambda b: -math.prod(b.values()))[:BLOCKS_TRIED]


def _vector_operand(root: OpInfo, sketch: Sketch, target: Target) -> int | None:
    """The input a seed packs: the panel every row of the register tile reads, along the
    lanes; None where none may be packed or the lanes are panels of a packed weight
    already (a copy only costs: 2.03 -> 2.60 ms)."""
    if seed_panel(root, target) is not None:
        return None
    vloop = lane_loop(root)
    return next((i for i in pack_candidates(root, sketch)
                 if vloop in root.operands[i].loops), None)


def _packed_block(ops: Sequence[OpInfo], sketch: Sketch, root: OpInfo, prog: Program,
                  target: Target) -> Program | None:
    """GotoBLAS's blocking of `prog`: its S1 tile a block of rows of the workgroup (along
    the loops the packed operand does not index) by one register tile along the others,
    and the vector operand's panel (R0 chunk x S1 tile) packed once per chunk and swept by
    all of the block's register tiles: the largest chunk whose panel fits the stack, then
    the most rows beside it (every row of the workgroup unless a local tile, a cache
    write's or a fused consumer's, must fit too). On the 1024^3 matmul (Zen 4): 4 x 64
    register tiles under 256 x 64 blocks and a 128 x 64 panel ran 10.2 ms, level with
    IREE's data tiling, where one register tile per packed panel ran 19.0-23.2 and the
    search's best with a 16 KiB panel 11.2 (docs/results.md). None where nothing is packed
    or no block passes the rules."""
    operand = _vector_operand(root, sketch, target)
    if operand is None:
        return None
    indexed = root.operands[operand].loops
    rows = {l: st for l, st in _parallel_splits(prog, root).items() if l not in indexed}
    tiles = {l: st.lengths[0] * st.lengths[1] for l, st in rows.items()}  # per workgroup
    blocks = _blocks(tiles)
    for chunk in CHUNKS:
        q = _chunked(ops, root, prog, target, chunk)
        # (The panel does not grow with the rows; a local tile beside it does.)
        if q is None or not packs_fit(ops, q, root, [operand]):
            continue
        for b in blocks:
            block = _resplit(q, root, {l: (tiles[l] // b.get(l, 1), b.get(l, 1),
                                           st.lengths[2]) for l, st in rows.items()})
            packed = _packed(ops, sketch, root, block, target)
            if packed is not None:
                return packed
    return None


def _peeled_rows(ops: Sequence[OpInfo], root: OpInfo, prog: Program, row: int, rows: int,
                 target: Target) -> Program | None:
    """`prog` with its row loop a micro-kernel loop (PeelStep) of `rows`-row tiles: whole
    in each workgroup, its partial last tile peeled (seed_program rounds tiles down to
    divisors: on 197 tokens, one row). None if that breaks a rule."""
    steps: list = []
    for st in prog.steps:
        if isinstance(st, SplitStep) and st.op == root.name and st.loop == row:
            st = replace(st, lengths=(1, 1, rows))
        elif isinstance(st, ParallelStep) and st.op == root.name:
            st = replace(st, loops=tuple(l for l in st.loops if l != row))
            if not st.loops:
                continue
        if (isinstance(st, SplitStep) and st.op == root.name and st.loop in root.reduction_dims
                and not any(isinstance(x, PeelStep) for x in steps)):
            steps.append(PeelStep(root.name, row))  # as annotate orders them
        steps.append(st)
    out = Program(prog.sketch, tuple(steps))
    return None if violations(ops, out, target=target) else out


def _packed(ops: Sequence[OpInfo], sketch: Sketch, root: OpInfo, prog: Program,
            target: Target) -> Program | None:
    """`prog` with the vector operand (`_vector_operand`) copied to a contiguous buffer per
    reduction chunk: read in place, a weight panel of a 1x1 conv walks its rows at the
    output's channel stride (4 KB and more apart: the same L1 sets); None when no such
    operand may be packed or its buffer does not fit."""
    operand = _vector_operand(root, sketch, target)
    if operand is None or not packs_fit(ops, prog, root, [operand]):
        return None
    steps = list(prog.steps)
    if not isinstance(steps[-1], VectorizeStep):
        return None
    steps.insert(len(steps) - 1, PackStep(root.name, operand))  # as annotate orders them
    out = Program(prog.sketch, tuple(steps))
    return None if violations(ops, out, target=target) else out


def _chunked(ops: Sequence[OpInfo], root: OpInfo, prog: Program, target: Target,
             most: int) -> Program | None:
    """`prog` with each plain reduction loop of the root cut into R0 chunks of at most
    `most` elements (seed_program leaves the loop whole); None if that breaks a rule."""
    window = window_loops(root) or set()
    cut = {}
    for l in root.reduction_dims:
        st = prog.split(root.name, l)
        if l not in window and st is not None and len(st.lengths) == 2:
            v = st.lengths[1]
            cut[l] = (max(d for d in divisors(root.extents[l])
                          if d <= max(most, v) and d % v == 0), v)
    out = _resplit(prog, root, cut)
    return None if violations(ops, out, target=target) else out


def _resplit(prog: Program, root: OpInfo, lengths: dict[int, tuple[int, ...]]) -> Program:
    """`prog` with the root's split of each loop in `lengths` given those lengths."""
    return Program(prog.sketch, tuple(
        replace(st, lengths=lengths[st.loop])
        if isinstance(st, SplitStep) and st.op == root.name and st.loop in lengths else st
        for st in prog.steps))
