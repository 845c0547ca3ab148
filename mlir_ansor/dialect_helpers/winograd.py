"""3x3 convolutions by Winograd F(6x6, 3x3), written out in linalg.

A 3x3 stride-1 f32 convolution with static shapes (`linalg.conv_2d_nhwc_hwcf` or
`linalg.conv_2d_nchw_fchw`) at a chosen site is replaced by Winograd F(6x6, 3x3) made of
plain linalg ops, so that every step is a task the tuner searches like any other:
- the input, zero-padded to whole 6x6 blocks, is viewed as blocks; each 8x8 input tile is
  its block plus two rows / columns of the next, so the input transform V = B^T d B is two
  contractions (rows, then columns), each summing its block's and its neighbour's terms
  (B^T's columns split in two) and reading both through slices: every indexing map stays a
  projected permutation, which the vectorizer needs (an 8-wide window at stride 6 is not);
- the filter transform U = G g G^T, two contractions on the weight (a constant weight is
  folded by IREE's compile-time evaluation);
- a batch matmul over the 64 tile positions, [64, tiles, C] x [64, C, F];
- the output transform Y = A^T M A, two contractions, then a reshape to the image (and a
  slice where the output is not a multiple of 6).
The batch matmul does 36*9/64 ~ 5x fewer multiplications than the direct convolution; the
transforms are cheap passes over memory. An earlier form marked the convolutions for IREE's
own rewrite (`iree-linalg-ext-convert-conv2d-to-winograd`), whose input and output
transforms are IREE ops the tuner cannot search: on the Zen 5 VM they took about 1 ms of the
1.30 ms the tuned `resnet_block` ran in its Winograd form (its direct form: 0.98 ms).

The rewrite computes into a zero accumulator: a convolution whose init is not a zero fill
(torch-mlir's form of nn.Conv2d with bias) is split first (the conv accumulates into a zero
fill and a `linalg.generic` adds the old init after it; IREE fuses it with what follows).

A site is addressed by its position among the model's linalg ops in program order, as
data_tiling_hints' sites are, so a site list applies to the model text it was found on.
The rewrite adds ops: other sites (data tiling's hints) are found on the rewritten text.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from iree.compiler import ir
from iree.compiler.dialects import arith, linalg, tensor

from mlir_ansor.dialect_helpers.linalg_info import linalg_ops
from mlir_ansor.dialect_helpers.tensor_building import (defining, is_zero_fill, padded,
                                                        reassociation, sliced, zeros, zero_init)
from mlir_ansor.errors import AnsorError

_CONVS = {"linalg.conv_2d_nhwc_hwcf": (0, 1), "linalg.conv_2d_nchw_fchw": (2, 3)}
# Offered where it is likely to pay: the 6x6 tiles overhang the image by at most 2x of its
# area (7x7: 12x12, 2.9x, keeps under 1.7x of the 5x fewer multiplications; 14x14: 1.65x),
# and there are at least 16 tiles, the rows of each of the batch matmul's 64 products
# (ResNet-50's 14x14 convs at batch 1: 9; at batch 16: 144, where a tuned Winograd form
# ran C2D-b16 1.5x faster than the tuned direct conv, results.md).
MAX_TILE_WASTE = 2.0
MIN_TILES = 16
# On the rewrite's contractions: not data-tiling sites (data_tiling_hints), so that a
# model's contractions stay the same in both forms, and the tuner tunes these itself.
WINOGRAD_OP_ATTR = "__winograd"

# F(6x6, 3x3) with the points 0, +-1, +-2, +-1/2 (Lavin and Gray): Y = A^T[(G g G^T) *
# (B^T d B)]A is the 6x6 correlation of an 8x8 tile d with a 3x3 filter g.
WINOGRAD_BT = np.array([
    [1, 0, -21 / 4, 0, 21 / 4, 0, -1, 0],
    [0, 1, 1, -17 / 4, -17 / 4, 1, 1, 0],
    [0, -1, 1, 17 / 4, -17 / 4, -1, 1, 0],
    [0, 1 / 2, 1 / 4, -5 / 2, -5 / 4, 2, 1, 0],
    [0, -1 / 2, 1 / 4, 5 / 2, -5 / 4, -2, 1, 0],
    [0, 2, 4, -5 / 2, -5, 1 / 2, 1, 0],
    [0, -2, 4, 5 / 2, -5, -1 / 2, 1, 0],
    [0, -1, 0, 21 / 4, 0, -21 / 4, 0, 1]])
WINOGRAD_G = np.array([
    [1, 0, 0], [-2 / 9, -2 / 9, -2 / 9], [-2 / 9, 2 / 9, -2 / 9], [1 / 90, 1 / 45, 2 / 45],
    [1 / 90, -1 / 45, 2 / 45], [32 / 45, 16 / 45, 8 / 45], [32 / 45, -16 / 45, 8 / 45],
    [0, 0, 1]])
WINOGRAD_AT = np.array([
    [1, 1, 1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 1 / 2, -1 / 2, 0],
    [0, 1, 1, 4, 4, 1 / 4, 1 / 4, 0], [0, 1, -1, 8, -8, 1 / 8, -1 / 8, 0],
    [0, 1, 1, 16, 16, 1 / 16, 1 / 16, 0], [0, 1, -1, 32, -32, 1 / 32, -1 / 32, 1]])
# An 8-row tile starting at block t covers block t's 6 rows and the first 2 of block t+1:
# B^T's first 6 columns weigh the block, its last 2 (zero-padded to 6) the next block.
_BT_OWN = WINOGRAD_BT[:, :6]
_BT_NEXT = np.concatenate([WINOGRAD_BT[:, 6:], np.zeros((8, 4))], axis=1)


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


def _worth_it(op: ir.Operation) -> bool:
    """An eligible convolution with enough tiles that do not overhang its image by much."""
    shape = op.results[0].type.shape
    oh, ow = shape[2:4] if op.name == "linalg.conv_2d_nchw_fchw" else shape[1:3]
    tiles = shape[0] * math.ceil(oh / 6) * math.ceil(ow / 6)
    return tile_waste(oh, ow) <= MAX_TILE_WASTE and tiles >= MIN_TILES


def tile_waste(oh: int, ow: int) -> float:
    """The area whole 6x6 tiles compute over the output's (14x14: 18x18, 1.65)."""
    return math.ceil(oh / 6) * math.ceil(ow / 6) * 36 / (oh * ow)


def _constant(m: np.ndarray, et: ir.Type) -> ir.Value:
    a = np.ascontiguousarray(m, dtype=np.float32)
    t = ir.RankedTensorType.get(list(a.shape), et)
    return arith.ConstantOp(t, ir.DenseElementsAttr.get(a, type=t)).result


def _dims(n_loops: int, dims: Sequence[int]) -> ir.AffineMapAttr:
    return ir.AffineMapAttr.get(ir.AffineMap.get(
        n_loops, 0, [ir.AffineDimExpr.get(d) for d in dims]))


def _contraction(terms: Sequence[Sequence[tuple[ir.Value, Sequence[int]]]],
                 out_shape: Sequence[int], n_loops: int, et: ir.Type) -> ir.Value:
    """A generic summing, over its last loop, the products of each term's two operands
    (operand, the loops its dimensions are); the output's dimensions are the other loops
    in order."""
    ins = [v for term in terms for v, _ in term]
    maps = [_dims(n_loops, d) for term in terms for _, d in term]
    maps.append(_dims(n_loops, range(n_loops - 1)))
    kinds = ["parallel"] * (n_loops - 1) + ["reduction"]
    out_t = ir.RankedTensorType.get(list(out_shape), et)
    op = linalg.GenericOp(
        [out_t], ins, [zeros(out_shape, et)], ir.ArrayAttr.get(maps),
        ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{k}>") for k in kinds]))
    op.operation.attributes[WINOGRAD_OP_ATTR] = ir.UnitAttr.get()
    body = op.regions[0].blocks.append(*([et] * (len(ins) + 1)))
    with ir.InsertionPoint(body):
        total = None
        for k in range(0, len(ins), 2):
            product = arith.MulFOp(body.arguments[k], body.arguments[k + 1]).result
            total = product if total is None else arith.AddFOp(total, product).result
        # (one add into the accumulator: the vectorizer's reduction match takes one combiner)
        linalg.YieldOp([arith.AddFOp(body.arguments[len(ins)], total).result])
    return op.result


def _expand(v: ir.Value, shape: Sequence[int], groups: Sequence[Sequence[int]],
            et: ir.Type) -> ir.Value:
    return tensor.ExpandShapeOp(ir.RankedTensorType.get(list(shape), et), v,
                                reassociation(groups), [], list(shape)).result


def _collapse(v: ir.Value, shape: Sequence[int], groups: Sequence[Sequence[int]],
              et: ir.Type) -> ir.Value:
    return tensor.CollapseShapeOp(ir.RankedTensorType.get(list(shape), et), v,
                                  reassociation(groups)).result


def _rewrite(op: ir.Operation) -> None:
    """Replace the convolution `op` (eligible, zero-filled init) by F(6x6, 3x3) in linalg."""
    nchw = op.name == "linalg.conv_2d_nchw_fchw"
    x, w = op.operands[0], op.operands[1]
    out_t = op.results[0].type
    et = out_t.element_type
    if nchw:
        n, c, hp, wp = x.type.shape
        _, f, oh, ow = out_t.shape
    else:
        n, hp, wp, c = x.type.shape
        _, oh, ow, f = out_t.shape
    th, tw = math.ceil(oh / 6), math.ceil(ow / 6)
    tiles = n * th * tw
    with ir.InsertionPoint(op), op.location:
        bt_own, bt_next = _constant(_BT_OWN, et), _constant(_BT_NEXT, et)
        g, at = _constant(WINOGRAD_G, et), _constant(WINOGRAD_AT, et)
        # The input zero-padded to TH+1 x TW+1 blocks of 6x6 (the last tile's next block).
        ph, pw = (th + 1) * 6, (tw + 1) * 6
        high = [0, 0, ph - hp, pw - wp] if nchw else [0, ph - hp, pw - wp, 0]
        pad = padded(x, [0] * 4, high)
        if nchw:  # [N, C, TH+1, 6, TW+1, 6]
            blocks = _expand(pad, [n, c, th + 1, 6, tw + 1, 6],
                             [[0], [1], [2, 3], [4, 5]], et)
            own = sliced(blocks, [0] * 6, [n, c, th, 6, tw + 1, 6])
            nxt = sliced(blocks, [0, 0, 1, 0, 0, 0], [n, c, th, 6, tw + 1, 6])
            x_dims = (0, 5, 1, 6, 3, 4)
        else:  # [N, TH+1, 6, TW+1, 6, C]
            blocks = _expand(pad, [n, th + 1, 6, tw + 1, 6, c],
                             [[0], [1, 2], [3, 4], [5]], et)
            own = sliced(blocks, [0] * 6, [n, th, 6, tw + 1, 6, c])
            nxt = sliced(blocks, [0, 1, 0, 0, 0, 0], [n, th, 6, tw + 1, 6, c])
            x_dims = (0, 1, 6, 3, 4, 5)
        # Rows, A[n, th, i, tw', m, c]; loops (n, th, i, tw', m, c | k).
        rows = _contraction([[(bt_own, (2, 6)), (own, x_dims)],
                             [(bt_next, (2, 6)), (nxt, x_dims)]],
                            [n, th, 8, tw + 1, 6, c], 7, et)
        # Columns, V[i, j, n, th, tw, c]; loops (i, j, n, th, tw, c | m).
        own = sliced(rows, [0] * 6, [n, th, 8, tw, 6, c])
        nxt = sliced(rows, [0, 0, 0, 1, 0, 0], [n, th, 8, tw, 6, c])
        v = _contraction([[(own, (2, 3, 0, 4, 6, 5)), (bt_own, (1, 6))],
                          [(nxt, (2, 3, 0, 4, 6, 5)), (bt_next, (1, 6))]],
                         [8, 8, n, th, tw, c], 7, et)
        v = _collapse(v, [64, tiles, c], [[0, 1], [2, 3, 4], [5]], et)
        # Filter, U[i, j, c, f]; loops (i, l, c, f | k), then (i, j, c, f | l).
        w_dims = (3, 2, 4, 1) if nchw else (4, 1, 2, 3)
        half = _contraction([[(g, (0, 4)), (w, w_dims)]], [8, 3, c, f], 5, et)
        u = _contraction([[(half, (0, 4, 2, 3)), (g, (1, 4))]], [8, 8, c, f], 5, et)
        u = _collapse(u, [64, c, f], [[0, 1], [2], [3]], et)
        m = linalg.batch_matmul(v, u, outs=[zeros([64, tiles, f], et)])
        m.owner.attributes[WINOGRAD_OP_ATTR] = ir.UnitAttr.get()
        m = _expand(m, [8, 8, n, th, tw, f], [[0, 1], [2, 3, 4], [5]], et)
        # Output rows, R[n, th, a, tw, j, f]; loops (n, th, a, tw, j, f | i).
        r = _contraction([[(at, (2, 6)), (m, (6, 4, 0, 1, 3, 5))]],
                         [n, th, 6, tw, 8, f], 7, et)
        if nchw:  # Y[n, f, th, a, tw, b]; loops (n, f, th, a, tw, b | j)
            y = _contraction([[(r, (0, 2, 3, 4, 6, 1)), (at, (5, 6))]],
                             [n, f, th, 6, tw, 6], 7, et)
            y = _collapse(y, [n, f, th * 6, tw * 6], [[0], [1], [2, 3], [4, 5]], et)
            image = [n, f, oh, ow]
        else:  # Y[n, th, a, tw, b, f]; loops (n, th, a, tw, b, f | j)
            y = _contraction([[(r, (0, 1, 2, 3, 6, 5)), (at, (4, 6))]],
                             [n, th, 6, tw, 6, f], 7, et)
            y = _collapse(y, [n, th * 6, tw * 6, f], [[0], [1, 2], [3, 4], [5]], et)
            image = [n, oh, ow, f]
        if (th * 6, tw * 6) != (oh, ow):
            y = sliced(y, [0] * 4, image)
    init = defining(op.operands[2])
    op.results[0].replace_all_uses_with(y)
    op.erase()
    # The zero fill the convolution accumulated into (and its empty tensor) are dead now:
    # erased, so that the model's linalg ops pair with their generic forms (a pass that
    # generalizes drops dead ops).
    while init is not None and init.name in ("linalg.fill", "tensor.empty"):
        if any(True for _ in init.results[0].uses):
            break
        nxt = defining(init.operands[-1]) if init.name == "linalg.fill" else None
        init.erase()
        init = nxt


def winograd_sites(model_mlir: str) -> list[WinogradSite]:
    """The convolutions the Winograd rewrite is offered, in program order: those it can
    take with at least MIN_TILES tiles that overhang the image by at most MAX_TILE_WASTE
    (with_winograd takes the others too, where asked)."""
    with ir.Context():
        module = ir.Module.parse(model_mlir)  # (must outlive its ops)
        ops = linalg_ops(module)
        return [WinogradSite(i, f"{op.name}({', '.join(str(v.type) for v in op.operands)})")
                for i, op in enumerate(ops) if _eligible(op) and _worth_it(op)]


def with_winograd(model_mlir: str, sites: Sequence[int]) -> str:
    """`model_mlir` with the convolutions at `sites` (positions as `winograd_sites` gives
    them) computed by Winograd F(6x6, 3x3) in linalg; verified after the edit."""
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
            if not is_zero_fill(ops[i].operands[2]):
                zero_init(ops[i])
            _rewrite(ops[i])
        if not module.operation.verify():
            raise WinogradError("the model does not verify after the Winograd rewrite")
        return str(module)
