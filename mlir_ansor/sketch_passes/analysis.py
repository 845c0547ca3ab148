"""Static analysis predicates of Ansor's derivation rules, read from iterator types and
indexing maps only (never from op names)."""
from __future__ import annotations

import math
from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo, OperandInfo

# Rfactor pays off when the parallel space cannot feed the cores but the reduction is long.
RFACTOR_MAX_PARALLEL = 256
RFACTOR_MIN_REDUCTION = 1024


def _is_projected_permutation(o: OperandInfo) -> bool:
    dims = [t[0][0] for t in o.map_results if len(t) == 1 and t[0][1] == 1]
    return len(dims) == len(o.map_results) and len(set(dims)) == len(dims)


def consumers(ops: Sequence[OpInfo], i: int) -> list[int]:
    return [o.index for o in ops if i in o.producers]


def is_output(ops: Sequence[OpInfo], i: int) -> bool:
    return not consumers(ops, i)


def is_elementwise(op: OpInfo) -> bool:
    """All loops parallel and every operand read through a projected permutation."""
    return (not op.reduction_dims) and all(_is_projected_permutation(o) for o in op.operands)


def is_strict_inlinable(ops: Sequence[OpInfo], i: int) -> bool:
    """Elementwise (or padding) and not an output: can be computed inside its consumer's tile."""
    op = ops[i]
    if is_output(ops, i):
        return False
    return op.op_name == "tensor.pad" or is_elementwise(op)


def has_data_reuse(op: OpInfo) -> bool:
    """A reduction where some input is not indexed by some parallel loop (A[i, k] in a
    matmul misses j): every element is read again for each of those iterations, and tiling
    turns that into reuse. An input that only misses reduction loops (the row max in a
    softmax's exp-sum) is reused across a reduction, which tiling cannot exploit. Not for
    an op left scalar (OpInfo.scalar: an argmax): multi-level tiling of it fails to
    compile (its tiled reduction has no combiner to split on)."""
    if not op.is_linalg or not op.reduction_dims or op.scalar:
        return False  # (a scalar op has no register tiles to reuse data in)
    for o in op.operands:
        if o.is_output or not o.shape:
            continue
        used = {d for terms in o.map_results for d, _ in terms}
        if any(d not in used for d in op.parallel_dims):
            return True
    return False


def has_fusible_consumer(ops: Sequence[OpInfo], i: int) -> bool:
    """Exactly one consumer, elementwise, reading op i through a full permutation of its loops."""
    cons = consumers(ops, i)
    if len(cons) != 1:
        return False
    c = ops[cons[0]]
    if not is_elementwise(c) or not is_output(ops, c.index):
        return False
    out_rank = len(ops[i].output.shape)
    return len(c.parallel_dims) == out_rank


def has_more_reduction_parallel(op: OpInfo) -> bool:
    """Small parallel space, long reduction: split the reduction (rfactor)."""
    if not op.reduction_dims:
        return False
    par = math.prod(op.extents[d] for d in op.parallel_dims)
    red = math.prod(op.extents[d] for d in op.reduction_dims)
    return par <= RFACTOR_MAX_PARALLEL and red >= RFACTOR_MIN_REDUCTION


def has_window_access(op: OpInfo) -> bool:
    """An input indexed by a sum of loops (convolution windows)."""
    return any(len(t) > 1 for o in op.operands for t in o.map_results)


def has_strided_access(op: OpInfo) -> bool:
    """An input indexed by a single loop times a stride > 1 (a strided 1x1 convolution as a
    generic): the vectorizer rejects such maps, so the strategy factors out a strided slice."""
    return any(len(t) == 1 and t[0][1] > 1 for o in op.operands if not o.is_output
               for t in o.map_results)


def conv_kind(op: OpInfo) -> str:
    """How a window op reaches the vectorizer: "conv1d" / "conv2d" (plain convolutions:
    one input-channel reduction, (n, f, spatial...) outputs; named op, 2-D decomposed to
    1-D), "fold" (any other window op: unit dims folded away), "" (no window)."""
    windows = max((sum(1 for t in o.map_results if len(t) > 1) for o in op.operands
                   if not o.is_output), default=0)
    if not windows:
        return ""
    in_window = {d for o in op.operands for t in o.map_results if len(t) > 1 for d, _ in t}
    channel = [l for l in op.reduction_dims if l not in in_window]
    if len(channel) == 1 and len(op.extents) == 3 + 2 * windows and windows in (1, 2) \
            and _named_conv_layout(op, channel[0]):
        return f"conv{windows}d"
    return "fold"


def _named_conv_layout(op: OpInfo, channel: int) -> bool:
    """Whether the windowed input holds its channel where the output holds its filter
    loop, both innermost (NHWC / HWCF) or both second (NCHW / FCHW): the layouts a named
    convolution has. A conv reading a channels-first input into a channels-last output
    (IREE fused the model input's transpose into it) matches no named op, and
    `transform.structured.specialize` fails on it (16 of 24 candidates of an unseen
    strided stem)."""
    x = next(o for o in op.operands if not o.is_output and any(len(t) > 1 for t in o.map_results))
    out = next(o for o in op.operands if o.is_output)
    reads = {d for t in x.map_results for d, _ in t}
    filters = [l for l in op.parallel_dims if l not in reads]
    in_pos = [i for i, t in enumerate(x.map_results) if [d for d, _ in t] == [channel]]
    out_pos = [i for i, t in enumerate(out.map_results) if [d for d, _ in t] == filters]
    if len(in_pos) != 1 or len(out_pos) != 1:
        return False
    last = (in_pos[0] == len(x.map_results) - 1 and out_pos[0] == len(out.map_results) - 1)
    return last or (in_pos[0] == 1 and out_pos[0] == 1)


def strided_window_loops(op: OpInfo) -> set[int]:
    """Output loops an input reads with a stride > 1 inside a window index (d * s + k): once
    the unit window dims fold away, d * s is no projected permutation and the vectorizer
    fails, so on the "fold" path these loops keep a unit register tile. (The named 1-D
    convolution kernels take strides.)"""
    if conv_kind(op) != "fold":
        return set()
    return {d for o in op.operands if not o.is_output for t in o.map_results if len(t) > 1
            for d, c in t if c > 1 and op.iterators[d] == "parallel"}
