"""GPU Program -> Transform-dialect strategy for IREE's cuda backend.

Loop structure of a root with data reuse ("SSSRRSRS", paper §4.1 on GPU):
  S0  scf.forall over blocks (blockIdx) on the anchor; every producer fused in
  S1  virtual threads and S2 threadIdx: scf.forall over threads on the anchor (or root),
      every other op fused in; one thread computes vthread x inner outputs
  R0  reduction tile (the shared-memory tile: the root's tiled inputs are cache-read into
      workgroup memory; `shared_memory=False` leaves them in global memory)
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
from mlir_ansor.sketch_passes.analysis import consumers, has_window_access
from mlir_ansor.sketch_passes.program import Program
from mlir_ansor.transform_scripts.emitter import _Plan, payload_handles

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


def _reduction_chunks(op: OpInfo) -> list[int]:
    sizes = [0] * len(op.extents)
    if op.reduction_dims:
        last = op.reduction_dims[-1]
        ext = op.extents[last]
        vec = max(d for d in range(1, min(ext, MAX_THREAD_REDUCTION) + 1) if ext % d == 0)
        sizes[last] = 0 if vec == ext else vec
    return sizes


def build_gpu_strategy(ops: Sequence[OpInfo], program: Program, name: str,
                       shared_memory: bool = False) -> None:
    """Insert `transform.named_sequence @name(%func)` at the current insertion point."""
    plan = _Plan(ops, program)
    sk = program.sketch
    root = plan.root
    seq = transform.NamedSequenceOp(name, [tbm.any_op()], [],
                                    arg_attrs=[{"transform.readonly": ir.UnitAttr.get()}])
    tb = tbm.TB()
    with ir.InsertionPoint(seq.body):
        func, h = payload_handles(tb, seq.bodyTarget, ops)

        # S0: blocks on the anchor, producers fused.
        block = plan.anchor_sizes(0)
        h[plan.anchor.name], forall = tb.tile_forall(h[plan.anchor.name], block)
        for o in reversed(ops):
            if o is not plan.anchor:
                h[o.name], forall = tb.fuse_into(h[o.name], forall)
        tb.patterns(func, tbm.tiling_cleanup())
        tb.cse(func)

        # S1+S2: threads on the thread anchor, every other op fused into the thread tile.
        t_anchor = plan.anchor if (root is None or sk.fuse_consumer) else root
        t_block = block if t_anchor is plan.anchor else plan.base_sizes(0)
        t_tile = plan.anchor_sizes(1) if t_anchor is plan.anchor else plan.base_sizes(1)
        sizes, counts = _thread_tiling(t_anchor, t_block, t_tile)
        if counts:
            h[t_anchor.name], t_forall = _tile_threads(h[t_anchor.name], sizes, counts)
            for o in reversed(ops):
                if o is not t_anchor:
                    h[o.name], t_forall = tb.fuse_into(h[o.name], t_forall)
            tb.patterns(func, tbm.tiling_cleanup())
            tb.cse(func)
        if any(len(consumers(ops, o.index)) > 1 for o in ops):
            for o in ops:  # fused once per use, merged by CSE: dedupe the handles
                if o is not plan.anchor:
                    h[o.name] = transform.MergeHandlesOp([h[o.name]], deduplicate=True).result

        vector_ops = []
        if root is not None:
            red = {l: plan.lengths[l][0] for l in root.reduction_dims}
            r0 = [red[l] if l in red and red[l] != root.extents[l] else 0
                  for l in range(len(root.extents))]
            if any(r0):
                h[root.name], _ = tb.tile_for(h[root.name], r0)
            if shared_memory and any(r0):
                # Cache read: the inputs' reduction tiles go to workgroup memory.
                ins = [i for i, o in enumerate(root.operands) if not o.is_output]
                prom = structured.PromoteOp(
                    tbm.any_op(), h[root.name], operands_to_promote=ins,
                    memory_space=ir.Attribute.parse("#gpu.address_space<workgroup>"))
                h[root.name] = prom.result
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
        for o in ops:
            if o is not root and o.is_linalg:
                chunks = _reduction_chunks(o)
                if any(chunks):
                    h[o.name], _ = tb.tile_for(h[o.name], chunks)
                vector_ops.append(o.name)
        for n in vector_ops:
            tb.vectorize(h[n])
        tb.patterns(func, tbm.after_vectorize())
        tb.cse(func)

        func = tb.registered_pass(func, "iree-eliminate-empty-tensors")
        bufferize = ir.Operation.create(
            "transform.iree.bufferize", results=[tbm.any_op()], operands=[func],
            attributes={"target_gpu": ir.UnitAttr.get()})
        func = bufferize.results[0]
        # What was not vectorized (window ops) becomes scalar loops inside each thread.
        structured.ConvertToLoopsOp(tbm.any_op(), tb.match_tileable(func))
        tb.iree_op("transform.iree.forall_to_workgroup", [func])
        dims = (list(reversed(counts)) + [1, 1, 1])[:3]
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
        tb.patterns(func, tbm.lower_vectors(shape_casts=not any(
            o.reduction_dims for o in ops if o is not root and o.is_linalg)))
        tb.cse(func)
        tb.annotate(func, "translation_info", ir.Attribute.parse(
            "#iree_codegen.translation_info<pipeline = #iree_codegen.no_pipeline "
            f"workgroup_size = [{dims[0]}, {dims[1]}, {dims[2]}] subgroup_size = 32>"))
        transform.YieldOp([])
