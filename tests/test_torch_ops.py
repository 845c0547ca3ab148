"""Torch's counterpart of a task's contraction (the report's roofline column): which op,
on which shapes, read from the indexing maps."""
import pytest

from mlir_ansor.tuner.measure import MeasureConfig
from mlir_ansor.tuner.torch_ops import (ConvOp, EinsumOp, torch_callables, torch_counterpart,
                                        torch_op_seconds)
from tests.conftest import DATA, mul_add_generic, ops_of
from tests.test_analysis import _depthwise_chw


def counterpart(name_or_text: str):
    text = (DATA / name_or_text).read_text() if name_or_text.endswith(".mlir") else name_or_text
    ops = ops_of(text)
    op = torch_counterpart(ops)
    if op is not None:  # the same work as the dispatch's contraction
        assert op.flops == max(o.flops for o in ops)
    return op


@pytest.mark.parametrize("data, want", [
    ("mm_128x256x64.mlir", "einsum ac,cb->ab 128x256, 256x64"),
    ("batch_matmul_4x64x48x32.mlir", "einsum abd,adc->abc 4x64x32, 4x32x48"),
    ("linear_const.mlir", "einsum ac,cb->ab 8x64, 64x32"),
    # Channels-last 3x3 conv reading a padded 18x18 input: filter (kh, kw, c, k).
    ("conv_nhwc_map_store.mlir", "conv2d 1x8x18x18 -> 16, kernel 3x3, stride 1x1"),
])
def test_contractions_map_to_one_torch_op(data, want):
    assert counterpart(data).describe() == want


def test_a_strided_depthwise_conv_is_a_grouped_conv():
    op = counterpart(_depthwise_chw(2))
    assert isinstance(op, ConvOp)
    assert (op.groups, op.in_channels, op.out_channels) == (8, 1, 1)
    assert op.spatial == (58, 58) and op.stride == (2, 2) and op.kernel == (3, 3)


@pytest.mark.parametrize("data", ["row_sum.mlir", "softmax_scale.mlir", "scale_rows.mlir",
                                  "embedding_gather.mlir"])
def test_no_counterpart_without_a_two_operand_contraction(data):
    assert counterpart(data) is None


def test_the_torch_calls_compute_the_shapes_they_claim():
    conv = counterpart("conv_nhwc_map_store.mlir")
    calls = torch_callables(conv)
    assert set(calls) == {"contiguous", "channels_last"}  # torch at its better layout
    for f in calls.values():
        assert tuple(f().shape) == (1, 16, 16, 16)
    mm = counterpart("batch_matmul_4x64x48x32.mlir")
    assert isinstance(mm, EinsumOp)
    assert tuple(torch_callables(mm)["einsum"]().shape) == (4, 64, 48)
    assert torch_op_seconds(mm, MeasureConfig(repetitions=1, min_time_s=0.001, warmup_s=0),
                            rounds=1) > 0


STRIDED_1X1 = mul_add_generic(
    "1x56x56x64", "64x128", "1x28x28x128", "n, h, w, k, c",
    ("n, h * 2, w * 2, c", "c, k", "n, h, w, k"),
    "parallel, parallel, parallel, parallel, reduction")


def test_a_strided_1x1_conv_is_a_conv_with_a_unit_kernel():
    assert counterpart(STRIDED_1X1).describe() == ("conv2d 1x64x56x56 -> 128, kernel 1x1, "
                                                   "stride 2x2")
