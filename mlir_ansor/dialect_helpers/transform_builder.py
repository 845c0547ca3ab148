"""Thin builders over the Transform dialect Python bindings (no tuning logic here).

Each method inserts one transform op at the current insertion point and returns its
result handle(s). Ops without generated Python classes (IREE's own) go through
`ir.Operation.create`, still from the bindings, never from strings of IR.
"""
from __future__ import annotations

from typing import Sequence

from iree.compiler import ir
from iree.compiler.dialects import transform
from iree.compiler.dialects.transform import loop, structured, vector


def any_op() -> ir.Type:
    return transform.AnyOpType.get()


def _nonzero(sizes: Sequence[int]) -> int:
    return sum(1 for s in sizes if s)


class TB:
    """Transform builder bound to an insertion point (use inside `with ir.InsertionPoint`)."""

    def match_names(self, target: ir.Value, names: Sequence[str],
                    each: bool = False) -> ir.Value:
        """Ops named `names` inside `target`. `each`: `target` may hold several payload ops
        (a match takes exactly one), matched one by one and the results concatenated."""
        if not each:
            return structured.MatchOp(any_op(), target, ops=list(names)).result
        loop_op = transform.ForeachOp([any_op()], [target])
        block = loop_op.regions[0].blocks[0]  # (the builder makes the one block)
        with ir.InsertionPoint(block):
            transform.YieldOp([structured.MatchOp(any_op(), block.arguments[0],
                                                  ops=list(names)).result])
        return loop_op.results[0]

    def match_tileable(self, target: ir.Value) -> ir.Value:
        return structured.MatchOp(
            any_op(), target, interface=structured.MatchInterfaceEnum.TilingInterface).result

    def split(self, handle: ir.Value, n: int) -> list[ir.Value]:
        if n == 1:
            return [handle]
        return list(transform.SplitHandleOp([any_op()] * n, handle).results)

    def registered_pass(self, target: ir.Value, name: str) -> ir.Value:
        return transform.ApplyRegisteredPassOp(any_op(), target, name).result

    @staticmethod
    def _count_workgroups(forall: ir.Value) -> None:
        """IREE's workgroup count for the dispatch comes from this workgroup forall."""
        ir.Operation.create(
            "transform.iree.populate_workgroup_count_region_using_num_threads_slice",
            operands=[forall])

    def tile_forall(self, target: ir.Value, sizes: Sequence[int],
                    resolve_dims_in: ir.Value | None = None) -> tuple[ir.Value, ir.Value]:
        """Workgroup tiling. `resolve_dims_in` (the function, for dynamic sizes): the
        forall's bounds are first resolved to the values the loads were sized with. A
        bound read as `tensor.dim` of a loaded binding would put the binding into the
        workgroup count, which IREE 3.13 cannot lower ("failed to legalize operation
        'stream.cmd.dispatch'"; an elementwise consumer whose first input is a second
        dynamic binding, e.g. a residual add)."""
        k = _nonzero(sizes)
        dims = ["z", "y", "x"][3 - k:]
        mapping = ir.ArrayAttr.get([ir.Attribute.parse(f"#gpu.block<{d}>") for d in dims])
        op = structured.TileUsingForallOp(any_op(), any_op(), target, tile_sizes=list(sizes),
                                          mapping=mapping)
        if resolve_dims_in is not None:
            self.patterns(resolve_dims_in, [lambda: ir.Operation.create(
                "transform.apply_patterns.memref.resolve_ranked_shaped_type_result_dims")])
        self._count_workgroups(op.results[1])
        return op.results[0], op.results[1]

    def reduction_forall(self, target: ir.Value, num_threads: Sequence[int]
                         ) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
        """Tile reduction loops into `num_threads` partial results, one per workgroup of an
        scf.forall: (init fill, partial op, merging op, forall)."""
        mapping = ir.ArrayAttr.get([ir.Attribute.parse("#gpu.block<x>")])
        op = structured.TileReductionUsingForallOp([any_op()], any_op(), any_op(), any_op(),
                                                   target, num_threads=list(num_threads),
                                                   mapping=mapping)
        self._count_workgroups(op.results[3])
        return tuple(op.results)

    def fuse_into(self, producer: ir.Value, containing: ir.Value) -> tuple[ir.Value, ir.Value]:
        op = structured.FuseIntoContainingOp(any_op(), any_op(), producer, containing)
        return op.results[0], op.results[1]

    def tile_for(self, target: ir.Value, sizes: Sequence[int]) -> tuple[ir.Value, list[ir.Value]]:
        n = _nonzero(sizes)
        op = structured.TileUsingForOp([any_op()] * n, target, sizes=list(sizes))
        return op.results[0], list(op.results[1:])

    def peel(self, loop_h: ir.Value) -> tuple[ir.Value, ir.Value]:
        """Split an scf.for into the iterations of full steps and the partial last one."""
        cast = transform.CastOp(transform.OperationType.get("scf.for"), loop_h).result
        op = loop.LoopPeelOp(any_op(), any_op(), cast)
        return op.results[0], op.results[1]

    def fuse(self, target: ir.Value, sizes: Sequence[int]) -> tuple[ir.Value, list[ir.Value]]:
        n = _nonzero(sizes)
        op = structured.FuseOp([any_op()] * n, target, tile_sizes=list(sizes))
        return op.results[0], list(op.results[1:])

    def rfactor(self, target: ir.Value, sizes: Sequence[int]) -> tuple[ir.Value, ...]:
        """Tile the reduction loops by `sizes` into partial sums: (init fill, partial op,
        merging op, loop)."""
        op = structured.TileReductionUsingForOp([any_op()], any_op(), any_op(), any_op(),
                                                target, tile_sizes=list(sizes))
        return tuple(op.results)

    def vectorize(self, target: ir.Value) -> None:
        structured.VectorizeOp(target)

    def hoist(self, loop_h: ir.Value) -> None:
        loop.HoistLoopInvariantSubsetsOp(loop_h)

    def unroll(self, loop_h: ir.Value, factor: int) -> None:
        loop.LoopUnrollOp(loop_h, factor=factor)

    def cse(self, target: ir.Value) -> None:
        transform.ApplyCommonSubexpressionEliminationOp(target)

    def patterns(self, target: ir.Value, builders: Sequence) -> None:
        op = transform.ApplyPatternsOp(target)
        with ir.InsertionPoint(op.regions[0].blocks[0]):
            for b in builders:
                b()

    def to_private(self, target: ir.Value, destination_only: bool = False) -> None:
        """Bufferize `target` (a tensor.pad, or with `destination_only` the destinations of a
        destination-style op) into a new private buffer (an alloca)."""
        structured.BufferizeToAllocationOp(
            target, memory_space=ir.Attribute.parse("#gpu.address_space<private>"),
            alloc_op="memref.alloca", memcpy_op="linalg.copy",
            bufferize_destination_only=destination_only or None)

    def privatize(self, forall: ir.Value) -> None:
        """Every tensor a thread's loop body creates (the destination of a fill or another
        op on a fresh tensor, a padded tile) in private memory. IREE's GPU bufferization
        puts every allocation in workgroup memory, which all threads of a block share: a
        per-thread accumulator there is a race (seen on an H200: wrong answers). Not
        covered: an op in the thread's body that writes a tensor of the block's (a row
        statistic the thread tiling does not slice); check_programs rejects those."""
        empties = self.match_names(forall, ["tensor.empty"])
        users = transform.GetConsumersOfResult(any_op(), empties, 0).result
        self.to_private(users, destination_only=True)
        self.to_private(self.match_names(forall, ["tensor.pad"]))

    def copy_operand(self, target: ir.Value, operand: int) -> ir.Value:
        """Copy operand `operand` of the op into a new tensor the op reads instead (IREE
        bufferizes it to a local buffer); returns the copy (a linalg.copy)."""
        return ir.Operation.create(
            "transform.iree.copy_tensor_operand", results=[any_op()], operands=[target],
            attributes={"operand_index": ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                            operand)}).results[0]

    def iree_op(self, name: str, operands: Sequence[ir.Value], results: int = 0):
        return ir.Operation.create(name, results=[any_op()] * results, operands=list(operands))

    def annotate(self, target: ir.Value, key: str, attr: ir.Attribute) -> None:
        param = transform.ParamConstantOp(transform.AnyParamType.get(), attr).result
        transform.AnnotateOp(target, key, param=param)


# Pattern groups used by the strategies (each entry builds one pattern op).
def tiling_cleanup() -> list:
    return [structured.ApplyTilingCanonicalizationPatternsOp,
            loop.ApplyForLoopCanonicalizationPatternsOp,
            lambda: ir.Operation.create("transform.apply_patterns.tensor.fold_tensor_empty"),
            transform.ApplyCanonicalizationPatternsOp]


def after_vectorize() -> list:
    return [vector.ApplyVectorReductionToContractPatternsOp,
            vector.ApplyTransferPermutationPatternsOp,
            vector.ApplyCastAwayVectorLeadingOneDimPatternsOp,
            structured.ApplyTilingCanonicalizationPatternsOp,
            loop.ApplyForLoopCanonicalizationPatternsOp,
            transform.ApplyCanonicalizationPatternsOp]


def scalarize_transfers() -> list:
    """Unroll strided 1-D transfers into scalar (0-D) ones. The n-D ones are unrolled too,
    but their contiguous 1-D rows become vector loads and stores first (the pattern listed
    first wins where both apply)."""
    return [vector.ApplyTransferPermutationPatternsOp,
            lambda: vector.ApplyLowerTransferPatternsOp(max_transfer_rank=1),
            lambda: vector.ApplyTransferToScfPatternsOp(max_transfer_rank=0, full_unroll=True)]


def lower_vectors(transpose_16x16: bool = False) -> list:
    """Lower vector ops to what LLVM takes. `transpose_16x16`: lower transposes with the
    16x16 shuffle network (fast for 16x16 f32 tiles on AVX-512; every other shape would fall
    back to scalar element moves, so the default is the general 1-D shuffle). No
    lower_shape_cast: in IREE 3.13 it loops forever on conv tiles, beside row reductions
    and on some batch-matmul tiles, and LLVM lowering takes the shape casts as they are."""
    group = [
        lambda: vector.ApplyLowerContractionPatternsOp(
            lowering_strategy=vector.VectorContractLowering.OuterProduct),
        vector.ApplyTransferPermutationPatternsOp,
        lambda: vector.ApplySplitTransferFullPartialPatternsOp(
            split_transfer_strategy=vector.VectorTransferSplit.LinalgCopy),
        lambda: vector.ApplyTransferToScfPatternsOp(max_transfer_rank=1, full_unroll=True),
        lambda: vector.ApplyLowerTransferPatternsOp(max_transfer_rank=1),
        lambda: vector.ApplyLowerTransposePatternsOp(
            lowering_strategy=vector.VectorTransposeLowering.Shuffle16x16 if transpose_16x16
            else vector.VectorTransposeLowering.Shuffle1D),
        vector.ApplyLowerOuterProductPatternsOp,
        # n-D reductions (rfactor merges, row reductions) to 1-D vector.reduction.
        *(lambda op=op: op(lowering_strategy=vector.VectorMultiReductionLowering.InnerReduction)
          for op in (vector.ApplyReorderMultiReductionPatternsOp,
                     vector.ApplyMultiReductionFlatteningPatternsOp,
                     vector.ApplyMultiReductionUnrollingPatternsOp)),
        transform.ApplyCanonicalizationPatternsOp,
    ]
    return group
