"""Which 3x3 convolutions IREE computes by Winograd: `__winograd_conv` marks.

IREE 3.13's preprocessing pass `iree-linalg-ext-convert-conv2d-to-winograd` rewrites a
marked `linalg.conv_2d_nhwc_hwcf` or `linalg.conv_2d_nchw_fchw` (3x3 filter, stride 1,
dilation 1, static shapes) into Winograd F(6x6, 3x3): a filter transform (folded at compile
time for a constant weight), an input transform of 8x8 tiles, a batch matmul over the 64
tile positions and an output transform. The batch matmul does 36*9/64 ~ 5x fewer
multiplications than the direct convolution on whole 6x6 tiles, so it can outrun a direct
kernel at the machine's FMA peak; the transforms are memory passes, and images whose
output is not a multiple of 6 compute a padded one (7x7 -> 12x12).

IREE's rewrite drops the convolution's initial value: a conv that accumulates into a bias
(torch-mlir's form of nn.Conv2d with bias) came out without it. A marked conv whose init
is not a zero fill is therefore split first: the conv accumulates into a zero fill and a
`linalg.generic` adds the old init after it (IREE fuses it with what follows).

A site is addressed by its position among the model's linalg ops in program order, as
data_tiling_hints' sites are, so a site list applies to the model text it was found on.
The split adds ops: other sites (data tiling's hints) are found on the marked text.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from iree.compiler import ir
from iree.compiler.dialects import arith, linalg, tensor

from mlir_ansor.dialect_helpers.linalg_info import linalg_ops
from mlir_ansor.errors import AnsorError

WINOGRAD_ATTR = "__winograd_conv"
# Only marked convolutions are rewritten (without the pass option replace-all-convs).
WINOGRAD_FLAGS = ("--iree-preprocessing-pass-pipeline=builtin.module(util.func("
                  "iree-linalg-ext-convert-conv2d-to-winograd))",)
_CONVS = {"linalg.conv_2d_nhwc_hwcf": (0, 1), "linalg.conv_2d_nchw_fchw": (2, 3)}


class WinogradError(AnsorError):
    """A Winograd site list that does not fit the model text (the message says why)."""


@dataclass(frozen=True)
class WinogradSite:
    index: int  # position among the model's linalg ops (program order)
    signature: str  # op name and operand types: sites of one signature are decided together


def _all_ones(attr: ir.Attribute | None) -> bool:
    return attr is None or all(int(v) == 1 for v in ir.DenseIntElementsAttr(attr))


def _eligible(op: ir.Operation) -> bool:
    kernel_dims = _CONVS.get(op.name)
    if kernel_dims is None:
        return False
    attrs = op.attributes
    if not (_all_ones(attrs["strides"] if "strides" in attrs else None)
            and _all_ones(attrs["dilations"] if "dilations" in attrs else None)):
        return False
    types = [v.type for v in op.operands if isinstance(v.type, ir.RankedTensorType)]
    if len(types) != 3 or not all(t.has_static_shape for t in types):
        return False
    if not all(isinstance(t.element_type, ir.F32Type) for t in types):
        return False  # (F(6x6, 3x3) loses too much precision below f32)
    kh, kw = (types[1].shape[d] for d in kernel_dims)
    return (kh, kw) == (3, 3)


def _zero_fill(value: ir.Value) -> bool:
    """Whether `value` is a linalg.fill of the constant 0.0."""
    owner = value.owner
    if not isinstance(owner, ir.Operation):
        owner = getattr(owner, "operation", None)
    if owner is None or owner.name != "linalg.fill":
        return False
    scalar = owner.operands[0].owner
    scalar = getattr(scalar, "operation", scalar)
    if not isinstance(scalar, ir.Operation) or scalar.name != "arith.constant":
        return False
    attr = scalar.attributes["value"]
    return isinstance(attr, ir.FloatAttr) and attr.value == 0.0


def _split_init(op: ir.Operation) -> None:
    """`op` accumulates into a zero fill; a generic after it adds its old init."""
    init = op.operands[2]
    t = init.type
    et, rank = t.element_type, len(t.shape)
    identity = ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    with ir.InsertionPoint(op), op.location:
        zero = arith.ConstantOp(et, ir.FloatAttr.get(et, 0.0))
        fill = linalg.fill(zero.result, outs=[tensor.EmptyOp(t.shape, et).result])
        add = linalg.GenericOp([t], [op.results[0], init], [tensor.EmptyOp(t.shape, et).result],
                               ir.ArrayAttr.get([identity] * 3),
                               ir.ArrayAttr.get([parallel] * rank))
        body = add.regions[0].blocks.append(et, et, et)
        with ir.InsertionPoint(body):
            linalg.YieldOp([arith.AddFOp(body.arguments[0], body.arguments[1]).result])
    op.move_before(add)
    for use in list(op.results[0].uses):
        if use.owner != add.operation:
            use.owner.operands[use.operand_number] = add.result
    op.operands[2] = fill


def winograd_sites(model_mlir: str) -> list[WinogradSite]:
    """The convolutions IREE's Winograd rewrite takes, in program order."""
    with ir.Context():
        module = ir.Module.parse(model_mlir)  # (must outlive its ops)
        ops = linalg_ops(module)
        return [WinogradSite(i, f"{op.name}({', '.join(str(v.type) for v in op.operands)})")
                for i, op in enumerate(ops) if _eligible(op)]


def with_winograd(model_mlir: str, sites: Sequence[int]) -> str:
    """`model_mlir` with the Winograd mark on the convolutions at `sites` (positions as
    `winograd_sites` gives them); verified after the edit."""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(model_mlir)
        ops = linalg_ops(module)  # (positions before any split)
        for i in sites:
            if not 0 <= i < len(ops):
                raise WinogradError(f"Winograd site {i} outside the model's {len(ops)} "
                                    "linalg ops (a layout of another model?)")
            if not _eligible(ops[i]):
                raise WinogradError(f"Winograd site {i} is a {ops[i].name}, not a 3x3 "
                                    "stride-1 f32 convolution with static shapes")
        for i in sites:
            if not _zero_fill(ops[i].operands[2]):
                _split_init(ops[i])
            ops[i].attributes[WINOGRAD_ATTR] = ir.UnitAttr.get()
        if not module.operation.verify():
            raise WinogradError("the model does not verify with its Winograd marks")
        return str(module)
