"""Channels-last activations: a whole-model layout alternative for channels-first (NCW,
NCHW, NCDHW) convolutions.

torch-mlir imports convolutions in PyTorch's NCHW layout (`linalg.conv_2d_nchw_fchw`): the
output's innermost, contiguous dim is the width, so vector lanes run along short rows (56,
28, 14, 7 wide) and the weight does not index them. IREE's preprocessing pass
`iree-preprocessing-convert-conv-to-channels-last` rewrites every such op to NHWC / HWCF with
transposes around it and propagates them, so that convs and the elementwise ops between
them meet in one layout and the transposes cancel (only the model's inputs, outputs and ops
the pass does not convert, e.g. NCHW pooling, keep one). The output channel is then the
innermost dim: the lanes a register tile vectorizes, indexed by the (constant) weight.

Whether that is faster depends on the model and on what runs each dispatch, so the tuner
measures both forms (tuner/layouts.py) and keeps the faster.
"""
from __future__ import annotations

from typing import Callable

from iree.compiler import ir
from iree.compiler.dialects import arith, linalg, tensor
from iree.compiler.passmanager import PassManager

from mlir_ansor.dialect_helpers.dispatch import defined_within, walk_ops
from mlir_ansor.dialect_helpers.layout_rewrite import LayoutRewriteError
from mlir_ansor.dialect_helpers.tensor_building import reassociation, reassociation_groups

# The named channels-first convolutions torch-mlir emits that the pass converts (any conv
# with one input and one output channel dim: 1-, 2- and 3-D; not grouped or depthwise ones,
# which keep their layout). A 2-D one becomes `linalg.conv_2d_nhwc_hwcf`, the others a
# `linalg.generic` with the channels innermost.
_CHANNELS_FIRST = ("linalg.conv_1d_ncw_fcw", "linalg.conv_2d_nchw_fchw",
                   "linalg.conv_3d_ncdhw_fcdhw")


# Depthwise and grouped convolutions, which IREE's pass leaves alone (their channel dim is
# in input, filter and output alike): rewritten here to their channels-last named op, with
# a transpose of each operand and of the result (IREE folds the constant filter's and
# cancels opposite transposes where they meet). Op -> (channels-last builder, input,
# filter and output permutations).
_Builder = Callable[..., ir.Value]
_GROUPED: dict[str, tuple[_Builder, list[int], list[int], list[int]]] = {
    "linalg.depthwise_conv_1d_ncw_cw":
        (linalg.depthwise_conv_1d_nwc_wc, [0, 2, 1], [1, 0], [0, 2, 1]),
    "linalg.depthwise_conv_2d_nchw_chw":
        (linalg.depthwise_conv_2d_nhwc_hwc, [0, 2, 3, 1], [1, 2, 0], [0, 2, 3, 1]),
    "linalg.depthwise_conv_3d_ncdhw_cdhw":
        (linalg.depthwise_conv_3d_ndhwc_dhwc, [0, 2, 3, 4, 1], [1, 2, 3, 0], [0, 2, 3, 4, 1]),
    "linalg.conv_2d_ngchw_gfchw":
        (linalg.conv_2d_nhwgc_gfhwc, [0, 3, 4, 1, 2], [0, 1, 3, 4, 2], [0, 3, 4, 1, 2]),
    "linalg.conv_2d_ngchw_fgchw":
        (linalg.conv_2d_nhwgc_gfhwc, [0, 3, 4, 1, 2], [1, 0, 3, 4, 2], [0, 3, 4, 1, 2]),
}


def _count(module: ir.Module) -> int:
    return sum(len(walk_ops(module.operation, name))
               for name in (*_CHANNELS_FIRST, *_GROUPED))


def transposed(value: ir.Value, perm: list[int]) -> ir.Value:
    """`value` permuted by a `linalg.transpose` built at the insertion point (a dynamic
    dim's size read with tensor.dim)."""
    t = ir.RankedTensorType(value.type)
    sizes: list = [tensor.DimOp(value, arith.ConstantOp(ir.IndexType.get(), p).result).result
                   if t.is_dynamic_dim(p) else t.shape[p] for p in perm]
    empty = tensor.EmptyOp(sizes, t.element_type).result
    out = linalg.transpose(value, outs=[empty], permutation=perm)
    return out if isinstance(out, ir.Value) else out.results[0]


# A grouped conv's filter with the output channels innermost, [G, KH, KW, C, F], from
# torch-mlir's two forms: the register tile's lanes run along F, and the named op's filter
# (gfhwc) holds F outermost but G, a load along it a gather (GRP ran at 54% of the peak).
_GROUPED_FILTER_LAST = {"linalg.conv_2d_ngchw_gfchw": [0, 3, 4, 2, 1],
                        "linalg.conv_2d_ngchw_fgchw": [1, 3, 4, 2, 0]}


def _grouped_conv_generic(x: ir.Value, w: ir.Value, init: ir.Value, strides: list[int],
                          dilations: list[int]) -> ir.Value:
    """out[n, h, w, g, f] += x[n, h*s + kh*d, w*s + kw*d, g, c] * w[g, kh, kw, c, f], a
    `linalg.generic` (loops n, h, w, g, f, kh, kw, c) on float operands of one type."""
    d = [ir.AffineDimExpr.get(i) for i in range(8)]
    n, oh, ow, g, f, kh, kw, c = d
    maps = [ir.AffineMap.get(8, 0, [n, oh * strides[0] + kh * dilations[0],
                                    ow * strides[1] + kw * dilations[1], g, c]),
            ir.AffineMap.get(8, 0, [g, kh, kw, c, f]),
            ir.AffineMap.get(8, 0, [n, oh, ow, g, f])]
    kinds = ["parallel"] * 5 + ["reduction"] * 3
    op = linalg.GenericOp([init.type], [x, w], [init],
                          ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
                          ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{k}>")
                                            for k in kinds]))
    elem = ir.RankedTensorType(init.type).element_type
    block = op.regions[0].blocks.append(elem, elem, elem)
    with ir.InsertionPoint(block):
        prod = arith.MulFOp(block.arguments[0], block.arguments[1]).result
        linalg.YieldOp([arith.AddFOp(block.arguments[2], prod).result])
    return op.result


def _float_alike(op: ir.Operation) -> bool:
    types = {str(ir.RankedTensorType(v.type).element_type) for v in op.operands}
    return len(types) == 1 and next(iter(types)) in ("f16", "bf16", "f32", "f64")


def _grouped_to_channels_last(module: ir.Module) -> None:
    """Every depthwise / grouped channels-first conv of `module` as its channels-last op
    between transposes (in place; the caller verifies); a float grouped conv as a generic
    with its filter [G, KH, KW, C, F] (`_GROUPED_FILTER_LAST`)."""
    found = [op for name in _GROUPED for op in walk_ops(module.operation, name)]
    for op in found:
        build, p_in, p_filter, p_out = _GROUPED[op.name]
        attrs = {k: [int(x) for x in ir.DenseIntElementsAttr(op.attributes[k])]
                 for k in ("strides", "dilations")}
        back = [p_out.index(i) for i in range(len(p_out))]  # the inverse permutation
        with ir.InsertionPoint(op), op.location:
            x = transposed(op.operands[0], p_in)
            init = transposed(op.operands[2], p_out)
            if op.name in _GROUPED_FILTER_LAST and _float_alike(op):
                w = transposed(op.operands[1], _GROUPED_FILTER_LAST[op.name])
                conv = _grouped_conv_generic(x, w, init, attrs["strides"], attrs["dilations"])
            else:
                conv = build(x, transposed(op.operands[1], p_filter), outs=[init], **attrs)
            result = transposed(conv, back)
        op.results[0].replace_all_uses_with(result)
        op.erase()


def _op_of(value: ir.Value) -> ir.Operation | None:
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def _permutation(op: ir.Operation) -> list[int]:
    return [int(v) for v in ir.DenseI64ArrayAttr(op.attributes["permutation"])]


def _outside_pad_value(pad: ir.Operation) -> ir.Value | None:
    """The value `pad` fills with, if defined outside its region (else None: computed per
    element, which a moved pad could not reuse)."""
    body = pad.regions[0].blocks[0].operations
    value = body[len(body) - 1].operands[0]
    return None if defined_within(value, pad) else value


def _pad_sizes(pad: ir.Operation) -> tuple[list[int], list[int]]:
    return (list(ir.DenseI64ArrayAttr(pad.attributes["static_low"])),
            list(ir.DenseI64ArrayAttr(pad.attributes["static_high"])))


def _padded_with(x: ir.Value, result: ir.Type, low: list[int], high: list[int],
                 value: ir.Value) -> ir.Value:
    """`x` padded to `result` with `value` (built at the insertion point)."""
    rank = len(low)
    pad = tensor.PadOp(result, x, [], [], low, high)
    block = pad.regions[0].blocks.append(*[ir.IndexType.get()] * rank)
    with ir.InsertionPoint(block):
        tensor.YieldOp(value)
    return pad.result


def sink_transposes_below_pads(module: ir.Module) -> int:
    """Rewrite `pad(transpose(x, p))` as `transpose(pad'(x), p)` where only transposes use
    the pad (in place; returns how many). A model exchanging its images channels-last
    (tuner/io_layout.py) enters as NHWC -> transpose -> NCHW pad -> conv; once the conv is
    channels-last its own input transpose follows the pad, and with the pad moved the two
    transposes meet and cancel (canonicalize) instead of IREE fusing them into the conv's
    input map (strided loads). Pads of dynamic shapes or widths, or with a padding value
    computed in the region, are left alone."""
    moved = 0
    for pad in walk_ops(module.operation, "tensor.pad"):
        src = _op_of(pad.operands[0])
        if src is None or src.name != "linalg.transpose" or len(pad.operands) != 1:
            continue
        users = [u.owner for u in pad.results[0].uses]
        if not users or any(u.name != "linalg.transpose" for u in users):
            continue
        value = _outside_pad_value(pad)
        if value is None:
            continue
        perm = _permutation(src)
        low, high = _pad_sizes(pad)
        x = src.operands[0]
        xt = ir.RankedTensorType(x.type)
        if not xt.has_static_shape:  # (the padded shape below is static arithmetic)
            continue
        low_x, high_x = [0] * len(perm), [0] * len(perm)
        for i, d in enumerate(perm):  # result dim i is x's dim perm[i]
            low_x[d], high_x[d] = low[i], high[i]
        shape = [xt.shape[d] + low_x[d] + high_x[d] for d in range(len(perm))]
        with ir.InsertionPoint(pad), pad.location:
            padded = _padded_with(x, ir.RankedTensorType.get(shape, xt.element_type), low_x,
                                  high_x, value)
            result = transposed(padded, perm)
        pad.results[0].replace_all_uses_with(result)
        pad.erase()
        moved += 1
    return moved


def hoist_transposes_above_pads(module: ir.Module) -> int:
    """Rewrite `transpose(pad(x), p)` as `pad'(transpose(x, p))` where the transpose is the
    pad's only user and `x` is not itself a transpose (in place; returns how many). Where
    a channels-first image reaches a channels-last conv through a pad (the model's input,
    or a pad after an op kept NCHW), IREE fuses the transpose into the conv's dispatch: the
    conv then reads its input along a strided map, the channel lanes 34x34 floats apart
    (ConvNeXt's 7x7 depthwise conv ran at 9% of the peak so). Before the pad, the transpose
    is a copy of its own (or fuses into x's producer) and the conv reads channels-last.
    The complement of `sink_transposes_below_pads`, which runs first and moves the pads
    whose source is a transpose, so the two never undo each other."""
    moved = 0
    for op in walk_ops(module.operation, "linalg.transpose"):
        pad = _op_of(op.operands[0])
        if pad is None or pad.name != "tensor.pad" or len(pad.operands) != 1:
            continue
        if len(list(pad.results[0].uses)) != 1:
            continue
        src = _op_of(pad.operands[0])
        if src is not None and src.name == "linalg.transpose":
            continue
        value = _outside_pad_value(pad)
        x = pad.operands[0]
        if value is None or not ir.RankedTensorType(x.type).has_static_shape:
            continue
        perm = _permutation(op)
        low, high = _pad_sizes(pad)
        with ir.InsertionPoint(op), op.location:
            # (Result dim i is x's dim perm[i].)
            padded = _padded_with(transposed(x, perm), op.results[0].type,
                                  [low[d] for d in perm], [high[d] for d in perm], value)
        op.results[0].replace_all_uses_with(padded)
        op.erase()
        pad.erase()
        moved += 1
    return moved


def _group_order(groups: list[list[int]], perm: list[int]) -> list[int] | None:
    """The order of `groups` (of an expand_shape's result dims) in `perm` (a transpose of
    that result), where each group stays together and in order in `perm`; else None."""
    order, i = [], 0
    while i < len(perm):
        g = next((k for k, grp in enumerate(groups) if grp[0] == perm[i]), None)
        if g is None or perm[i:i + len(groups[g])] != groups[g]:
            return None
        order.append(g)
        i += len(groups[g])
    return order


def hoist_transposes_above_expands(module: ir.Module) -> int:
    """Rewrite `transpose(expand_shape(y), p)` as `expand_shape'(transpose(y, q))` where
    the transpose is the expand's only user, shapes are static and `p` keeps every split
    dim's parts together and in order (in place; returns how many). A grouped conv splits
    its channels (C -> G x Cg) between its input's pad and its own transpose to
    channels-last: with the transpose before the split it meets the pad, and from there
    the transpose of a channels-last input (`sink_transposes_below_pads`), so the two
    cancel. Else the pad stayed channels-first and IREE fused the input's transpose into
    its copy (GRP-b1's grouped conv read its input as [G, C, H, W]). Nothing moves a
    transpose back down past an expand, so a transpose hoisted here no longer sinks below
    an elementwise op (only a lost chance, never a wrong result)."""
    moved = 0
    for op in walk_ops(module.operation, "linalg.transpose"):
        expand = _op_of(op.operands[0])
        if expand is None or expand.name != "tensor.expand_shape" or \
                len(list(expand.results[0].uses)) != 1:
            continue
        y = expand.operands[0]
        if not (ir.RankedTensorType(y.type).has_static_shape and
                ir.RankedTensorType(op.results[0].type).has_static_shape):
            continue
        groups = reassociation_groups(expand)
        order = _group_order(groups, _permutation(op))
        if order is None:
            continue
        new_groups, at = [], 0
        for g in order:
            new_groups.append(list(range(at, at + len(groups[g]))))
            at += len(groups[g])
        out = ir.RankedTensorType(op.results[0].type)
        with ir.InsertionPoint(op), op.location:
            result = tensor.ExpandShapeOp(out, transposed(y, order), reassociation(new_groups),
                                          [], list(out.shape)).result
        op.results[0].replace_all_uses_with(result)
        op.erase()
        expand.erase()
        moved += 1
    return moved


def _broadcast_map(m: ir.AffineMap, rank: int) -> bool:
    """Whether `m` reads a lower-rank operand of an elementwise op (a per-channel scale, a
    bias): its results are loops or constants, fewer loops than `rank`."""
    kinds = [type(r.maybe_downcast()) for r in m.results]
    dims = [k for k in kinds if k is ir.AffineDimExpr]
    consts = [k for k in kinds if k is ir.AffineConstantExpr]
    return len(dims) + len(consts) == len(m.results) and len(dims) < rank


def _over_transposes(op: ir.Operation) -> list[int] | None:
    """The permutation `op`'s transposed inputs share, when `op` is a `linalg.generic` with
    one result and static shapes, its body not reading the loop indices, whose every input
    is either a `linalg.transpose` by that permutation read through the identity or a
    lower-rank operand read by broadcast; at least one transposed. Else None."""
    if op.name != "linalg.generic" or len(op.results) != 1 or \
            not ir.RankedTensorType(op.results[0].type).has_static_shape:
        return None
    rank = len(ir.ArrayAttr(op.attributes["iterator_types"]))
    identity = ir.AffineMap.get_identity(rank)
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if any(o.name == "linalg.index" for o in op.regions[0].blocks[0].operations):
        return None
    perms = []
    for v, m in zip(list(op.operands)[:-1], maps):
        src = _op_of(v)
        if m == identity and src is not None and src.name == "linalg.transpose" and \
                ir.RankedTensorType(src.operands[0].type).has_static_shape:
            perms.append(_permutation(src))
        elif not _broadcast_map(m, rank):
            return None
    if not perms or any(q != perms[0] for q in perms):
        return None
    return perms[0]


def _elementwise(op: ir.Operation) -> bool:
    """All loops parallel, the output written through the identity and never read."""
    its = ir.ArrayAttr(op.attributes["iterator_types"])
    maps = ir.ArrayAttr(op.attributes["indexing_maps"])
    out_map = ir.AffineMapAttr(maps[len(maps) - 1]).value  # (no negative index on attrs)
    body = op.regions[0].blocks[0]
    return all("parallel" in str(it) for it in its) and \
        out_map == ir.AffineMap.get_identity(len(its)) and \
        not any(True for _ in body.arguments[len(body.arguments) - 1].uses)


def sink_transposes_below_generics(module: ir.Module) -> int:
    """Read the sources of transposed inputs directly (in place; returns how many ops).
    An elementwise `f(transpose(a, p), transpose(b, p), c)` becomes `transpose(f(a, b, c),
    p)` (`c` a broadcast operand, its map permuted alike): the transpose moves on and meets
    the next one. Any other generic (a reduction: a global average pool) keeps its result
    and reads `a` through permuted loops (its output map permuted alike). IREE's pass
    leaves batch norms, SiLUs (`x * sigmoid(x)`) and squeeze-excitation pools
    channels-first between transposes: with IREE's transpose propagation off
    (tuner/layouts.py folds weight transposes) those stayed, and each depthwise conv read
    its input NCHW across its vector lanes (EfficientNet-B0's at 3-14x torch's time)."""
    moved = 0
    for op in walk_ops(module.operation, "linalg.generic"):
        perm = _over_transposes(op)
        if perm is None:
            continue
        rank = len(perm)
        identity = ir.AffineMap.get_identity(rank)
        to_old = ir.AffineMap.get_permutation(perm)  # new loops -> the op's loops

        def permuted(m: ir.AffineMap) -> ir.AffineMap:
            return ir.AffineMap.get(rank, 0, [r.compose(to_old) for r in m.results])

        maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
        ins, new_maps, shape = [], [], None
        for v, m in zip(list(op.operands)[:-1], maps):
            src = _op_of(v)
            if m == identity:  # a transpose by `perm` (_over_transposes): read its source
                ins.append(src.operands[0])
                new_maps.append(identity)
                shape = list(ir.RankedTensorType(src.operands[0].type).shape)
            else:
                ins.append(v)
                new_maps.append(permuted(m))
        elementwise = _elementwise(op)
        old_its = list(ir.ArrayAttr(op.attributes["iterator_types"]))
        its = [old_its[perm.index(i)] for i in range(rank)]  # new loop i is old loop k, perm[k] = i
        elem = ir.RankedTensorType(op.results[0].type).element_type
        with ir.InsertionPoint(op), op.location:
            init = tensor.EmptyOp(shape, elem).result if elementwise else None
            new = op.clone()  # (after `init`: it uses it)
            for i, x in enumerate(ins):
                new.operands[i] = x
            if elementwise:
                new.operands[len(ins)] = init
                new.results[0].set_type(ir.RankedTensorType.get(shape, elem))
            out_map = identity if elementwise else permuted(maps[-1])
            new.attributes["indexing_maps"] = ir.ArrayAttr.get(
                [ir.AffineMapAttr.get(m) for m in (*new_maps, out_map)])
            new.attributes["iterator_types"] = ir.ArrayAttr.get(its)
            result = transposed(new.results[0], perm) if elementwise else new.results[0]
        op.results[0].replace_all_uses_with(result)
        op.erase()
        moved += 1
    return moved


_PASS = "iree-preprocessing-convert-conv-to-channels-last"
_PIPELINE = f"builtin.module(func.func({_PASS}),canonicalize,cse)"
_TIDY = "builtin.module(canonicalize,cse)"
_SINK_ROUNDS = 8
# The same rewrite inside a stock iree-compile run (the anchor of tools/bench_models.py).
CHANNELS_LAST_FLAG = f"--iree-preprocessing-pass-pipeline=builtin.module(util.func({_PASS}))"


def channels_first_convs(model_mlir: str) -> int:
    """How many channels-first (NCW, NCHW, NCDHW; plain, depthwise or grouped)
    convolutions the model has (0: nothing to rewrite)."""
    with ir.Context():
        return _count(ir.Module.parse(model_mlir))


def to_channels_last(model_mlir: str) -> str:
    """`model_mlir` with every channels-first convolution channels-last (NHWC / HWCF for 2-D;
    same function signature)."""
    with ir.Context():
        module = ir.Module.parse(model_mlir)
        before = _count(module)
        if not before:
            raise LayoutRewriteError("the model has no NCHW (NCW, NCDHW) convolution to "
                                     "convert")
        pipeline = PassManager.parse(_PIPELINE)
        try:
            _grouped_to_channels_last(module)
            pipeline.run(module.operation)
            # Generics and pads IREE's pass left between transposes: sink the transposes
            # below them (and up past a channel split) until they meet and cancel (bounded:
            # a round moves a transpose down a chain of generics, above an expand, then
            # past a pad; the moves only go one way, so the rounds converge).
            for _ in range(_SINK_ROUNDS):
                if not (sink_transposes_below_generics(module) +
                        hoist_transposes_above_expands(module) +
                        sink_transposes_below_pads(module)):
                    break
                PassManager.parse(_TIDY).run(module.operation)
            # Transposes the sinking left after a pad (channels-first sources): before it.
            if hoist_transposes_above_pads(module):
                PassManager.parse(_TIDY).run(module.operation)
        except ir.MLIRError as e:  # a pass failed on this model; the diagnostics say why
            raise LayoutRewriteError(f"converting to channels-last failed: {e}") from e
        left = _count(module)
        if left:
            raise LayoutRewriteError(f"{left} of {before} channels-first convolutions were "
                                     "not converted")
        if not module.operation.verify():
            raise LayoutRewriteError("the channels-last model does not verify")
        return str(module)
