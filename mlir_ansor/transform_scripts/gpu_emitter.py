"""GPU Program -> Transform-dialect strategy for IREE's cuda backend.

Loop structure of a root with data reuse ("SSSRRSRS", paper §4.1 on GPU):
  S0  scf.forall over blocks (blockIdx) on the anchor; every producer fused in
  S1  virtual threads and S2 threadIdx: scf.forall over threads on the anchor (or root),
      every other op fused in; one thread computes vthread x inner outputs
  R0  reduction tile; with cache read, at block level: each step's input tiles are copied
      into workgroup memory by all threads (then S1/S2 run inside the step)
  S3  vthread loop, R1 inner reduction, S4 the inner tile, vectorized
Plain sketches: blocks and threads on the anchor, every other op fused into the thread tile.
The thread foralls become threadIdx with `map_nested_forall_to_gpu_threads`.
"""
from __future__ import annotations

from typing import Sequence

from iree.compiler import ir
from iree.compiler.dialects import transform
from iree.compiler.dialects.transform import structured

from mlir_ansor.dialect_helpers import transform_builder as tbm
from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.analysis import has_window_access
from mlir_ansor.sketch_passes.program import Program
from mlir_ansor.sketch_passes.rules import CacheReadShared, CrossThreadReduction
from mlir_ansor.transform_scripts.emitter import (TilePlan, chunk, dedupe_fused,
                                                  payload_handles, workgroups_on_anchor)

MAX_THREAD_REDUCTION = 16  # reduction chunk of a plain op inside one thread


def _thread_tiling(op: OpInfo, block: Sequence[int], thread: Sequence[int]
                   ) -> tuple[list[int], list[int]]:
    """Tile sizes of the thread forall on an op already tiled to `block` (0 = whole extent),
    and the thread counts of its mapped loops, outermost first."""
    sizes, counts = [], []
    for l, (b, t) in enumerate(zip(block, thread)):
        blk = b or op.extents[l]
        if t and t < blk:
            sizes.append(t)
            counts.append(blk // t)
        else:
            sizes.append(0)
    return sizes, counts


def _tile_threads(target: ir.Value, sizes: Sequence[int], counts: Sequence[int]
                  ) -> tuple[ir.Value, ir.Value]:
    dims = ["z", "y", "x"][3 - len(counts):]
    mapping = ir.ArrayAttr.get([ir.Attribute.parse(f"#gpu.thread<{d}>") for d in dims])
    op = structured.TileUsingForallOp(tbm.any_op(), tbm.any_op(), target,
                                      tile_sizes=list(sizes), mapping=mapping)
    return op.results[0], op.results[1]


def _distribute(tb: tbm.TB, target: ir.Value, shape: Sequence[int], parallel: Sequence[int],
                dims: Sequence[int]) -> ir.Value:
    """Spread an op whose block tile has `shape` over the block's threads: its last (up to
    three) `parallel` loops of more than one iteration get threadIdx.x/y/z with at most the
    block's thread counts `dims` ([x, y, z]) iterations each, in static tiles (the smallest
    divisor of the extent that fits), so no thread allocates a dynamic buffer; what a thread
    allocates is private. Returns the tiled op."""
    sizes = [0] * len(shape)
    mapped: dict[int, str] = {}
    # Loops of one iteration are skipped: threadIdx.x goes to the innermost loop that has
    # work (else every thread would copy the same elements).
    spread = [l for l in reversed(list(parallel)) if shape[l] > 1][:3]
    for l, n, name in zip(spread, dims, "xyz"):
        ext = shape[l]
        tile = next(t for t in range(1, ext + 1) if ext % t == 0 and ext // t <= n)
        if ext // tile > 1:
            sizes[l] = tile
            mapped[l] = name
    if not mapped:
        return target
    mapping = ir.ArrayAttr.get([ir.Attribute.parse(f"#gpu.thread<{mapped[l]}>")
                                for l in sorted(mapped)])
    res = structured.TileUsingForallOp(tbm.any_op(), tbm.any_op(), target, tile_sizes=sizes,
                                       mapping=mapping)
    tb.privatize(res.results[1])
    return res.results[0]


def _block_tiles(root: OpInfo, plan: TilePlan) -> dict[int, int]:
    """Per loop of the root, its extent inside one block and one reduction step."""
    block = plan.base_sizes(0)
    tiles = {}
    for l, ext in enumerate(root.extents):
        if root.iterators[l] == "parallel":
            tiles[l] = block[l] or ext
        else:
            tiles[l] = plan.lengths[l][0]
    return tiles


def _operand_tile(o, tiles: dict[int, int]) -> list[int]:
    return [sum((tiles[d] - 1) * abs(c) for d, c in terms) + 1 for terms in o.map_results]


def _reduction_chunks(op: OpInfo) -> list[int]:
    sizes = [0] * len(op.extents)
    if op.reduction_dims:
        last = op.reduction_dims[-1]
        sizes[last] = chunk(op.extents[last], MAX_THREAD_REDUCTION)
    return sizes


def _chunk_others(tb: tbm.TB, h: dict[str, ir.Value], ops: Sequence[OpInfo],
                  root: OpInfo | None) -> list[str]:
    """Every linalg op but the root, its reduction in chunks a thread vectorizes; returns
    their names (to vectorize)."""
    names = []
    for o in ops:
        if o is not root and o.is_linalg:
            chunks = _reduction_chunks(o)
            if any(chunks):
                h[o.name], _ = tb.tile_for(h[o.name], chunks)
            names.append(o.name)
    return names


def _cross_thread(tb: tbm.TB, func: ir.Value, h: dict[str, ir.Value], ops: Sequence[OpInfo],
                  plan: TilePlan) -> tuple[list[int], list[str]]:
    """Cross-thread reduction inside each block: the innermost reduction loop is split over
    `threads` (threadIdx.x); each thread reduces its slice `vector` elements per step into
    its slot of a partial-result tile (workgroup memory); after the barrier that ends the
    thread forall, the slots are combined. Returns the block dims and the ops to vectorize."""
    dedupe_fused(h, ops, plan.anchor)
    root = plan.root
    last = root.reduction_dims[-1]
    threads, vec = plan.lengths[last]
    n = len(root.extents)
    red = structured.TileReductionUsingForallOp(
        [tbm.any_op()], tbm.any_op(), tbm.any_op(), tbm.any_op(), h[root.name],
        num_threads=[threads if l == last else 0 for l in range(n)],
        mapping=ir.ArrayAttr.get([ir.Attribute.parse("#gpu.thread<x>")]))
    fill, split, combine = red.results[0], red.results[1], red.results[2]
    dims = [threads, 1, 1]
    # Each thread initializes its own slot (a fill outside a thread forall would run in every
    # thread, racing with the partial sums of threads already past it). The partial tile has
    # the root's parallel loops and the split loop, in loop order.
    kept = [l for l in range(n) if root.iterators[l] == "parallel" or l == last]
    structured.TileUsingForallOp(
        tbm.any_op(), tbm.any_op(), fill, tile_sizes=[1 if l == last else 0 for l in kept],
        mapping=ir.ArrayAttr.get([ir.Attribute.parse("#gpu.thread<x>")]))
    # A thread's slice, `vec` elements of the split loop (and one of any other reduction
    # loop) per step.
    steps = [vec if l == last else (1 if l in root.reduction_dims else 0) for l in range(n)]
    if any(t and t < e for t, e in zip(
            steps, [root.extents[l] // threads if l == last else root.extents[l]
                    for l in range(n)])):
        split, _ = tb.tile_for(split, steps)
    tb.patterns(func, tbm.tiling_cleanup())
    tb.cse(func)
    h[root.name] = split
    vector_ops = [root.name, *_chunk_others(tb, h, ops, root)]
    # The combining op after the barrier: one thread per row of its last parallel loop
    # (every thread adding into the same row would race).
    rows = [l for l in kept if l != last]
    in_block = {l: plan.base_sizes(0)[l] or root.extents[l] for l in rows}
    along = ([l for l in rows if in_block[l] > 1] or rows)[-1]
    structured.TileUsingForallOp(
        tbm.any_op(), tbm.any_op(), combine,
        tile_sizes=[1 if l == along else 0 for l in kept],
        mapping=ir.ArrayAttr.get([ir.Attribute.parse("#gpu.thread<x>")]))
    return dims, vector_ops


def build_gpu_strategy(ops: Sequence[OpInfo], program: Program, name: str) -> None:
    """Insert `transform.named_sequence @name(%func)` at the current insertion point."""
    plan = TilePlan(ops, program)
    sk = program.sketch
    root = plan.root
    seq = transform.NamedSequenceOp(name, [tbm.any_op()], [],
                                    arg_attrs=[{"transform.readonly": ir.UnitAttr.get()}])
    tb = tbm.TB()
    with ir.InsertionPoint(seq.body):
        func, h = payload_handles(tb, seq.bodyTarget, ops)

        # S0: blocks on the anchor, producers fused.
        workgroups_on_anchor(tb, func, h, ops, plan)
        block = plan.anchor_sizes(0)

        if sk.has(CrossThreadReduction):
            dims, vector_ops = _cross_thread(tb, func, h, ops, plan)
        else:
            # S1+S2: threads on the thread anchor, every other op fused into the thread tile.
            t_anchor = plan.anchor if (root is None or sk.consumer_fused) else root
            t_block = block if t_anchor is plan.anchor else plan.base_sizes(0)
            t_tile = plan.anchor_sizes(1) if t_anchor is plan.anchor else plan.base_sizes(1)
            sizes, counts = _thread_tiling(t_anchor, t_block, t_tile)
            cache_read = root is not None and sk.has(CacheReadShared)
            if cache_read:
                # Thread counts of the root's tile; every op gets its own thread forall below
                # (the shared-memory copies must be spread over the whole block).
                sizes, counts = _thread_tiling(root, plan.base_sizes(0), plan.base_sizes(1))
            if counts and not cache_read:
                h[t_anchor.name], t_forall = _tile_threads(h[t_anchor.name], sizes, counts)
                for o in reversed(ops):
                    if o is not t_anchor:
                        h[o.name], t_forall = tb.fuse_into(h[o.name], t_forall)
                tb.patterns(func, tbm.tiling_cleanup())
                tb.cse(func)
                tb.privatize(t_forall)
            dedupe_fused(h, ops, plan.anchor)

            dims = (list(reversed(counts)) + [1, 1, 1])[:3]
            vector_ops = []
            if root is not None:
                red = {l: plan.lengths[l][0] for l in root.reduction_dims}
                r0 = [red[l] if l in red and red[l] != root.extents[l] else 0
                      for l in range(len(root.extents))]
                if any(r0):
                    h[root.name], _ = tb.tile_for(h[root.name], r0)
                if cache_read:
                    # Cache read: each input's tile of a reduction step copied into a fresh
                    # tensor (a linalg.copy into a workgroup buffer after GPU bufferization),
                    # the copy spread over the block's threads, each writing its piece in
                    # place; thread mapping adds the barriers between foralls. (Tiles divide
                    # the extents: the annotation draws divisors.)
                    tiles = _block_tiles(root, plan)
                    for i, o in enumerate(root.operands):
                        if not o.is_output:
                            shape = _operand_tile(o, tiles)
                            copy = tb.copy_operand(h[root.name], i)
                            _distribute(tb, copy, shape, range(len(shape)), dims)
                    h[root.name], r_forall = _tile_threads(h[root.name], sizes, counts)
                    tb.privatize(r_forall)
                    out_shape = _operand_tile(root.output, tiles)
                    for o in ops:
                        # Ops shaped like the root's output tile (its init, a fused consumer)
                        # are spread the same way; any other op runs in every thread.
                        if o is not root and o.is_linalg and o.output.shape == root.output.shape:
                            shape = [out_shape[o.output_dim_of_loop(l)]
                                     if o.output_dim_of_loop(l) is not None else o.extents[l]
                                     for l in range(len(o.extents))]
                            h[o.name] = _distribute(tb, h[o.name], shape, o.parallel_dims,
                                                    dims)
                s2 = plan.base_sizes(2)  # the vthread loop around the inner tile
                if any(s2):
                    h[root.name], _ = tb.tile_for(h[root.name], s2)
                vec = {l: (plan.lengths[l][1] if len(plan.lengths[l]) > 1 else 1) for l in red}
                r1 = [vec[l] if l in red and red[l] > vec[l] else 0 for l in range(len(root.extents))]
                if any(r1):
                    h[root.name], _ = tb.tile_for(h[root.name], r1)
                if not has_window_access(root):
                    # Window ops (convolutions) keep scalar per-thread loops: the vectorizer
                    # rejects their tiles, and a thread's tile is small.
                    vector_ops.append(root.name)
            vector_ops += _chunk_others(tb, h, ops, root)
        scalar_ops = {o.name for o in ops if o.scalar}  # scalar: see emitter.build_strategy
        for n in vector_ops:
            if n not in scalar_ops:
                tb.vectorize(h[n])
        tb.patterns(func, tbm.after_vectorize())
        tb.cse(func)

        func = tb.registered_pass(func, "iree-eliminate-empty-tensors")
        bufferize = ir.Operation.create(
            "transform.iree.bufferize", results=[tbm.any_op()], operands=[func],
            attributes={"target_gpu": ir.UnitAttr.get()})
        func = bufferize.results[0]
        # Erase bufferization's self-copies first (CSE exposes them): as loops they would
        # copy a whole output in every thread, racing with other blocks' writes.
        tb.patterns(func, [transform.ApplyCanonicalizationPatternsOp])
        tb.cse(func)
        tb.patterns(func, [transform.ApplyCanonicalizationPatternsOp])
        # What was not vectorized (window ops) becomes scalar loops inside each thread.
        structured.ConvertToLoopsOp(tbm.any_op(), tb.match_tileable(func))
        tb.iree_op("transform.iree.forall_to_workgroup", [func])
        ir.Operation.create(
            "transform.iree.map_nested_forall_to_gpu_threads", operands=[func],
            attributes={"workgroup_dims": ir.DenseI64ArrayAttr.get(dims),
                        "subgroup_size": ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                            32)})
        tb.patterns(func, [lambda: ir.Operation.create(
            "transform.apply_patterns.memref.fold_memref_alias_ops"),
            transform.ApplyCanonicalizationPatternsOp])
        tb.iree_op("transform.iree.apply_licm", [func])
        tb.cse(func)
        tb.patterns(func, tbm.lower_vectors())
        tb.cse(func)
        tb.annotate(func, "translation_info", ir.Attribute.parse(
            "#iree_codegen.translation_info<pipeline = #iree_codegen.no_pipeline "
            f"workgroup_size = [{dims[0]}, {dims[1]}, {dims[2]}] subgroup_size = 32>"))
        transform.YieldOp([])
