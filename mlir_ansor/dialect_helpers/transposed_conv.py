"""Transposed convolutions without the zeros: the sub-pixel decomposition.

torch-mlir imports `ConvTranspose{1,2,3}d` with stride s as a stride-1 convolution over the
input spread out with zeros (`tensor.insert_slice` with strides s into a zero-filled tensor)
and a flipped kernel: of every s^d products, all but one multiply a zero (a 2-D stride-2
layer does 4x the work it needs; kernels run at the peak on the zeros). Here each such
convolution becomes one convolution per output phase (r_1..r_d, o = s*q + r): the phase
reads the original input (padded or cut as it needs) with the kernel taps that meet
non-zeros, k = k0 + s*j; the phases' outputs interleave back through contiguous slices, an
expand and a transpose (`_decompose`). The phases partition the output, so the result is
the same numbers (each output sums the same products, in the same kernel order).

For one spatial dim, Z[off + s*i] = X[i] (zero elsewhere), O[o] = sum_k W[k] Z[o + k]:
with o = s*q + r the taps that meet X are k = k0 + s*j, k0 = (off - r) mod s, and
Z[o + k] = X[q + j + d] with d = (r + k0 - off) / s.
"""
from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir
from iree.compiler.dialects import arith, linalg, tensor

from mlir_ansor.dialect_helpers.activation_layout import transposed
from mlir_ansor.dialect_helpers.dispatch import walk_ops
from mlir_ansor.dialect_helpers.tensor_building import (defining, is_zero_fill, padded,
                                                        reassociation, sliced)

# Channels-first convs by rank of their spatial part (torch-mlir's import of conv{1,2,3}d).
_CONVS = {"linalg.conv_1d_ncw_fcw": linalg.conv_1d_ncw_fcw,
          "linalg.conv_2d_nchw_fchw": linalg.conv_2d_nchw_fchw,
          "linalg.conv_3d_ncdhw_fcdhw": linalg.conv_3d_ncdhw_fcdhw}


@dataclass(frozen=True)
class _Phase:
    """One output phase along one spatial dim."""

    r: int  # output positions r, r + s, ...
    k0: int  # first kernel tap that meets the input
    taps: int  # J taps: k0, k0 + s, ...
    d: int  # input offset: X[q + j + d]


def _phases(off: int, s: int, k: int, n_out: int) -> list[_Phase]:
    """The phases of one spatial dim: input spread from `off` with stride `s`, kernel size
    `k`, `n_out` output positions."""
    out = []
    for r in range(min(s, n_out)):
        k0 = (off - r) % s
        taps = max(0, -(-(k - k0) // s))
        out.append(_Phase(r, k0, taps, (r + k0 - off) // s))
    return out


def _ints(attr: ir.Attribute) -> list[int]:
    return [int(x) for x in ir.DenseIntElementsAttr(attr)]


def _spread_input(conv: ir.Operation) -> ir.Operation | None:
    """The `tensor.insert_slice` that spreads the input of `conv` with zeros, if it has
    one that this rewrite can take (static shapes, unit strides on batch and channels)."""
    owner = defining(conv.operands[0])
    if owner is None or owner.name != "tensor.insert_slice":
        return None
    if len(owner.operands) != 2 or not is_zero_fill(owner.operands[1]):
        return None  # dynamic offsets / sizes / strides, or not into zeros
    strides = list(ir.DenseI64ArrayAttr(owner.attributes["static_strides"]))
    if strides[:2] != [1, 1] or all(s == 1 for s in strides[2:]):
        return None
    offsets = list(ir.DenseI64ArrayAttr(owner.attributes["static_offsets"]))
    if offsets[:2] != [0, 0]:
        return None
    shapes = [ir.RankedTensorType(v.type) for v in (owner.operands[0], owner.results[0])]
    if not all(t.has_static_shape for t in shapes):
        return None
    return owner


def _slice_reduced(value: ir.Value, offsets: list[int], sizes: list[int],
                   shape: list[int]) -> ir.Value:
    """A unit-stride slice of `value` with its unit leading dims dropped (`shape`)."""
    t = ir.RankedTensorType(value.type)
    return tensor.extract_slice(ir.RankedTensorType.get(shape, t.element_type), value, [],
                                [], [], offsets, sizes, [1] * len(sizes))


def _decompose(conv: ir.Operation, spread: ir.Operation) -> None:
    """Replace `conv` by its phases. With Q = ceil(O / s) outputs per phase and dim (the
    last phases compute up to one extra position each, cut at the end), each phase
    accumulates into zeros, the phases are stacked as [s.., N, F, Q..] and transposed and
    collapsed into the output padded to Q*s: contiguous slices, no strided copies. What
    `conv` accumulated into (a bias) is added after."""
    x = spread.operands[0]
    w, init = conv.operands[1], conv.operands[2]
    x_shape = ir.RankedTensorType(x.type).shape
    w_shape = ir.RankedTensorType(w.type).shape
    o_shape = ir.RankedTensorType(init.type).shape
    et = ir.RankedTensorType(init.type).element_type
    strides = list(ir.DenseI64ArrayAttr(spread.attributes["static_strides"]))[2:]
    offsets = list(ir.DenseI64ArrayAttr(spread.attributes["static_offsets"]))[2:]
    nd = len(strides)
    q = [-(-o_shape[2 + i] // strides[i]) for i in range(nd)]
    per_dim = [_phases(offsets[i], strides[i], w_shape[2 + i], q[i] * strides[i])
               for i in range(nd)]
    build = _CONVS[conv.name]
    lead = o_shape[:2]
    # [N, F, Q0, s0, Q1, s1, ...] <-> [s0, s1, ..., N, F, Q0, Q1, ...]
    groups = [[0], [1], *([2 + 2 * i, 3 + 2 * i] for i in range(nd))]
    perm = [*(3 + 2 * i for i in range(nd)), 0, 1, *(2 + 2 * i for i in range(nd))]
    back = [perm.index(i) for i in range(len(perm))]
    part_shape = [*lead, *q]
    with ir.InsertionPoint(conv), conv.location:
        zero = arith.constant(et, 0.0)
        # The kernel taps by phase, k = s*j + t, as [t0, t1, ..., F, C, J0, J1, ...]: a
        # phase's taps (t = k0) are then a contiguous slice of a tensor computed from the
        # constant weight once (IREE 3.13 failed to distribute a conv whose weight was a
        # strided slice).
        jmax = [-(-w_shape[2 + i] // strides[i]) for i in range(nd)]
        w_split_shape = [*w_shape[:2], *(v for i in range(nd) for v in (jmax[i], strides[i]))]
        w_p = padded(w, [0] * (2 + nd),
                      [0, 0, *(jmax[i] * strides[i] - w_shape[2 + i] for i in range(nd))])
        w_t = transposed(tensor.expand_shape(ir.RankedTensorType.get(w_split_shape, et), w_p,
                                             reassociation(groups), [], w_split_shape),
                         perm)
        stacked = tensor.EmptyOp([*strides, *part_shape], et).result
        combos: list[list[_Phase]] = [[]]
        for phases in per_dim:
            combos = [c + [p] for c in combos for p in phases]
        for combo in combos:
            at = [*(p.r for p in combo), *([0] * (2 + nd))]
            sizes = [*([1] * nd), *part_shape]
            part = linalg.fill(zero, outs=[tensor.EmptyOp(part_shape, et).result])
            if all(p.taps for p in combo):  # else no tap meets the input: the init stays
                # P[u] = X[u + d], u < Q + J - 1: pad what falls outside X, cut the rest.
                low = [0, 0, *(max(0, -p.d) for p in combo)]
                high = [0, 0, *(max(0, q[i] + p.taps - 1 + p.d - x_shape[2 + i])
                                for i, p in enumerate(combo))]
                x_part = sliced(padded(x, low, high),
                                [0, 0, *(p.d + lo for p, lo in zip(combo, low[2:]))],
                                [*x_shape[:2], *(q[i] + p.taps - 1
                                                 for i, p in enumerate(combo))],
                                [1] * (2 + nd))
                w_part = _slice_reduced(
                    w_t, [*(p.k0 for p in combo), *([0] * (2 + nd))],
                    [*([1] * nd), *w_shape[:2], *(p.taps for p in combo)],
                    [*w_shape[:2], *(p.taps for p in combo)])
                part = build(x_part, w_part, outs=[part], strides=[1] * nd,
                             dilations=[1] * nd)
            stacked = tensor.insert_slice(part, stacked, [], [], [], at, sizes,
                                          [1] * len(sizes))
        merged = tensor.collapse_shape(
            ir.RankedTensorType.get([*lead, *(q[i] * strides[i] for i in range(nd))], et),
            transposed(stacked, back), reassociation(groups))
        result = sliced(merged, [0] * (2 + nd), list(o_shape), [1] * (2 + nd))
        if not is_zero_fill(init):  # what the conv accumulated into (a bias): added after
            added = linalg.elementwise(result, init,
                                       outs=[tensor.EmptyOp(list(o_shape), et).result],
                                       kind=linalg.ElementwiseKind.add)
            result = added if isinstance(added, ir.Value) else added.results[0]
    conv.results[0].replace_all_uses_with(result)
    conv.erase()
    fill = defining(spread.operands[1])
    for op in (spread, fill):  # the zero-spread input, unless something else reads it
        if op is not None and not any(True for _ in op.results[0].uses):
            op.erase()


def decompose_transposed_convs(module_text: str) -> tuple[str, int]:
    """`module_text` with every zero-spread stride-1 convolution (a transposed conv as
    torch-mlir imports it) split into its output phases, and how many were split. Convs of
    another form are left as they are."""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(module_text)
        done = 0
        for name in _CONVS:
            for conv in walk_ops(module.operation, name):
                if any(v != 1 for k in ("strides", "dilations")
                       for v in _ints(conv.attributes[k])):
                    continue
                spread = _spread_input(conv)
                if spread is None:
                    continue
                _decompose(conv, spread)
                done += 1
        if not done:
            return module_text, 0
        if not module.operation.verify():
            raise ValueError("the sub-pixel decomposition of a transposed convolution does "
                             "not verify (a bug of mlir-ansor)")
        return str(module), done
