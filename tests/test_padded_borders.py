"""Padded convolutions split into interior and border rows (dialect_helpers/padded_borders.py):
the segments and taps of an axis, which convs the rule offers, that every split form still
computes torch's numbers (as imported and channels-last), and the layout that carries it."""
import pytest
import torch
from torch import nn

from mlir_ansor.dialect_helpers.activation_layout import to_channels_last
from mlir_ansor.dialect_helpers.linalg_info import linalg_ops
from mlir_ansor.dialect_helpers.padded_borders import (BorderRule, BorderSplitError,
                                                       PaddedAxis, Segment, border_sites,
                                                       with_border_split)
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.layouts import ModelLayout, load_layout, save_layout
from tests.conftest import assert_computes_torchs_numbers

EVERY_AXIS = BorderRule(min_saved=0.0, max_regions=64)  # split wherever it can


def _axis(size: int, low: int, kernel: int, stride: int = 1, dilation: int = 1,
          high: int | None = None) -> PaddedAxis:
    high = low if high is None else high
    outputs = (size + low + high - dilation * (kernel - 1) - 1) // stride + 1
    return PaddedAxis(0, 0, 1, stride, dilation, size, low, outputs, kernel)


def test_a_three_tap_window_over_one_row_of_padding_has_two_border_rows():
    ax = _axis(4, 1, 3)
    assert ax.segments() == [Segment(0, 1, 1, 2), Segment(1, 2, 0, 3), Segment(3, 1, 0, 2)]
    assert ax.real_share() == pytest.approx(10 / 12)


def test_strided_and_dilated_windows_keep_only_the_taps_on_the_image():
    # stride 2, kernel 3, padding 1 on 7: outputs 0..3 read padded 2o..2o+2 of 0..8
    assert _axis(7, 1, 3, stride=2).segments() == [Segment(0, 1, 1, 2), Segment(1, 2, 0, 3),
                                                   Segment(3, 1, 0, 2)]
    # the same with no padding high: outputs 0..2, the last windows on the image
    assert _axis(7, 1, 3, stride=2, high=0).segments() == [Segment(0, 1, 1, 2),
                                                           Segment(1, 2, 0, 3)]
    # dilation 2, kernel 3, padding 2 on 5: output o reads o-2, o, o+2
    assert _axis(5, 2, 3, dilation=2).segments() == [
        Segment(0, 2, 1, 2), Segment(2, 1, 0, 3), Segment(3, 2, 0, 2)]
    # a 1x1 window over padding: the border rows read nothing of the image
    assert _axis(3, 1, 1).segments() == [Segment(0, 1, 0, 0), Segment(1, 3, 0, 1),
                                         Segment(4, 1, 0, 0)]


def _text(conv: nn.Module, shape: tuple[int, ...]):
    torch.manual_seed(0)
    model, inputs = conv.eval(), (torch.randn(*shape),)
    return model, inputs, import_model(model, inputs)


def test_the_rule_offers_a_small_padded_depth_and_not_a_large_image():
    """A 3x3x3 conv over a depth of 4 wastes a sixth of its taps along the depth (split
    alone: three convs); along 14 rows only 1/21; a 56x56 image and an unpadded conv are
    not worth a split; a max pool is not a multiply-accumulate."""
    _, _, text = _text(nn.Conv3d(4, 8, 3, 1, 1, bias=False), (2, 4, 4, 14, 14))
    (site,) = border_sites(text)
    assert [(a.image_dim, a.size, a.low) for a in site.axes] == [(2, 4, 1)]
    assert (site.saved, site.regions) == (pytest.approx(1 / 6), 3)
    assert border_sites(to_channels_last(text))[0].axes[0].image_dim == 1  # NDHWC
    for conv, shape in [(nn.Conv2d(4, 8, 3, 1, 1), (1, 4, 56, 56)),
                        (nn.Conv3d(4, 8, 3, 1, 0), (2, 4, 4, 14, 14)),
                        (nn.MaxPool2d(3, 1, 1), (1, 4, 4, 4))]:
        assert border_sites(_text(conv, shape)[2]) == [], conv


CASES = {  # name: (module, input shape, convolutions after the split by EVERY_AXIS)
    "3d-depth": (nn.Conv3d(3, 4, 3, 1, 1, bias=False), (2, 3, 4, 6, 5), 27),
    "2d-stride2-bias": (nn.Conv2d(3, 8, 3, 2, 1), (1, 3, 9, 16), 6),
    "2d-dilated": (nn.Conv2d(2, 3, 3, 1, 2, dilation=2), (1, 2, 5, 6), 9),
    "2d-asymmetric": (nn.Conv2d(2, 3, (3, 5), 1, (1, 2)), (1, 2, 4, 7), 15),
    "1d": (nn.Conv1d(3, 4, 5, 1, 2, bias=False), (2, 3, 9), 5),
    # the border rows of a 1x1 conv with padding read only zeros: no conv there
    "1x1-padded": (nn.Conv2d(3, 4, 1, 1, 1, bias=False), (1, 3, 4, 4), 1),
}


def _convs(text: str) -> int:
    from iree.compiler import ir
    with ir.Context():
        return sum(1 for o in linalg_ops(ir.Module.parse(text)) if "conv" in o.name
                   or o.name == "linalg.generic" and "reduction" in str(
                       o.attributes["iterator_types"]))


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("channels_last", [False, True])
def test_split_convs_keep_torchs_numbers(name, channels_last, tools, tmp_path):
    conv, shape, convs = CASES[name]
    model, inputs, text = _text(conv, shape)
    if channels_last:
        text = to_channels_last(text)
    sites = [s.index for s in border_sites(text, EVERY_AXIS)]
    assert len(sites) == 1
    split = with_border_split(text, sites, EVERY_AXIS)
    assert _convs(split) == convs, split[:4000]
    assert "tensor.extract_slice" in split
    assert_computes_torchs_numbers(split, model, inputs, tools, tmp_path, atol=1e-5)


def test_a_site_that_is_no_padded_conv_is_refused():
    _, _, text = _text(nn.Conv3d(4, 8, 3, 1, 1, bias=False), (2, 4, 4, 14, 14))
    with pytest.raises(BorderSplitError, match="site 0 is not a padded convolution"):
        with_border_split(text, [0])


def test_the_layout_carries_the_split_sites(tmp_path):
    _, _, text = _text(nn.Conv3d(4, 8, 3, 1, 1, bias=False), (2, 4, 4, 14, 14))
    layout = ModelLayout(channels_last=True,
                         border_sites=tuple(s.index for s in
                                            border_sites(to_channels_last(text))))
    assert layout.changed and layout.border_sites
    save_layout(tmp_path / "layout.json", layout)
    assert load_layout(tmp_path / "layout.json") == layout
    assert _convs(layout.apply(text)) == 3


def test_a_split_conv_is_tuned_beside_its_padded_form_and_one_handed_back(tmp_path):
    """With --split-borders auto the layout stage splits the conv (its default build checked
    against torch) and forms the padded model as the other form: both are tuned, both
    timed end to end, and the layout handed back is the one the report says won."""
    from mlir_ansor import api
    import json

    out = tmp_path / "run"
    model, inputs, _ = _text(nn.Conv3d(4, 8, 3, 1, 1, bias=False), (2, 4, 4, 8, 8))
    api.tune(model, inputs, trials=6, out=out, batch=2, repeat=2, min_repeat_ms=10,
             retime_rounds=2, e2e_rounds=2, pad_fusion="off")
    report = json.loads((out / "report.json").read_text())
    entry = next(iter(report["e2e"].values()))
    padded, split = entry["border_speedups"]  # both tuned forms built and timed
    names = [t["dispatch"] for t in report["tasks"]]
    assert any(n.endswith("(padded)") for n in names), names
    split_kept = entry["border_sites"] != []
    assert split_kept == (not padded > split * api.TuneOptions().min_speedup)
    assert bool(load_layout(out / "layout.json").border_sites) == split_kept
    text = (out / "report.txt").read_text()
    assert "Border split of" in text and "decided end to end on the tuned forms" in text, text
