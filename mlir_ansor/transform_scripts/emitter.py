"""Program -> Transform-dialect strategy (a pure function of the task's ops and the program).

Loop structure for a root with data reuse ("SSRSRS", paper §4.1):
  S0  scf.forall over workgroups on the anchor (the output op); every producer fused in
  S1  tile (fusing the root into the consumer tile, or its init for cache write)
  R0  reduction tiles of the root
  S2  register-tile loops
  R1  innermost reduction loop (accumulator hoisted to registers, unrolled)
  S3  the register tile, vectorized
Without a root ("Plain"): S0 forall on the anchor, producers fused, innermost rows vectorized.
"""
from __future__ import annotations

import math
from typing import Sequence

from iree.compiler import ir
from iree.compiler.dialects import transform
from iree.compiler.dialects.transform import structured

from mlir_ansor.dialect_helpers import transform_builder as tbm
from mlir_ansor.dialect_helpers.linalg_info import MAP_STORE, OpInfo
from mlir_ansor.sketch_passes.analysis import (consumers, conv_kind, has_strided_access,
                                               has_window_access)
from mlir_ansor.sketch_passes.annotation import whole_row_loops
from mlir_ansor.sketch_passes.loops import (batch_loops, column_read_loop, footprint_shape,
                                            lane_loop, largest_divisor, op_by_name,
                                            reduction_tile, SQUARE_TRANSPOSE,
                                            transposed_inputs)
from mlir_ansor.sketch_passes.program import ParallelStep, Program, UnrollStep

# A compile-size cap on the row an elementwise op is vectorized in, not a machine fact: LLVM
# splits a wider vector into the target's registers (64 f32: 4 zmm, 8 ymm, 16 NEON q), so
# the emitter stays a function of the program alone, the same for every target.
MAX_ELEMENTWISE_VECTOR = 64
# Partial sums of a row reduction outside the root: a short row is one vector; a longer one
# accumulates chunk-wide partial sums and reduces them once per row. That last horizontal
# add is a chain of dependent scalar adds (LLVM may not reassociate an f32 add), so the
# chunk stays short: a softmax row of 197 reduced as one vector ran 197 adds in a chain.
# Chunks of 16 against 64 / 32 (softmax rows of 64, 128 and 197, the best programs of
# their runs side by side, Xeon VM, 2026-11-29): 0.40 -> 0.32 ms, 0.105-0.109 -> 0.098-0.100,
# 0.126-0.136 -> 0.119-0.124.
WHOLE_REDUCTION_ROW = 16
REDUCTION_CHUNK = 16  # rows up to LONG_REDUCTION_ROW
LONG_REDUCTION_CHUNK = 64  # longer rows: more accumulators, fewer steps
LONG_REDUCTION_ROW = 512
MIN_ROW_CHUNK = 16  # a divisor chunk shorter than this: full chunks and a peeled tail instead


def _closure(ops: Sequence[OpInfo], idx: int) -> list[int]:
    """`idx` and all ops it (transitively) reads, in payload order."""
    seen = {idx}
    stack = [idx]
    while stack:
        for p in ops[stack.pop()].producers:
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return sorted(seen)


class TilePlan:
    """Tile sizes per level, derived from the program's steps."""

    def __init__(self, ops: Sequence[OpInfo], program: Program):
        sk = program.sketch
        self.ops = ops
        self.anchor = op_by_name(ops, sk.anchor)
        self.root = op_by_name(ops, sk.root) if sk.root else None
        base = self.root or self.anchor
        par = program.find(ParallelStep, base.name)
        self.parallel = set(par.loops) if par else set()
        self.lengths = {l: program.split(base.name, l).lengths for l in range(len(base.extents))
                        if program.split(base.name, l) is not None}
        self.peeled = program.peeled(base.name)  # partial register tile peeled
        self.blocks = program.blocks(base.name)  # peeled loops tiled in blocks above S2
        self.s1_peel = program.s1_peeled(base.name)  # peeled at S1 (S1 tile = register tile)
        # A one-row kernel on a dynamic loop leaves no partial tile to peel.
        self.one_row_kernel = any(l in base.dynamic_loops and self.lengths[l][-1] == 1
                                  for l in self.peeled)
        unroll = program.find(UnrollStep, base.name)
        self.unroll = unroll.factor if unroll else 1
        # Without a root: loops a producer reduces stay whole in a workgroup; a dynamic
        # contiguous loop is (W, V): W elements per workgroup (or whole), chunks of V.
        self.whole = set() if sk.gpu else whole_row_loops(ops, sk)
        self.row_loops = {l for l, ls in self.lengths.items() if self.root is None
                          and not sk.gpu and l in base.dynamic_loops and len(ls) == 2}
        self.row_chunk = next((self.lengths[l][1] for l in self.row_loops), 0)

    def _whole_at(self, loop: int, level: int) -> bool:
        """Whether a parallel loop of the base op is untiled at `level`: not distributed
        over workgroups (level 0), or peeled (whole above S2)."""
        if (level == 0 and loop not in self.parallel) or loop in self.whole:
            return True
        if loop == self.s1_peel:
            return level != 1  # S1 tiles of the register tile, nothing left to S2
        # A dynamic micro-kernel loop has fixed workgroup tiles; a static one stays whole
        # above S2.
        dynamic = loop in (self.root or self.anchor).dynamic_loops
        return loop in self.peeled and loop not in self.blocks and (
            level == 1 or (level == 0 and not dynamic))

    def _tile(self, loop: int, level: int) -> int:
        """Tile of a parallel loop at `level` (0 workgroup, 1 S1, 2 register): the product
        of its split's lengths from `level` on; a blocked loop (a, 1, c) has workgroups of
        a blocks, S1 tiles of one block and register tiles of c."""
        if loop in self.blocks:
            a, c = self.lengths[loop][0], self.lengths[loop][-1]
            return (a * self.blocks[loop], self.blocks[loop], c)[level]
        if loop in self.row_loops:
            return self.lengths[loop][0]  # (W, V): W per workgroup, chunks of V inside
        return math.prod(self.lengths[loop][level:])

    def base_sizes(self, level: int) -> list[int]:
        """Tile sizes of the base op's loops at `level` (0 = forall; for parallel loops
        level k tiles by the product of lengths[k:], 0 = untiled)."""
        base = self.root or self.anchor
        sizes = []
        for l, ext in enumerate(base.extents):
            if base.iterators[l] != "parallel":
                sizes.append(0)
                continue
            tile = 0 if self._whole_at(l, level) else self._tile(l, level)
            # (A dynamic extent is never "the whole loop": its nominal size is no size.)
            sizes.append(0 if tile == ext and l not in base.dynamic_loops else tile)
        if level == 0 and not any(sizes):
            # One workgroup: tile the outermost static loop by its full extent.
            static = [l for l in base.parallel_dims if l not in base.dynamic_loops]
            if not static:
                raise ValueError("every parallel loop is dynamic and none is distributed: "
                                 "no static workgroup tile")
            sizes[static[0]] = base.extents[static[0]]
        return sizes

    def anchor_sizes(self, level: int) -> list[int]:
        """The base op's parallel sizes expressed on the anchor's loops."""
        sizes = self.base_sizes(level)
        if self.root is None or self.anchor is self.root:
            return sizes
        out = [0] * len(self.anchor.extents)
        loop_of = self._anchor_loop_of_root_dim()
        for l, s in enumerate(sizes):
            p = self.root.output_dim_of_loop(l)
            if p is None or not s or loop_of.get(p) is None:
                continue
            out[loop_of[p]] = s
        if level == 0 and not any(out):
            static = [l for l in range(len(out)) if l not in self.anchor.dynamic_loops]
            if not static:
                raise ValueError("no static anchor loop for the one workgroup")
            out[static[0]] = self.anchor.extents[static[0]]
        return out

    def loop_on(self, op: OpInfo, loop: int) -> int:
        """The loop of `op` (the root or the anchor) that runs over the base op's `loop`."""
        base = self.root or self.anchor
        if op is base:
            return loop
        found = self._anchor_loop_of_root_dim().get(base.output_dim_of_loop(loop))
        if found is None:
            raise ValueError(f"no loop of {op.name} runs over loop {loop} of {base.name}")
        return found

    def _anchor_loop_of_root_dim(self) -> dict[int, int | None]:
        """Root output dim -> the anchor loop over it: through the map the anchor reads the
        root's result with (a consumer may write its output transposed, e.g. back to NCHW
        at a model's output), else by equal output dims."""
        shape = self.root.output.shape
        reads = [o for o in self.anchor.operands if not o.is_output and o.shape == shape
                 and all(len(t) == 1 and t[0][1] == 1 for t in o.map_results)]
        if self.root.index in self.anchor.producers and len(reads) == 1:
            return {p: t[0][0] for p, t in enumerate(reads[0].map_results)}
        return {p: next((c for c in range(len(self.anchor.extents))
                         if self.anchor.output_dim_of_loop(c) == p), None)
                for p in range(len(shape))}

    def tile_shape(self, level: int, whole_s1_peel: bool = False) -> list[int]:
        """Shape of the root/anchor output tile at `level` (`whole_s1_peel`: with the loop
        peeled at S1 whole, as ops outside the S1 tile see it)."""
        base = self.root or self.anchor
        shape = list(base.output.shape)
        for l in base.parallel_dims:
            p = base.output_dim_of_loop(l)
            if p is not None:
                whole = self._whole_at(l, level) or (whole_s1_peel and l == self.s1_peel)
                shape[p] = base.extents[l] if whole else self._tile(l, level)
        return shape


def _transposed_tiles(root: OpInfo, plan: "TilePlan") -> list[tuple[int, int]]:
    """(lanes, reduction) register tiles of inputs read along a reduction loop but used
    along the vector lanes (`transposed_inputs`): the outer-product contraction transposes
    these tiles."""
    lane = lane_loop(root)
    out = []
    for _, loop in transposed_inputs(root):
        red = plan.lengths.get(loop, (1,))
        out.append((plan.lengths[lane][-1], red[1] if len(red) > 1 else 1))
    return out


def _batch_contraction(op: OpInfo) -> bool:
    """A reduction over two or more inputs that all share a batch loop (batch matmul)."""
    inputs = [o for o in op.operands if not o.is_output and o.shape]
    return bool(op.reduction_dims) and len(inputs) >= 2 and bool(batch_loops(op))


def _tile_rows(tb: tbm.TB, func: ir.Value, h: dict, op: OpInfo, tile_last: int,
               extra_vector: list, peel_rows: bool = True, each: bool = False) -> list:
    """Tile an op outside the root to rows (`_row_sizes`). A row reduction longer than one
    chunk accumulates chunk-wide partial sums (rfactor) and reduces them once per row;
    a row no good chunk divides is cut into full chunks and a peeled partial last one.
    `peel_rows`: whether `tile_last` is the elementwise row's extent where the op runs (a
    peel needs a partial last chunk; a reduction's row is always whole). `each`: the op's
    handle may hold several copies (see `_peel`). Returns the partial-sum loops to hoist."""
    if not op.extents:
        return []  # a 0-d op (the init of a scalar): nothing to tile
    sizes, odd = _row_sizes(op, tile_last, peel_rows)
    if not op.reduction_dims:
        h[op.name], loops = tb.tile_for(h[op.name], sizes)
        if odd and not op.scalar:
            # The row's partial last chunk in its own loop: a static vector of its own.
            row = _row_loop(op)
            _, h[op.name] = _peel(tb, func, loops[sum(1 for t in sizes[:row] if t)],
                                  op.op_name, None, each)
        return []
    last = op.reduction_dims[-1]
    chunk = sizes[last]
    outer = [0 if l == last else t for l, t in enumerate(sizes)]
    if any(outer):
        h[op.name], _ = tb.tile_for(h[op.name], outer)
    if not chunk or op.scalar:
        return []  # the whole row is one vector (or scalar loops: no partial sums)
    rf = [chunk if l == last else 0 for l in range(len(sizes))]
    init, partial, merge, loop_h = tb.rfactor(h[op.name], rf)
    h[op.name] = partial
    extra_vector += [init, merge]
    if odd:
        # Full chunks, then the partial last one (static: one vector of its own).
        full, h[op.name] = _peel(tb, func, loop_h, op.op_name, None, each)
        return [full]
    return [loop_h]


def _dynamic_row(op: OpInfo, tile_last: int) -> bool:
    """Whether `op`'s innermost loop is a dynamic row inside the workgroup: its innermost
    reduction, or its contiguous output dim over more than a row of one (`tile_last`)."""
    inner = len(op.extents) - 1
    if inner < 0 or inner not in op.dynamic_loops:
        return False
    return op.iterators[inner] == "reduction" or tile_last > 1


def _tile_dynamic_rows(tb: tbm.TB, func: ir.Value, h: dict, op: OpInfo, chunk: int,
                       extra_vector: list) -> list:
    """Tile an op whose innermost loop has a dynamic extent to rows of one and that loop to
    chunks of `chunk` elements: the full chunks are one static vector each, the partial
    last chunk is peeled and cut to single elements (masked vectorization is not an option
    in IREE 3.13). A reduction accumulates `chunk` partial results (rfactor) merged once
    per row; returns the loops whose accumulators to hoist."""
    n = len(op.extents)
    outer = [1] * (n - 1) + [0]
    if any(outer):
        h[op.name], _ = tb.tile_for(h[op.name], outer)
    inner = [0] * (n - 1) + [chunk]
    one = [0] * (n - 1) + [1]
    reduction = op.iterators[n - 1] == "reduction"
    if chunk == 1:  # nothing to peel
        h[op.name], _ = tb.tile_for(h[op.name], one)
        return []
    if reduction:
        init, h[op.name], merge, loop_h = tb.rfactor(h[op.name], inner)
        extra_vector += [init, merge]
    else:
        h[op.name], (loop_h,) = tb.tile_for(h[op.name], inner)
    full, h[op.name] = _peel(tb, func, loop_h, op.op_name, one)
    return [full] if reduction else []


def _peel(tb: tbm.TB, func: ir.Value, loop_h: ir.Value, op_name: str,
          rest_tile: Sequence[int] | None, each: bool = False) -> tuple[ir.Value, ir.Value]:
    """Peel `loop_h` into its full steps and the partial last one, whose `op_name` op is
    tiled by `rest_tile` (None: kept whole); returns the full steps' loop and both copies
    of the op (the peel consumed the loop and every handle into it). `each`: `loop_h` holds
    several loops (copies made by an earlier peel)."""
    full, rest = tb.peel(loop_h)
    rest_op = tb.match_names(rest, [op_name], each)
    if rest_tile is not None:
        rest_op, _ = tb.tile_for(rest_op, rest_tile)
    both = transform.MergeHandlesOp([tb.match_names(full, [op_name], each), rest_op]).result
    tb.patterns(func, tbm.tiling_cleanup())
    return full, both


def _tile_last(op: OpInfo, plan: "TilePlan", shape: Sequence[int]) -> int:
    """Extent of `op`'s last output dim inside the tile whose (root or anchor) output tile is
    `shape`: the tile of the base output dim of the same size (the last one if it fits),
    e.g. 2 for a row statistic tensor<128> under a 2x768 tile of a 128x768 output."""
    base = plan.root or plan.anchor
    if not op.output.shape:
        return 1
    # The base reads op's result through a map: op's last dim is the base loop it names.
    reads = [o for o in base.operands if not o.is_output and o.shape == op.output.shape]
    if op is not base and reads and len(reads[0].map_results[-1]) == 1:
        p = base.output_dim_of_loop(reads[0].map_results[-1][0][0])
        if p is not None:
            return shape[p]
    ext = op.output.shape[-1]
    dims = [d for d, e in enumerate(base.output.shape) if e == ext]
    if not dims:
        return ext
    return shape[dims[-1]]


def chunk(extent: int, limit: int) -> int:
    """Tile size of a loop cut into the largest chunks of at most `limit` that divide it
    (0: the loop stays whole)."""
    size = largest_divisor(extent, limit)
    return 0 if size == extent else size


def _row_sizes(op: OpInfo, tile_last: int, peel_rows: bool = True
               ) -> tuple[list[int], bool]:
    """Tile sizes of an op outside the root, and whether its row loop's last chunk is
    partial (to peel): an elementwise op in rows of at most MAX_ELEMENTWISE_VECTOR along the
    loop of its output's last dim (`tile_last` long in the tile; the last loop unless the op
    transposes); a reduction in partial-sum chunks of its innermost reduction loop (a whole
    long reduction as one vector would blow up the compile and chain its adds)."""
    n = len(op.extents)
    sizes = [1] * n
    if op.reduction_dims:
        last = op.reduction_dims[-1]
        ext = op.extents[last]
        if ext <= WHOLE_REDUCTION_ROW:
            sizes[last] = 0
            return sizes, False
        sizes[last], odd = _row_chunk(ext, LONG_REDUCTION_CHUNK if ext > LONG_REDUCTION_ROW
                                      else REDUCTION_CHUNK)
        return sizes, odd
    # Every other loop in steps of one: a transpose's 48x4096 tile once kept its 4096-long
    # input row whole, one vector, 40 s of compile.
    row = _row_loop(op)
    sizes[row], odd = _row_chunk(tile_last, MAX_ELEMENTWISE_VECTOR, peel_rows)
    return sizes, odd


def _row_chunk(extent: int, limit: int, peel: bool = True) -> tuple[int, bool]:
    """(tile size, partial last chunk) of a row: whole up to `limit`, else the largest
    divisor up to `limit`, or (with `peel`) chunks of `limit` and a partial last one where
    no divisor of at least MIN_ROW_CHUNK exists (a row of 197 tokens: 197 single elements
    otherwise)."""
    size = chunk(extent, limit)
    if not peel or size == 0 or size >= MIN_ROW_CHUNK:
        return size, False
    return limit, True


def _row_loop(op: OpInfo) -> int:
    """The loop that indexes `op`'s output's last dim (the last loop if none does alone)."""
    terms = op.output.map_results[-1] if op.output.map_results else ()
    if len(terms) == 1 and terms[0][1] == 1:
        return terms[0][0]
    return len(op.extents) - 1


def payload_handles(tb: tbm.TB, target: ir.Value, ops: Sequence[OpInfo]
                    ) -> tuple[ir.Value, dict[str, ir.Value]]:
    """The dispatch function and one handle per op (by role name), after the rewrites
    that bring the payload to the form the ops were read in."""
    func = tb.match_names(target, ["func.func"])
    func = tb.registered_pass(func, "iree-eliminate-empty-tensors")
    for pass_name in ops[0].prelude if ops else ():
        func = tb.registered_pass(func, pass_name)  # e.g. softmax -> its generics
    if any(has_strided_access(o) for o in ops if o.is_linalg):
        # extract_slice (not tileable) + a plain contraction: same ops, same loops.
        func = tb.registered_pass(
            func, "iree-global-opt-convert-strided-contraction-to-contraction")
    stored = any(o.map_stored for o in ops)
    handles = tb.split(tb.match_tileable(func), len(ops) + stored)
    h = dict(zip((o.name for o in ops), handles))
    if stored:
        h[MAP_STORE] = handles[-1]
    return func, h


def workgroups_on_anchor(tb: tbm.TB, func: ir.Value, h: dict[str, ir.Value],
                         ops: Sequence[OpInfo], plan: TilePlan) -> None:
    """S0: one scf.forall over workgroups (blocks) on the anchor, every producer fused into
    it, consumers first; `h` is updated to the fused ops. An anchor written out through a
    map_store is tiled through it: the map_store (over the anchor's output dims) is the
    forall's root and the anchor is fused in first."""
    sizes = plan.anchor_sizes(0)
    dynamic = func if any(o.dynamic_loops for o in ops) else None
    if plan.anchor.map_stored:
        by_dim = [0] * len(plan.anchor.output.shape)
        for l, s in enumerate(sizes):
            p = plan.anchor.output_dim_of_loop(l)
            if p is not None:
                by_dim[p] = s
        _, forall = tb.tile_forall(h.pop(MAP_STORE), by_dim, dynamic)
        h[plan.anchor.name], forall = tb.fuse_into(h[plan.anchor.name], forall)
    else:
        h[plan.anchor.name], forall = tb.tile_forall(h[plan.anchor.name], sizes, dynamic)
    for o in reversed(ops):
        if o is not plan.anchor:
            h[o.name], forall = tb.fuse_into(h[o.name], forall)
    tb.patterns(func, tbm.tiling_cleanup())
    tb.cse(func)


def one_workgroup_reduction(tb: tbm.TB, func: ir.Value, h: dict[str, ir.Value],
                            ops: Sequence[OpInfo], plan: TilePlan) -> list[ir.Value]:
    """S0 of a full reduction to a scalar (a task of only its init and the reduction): no
    parallel loop to give workgroups, and IREE needs an scf.forall to map. The reduction
    becomes one partial result in a one-workgroup forall, merged after it: with a single
    workgroup, code after the forall runs once and after it. Returns the ops outside the
    forall (the partial result's init, the merge, the scalar's init) to vectorize."""
    anchor = plan.anchor
    first = anchor.reduction_dims[0]
    init, h[anchor.name], merge, _ = tb.reduction_forall(
        h[anchor.name], [1 if l == first else 0 for l in range(len(anchor.extents))])
    tb.patterns(func, tbm.tiling_cleanup())
    tb.cse(func)
    return [init, merge] + [h[o.name] for o in ops if o is not anchor]


def dedupe_fused(h: dict[str, ir.Value], ops: Sequence[OpInfo], anchor: OpInfo) -> None:
    """A producer with several uses is fused once per use (and its own producers once per
    copy); CSE merges the copies, so a handle may name one op twice: dedupe them."""
    if any(len(consumers(ops, o.index)) > 1 for o in ops):
        for o in ops:
            if o is not anchor:
                h[o.name] = transform.MergeHandlesOp([h[o.name]], deduplicate=True).result


def _fastmath(tb: tbm.TB, func: ir.Value, op_name: str, flags: str) -> None:
    """Annotate every `op_name` in `func` with `#arith.fastmath<flags>` (the op's inherent
    fastmath attribute; vectorization keeps it)."""
    tb.annotate(tb.match_names(func, [op_name]), "fastmath",
                ir.Attribute.parse(f"#arith.fastmath<{flags}>"))


def build_strategy(ops: Sequence[OpInfo], program: Program, name: str) -> None:
    """Insert `transform.named_sequence @name(%module)` at the current insertion point."""
    plan = TilePlan(ops, program)
    sk = program.sketch
    seq = transform.NamedSequenceOp(name, [tbm.any_op()], [],
                                    arg_attrs=[{"transform.readonly": ir.UnitAttr.get()}])
    tb = tbm.TB()
    with ir.InsertionPoint(seq.body):
        func, h = payload_handles(tb, seq.bodyTarget, ops)
        if any("arith.divf" in o.body_kinds for o in ops):
            # Divisions may multiply by the divisor's reciprocal (arcp): a divisor shared
            # by a row's vectors (a softmax's sum) is then divided once, as torch's softmax
            # does (TBS-b1's: its 4 vdivps became one scalar division and multiplies,
            # 0.0958 -> 0.0908 ms).
            _fastmath(tb, func, "arith.divf", "arcp")

        # Ops the vectorizer rejects stay scalar (OpInfo.scalar); gathers (tensor.extract
        # at computed indices) vectorized would become n-D vector.gather ops the LLVM
        # lowering rejects for most tile shapes.
        scalar_ops = {o.name for o in ops if o.scalar}
        vector_ops: list[str] = []
        folded = False  # unit dims of the register tile folded away (see below)
        extra_vector: list[ir.Value] = []  # handles of ops created by the strategy itself
        # S0: workgroups on the anchor, every producer fused in (consumers first).
        if plan.anchor.parallel_dims:
            workgroups_on_anchor(tb, func, h, ops, plan)
            dedupe_fused(h, ops, plan.anchor)
        else:
            extra_vector += one_workgroup_reduction(tb, func, h, ops, plan)
        extra_loops: list[ir.Value] = []  # partial-sum loops of row reductions (hoisted)
        r1_loops: list[ir.Value] = []
        root = plan.root
        if root is None and not plan.anchor.parallel_dims:
            vector_ops.append(plan.anchor.name)  # a scalar result: no rows to tile
        elif root is None:
            shape = plan.tile_shape(0)
            for o in ops:
                if not o.is_linalg:
                    continue
                if _dynamic_row(o, _tile_last(o, plan, shape)):
                    # (Without a chunked row, a dynamic row loop of k > 1 rows, e.g. a
                    # layer norm's statistics: single elements.)
                    extra_loops += _tile_dynamic_rows(tb, func, h, o, plan.row_chunk or 1,
                                                      extra_vector)
                else:
                    extra_loops += _tile_rows(tb, func, h, o, _tile_last(o, plan, shape),
                                              extra_vector)
                vector_ops.append(o.name)
        else:
            # S1: fuse the root (and its init) into the consumer tile / local accumulator.
            # A structure step (consumer fusion, cache write) may name the op whose S1 tile
            # the root is fused into; otherwise the root is tiled alone.
            s1 = plan.base_sizes(1)
            inner = None
            fusion = next((f for f in (s.s1_fusion(plan) for s in sk.structure)
                           if f is not None and any(f[1])), None)
            s1_loops: list[ir.Value] = []
            if fusion is not None:
                _, s1_loops = tb.fuse(h[fusion[0].name], fusion[1])
                inner = _closure(ops, fusion[0].index)
            elif any(s1):
                h[root.name], s1_loops = tb.tile_for(h[root.name], s1)
            names = [ops[i].name for i in inner] if inner is not None else [root.name]
            if inner is not None and plan.s1_peel is None:
                h.update(zip(names, tb.split(tb.match_tileable(s1_loops[-1]), len(names))))
                # Shrink the fused temporaries' tensor.empty to the S1 tile (local buffer).
                tb.patterns(func, tbm.tiling_cleanup())
            if plan.s1_peel is not None:
                # The outer of two peeled loops: its S1 loop runs full register tiles, then
                # the partial last one in a copy of everything the S1 tile holds (peeled
                # before any cleanup rewrites the loop under its handle).
                tiled_op, sizes = fusion if fusion is not None else (root, s1)
                at = [i for i, x in enumerate(sizes) if x].index(
                    plan.loop_on(tiled_op, plan.s1_peel))
                full, rest = tb.peel(s1_loops[at])
                copies = [tb.split(tb.match_tileable(x), len(names)) for x in (full, rest)]
                for n, a, b in zip(names, *copies):
                    h[n] = transform.MergeHandlesOp([a, b]).result
                tb.patterns(func, tbm.tiling_cleanup())
            shape = plan.tile_shape(1)
            # Ops outside the S1 tile see a loop peeled at S1 whole.
            outside = plan.tile_shape(1, whole_s1_peel=True)
            # R0, S2, R1 on the root.
            red = {l: plan.lengths[l][0] for l in root.reduction_dims}
            r0 = [red[l] if l in red and red[l] != root.extents[l] else 0
                  for l in range(len(root.extents))]
            r0_loops: list[ir.Value] = []
            if any(r0):
                h[root.name], r0_loops = tb.tile_for(h[root.name], r0)
            for i in program.packed(root.name):
                # The operand's slice of this reduction step, copied to a contiguous local
                # buffer the register tiles read; the copy moves rows of vectors.
                copy = tb.copy_operand(h[root.name], i)
                panel = footprint_shape(root.operands[i], reduction_tile(root, program))
                copy, _ = tb.tile_for(copy, [1] * (len(panel) - 1) +
                                      [chunk(panel[-1], MAX_ELEMENTWISE_VECTOR)])
                extra_vector.append(copy)
            s2 = plan.base_sizes(2)
            if any(s2):
                h[root.name], s2_loops = tb.tile_for(h[root.name], s2)
                if plan.peeled and not plan.one_row_kernel:
                    # The register-tile loop of a micro-kernel extent: full tiles, then the
                    # partial last one in its own loop; both copies of the root go on (the
                    # outer of two peeled loops was peeled at S1).
                    tiled = [i for i, s in enumerate(s2) if s]
                    for l in sorted(plan.peeled - {plan.s1_peel}, reverse=True):
                        # The partial tile of a dynamic extent has a dynamic size: cut to
                        # rows of one, a static kernel (masked vectorization is not an
                        # option in IREE 3.13). A static one's sizes fold to constants.
                        _, h[root.name] = _peel(
                            tb, func, s2_loops[tiled.index(l)], root.op_name,
                            [1 if i == l else 0 for i in range(len(s2))]
                            if l in root.dynamic_loops else None,
                            each=plan.s1_peel is not None)
            vec = {l: (plan.lengths[l][1] if len(plan.lengths[l]) > 1 else 1) for l in red}
            # A structure step (rfactor) may turn one loop's inner tile into partial sums.
            psum = next((p for p in (s.partial_sum_loop(root, vec) for s in sk.structure)
                         if p is not None), None)
            r1 = [vec[l] if l in red and red[l] > vec[l] and l != psum else 0
                  for l in range(len(root.extents))]
            if any(r1):
                h[root.name], r1_loops = tb.tile_for(h[root.name], r1)
            if psum is not None:
                # v partial sums per output element (vector lanes), merged once after the
                # loop.
                rf = [vec[psum] if l == psum else 0 for l in range(len(root.extents))]
                init, partial, merge, loop_h = tb.rfactor(h[root.name], rf)
                h[root.name] = partial
                extra_vector += [init, merge]
                # A one-trip loop folds away (and its handle with it).
                r1_loops = r1_loops + ([loop_h] if red[psum] > vec[psum] else [])
            vector_ops.append(root.name)
            for o in ops:
                # (A scalar op, the init of a reduction to a scalar, stays outside the
                # forall: one_workgroup_reduction hands it over to vectorize.)
                if o is not root and o.is_linalg and o.output.shape:
                    # (Only the fused ops run at the S1 tile whose shape gives tile_last.)
                    fused = inner is not None and o.index in inner
                    extra_loops += _tile_rows(tb, func, h, o, _tile_last(
                                              o, plan, shape if fused else outside),
                                              extra_vector, peel_rows=fused,
                                              each=plan.s1_peel is not None)
                    vector_ops.append(o.name)
            kind = conv_kind(root)
            if kind in ("conv1d", "conv2d"):
                # Back to the named op; 2-D -> 1-D (the unit window rows fold away) so the
                # vectorizer emits its 1-D convolution kernel.
                named = transform.structured.SpecializeOp(tbm.any_op(), h[root.name]).result
                h[root.name] = (transform.structured.DecomposeOp(named).result
                                if kind == "conv2d" else named)
            elif kind == "fold" or _batch_contraction(root) or \
                    column_read_loop(root) is not None:
                # No 1-D kernel for these (3-D, depthwise, grouped): every window loop and
                # output row is a unit tile here (a column read keeps rows along its
                # column), and folding the unit dims leaves a contraction (or an
                # elementwise multiply-add) the vectorizer takes.
                # Batch contractions too: a named batch_matmul vectorized with its unit
                # batch dim lowers element by element (1x2304x32x288: 13x slower than
                # IREE's); the fold needs the generic form. So do contractions reading
                # their broadcast operand by columns (A[k][m]): unfolded, the unit dims
                # around the column keep the vector contraction from becoming outer
                # products, and it lowered element by element (ShuffleNet's 1x1 conv from
                # a channels-first input: 0.91 against 0.063 ms). The other ops are vectorized
                # first: folded, a transposing consumer (BERT's attention) was rewritten
                # beyond what its handle tracks ("tracking listener failed to find
                # replacement op"); a handle with no later use is not tracked.
                for n in vector_ops:
                    if n != root.name and n not in scalar_ops:
                        tb.vectorize(h[n])
                vector_ops = [root.name]
                if kind != "fold":
                    h[root.name] = structured.GeneralizeOp(h[root.name]).result
                tb.patterns(func, [structured.ApplyFoldUnitExtentDimsViaSlicesPatternsOp,
                                   transform.ApplyCanonicalizationPatternsOp])
                folded = True
        for n in vector_ops:
            if n not in scalar_ops:
                tb.vectorize(h[n])
        for handle in extra_vector:
            tb.vectorize(handle)
        tb.patterns(func, tbm.after_vectorize())
        tb.cse(func)
        for loop_h in extra_loops:
            tb.hoist(loop_h)
        if r1_loops:
            # Innermost first: the accumulator climbs out of every reduction loop.
            for loop_h in reversed(r1_loops):
                tb.hoist(loop_h)
            if plan.unroll > 1:
                tb.unroll(r1_loops[-1], plan.unroll)
        if extra_loops or r1_loops:
            # Hoisting a rank-reduced accumulator (a batch contraction's unit dim folded)
            # leaves the slice and its rank-reduced view as two loop-carried tensors that
            # the loop yields unchanged; bufferized as they stand, the second is a copy of
            # the register tile, element by element, before and after every reduction loop
            # (BERT's attention batch matmul: 0.32 against 0.12 ms for one program).
            # Folding them first keeps the tile in place.
            tb.patterns(func, [transform.ApplyCanonicalizationPatternsOp])
            tb.cse(func)

        func = tb.registered_pass(func, "iree-eliminate-empty-tensors")
        func = tb.iree_op("transform.iree.bufferize", [func], results=1).results[0]
        tb.iree_op("transform.iree.forall_to_workgroup", [func])
        tb.patterns(func, [transform.ApplyCanonicalizationPatternsOp])
        tb.cse(func)
        # CSE merges the two subviews of a copy bufferization left between equal views;
        # canonicalizing again erases that self-copy, which vectorized would be one vector
        # of the whole workgroup tile (minutes of LLVM time on large conv tiles).
        tb.patterns(func, [transform.ApplyCanonicalizationPatternsOp])
        if scalar_ops:
            structured.ConvertToLoopsOp(tbm.any_op(), tb.match_tileable(func))
        if root is not None and has_window_access(root):
            # Decomposed convolutions leave small copies around their rank-reduced
            # accumulator (bounded by the local tile): vectorize them. Not done in general:
            # a large leftover copy would become one huge vector.
            func = transform.structured.VectorizeChildrenAndApplyPatternsOp(func).result
        if folded:
            # A unit reduction tile folded away leaves the left operand's tile a strided 1-D
            # read (a column; a prime reduction extent allows no other tile). The vector
            # lowering below would turn it into a loop of scalar loads inserted into a
            # vector, which the outer products then take apart again (ViT's attention times
            # V: 0.33 against 0.15 ms); unrolled into scalar reads first, LLVM feeds each
            # FMA a broadcast from memory.
            tb.patterns(func, tbm.scalarize_transfers())
        transposed = _transposed_tiles(root, plan) if root is not None else []
        tb.patterns(func, tbm.lower_vectors(
            transpose_16x16=bool(transposed) and all(
                t == (SQUARE_TRANSPOSE, SQUARE_TRANSPOSE) for t in transposed)))
        tb.cse(func)
        if any(o.reduction_dims for o in ops):
            # A vector's horizontal reduction may reassociate, as IREE's own pipeline lets
            # LLVM at its default -O2 (--iree-llvmcpu-reassociate-fp-reductions, which
            # does not reach a strategy's lowering); the split reduction already reordered
            # the sum. Without it, LLVM adds the 16 lanes one after another (TBS-b1's
            # softmax, its two row reductions: 0.1051 -> 0.0935 ms). After lower_vectors:
            # the multi-reductions it lowers are the vector.reduction ops matched here.
            _fastmath(tb, func, "vector.reduction", "reassoc")
        if any(k.startswith("math.") for o in ops for k in o.body_kinds):
            # Vector exp/tanh/erf as polynomials, as IREE's own pipeline does (LLVM would
            # scalarize them into libm calls).
            func = tb.registered_pass(func, "iree-codegen-math-transform")
        tb.annotate(func, "translation_info", ir.Attribute.parse(
            "#iree_codegen.translation_info<pipeline = #iree_codegen.no_pipeline>"))
        transform.YieldOp([])


def emit_standalone(ops: Sequence[OpInfo], program: Program, name: str = "strategy") -> ir.Module:
    """A module holding just the strategy (for lit tests and inspection). Needs a context."""
    module = ir.Module.create()
    module.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
    with ir.InsertionPoint(module.body):
        build_strategy(ops, program, name)
    if not module.operation.verify():
        raise ValueError("emitted strategy does not verify")
    return module
