"""Torch's counterpart of a task: the one PyTorch op (oneDNN/MKL behind it) that computes a
dispatch's contraction, read from the op's indexing maps, so the report's roofline can
show what the vendor library reaches on the same shapes.

Any sum-of-products over two operands whose maps are plain loop indices is an einsum
(matmul, batch matmul, a 1x1 convolution IREE turned into a generic, transposed forms);
one with window expressions (`oh * s + kh * d`, or `oh * s` of a strided 1x1 conv) is a
convolution, grouped when a parallel loop indexes input, filter and output alike
(depthwise). Other dispatches (reductions, elementwise, pooling, softmax) have no single
counterpart: None. Only the contraction is timed, not the bias or activation fused after
it in the dispatch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.tuner.measure import MeasureConfig, lower_quartile

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class EinsumOp:
    equation: str
    shapes: tuple[tuple[int, ...], tuple[int, ...]]
    flops: int

    def describe(self) -> str:
        return f"einsum {self.equation} " + ", ".join("x".join(map(str, s)) for s in self.shapes)


@dataclass(frozen=True)
class ConvOp:
    batch: int
    in_channels: int  # per group
    out_channels: int  # per group
    groups: int
    spatial: tuple[int, ...]  # input sizes, as the dispatch reads them (padding included)
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    flops: int

    def describe(self) -> str:
        g = f" groups {self.groups}" if self.groups > 1 else ""
        return (f"conv{len(self.spatial)}d {self.batch}x{self.in_channels * self.groups}x"
                + "x".join(map(str, self.spatial)) + f" -> {self.out_channels * self.groups}, "
                f"kernel {'x'.join(map(str, self.kernel))}, stride "
                f"{'x'.join(map(str, self.stride))}{g}")


TorchOp = EinsumOp | ConvOp


def _contraction(ops: Sequence[OpInfo]) -> OpInfo | None:
    """The dispatch's sum of products of two tensors (the largest, if several)."""
    cands = [o for o in ops if o.is_linalg and o.reduction_dims and not o.scalar
             and len([x for x in o.operands if not x.is_output]) == 2
             and len([x for x in o.operands if x.is_output]) == 1
             and sorted(o.body_kinds) == ["arith.addf", "arith.mulf"]
             and all(x.elem_type == "f32" for x in o.operands)]
    return max(cands, key=lambda o: o.flops) if cands else None


def _einsum(op: OpInfo) -> EinsumOp | None:
    subs, shapes = [], []
    for x in op.operands:
        s, shape = "", []
        for terms, size in zip(x.map_results, x.shape):
            if not terms:  # a constant index: a unit dim that torch need not see
                if size != 1:
                    return None
                continue
            (loop, coeff), = terms
            if coeff != 1:
                return None
            s += _LETTERS[loop]
            shape.append(size)
        subs.append(s)
        shapes.append(tuple(shape))
    *ins, out = subs
    if len(set(out)) != len(out):
        return None
    return EinsumOp(f"{ins[0]},{ins[1]}->{out}", (shapes[0], shapes[1]), 2 * math.prod(op.extents))


def _conv(op: OpInfo) -> ConvOp | None:
    inputs = [x for x in op.operands if not x.is_output]
    windowed = [i for i, x in enumerate(inputs) if any(_windowed(t) for t in x.map_results)]
    if len(windowed) != 1:
        return None
    img, flt, out = inputs[windowed[0]], inputs[1 - windowed[0]], op.output
    loops_of = [x.loops for x in (img, flt, out)]
    spatial, kernel, stride, dilation, in_window = [], [], [], [], set()
    for terms, size in zip(img.map_results, img.shape):
        if len(terms) == 1 and terms[0][1] == 1:
            continue
        par = [(l, c) for l, c in terms if op.iterators[l] == "parallel"]
        red = [(l, c) for l, c in terms if op.iterators[l] == "reduction"]
        if len(terms) == 1 and len(par) == 1:  # a strided 1x1 window: `oh * s`
            spatial.append(size)
            kernel.append(1)
            stride.append(par[0][1])
            dilation.append(1)
            in_window.add(par[0][0])
            continue
        if len(terms) != 2 or len(par) != 1 or len(red) != 1:
            return None
        spatial.append(size)
        kernel.append(op.extents[red[0][0]])
        stride.append(par[0][1])
        dilation.append(red[0][1])
        in_window |= {par[0][0], red[0][0]}
    if not 1 <= len(spatial) <= 3:
        return None
    ext = {"batch": 1, "cin": 1, "cout": 1, "groups": 1}
    for l, kind in enumerate(op.iterators):
        if l in in_window:
            continue
        where = tuple(l in s for s in loops_of)  # (input, filter, output)
        role = {("reduction", (True, True, False)): "cin",
                ("parallel", (True, False, True)): "batch",
                ("parallel", (False, True, True)): "cout",
                ("parallel", (True, True, True)): "groups"}.get((kind, where))
        if role is None or ext[role] != 1:
            return None
        ext[role] = op.extents[l]
    flops = 2 * math.prod(op.extents)
    conv = ConvOp(ext["batch"], ext["cin"], ext["cout"], ext["groups"], tuple(spatial),
                  tuple(kernel), tuple(stride), tuple(dilation), flops)
    out_sizes = [(s - d * (k - 1) - 1) // st + 1
                 for s, k, st, d in zip(spatial, kernel, stride, dilation)]
    mine = (2 * conv.batch * conv.groups * conv.out_channels * conv.in_channels
            * math.prod(out_sizes) * math.prod(kernel))
    return conv if mine == flops else None  # the roles did not add up: no counterpart


def torch_counterpart(ops: Sequence[OpInfo]) -> TorchOp | None:
    """The torch op that computes the dispatch's contraction, or None."""
    op = _contraction(ops)
    if op is None:
        return None
    windowed = any(_windowed(t) for x in op.operands for t in x.map_results)
    return _conv(op) if windowed else _einsum(op)


def _windowed(terms: tuple[tuple[int, int], ...]) -> bool:
    # `oh * s + kh * d`, or a strided index `oh * s` (a 1x1 conv with stride)
    return len(terms) > 1 or (len(terms) == 1 and terms[0][1] != 1)


def torch_callables(op: TorchOp, seed: int = 0) -> dict[str, Callable[[], object]]:
    """Zero-argument calls of the op on random inputs: per memory format for a 2-D
    convolution (torch eager is compared at its better layout)."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(seed)
    if isinstance(op, EinsumOp):
        a, b = (torch.randn(s, generator=g) for s in op.shapes)
        return {"einsum": lambda: torch.einsum(op.equation, a, b)}
    conv = (F.conv1d, F.conv2d, F.conv3d)[len(op.spatial) - 1]
    x = torch.randn((op.batch, op.in_channels * op.groups) + op.spatial, generator=g)
    w = torch.randn((op.out_channels * op.groups, op.in_channels) + op.kernel, generator=g)
    calls = {"contiguous": lambda: conv(x, w, stride=op.stride, dilation=op.dilation,
                                        groups=op.groups)}
    if len(op.spatial) == 2:
        xl, wl = (t.to(memory_format=torch.channels_last) for t in (x, w))
        calls["channels_last"] = lambda: conv(xl, wl, stride=op.stride, dilation=op.dilation,
                                              groups=op.groups)
    return calls


def torch_op_seconds(op: TorchOp, cfg: MeasureConfig, rounds: int = 3) -> float:
    """Torch eager's time for the op (its default threads), the better memory format's lower
    quartile over `rounds` interleaved rounds."""
    from mlir_ansor.tuner.e2e import interleaved, torch_times

    calls = torch_callables(op)
    times = interleaved({k: (lambda f=f: torch_times(f, (), cfg)) for k, f in calls.items()},
                        rounds)
    return min(lower_quartile(t) for t in times.values())
