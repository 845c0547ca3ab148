"""--io-layout channels-last: the wrapped model computes the model's numbers on NHWC
tensors, the transposes the import brings cancel against the channels-last convs' own (the
pad between them is moved), --dynamic dims are renumbered, and a depthwise conv's channel
loop is its vector loop."""
import random

import pytest
import torch
from torch import nn

from mlir_ansor.dialect_helpers.activation_layout import (hoist_transposes_above_expands,
                                                          hoist_transposes_above_pads,
                                                          sink_transposes_below_pads,
                                                          to_channels_last)
from mlir_ansor.dialect_helpers.dispatch import walk_ops
from mlir_ansor.dynamic import parse_dynamic, resolve
from mlir_ansor.errors import FrontendError, UsageError
from mlir_ansor.sketch_passes.annotation import annotate
from mlir_ansor.sketch_passes.loops import lane_loop, unit_loops
from mlir_ansor.sketch_passes.rules import default_cpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from mlir_ansor.targets import host
from mlir_ansor.tuner.driver import TuneOptions
from mlir_ansor.tuner.features import root_nest
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.io_layout import map_dynamic, to_first, to_last, wrap_channels_last
from tests.conftest import (QUICK_CLI, assert_computes_torchs_numbers, linalg_func, ops_of,
                            tune_cli)


class DepthwiseBlock(nn.Module):
    """A padded depthwise conv, a pointwise conv and a second output of another rank."""

    def __init__(self, single: bool = False):
        super().__init__()
        self.single = single
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)
        self.pw = nn.Conv2d(16, 8, 1)

    def forward(self, x, scale):
        y = self.pw(torch.relu(self.dw(x)))
        return y * scale if self.single else (y * scale, y.mean(dim=(2, 3)))


def _block(single: bool = False):
    torch.manual_seed(0)
    return DepthwiseBlock(single).eval(), (torch.randn(2, 16, 10, 12), torch.randn(8, 1, 1))


def test_permutations_are_inverse():
    for rank in (4, 5):
        p, q = to_last(rank), to_first(rank)
        assert [p[i] for i in q] == list(range(rank))
    assert to_last(4) == [0, 2, 3, 1] and to_first(4) == [0, 3, 1, 2]


def test_wrapped_model_computes_the_models_numbers_channels_last():
    model, inputs = _block()
    wrapped, cl = wrap_channels_last("block", model, inputs)
    assert cl[0].shape == (2, 10, 12, 16) and cl[0].is_contiguous()
    assert cl[1].shape == (8, 1, 1)  # rank 3: not exchanged
    with torch.no_grad():
        y, m = model(*inputs)
        y_cl, m_cl = wrapped(*cl)
    assert y_cl.shape == (2, 10, 12, 8)
    torch.testing.assert_close(y_cl.permute(0, 3, 1, 2), y)
    torch.testing.assert_close(m_cl, m)  # rank 2: as the model returns it


def test_a_model_without_images_is_refused():
    with pytest.raises(FrontendError, match="no 4-D or 5-D input"):
        wrap_channels_last("mlp", nn.Linear(4, 4), (torch.randn(3, 4),))


def test_unknown_io_layout_is_a_usage_error():
    with pytest.raises(UsageError, match="--io-layout"):
        TuneOptions(io_layout="nhwc").check()


def test_dynamic_dims_follow_the_channels_last_input():
    model, inputs = _block()
    dims = [parse_dynamic("x:0=1..8"), parse_dynamic("x:3=4..16")]
    mapped = map_dynamic(resolve(model, inputs, dims), inputs)
    assert [d.dim for d in mapped.dims] == [0, 2]  # batch stays, W moves to 2 in NHWC
    assert mapped.symbols == ("x_0", "x_3")  # named as the user wrote them
    wrapped, cl = wrap_channels_last("block", model, inputs)
    # torch.export binds the renumbered dims by the model's own argument names.
    text = import_model(wrapped, cl, mapped.export_shapes())
    assert "tensor<?x10x?x16xf32>" in text
    # A dynamic model's transposes stay where they are (the pad is not moved), and the
    # channels-last rewrite still works.
    cl_text = to_channels_last(text)
    assert "linalg.depthwise_conv_2d_nhwc_hwc" in cl_text


class NestedOut(nn.Module):
    def forward(self, x):
        y = x * 2
        return {"image": y, "pair": (y + 1, y.sum(dim=1))}


def test_nested_outputs_are_exchanged_too():
    x = torch.randn(1, 3, 4, 5)
    wrapped, (x_cl,) = wrap_channels_last("nested", NestedOut(), (x,))
    out = wrapped(x_cl)
    torch.testing.assert_close(out["image"], (x * 2).permute(0, 2, 3, 1))
    torch.testing.assert_close(out["pair"][0], (x * 2 + 1).permute(0, 2, 3, 1))
    assert out["pair"][1].shape == (1, 4, 5)  # rank 3: as returned


def _from_constants(value) -> bool:
    from iree.compiler import ir

    if isinstance(value.owner, ir.Block):
        return False
    op = value.owner.operation
    return op.name == "arith.constant" or (
        len(op.operands) > 0 and all(_from_constants(v) for v in op.operands))


def _image_transposes(text: str) -> int:
    """Transposes of rank-4 values that are not computed from constants alone."""
    from iree.compiler import ir

    with ir.Context():
        module = ir.Module.parse(text)
        return sum(1 for op in walk_ops(module.operation, "linalg.transpose")
                   if ir.RankedTensorType(op.operands[0].type).rank == 4
                   and not _from_constants(op.operands[0]))


def test_boundary_transposes_cancel_through_the_pad(tools, tmp_path):
    model, inputs = _block(single=True)
    wrapped, cl = wrap_channels_last("block", model, inputs)
    text = to_channels_last(import_model(wrapped, cl))
    # Only constant weights are transposed (IREE folds those), no image: the import's
    # boundary transposes met the convs' own and cancelled.
    assert _image_transposes(text) == 0, text
    assert_computes_torchs_numbers(text, wrapped, cl, tools, tmp_path)


def _rewritten_once(text: str, rule) -> str:
    """`text` after `rule` (one of activation_layout's rewrites), which must rewrite exactly
    one op and leave a module that verifies."""
    from iree.compiler import ir

    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        assert rule(module) == 1
        assert module.operation.verify()
        return str(module)


def test_pads_fed_by_a_transpose_are_moved_only_where_transposes_use_them():
    body = """
      %e = tensor.empty() : tensor<1x4x6x5xf32>
      %t = linalg.transpose ins(%x : tensor<1x6x5x4xf32>) outs(%e : tensor<1x4x6x5xf32>)
          permutation = [0, 3, 1, 2]
      %c = arith.constant 0.0 : f32
      %p = tensor.pad %t low[0, 0, 1, 2] high[0, 0, 1, 0] {
      ^bb0(%a: index, %b: index, %d: index, %f: index):
        tensor.yield %c : f32
      } : tensor<1x4x6x5xf32> to tensor<1x4x8x7xf32>
      %e2 = tensor.empty() : tensor<1x8x7x4xf32>
      %u = linalg.transpose ins(%p : tensor<1x4x8x7xf32>) outs(%e2 : tensor<1x8x7x4xf32>)
          permutation = [0, 2, 3, 1]
      %q = tensor.pad %t low[0, 0, 1, 1] high[0, 0, 1, 1] {
      ^bb0(%a: index, %b: index, %d: index, %f: index):
        tensor.yield %c : f32
      } : tensor<1x4x6x5xf32> to tensor<1x4x8x7xf32>
      return %u, %q : tensor<1x8x7x4xf32>, tensor<1x4x8x7xf32>"""
    text = linalg_func("%x: tensor<1x6x5x4xf32>", "(tensor<1x8x7x4xf32>, tensor<1x4x8x7xf32>)",
                       body)
    # %p (only a transpose uses it) moves; %q (returned) stays.
    out = _rewritten_once(text, sink_transposes_below_pads)
    # The moved pad pads %x's own dims (H low 1 high 1, W low 2): [N, H, W, C].
    assert "tensor.pad %arg0 low[0, 1, 2, 0] high[0, 1, 0, 0]" in out, out


def test_a_transpose_after_a_pad_of_a_channels_first_image_moves_before_it():
    body = """
      %c = arith.constant 0.0 : f32
      %p = tensor.pad %x low[0, 0, 1, 2] high[0, 0, 1, 0] {
      ^bb0(%a: index, %b: index, %d: index, %f: index):
        tensor.yield %c : f32
      } : tensor<1x4x6x5xf32> to tensor<1x4x8x7xf32>
      %e = tensor.empty() : tensor<1x8x7x4xf32>
      %u = linalg.transpose ins(%p : tensor<1x4x8x7xf32>) outs(%e : tensor<1x8x7x4xf32>)
          permutation = [0, 2, 3, 1]
      %q = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
      ^bb0(%a: index, %b: index, %d: index, %f: index):
        tensor.yield %c : f32
      } : tensor<1x4x6x5xf32> to tensor<1x4x8x7xf32>
      %e2 = tensor.empty() : tensor<1x8x7x4xf32>
      %v = linalg.transpose ins(%q : tensor<1x4x8x7xf32>) outs(%e2 : tensor<1x8x7x4xf32>)
          permutation = [0, 2, 3, 1]
      return %u, %v, %q : tensor<1x8x7x4xf32>, tensor<1x8x7x4xf32>, tensor<1x4x8x7xf32>"""
    text = linalg_func("%x: tensor<1x4x6x5xf32>",
                       "(tensor<1x8x7x4xf32>, tensor<1x8x7x4xf32>, tensor<1x4x8x7xf32>)", body)
    # %u's pad has no other user: the transpose moves before it; %q is also returned.
    out = _rewritten_once(text, hoist_transposes_above_pads)
    assert "linalg.transpose ins(%arg0 : tensor<1x4x6x5xf32>)" in out, out
    # The pad now pads the transposed [N, H, W, C] dims: H low 1 high 1, W low 2.
    assert "low[0, 1, 2, 0] high[0, 1, 0, 0]" in out, out
    assert out.count("tensor.pad") == 2


def test_a_channels_first_image_padded_for_a_depthwise_conv_is_read_channels_last(tools,
                                                                                 tmp_path):
    """ConvNeXt's block: the model's NCHW input padded into a depthwise conv whose output
    is permuted channels-last. After the rewrite no transpose reads a pad, so IREE cannot
    fuse one into the conv's input map."""
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.dw = nn.Conv2d(16, 16, 7, padding=3, groups=16)

        def forward(self, x):
            return self.dw(x).permute(0, 2, 3, 1) * 2

    from iree.compiler import ir

    torch.manual_seed(0)
    model, x = Block().eval(), torch.randn(1, 16, 12, 12)
    text = to_channels_last(import_model(model, (x,)))
    with ir.Context():
        module = ir.Module.parse(text)
        for t in walk_ops(module.operation, "linalg.transpose"):
            src = t.operands[0].owner
            assert isinstance(src, ir.Block) or src.name != "tensor.pad", text
    assert_computes_torchs_numbers(text, model, (x,), tools, tmp_path)


def test_a_transpose_after_a_channel_split_moves_before_it_where_the_split_stays_whole():
    body = """
      %s = tensor.expand_shape %x [[0], [1, 2], [3], [4]] output_shape [1, 2, 3, 4, 5]
          : tensor<1x6x4x5xf32> into tensor<1x2x3x4x5xf32>
      %e = tensor.empty() : tensor<1x4x5x2x3xf32>
      %u = linalg.transpose ins(%s : tensor<1x2x3x4x5xf32>) outs(%e : tensor<1x4x5x2x3xf32>)
          permutation = [0, 3, 4, 1, 2]
      %r = tensor.expand_shape %x [[0], [1, 2], [3], [4]] output_shape [1, 2, 3, 4, 5]
          : tensor<1x6x4x5xf32> into tensor<1x2x3x4x5xf32>
      %e2 = tensor.empty() : tensor<1x4x5x3x2xf32>
      %v = linalg.transpose ins(%r : tensor<1x2x3x4x5xf32>) outs(%e2 : tensor<1x4x5x3x2xf32>)
          permutation = [0, 3, 4, 2, 1]
      %r2 = tensor.expand_shape %y [[0, 1], [2, 3]] output_shape [2, 3, 4, 5]
          : tensor<6x20xf32> into tensor<2x3x4x5xf32>
      %e3 = tensor.empty() : tensor<4x3x2x5xf32>
      %w = linalg.transpose ins(%r2 : tensor<2x3x4x5xf32>) outs(%e3 : tensor<4x3x2x5xf32>)
          permutation = [2, 1, 0, 3]
      %s2 = tensor.expand_shape %x [[0], [1, 2], [3], [4]] output_shape [1, 2, 3, 4, 5]
          : tensor<1x6x4x5xf32> into tensor<1x2x3x4x5xf32>
      %a1 = linalg.transpose ins(%s2 : tensor<1x2x3x4x5xf32>) outs(%e : tensor<1x4x5x2x3xf32>)
          permutation = [0, 3, 4, 1, 2]
      %a2 = linalg.transpose ins(%s2 : tensor<1x2x3x4x5xf32>) outs(%e : tensor<1x4x5x2x3xf32>)
          permutation = [0, 3, 4, 1, 2]
      return %u, %v, %w, %a1, %a2 : tensor<1x4x5x2x3xf32>, tensor<1x4x5x3x2xf32>,
          tensor<4x3x2x5xf32>, tensor<1x4x5x2x3xf32>, tensor<1x4x5x2x3xf32>"""
    text = linalg_func("%x: tensor<1x6x4x5xf32>, %y: tensor<6x20xf32>",
                       "(tensor<1x4x5x2x3xf32>, tensor<1x4x5x3x2xf32>, tensor<4x3x2x5xf32>, "
                       "tensor<1x4x5x2x3xf32>, tensor<1x4x5x2x3xf32>)", body)
    # %u keeps the split [2, 3] together and in order: it moves; %v swaps its parts;
    # %w starts with a group's first dim but breaks both groups up; %s2 has two users.
    out = _rewritten_once(text, hoist_transposes_above_expands)
    assert "permutation = [0, 2, 3, 1]" in out, out
    assert "tensor.expand_shape %transposed [[0], [1], [2], [3, 4]] output_shape [1, 4, 5, 2, 3]" \
        in out, out
    assert "permutation = [0, 3, 4, 2, 1]" in out and "permutation = [2, 1, 0, 3]" in out, out
    assert out.count("permutation = [0, 3, 4, 1, 2]") == 2, out


def test_a_grouped_convs_channels_last_input_is_padded_channels_last(tools, tmp_path):
    """A grouped conv splits its channels between its input's pad and its own transpose:
    with the model's input exchanged channels-last, the pad pads that input and no
    transpose is left before the conv (its input transpose fused into the pad's copy made
    GRP-b1's conv read [G, C, H, W])."""
    from iree.compiler import ir

    torch.manual_seed(0)
    model = nn.Conv2d(8, 8, 3, padding=1, groups=2, bias=False).eval()
    wrapped, inputs = wrap_channels_last("grouped", model, (torch.randn(1, 8, 6, 6),))
    text = to_channels_last(import_model(wrapped, inputs))
    with ir.Context():
        module = ir.Module.parse(text)
        pads = list(walk_ops(module.operation, "tensor.pad"))
        assert len(pads) == 1 and isinstance(pads[0].operands[0].owner, ir.Block), text
        conv = next(op for op in walk_ops(module.operation, "linalg.generic")
                    if "reduction" in str(op.attributes["iterator_types"]))
        src = conv.operands[0].owner
        assert src.name == "tensor.expand_shape", text
        assert src.operands[0].owner.name == "tensor.pad", text
    assert_computes_torchs_numbers(text, wrapped, inputs, tools, tmp_path)


_DEPTHWISE_NHWC = """
#x = affine_map<(n, h, w, c, kh, kw) -> (n, h + kh, w + kw, c)>
#k = affine_map<(n, h, w, c, kh, kw) -> (kh, kw, c)>
#o = affine_map<(n, h, w, c, kh, kw) -> (n, h, w, c)>
func.func @main(%x: tensor<2x14x14x32xf32>, %k: tensor<3x3x32xf32>) -> tensor<2x12x12x32xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x12x12x32xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<2x12x12x32xf32>) -> tensor<2x12x12x32xf32>
  %r = linalg.generic {indexing_maps = [#x, #k, #o], iterator_types = ["parallel",
      "parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%x, %k : tensor<2x14x14x32xf32>, tensor<3x3x32xf32>)
      outs(%f : tensor<2x12x12x32xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<2x12x12x32xf32>
  return %r : tensor<2x12x12x32xf32>
}"""


def test_a_depthwise_convs_channels_are_its_vector_lanes():
    ops = ops_of(_DEPTHWISE_NHWC)
    root = next(o for o in ops if o.reduction_dims)
    lane = lane_loop(root)
    # The channel is in every operand (a batch loop) yet the output's contiguous dim.
    assert root.extents[lane] == 32 and lane not in unit_loops(root)
    sketches = generate_sketches(ops, default_cpu_rules())
    rng = random.Random(0)
    lanes = {root_nest(ops, annotate(ops, sketches[i % len(sketches)], rng,
                                     target=host())).lanes for i in range(60)}
    assert max(lanes) >= host().f32_lanes, lanes


def make_depthwise():
    """(model, inputs) factory for the CLI test: a padded depthwise conv and ReLU."""
    torch.manual_seed(0)
    return (nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False),
                          nn.ReLU()).eval(), (torch.randn(2, 16, 12, 12),))


def test_tune_hands_back_a_module_taking_channels_last_tensors(tmp_path):
    import json

    from mlir_ansor import api

    out = tmp_path / "run"
    res = tune_cli(f"{__file__}:make_depthwise", "--io-layout", "channels-last", "--trials",
                   "4", "--batch", "2", "--out", str(out), *QUICK_CLI)
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    entry = next(iter(report["e2e"].values()))
    assert entry["io_layout"] == "channels-last" and entry["channels_last"]
    assert "Inputs and outputs (--io-layout channels-last)" in (out / "report.txt").read_text()
    assert "NHWC / NDHWC" in (out / "build.sh").read_text()
    model, inputs = make_depthwise()
    module = api.load(model, inputs, out)
    x = inputs[0].contiguous(memory_format=torch.channels_last)
    y = torch.from_numpy(module(x.permute(0, 2, 3, 1)))
    assert y.shape == (2, 12, 12, 16)
    with torch.no_grad():
        torch.testing.assert_close(y.permute(0, 3, 1, 2), model(inputs[0]), rtol=1e-4,
                                   atol=1e-4)
