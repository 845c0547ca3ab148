"""Layout rewrite of constant weights (paper §4.2): pack a weight to the tile structure at
compile time, before IREE forms dispatches.

A site is a contraction of the model (a linalg op with a reduction loop) with a constant
input (a weight, possibly transposed or reshaped on the way) and a parallel loop `d` that:
indexes the output's innermost (contiguous) dim, indexes the weight, and no other input.
`d` is split into (d / tile, tile); the weight becomes `linalg.pack`ed with the tile
innermost and the outer block of `d` first (a GEMM panel: a tile of `d` is contiguous for
every step of the reduction), and the op reads it in that layout. The output is packed the
same way, which is only a reshape of its innermost dim (IREE's simplify-pack-unpack turns
it into expand/collapse_shape), so nothing but the weight moves. IREE's constant evaluation
then folds the weight's pack into a new constant.

Where the input does not allow it, nothing is rewritten: e.g. NCHW convolutions (the
output's innermost loop is the output width, which the weight does not index; packing the
output channels would need a real transpose of the output), or a matmul of two activations.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from iree.compiler import ir
from iree.compiler.dialects import transform
from iree.compiler.dialects.transform import interpreter, structured
from iree.compiler.passmanager import PassManager

from mlir_ansor.dialect_helpers.linalg_info import generic_forms, linalg_ops
from mlir_ansor.errors import AnsorError
from mlir_ansor.targets import DEFAULT_CPU, Target

SITE_ATTR = "ansor_pack_site"
# Ops through which a weight stays a compile-time constant.
_CONST_THROUGH = ("linalg.", "tensor.expand_shape", "tensor.collapse_shape",
                  "tensor.extract_slice", "tensor.empty", "arith.constant")


def pack_tile(target: Target) -> int:
    """Lanes of the packed loop: one f32 vector of the target (AVX-512: 16, NEON: 4)."""
    return target.f32_lanes


DEFAULT_TILE = pack_tile(DEFAULT_CPU)  # where no target is given (see targets.DEFAULT_CPU)


class LayoutRewriteError(AnsorError):
    """The rewrite could not be applied (the model is then tuned in its own layout)."""


@dataclass(frozen=True)
class PackSite:
    index: int  # position among the model's linalg ops, in program order
    op_name: str  # e.g. linalg.matmul
    loops: int  # loops of the op
    operand: int  # the constant input that is packed
    loop: int  # the parallel loop split into (outer, tile)
    tile: int
    outer_perm: tuple[int, ...]  # of the packed weight's outer dims: the block of `loop` first


def _owner(v: ir.Value) -> ir.Operation | None:
    if isinstance(v, ir.BlockArgument):
        return None
    return getattr(v.owner, "operation", v.owner)


def _constant(v: ir.Value, seen: dict) -> bool:
    """True when `v` is computed from constants only (IREE folds it at compile time)."""
    op = _owner(v)
    if op is None:
        return False
    key = op
    if key in seen:
        return seen[key]
    seen[key] = False  # cycles cannot occur in SSA, but keep the walk finite
    ok = op.name.startswith(_CONST_THROUGH) and all(_constant(o, seen) for o in op.operands)
    seen[key] = ok
    return ok


def _dim(expr: ir.AffineExpr) -> int | None:
    return expr.position if isinstance(expr, ir.AffineDimExpr) else None


def _tokens(s: str) -> list[str]:
    for c in "()+*-,":
        s = s.replace(c, " ")
    return s.split()


def _site(op: ir.Operation, generic: ir.Operation, seen: dict, tile: int,
          index: int) -> PackSite | None:
    iterators = [str(a).split("<")[-1].rstrip(">") for a in generic.attributes["iterator_types"]]
    if "reduction" not in iterators or len(generic.results) != 1:
        return None
    maps = [ir.AffineMapAttr(a).value for a in generic.attributes["indexing_maps"]]
    n_in = len(generic.operands) - 1
    out_t = generic.operands[n_in].type
    if not isinstance(out_t, ir.RankedTensorType) or not out_t.has_static_shape:
        return None
    d = _dim(maps[n_in].results[-1]) if maps[n_in].results else None
    if d is None or iterators[d] != "parallel":
        return None
    extent = out_t.shape[-1]
    if extent % tile or extent < 2 * tile:
        return None
    users = [i for i in range(n_in) if any(_tokens(str(r)).count(f"d{d}") for r in
                                           maps[i].results)]
    if len(users) != 1:
        return None
    w = users[0]
    pos = [p for p, r in enumerate(maps[w].results) if _dim(r) == d]
    w_t = generic.operands[w].type
    if len(pos) != 1 or not isinstance(w_t, ir.RankedTensorType) or not w_t.has_static_shape:
        return None
    if not _constant(op.operands[w], seen):
        return None
    rank = len(maps[w].results)
    perm = (pos[0],) + tuple(j for j in range(rank) if j != pos[0])
    return PackSite(index, op.name, len(iterators), w, d, tile, perm)


def find_sites(model_mlir: str, tile: int = DEFAULT_TILE,
               convolutions: bool = True) -> list[PackSite]:
    """The contractions of the model whose constant weight can be packed (program order);
    `convolutions=False` leaves named convolutions out."""
    with ir.Context():
        forms = generic_forms(model_mlir)
        if forms is None:
            return []  # cannot pair the ops up: leave the layout alone
        seen: dict = {}
        sites = []
        for i, (op, gen) in enumerate(zip(forms.ops, forms.generics)):
            if gen.name != "linalg.generic" or (
                    not convolutions and op.name.startswith("linalg.conv_")):
                continue
            s = _site(op, gen, seen, tile, i)
            if s is not None:
                sites.append(s)
        return sites


def site_signatures(model_mlir: str, sites: Sequence[PackSite]) -> list[str]:
    """Per site: its op and operand types (sites with equal signatures pack alike)."""
    with ir.Context():
        module = ir.Module.parse(model_mlir)  # (kept alive while its ops are read)
        ops = linalg_ops(module)
        return [f"{s.op_name}({', '.join(str(v.type) for v in ops[s.index].operands)})"
                for s in sites]


def _transform_module(sites: Sequence[PackSite]) -> tuple[ir.Module, transform.NamedSequenceOp]:
    any_op = transform.AnyOpType.get()
    module = ir.Module.create()
    module.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
    with ir.InsertionPoint(module.body):
        seq = transform.NamedSequenceOp("__transform_main", [any_op], [],
                                        arg_attrs=[{"transform.readonly": ir.UnitAttr.get()}])
        with ir.InsertionPoint(seq.body):
            for s in sites:
                tag = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), s.index)
                op = structured.MatchOp(any_op, seq.bodyTarget, ops=[s.op_name],
                                        op_attrs={SITE_ATTR: tag}).result
                sizes = [0] * s.loops
                sizes[s.loop] = s.tile
                packed = structured.PackOp(any_op, op, [], static_packed_sizes=sizes).result
                weight = transform.GetProducerOfOperand(any_op, packed, s.operand).result
                structured.PackTransposeOp(any_op, any_op, any_op, weight, packed,
                                           outer_perm=list(s.outer_perm))
            transform.YieldOp([])
    if not module.operation.verify():
        raise LayoutRewriteError("the layout-rewrite script does not verify")
    return module, seq


def rewrite(model_mlir: str, sites: Sequence[PackSite]) -> str:
    """`model_mlir` with the weights of `sites` packed (the other ops untouched)."""
    if not sites:
        return model_mlir
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(model_mlir)
        ops = linalg_ops(module)
        for s in sites:
            if s.index >= len(ops) or ops[s.index].name != s.op_name:
                raise LayoutRewriteError(f"site {s.index} ({s.op_name}) is not in this model")
            ops[s.index].attributes[SITE_ATTR] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), s.index)
        script, seq = _transform_module(sites)
        cleanup = PassManager.parse("builtin.module(canonicalize,"
                                    "iree-global-opt-simplify-pack-unpack,canonicalize)")
        try:
            interpreter.apply_named_sequence(module.operation, seq, script)
            cleanup.run(module.operation)
        # What the bindings raise when a transform or pass fails on the payload (the
        # message names it); anything else is our bug and propagates.
        except (ValueError, ir.MLIRError) as e:
            raise LayoutRewriteError(f"packing the weights failed: {e}") from e
        left = [o for o in linalg_ops(module) if SITE_ATTR in o.attributes]
        if left:
            raise LayoutRewriteError(f"{len(left)} sites were not packed")
        unpacks = sum(1 for o in linalg_ops(module) if o.name == "linalg.unpack")
        if unpacks:
            raise LayoutRewriteError("an output pack did not fold into a reshape")
        if not module.operation.verify():
            raise LayoutRewriteError("the rewritten model does not verify")
        return str(module)
