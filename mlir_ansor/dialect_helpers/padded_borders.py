"""Padded convolutions without the taps that read the padding: their borders split off.

A convolution over a zero-padded image multiplies zeros wherever its window hangs over
the image's edge; on a small image that is a large share of its work (a 3x3x3 conv over
a depth of 4 with one plane of padding: one tap in six along the depth reads a zero plane).
oneDNN skips those taps; a kernel tuned over the padded image cannot. Here such a
convolution becomes one convolution per output segment along the axes split: the interior,
whose windows lie inside the image, with every tap, and each border row with the taps that
meet the image only (a slice of the weight). The segments partition the output, and every
output sums the same non-zero products in the same order, so the result is the same.

Any linalg op that the generalizer turns into a multiply-accumulate over a zero-padded
image is taken, whatever its layout (channels-first named convs, channels-last generics):
an image dim indexed s*o + d*k (o a parallel loop, k a reduction loop) whose padding the
image's producers give (tensor.pad of 0.0, possibly between a unit-dim expand and a
collapse), with o and k indexing the other operands as plain dims only.

Which axes are split is the `BorderRule`'s call: the axes whose split saves the most taps
within a bound on the segments (each is a dispatch of its own); `border_sites` offers only
the ops where the split saves at least `min_saved` of the taps.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

from iree.compiler import ir
from iree.compiler.dialects import tensor
from iree.compiler.passmanager import PassManager

from mlir_ansor.dialect_helpers.linalg_info import _affine_terms, linalg_ops
from mlir_ansor.dialect_helpers.tensor_building import (defining, is_zero_fill,
                                                        reassociation_groups, sliced,
                                                        zero_init)
from mlir_ansor.errors import AnsorError


class BorderSplitError(AnsorError):
    """A border-split site list that does not fit the model text (the message says why)."""


@dataclass(frozen=True)
class BorderRule:
    """Which padded convolutions are split, and along which axes: the axes are taken by
    the share of taps they save, largest first, while the segments stay within
    `max_regions` (each a dispatch); a conv is offered if they save `min_saved` of its
    taps. One axis of three segments by default: a conv with one row of padding on each
    side of its most wasteful axis."""

    min_saved: float = 0.10
    max_regions: int = 3


@dataclass(frozen=True)
class Segment:
    """Output rows [start, start + size) along one axis and the taps they use."""

    start: int
    size: int
    tap_start: int
    taps: int  # 0: every tap of these rows reads padding (the output keeps its init)


@dataclass(frozen=True)
class PaddedAxis:
    """One image dim that a conv's window slides along over zero padding."""

    image_dim: int  # the image operand's dim
    out_loop: int  # the parallel loop o in s*o + d*k
    tap_loop: int  # the reduction loop k
    stride: int
    dilation: int
    size: int  # the image's extent without the padding
    low: int
    outputs: int  # extent of o
    kernel: int  # extent of k

    def segments(self) -> list[Segment]:
        """Runs of output rows that use the same taps: those meeting the image."""
        runs: list[Segment] = []
        for o in range(self.outputs):
            first = max(0, -(-(self.low - o * self.stride) // self.dilation))
            last = min(self.kernel - 1,
                       (self.low + self.size - 1 - o * self.stride) // self.dilation)
            taps = max(0, last - first + 1)
            first = first if taps else 0
            prev = runs[-1] if runs else None
            if prev and (prev.tap_start, prev.taps) == (first, taps):
                runs[-1] = Segment(prev.start, prev.size + 1, first, taps)
            else:
                runs.append(Segment(o, 1, first, taps))
        return runs

    def real_share(self) -> float:
        """The share of this axis's taps that read the image, not the padding."""
        return sum(s.size * s.taps for s in self.segments()) / (self.outputs * self.kernel)


@dataclass(frozen=True)
class BorderSite:
    index: int  # position among the model's linalg ops (program order)
    axes: tuple[PaddedAxis, ...]  # the axes split, by the rule
    saved: float  # the share of the op's taps that the split skips
    regions: int  # convolutions it becomes
    taps: int  # the op's multiply-accumulates (the product of its loop extents)


# Per operand, per dim: the (loop, coefficient) terms of its indexing map.
Terms = tuple[tuple[tuple[tuple[int, int], ...], ...], ...]


@dataclass(frozen=True)
class _Conv:
    """A generalized conv's image operand, its padded axes that can be split, its maps'
    terms and its multiply-accumulates."""

    image: int
    axes: tuple[PaddedAxis, ...]
    terms: Terms
    taps: int


def _const_float(value: ir.Value) -> float | None:
    owner = defining(value)
    if owner is None or owner.name != "arith.constant":
        return None
    attr = owner.attributes["value"]
    return attr.value if isinstance(attr, ir.FloatAttr) else None


def _padding(value: ir.Value, dim: int) -> tuple[int, int] | None:
    """(low, high) zero padding of `value` along `dim` from its producers: a tensor.pad
    of 0.0 with static sizes, seen through collapse_shape / expand_shape groups whose
    other dims are unit dims. None where that cannot be read."""
    owner = defining(value)
    if owner is None:
        return None
    if owner.name == "tensor.pad":
        if len(owner.operands) != 1:  # dynamic low / high
            return None
        body = owner.regions[0].blocks[0]
        yields = [o for o in body.operations if o.operation.name == "tensor.yield"]
        if not yields or _const_float(yields[0].operands[0]) != 0.0:
            return None
        low = list(ir.DenseI64ArrayAttr(owner.attributes["static_low"]))
        high = list(ir.DenseI64ArrayAttr(owner.attributes["static_high"]))
        return low[dim], high[dim]
    if owner.name in ("tensor.collapse_shape", "tensor.expand_shape"):
        src = owner.operands[0]
        src_shape = ir.RankedTensorType(src.type).shape
        groups = reassociation_groups(owner)
        if owner.name == "tensor.collapse_shape":  # result dim `dim` <- group of src dims
            members = groups[dim]
            big = [d for d in members if src_shape[d] != 1]
            if len(big) != 1:
                return None
            return _padding(src, big[0])
        # expand: src dim g -> result dims groups[g]; `dim` must be the group's one
        # non-unit dim
        out_shape = ir.RankedTensorType(owner.results[0].type).shape
        for g, members in enumerate(groups):
            if dim in members:
                if any(out_shape[d] != 1 for d in members if d != dim):
                    return None
                return _padding(src, g)
    return None


def _is_multiply_accumulate(generic: ir.Operation) -> bool:
    """A body `out + a * b` over two inputs (a conv): zeros in `a` add nothing."""
    body = generic.regions[0].blocks[0]
    names = [o.operation.name for o in body.operations]
    return names == ["arith.mulf", "arith.addf", "linalg.yield"]


def _conv(generic: ir.Operation) -> _Conv | None:
    """A generalized conv over a zero-padded image with axes that can be split, else None."""
    if generic.name != "linalg.generic" or len(generic.results) != 1:
        return None
    if not _is_multiply_accumulate(generic):
        return None
    maps = [ir.AffineMapAttr(a).value for a in generic.attributes["indexing_maps"]]
    iterators = [str(a).split("<")[-1].rstrip(">") for a in generic.attributes["iterator_types"]]
    types = [v.type for v in generic.operands]
    if not all(isinstance(t, ir.RankedTensorType) and t.has_static_shape for t in types):
        return None
    n_in = len(generic.operands) - 1
    terms = []
    for amap in maps:
        row = [_affine_terms(r) for r in amap.results]
        if any(t is None for t in row):
            return None
        terms.append(tuple(row))
    extents: dict[int, int] = {}
    for op_terms, t in zip(terms, types):
        for d, ts in enumerate(op_terms):
            if len(ts) == 1 and ts[0][1] == 1:
                extents[ts[0][0]] = ir.RankedTensorType(t).shape[d]
    for image in range(n_in):
        axes = []
        for d, ts in enumerate(terms[image]):
            if len(ts) != 2:
                continue
            (o, s), (k, dl) = sorted(ts, key=lambda t: iterators[t[0]] != "parallel")
            if (iterators[o], iterators[k]) != ("parallel", "reduction") or o not in extents \
                    or k not in extents:
                continue
            # o and k index every other operand dim as plain dims or not at all.
            plain = all(
                (len(ts2) == 1 and ts2[0][1] == 1) or not ({o, k} & {l for l, _ in ts2})
                for i, row in enumerate(terms) for d2, ts2 in enumerate(row)
                if (i, d2) != (image, d))
            if not plain:
                continue
            pad = _padding(generic.operands[image], d)
            if pad is None or not any(pad):
                continue
            full = ir.RankedTensorType(types[image]).shape[d]
            size = full - pad[0] - pad[1]
            if size <= 0 or (extents[o] - 1) * s + (extents[k] - 1) * dl + 1 > full:
                continue
            axes.append(PaddedAxis(d, o, k, s, dl, size, pad[0], extents[o], extents[k]))
        if axes:
            return _Conv(image, tuple(axes), tuple(terms), math.prod(extents.values()))
    return None


def _choose(axes: Sequence[PaddedAxis], rule: BorderRule
            ) -> tuple[tuple[PaddedAxis, ...], float, int]:
    """The axes to split by `rule`, the share of taps saved and the segments."""
    chosen: list[PaddedAxis] = []
    regions, real = 1, 1.0
    for ax in sorted(axes, key=lambda a: a.real_share()):
        n = len(ax.segments())
        if ax.real_share() >= 1.0 or regions * n > rule.max_regions:
            continue
        chosen.append(ax)
        regions *= n
        real *= ax.real_share()
    return tuple(chosen), 1.0 - real, regions


def _generalized(module: ir.Module) -> ir.Module:
    """A generalized copy of `module` (a copy: the model keeps its named ops, which IREE
    and the Winograd rewrite look for); its linalg ops pair with the model's by position."""
    copy = ir.Module.parse(str(module))
    PassManager.parse("builtin.module(func.func(linalg-generalize-named-ops))").run(
        copy.operation)
    if len(linalg_ops(copy)) != len(linalg_ops(module)):
        raise BorderSplitError("generalizing the model changed its number of linalg ops")
    return copy


def _sites(generalized: ir.Module, rule: BorderRule) -> list[tuple[BorderSite, _Conv]]:
    """Every padded conv the rule splits, with what the split reads of it."""
    out = []
    for i, g in enumerate(linalg_ops(generalized)):
        conv = _conv(g)
        if conv is None:
            continue
        chosen, saved, regions = _choose(conv.axes, rule)
        if chosen and regions > 1:
            out.append((BorderSite(i, chosen, saved, regions, conv.taps), conv))
    return out


def border_sites(model_mlir: str, rule: BorderRule = BorderRule()) -> list[BorderSite]:
    """The padded convolutions whose split by `rule` saves at least `rule.min_saved` of
    their taps, in program order."""
    with ir.Context():
        generalized = _generalized(ir.Module.parse(model_mlir))
        return [s for s, _ in _sites(generalized, rule) if s.saved >= rule.min_saved]


def _split(op: ir.Operation, image: int, site: BorderSite, terms: Terms) -> None:
    """Replace `op` by one clone per region (a product of the axes' segments), each over
    slices of its operands, inserted into its output."""
    n_in = len(op.operands) - 1
    by_image_dim = {ax.image_dim: ax for ax in site.axes}
    by_out = {ax.out_loop: ax for ax in site.axes}
    by_tap = {ax.tap_loop: ax for ax in site.axes}
    with ir.InsertionPoint(op), op.location:
        # Regions accumulate into zeros (a bias is added after: `zero_init`) and are
        # inserted into a fresh tensor. IREE 3.13 then copies each region in (C3D-b16: 3
        # copy dispatches of its output). Threaded through the op's init instead, it writes
        # the first region in place, but its early-bufferized 2-D convs fail to compile so
        # ("write affecting operations on global resources are restricted to workgroup
        # distributed contexts").
        out_t = ir.RankedTensorType(op.results[0].type)
        result = tensor.EmptyOp(list(out_t.shape), out_t.element_type).result
        for segs in itertools.product(*(ax.segments() for ax in site.axes)):
            seg = {ax.out_loop: s for ax, s in zip(site.axes, segs)}
            live = all(s.taps for s in segs)

            def window(i: int) -> tuple[list[int], list[int]]:
                shape = ir.RankedTensorType(op.operands[i].type).shape
                offsets, sizes = [0] * len(shape), list(shape)
                for d, ts in enumerate(terms[i]):
                    if i == image and d in by_image_dim:
                        ax = by_image_dim[d]
                        s = seg[ax.out_loop]
                        offsets[d] = s.start * ax.stride + s.tap_start * ax.dilation
                        sizes[d] = (s.size - 1) * ax.stride + (s.taps - 1) * ax.dilation + 1
                    elif len(ts) == 1 and ts[0][0] in by_out:
                        s = seg[ts[0][0]]
                        offsets[d], sizes[d] = s.start, s.size
                    elif len(ts) == 1 and ts[0][0] in by_tap:
                        s = seg[by_tap[ts[0][0]].out_loop]
                        offsets[d], sizes[d] = s.tap_start, s.taps
                return offsets, sizes

            at, size = window(n_in)
            init = sliced(op.operands[n_in], at, size)
            if live:
                ins = [sliced(op.operands[i], *window(i)) for i in range(n_in)]
                clone = op.clone()  # (at the insertion point: after its operands)
                for i, v in enumerate(ins):
                    clone.operands[i] = v
                clone.operands[n_in] = init
                clone.results[0].set_type(init.type)
                part = clone.results[0]
            else:
                part = init
            result = tensor.insert_slice(part, result, [], [], [], at, size, [1] * len(at))
    op.results[0].replace_all_uses_with(result)
    op.erase()


def with_border_split(model_mlir: str, sites: Sequence[int],
                      rule: BorderRule = BorderRule()) -> str:
    """`model_mlir` with the padded convolutions at `sites` (positions among its linalg
    ops, as `border_sites` gives them) split along the axes `rule` picks; verified."""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(model_mlir)
        ops = linalg_ops(module)  # (positions before any split)
        found = {s.index: (s, conv) for s, conv in _sites(_generalized(module), rule)}
        for i in sites:
            if i not in found:
                raise BorderSplitError(
                    f"border-split site {i} is not a padded convolution the rule splits "
                    f"(the model has {len(ops)} linalg ops; a layout of another model?)")
        for i in sites:
            site, conv = found[i]
            if not is_zero_fill(ops[i].operands[-1]):
                zero_init(ops[i])
            _split(ops[i], conv.image, site, conv.terms)
        if not module.operation.verify():
            raise BorderSplitError("the model does not verify after the border split "
                                   "(a bug of mlir-ansor)")
        PassManager.parse("builtin.module(canonicalize,cse)").run(module.operation)
        return str(module)
