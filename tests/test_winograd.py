"""3x3 convolutions by Winograd F(6x6, 3x3) (dialect_helpers/winograd.py): which sites are
eligible, the rewrite (its numbers against a direct convolution), the layout file, the
decision, and tuning runs that tune the transforms and the batch matmul it forms."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from mlir_ansor.dialect_helpers.winograd import (MAX_TILE_WASTE, MIN_TILES, WINOGRAD_AT,
                                                 WINOGRAD_BT, WINOGRAD_G, WinogradError,
                                                 tile_waste,
                                                 winograd_sites, with_winograd)
from mlir_ansor.errors import UsageError
from mlir_ansor.tuner.driver import TuneOptions
from mlir_ansor.dialect_helpers.data_tiling_hints import (DataTilingHintError, hint_sites,
                                                          same_contractions)
from mlir_ansor.tuner.layouts import (WINOGRAD_MARGIN, DataTilingChoice, ModelLayout,
                                      WinogradChoice, decide_winograd, load_layout,
                                      save_layout)
from mlir_ansor.tuner.stages.layout_choice import flip_winograd
from mlir_ansor.tuner.stages.state import ModelForms
from tests.conftest import QUICK_CLI, tune_cli


def _conv(name: str, x: str, w: str, out: str, strides: int = 1, dilations: int = 1) -> str:
    return (f"linalg.{name} {{dilations = dense<{dilations}> : tensor<2xi64>, strides = "
            f"dense<{strides}> : tensor<2xi64>}} ins(%x, %w : {x}, {w}) outs(%f : {out}) "
            f"-> {out}")


def _model(*convs: tuple[str, str, str, str, int, int]) -> str:
    """A function with one argument per conv (input, weight, init), returning each."""
    args, body, rets = [], [], []
    for i, (name, x, w, out, s, d) in enumerate(convs):
        args += [f"%x{i}: {x}", f"%w{i}: {w}", f"%f{i}: {out}"]
        body.append(f"  %r{i} = " + _conv(name, x, w, out, s, d)
                    .replace("%x,", f"%x{i},").replace("%w :", f"%w{i} :")
                    .replace("%f :", f"%f{i} :"))
        rets.append((f"%r{i}", out))
    return (f"func.func @main({', '.join(args)}) -> ({', '.join(t for _, t in rets)}) {{\n"
            + "\n".join(body) + f"\n  return {', '.join(r for r, _ in rets)} : "
            f"{', '.join(t for _, t in rets)}\n}}")


NHWC = ("conv_2d_nhwc_hwcf", "tensor<1x10x10x8xf32>", "tensor<3x3x8x16xf32>",
        "tensor<1x8x8x16xf32>", 1, 1)
STRIDED = ("conv_2d_nhwc_hwcf", "tensor<1x10x10x8xf32>", "tensor<3x3x8x16xf32>",
           "tensor<1x4x4x16xf32>", 2, 1)
DILATED = ("conv_2d_nhwc_hwcf", "tensor<1x10x10x8xf32>", "tensor<3x3x8x16xf32>",
           "tensor<1x6x6x16xf32>", 1, 2)
ONE_BY_ONE = ("conv_2d_nhwc_hwcf", "tensor<1x10x10x8xf32>", "tensor<1x1x8x16xf32>",
              "tensor<1x10x10x16xf32>", 1, 1)
F16 = ("conv_2d_nhwc_hwcf", "tensor<1x10x10x8xf16>", "tensor<3x3x8x16xf16>",
       "tensor<1x8x8x16xf16>", 1, 1)
DYNAMIC = ("conv_2d_nhwc_hwcf", "tensor<?x10x10x8xf32>", "tensor<3x3x8x16xf32>",
           "tensor<?x8x8x16xf32>", 1, 1)


NHWC24 = ("conv_2d_nhwc_hwcf", "tensor<1x26x26x8xf32>", "tensor<3x3x8x16xf32>",
          "tensor<1x24x24x16xf32>", 1, 1)
NCHW14 = ("conv_2d_nchw_fchw", "tensor<2x8x16x16xf32>", "tensor<16x8x3x3xf32>",
          "tensor<2x16x14x14xf32>", 1, 1)
FEW_TILES = ("conv_2d_nhwc_hwcf", "tensor<1x16x16x8xf32>", "tensor<3x3x8x16xf32>",
             "tensor<1x14x14x16xf32>", 1, 1)


def test_only_3x3_stride_1_f32_static_convolutions_are_sites():
    text = _model(NHWC24, STRIDED, DILATED, ONE_BY_ONE, F16, DYNAMIC, NCHW14, NHWC, FEW_TILES)
    sites = winograd_sites(text)
    # Not offered: 8x8 would compute 12x12 in whole tiles (2.25x its area); one 14x14
    # image makes 9 tiles (two make 18: offered).
    assert [s.index for s in sites] == [0, 6]
    assert sites[0].signature.startswith("linalg.conv_2d_nhwc_hwcf(tensor<1x26x26x8xf32>")
    assert sites[1].signature.startswith("linalg.conv_2d_nchw_fchw(")
    assert tile_waste(8, 8) == 2.25 > MAX_TILE_WASTE >= tile_waste(14, 14) == 324 / 196
    assert MIN_TILES == 16
    rewritten = with_winograd(text, [0, 6])
    assert rewritten.count("linalg.batch_matmul") == 2
    assert text.count("linalg.conv_2d") - rewritten.count("linalg.conv_2d") == 2
    assert [s.index for s in winograd_sites(rewritten)] == []  # the others stay direct


def test_the_matrices_compute_a_correlation():
    rng = np.random.default_rng(0)
    d, g = rng.standard_normal((8, 8)), rng.standard_normal((3, 3))
    y = WINOGRAD_AT @ ((WINOGRAD_G @ g @ WINOGRAD_G.T) * (WINOGRAD_BT @ d @ WINOGRAD_BT.T)) \
        @ WINOGRAD_AT.T
    direct = np.array([[(d[a:a + 3, b:b + 3] * g).sum() for b in range(6)] for a in range(6)])
    np.testing.assert_allclose(y, direct, atol=1e-12)


def _run(text: str, *args: np.ndarray) -> np.ndarray:
    import iree.compiler as ic
    import iree.runtime as rt
    vmfb = ic.compile_str(text, target_backends=["llvm-cpu"],
                          extra_args=["--iree-llvmcpu-target-cpu=generic"])
    return rt.load_vm_flatbuffer(vmfb, driver="local-sync").main(*args).to_host()


@pytest.mark.parametrize("layout,image,channels", [
    ("nhwc", 10, (8, 16)),   # 8x8 output: 2x2 tiles of 6, sliced back to 8x8
    ("nhwc", 14, (3, 5)),    # 12x12: whole tiles; channels no vector fills
    ("nchw", 11, (4, 8)),    # 9x9 output, channels-first
])
def test_the_rewrite_computes_the_convolution(layout, image, channels):
    c, f = channels
    o = image - 2
    if layout == "nhwc":
        x_t, w_t, o_t = (f"tensor<2x{image}x{image + 1}x{c}xf32>", f"tensor<3x3x{c}x{f}xf32>",
                         f"tensor<2x{o}x{o + 1}x{f}xf32>")
        name = "conv_2d_nhwc_hwcf"
    else:
        x_t, w_t, o_t = (f"tensor<2x{c}x{image}x{image + 1}xf32>", f"tensor<{f}x{c}x3x3xf32>",
                         f"tensor<2x{f}x{o}x{o + 1}xf32>")
        name = "conv_2d_nchw_fchw"
    text = _model((name, x_t, w_t, o_t, 1, 1))
    rewritten = with_winograd(text, [0])
    assert "linalg.conv_2d" not in rewritten and "linalg.batch_matmul" in rewritten
    # every map a projected permutation: no window map (d0 * 6 + d1) is left to vectorize
    assert "* 6" not in rewritten
    rng = np.random.default_rng(1)
    shape = lambda t: [int(v) for v in t[7:-5].split("x")]
    x, w, init = (rng.standard_normal(shape(t)).astype(np.float32) for t in (x_t, w_t, o_t))
    direct, wino = _run(text, x, w, init), _run(rewritten, x, w, init)
    # the bias (the conv's init) is added after the transforms
    np.testing.assert_allclose(wino, direct, rtol=1e-4, atol=1e-4 * np.abs(direct).max())


def test_a_conv_into_a_bias_adds_it_after_the_output_transform():
    text = _model(NHWC)
    rewritten = with_winograd(text, [0])
    # after the batch matmul: the output transforms, the 8x8 image sliced from 2x2 tiles
    # of 6x6, then the conv's old init (%arg2) added to it and returned
    tail = rewritten[rewritten.index("linalg.batch_matmul"):]
    assert "tensor.extract_slice" in tail and "to tensor<1x8x8x16xf32>" in tail
    add = tail[tail.index("to tensor<1x8x8x16xf32>"):]
    assert "linalg.generic" in add and "%arg2 : tensor<1x8x8x16xf32>" in add, add
    assert "arith.addf" in add and "return %" in add
    # the zero fill the conv accumulated into went with it: every op pairs with its
    # generic form (data tiling's sites and packing need that)
    from iree.compiler import ir

    from mlir_ansor.dialect_helpers.linalg_info import generic_forms
    with ir.Context():
        assert generic_forms(rewritten) is not None


def test_a_site_that_is_not_eligible_is_an_error():
    text = _model(NHWC, STRIDED)
    with pytest.raises(WinogradError, match="site 1 is a linalg.conv_2d_nhwc_hwcf, not a 3x3"):
        with_winograd(text, [1])
    with pytest.raises(WinogradError, match="site 5 outside the model's 2 linalg ops"):
        with_winograd(text, [5])


def test_the_layout_rewrites_the_sites_and_needs_no_flag(tmp_path):
    layout = ModelLayout(winograd_sites=(0,))
    assert layout.flags == () and layout.changed
    assert layout.codegen_flags == ()
    assert layout.apply(_model(NHWC, STRIDED)).count("linalg.batch_matmul") == 1
    save_layout(tmp_path / "layout.json", layout)
    assert load_layout(tmp_path / "layout.json") == layout
    data = json.loads((tmp_path / "layout.json").read_text())
    del data["winograd_sites"]  # a layout file from before: direct convolutions
    (tmp_path / "layout.json").write_text(json.dumps(data))
    assert load_layout(tmp_path / "layout.json").winograd_sites == ()


def test_winograd_is_taken_only_when_clearly_faster():
    on = decide_winograd(1.0, 0.5, (3, 17))
    assert on.on and on.sites == (3, 17) and on.why == ""
    off = decide_winograd(1.0, 0.97, (3, 17))
    assert not off.on and off.sites == () and "not over 1.05x faster" in off.why


def test_unknown_mode_is_a_usage_error():
    with pytest.raises(UsageError, match="--winograd"):
        TuneOptions(winograd="maybe").check()


def make_conv():
    torch.manual_seed(0)
    return (nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU()).eval(),
            (torch.randn(1, 8, 20, 20),))


def test_a_tuning_run_with_winograd_tunes_its_batch_matmul(tmp_path):
    out = tmp_path / "run"
    res = tune_cli(f"{__file__}:make_conv", "--trials", "4", "--batch", "2",
                   "--winograd", "on", "--out", str(out), *QUICK_CLI)
    assert res.returncode == 0, res.stderr[-2000:]
    text = (out / "report.txt").read_text()
    assert "Winograd F(6x6, 3x3) of" in text and "on for 1 convolutions" in text, text
    entry = next(iter(json.loads((out / "report.json").read_text())["e2e"].values()))
    assert entry["winograd_sites"] == list(load_layout(out / "layout.json").winograd_sites)
    assert len(entry["winograd_sites"]) == 1
    assert "linalg.batch_matmul" in (out / "model_tuned.mlir").read_text()
    # 20x20 -> 4x4 tiles of 6x6: 64 matmuls of 16 tiles x 8 channels by 8 x 16, and the
    # transforms around it are tasks too (IREE folds the filter's on the constant weight).
    tasks = json.loads((out / "tasks.json").read_text())
    ops = "".join(t["ops_mlir"] for t in tasks)
    assert "linalg.batch_matmul" in ops and "tensor<64x16x8xf32>, tensor<64x8x16xf32>" in ops
    assert "tensor<8x6xf32>" in ops and "tensor<6x8xf32>" in ops  # B^T's halves, A^T
    assert len(tasks) >= 5, [t["ops_mlir"][:200] for t in tasks]
    res = tune_cli(f"{__file__}:make_conv", "--trials", "2", "--batch", "2",
                   "--winograd", "off", "--out", str(out / "off"), *QUICK_CLI)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Winograd" not in (out / "off" / "report.txt").read_text()
    assert "linalg.batch_matmul" not in (out / "off" / "model_tuned.mlir").read_text()


MATMUL_AFTER_CONV = """func.func @main(%x: tensor<1x10x10x8xf32>, %w: tensor<3x3x8x16xf32>,
    %f: tensor<1x8x8x16xf32>, %a: tensor<4x8xf32>, %b: tensor<8x4xf32>, %c: tensor<4x4xf32>)
    -> (tensor<1x8x8x16xf32>, tensor<4x4xf32>) {
  %0 = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%x, %w : tensor<1x10x10x8xf32>, tensor<3x3x8x16xf32>) outs(%f : tensor<1x8x8x16xf32>) -> tensor<1x8x8x16xf32>
  %1 = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x4xf32>) outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0, %1 : tensor<1x8x8x16xf32>, tensor<4x4xf32>
}"""


def test_data_tiled_sites_follow_their_contractions_into_the_other_form():
    # The rewrite adds its transforms, batch matmul and the bias's add before the matmul:
    # its data-tiling site moves with it when the hand-back builds the form with Winograd
    # the other way; the rewrite's own contractions are no sites.
    marked = with_winograd(MATMUL_AFTER_CONV, [0])
    assert [s.index for s in hint_sites(MATMUL_AFTER_CONV)] == [1]
    assert [s.index for s in hint_sites(marked)] == [15]
    assert same_contractions(MATMUL_AFTER_CONV, marked, [1]) == (15,)
    assert same_contractions(marked, MATMUL_AFTER_CONV, [15]) == (1,)
    with pytest.raises(DataTilingHintError, match="no contraction"):
        same_contractions(MATMUL_AFTER_CONV, marked, [0])
    with pytest.raises(DataTilingHintError, match="not have the same contractions"):
        same_contractions(MATMUL_AFTER_CONV, _model(NHWC), [1])


def make_conv_classifier():
    """A conv and a classifier whose weight the first form may pack."""
    torch.manual_seed(0)
    return (nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(16, 64)).eval(),
            (torch.randn(1, 8, 20, 20),))


def test_with_winograd_auto_both_forms_are_tuned_and_the_faster_is_handed_back(tmp_path):
    out = tmp_path / "run"
    res = tune_cli(f"{__file__}:make_conv_classifier", "--trials", "10", "--batch", "2",
                   "--winograd", "auto", "--out", str(out), *QUICK_CLI)
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    entry = next(iter(report["e2e"].values()))
    # The form tuned first is the one IREE's default builds chose; the other form's
    # dispatches are tasks too, named by their form.
    plain_s, wino_s = entry["winograd_default_s"]
    first_on = plain_s > wino_s * WINOGRAD_MARGIN
    other = "direct" if first_on else "Winograd"
    statuses = [t["status"] for t in report["tasks"]]
    assert any(s == f"only in the {other} form: not handed back" or
               s.startswith(f"{other} form: ") for s in statuses), statuses
    # The classifier's packed weight is a task of the first form only: the other form is
    # built without packed weights.
    packed = [t for t in report["tasks"] if t["dispatch"].endswith("(packed)")]
    assert len(packed) == 1, [t["dispatch"] for t in report["tasks"]]
    # Both tuned forms were built, checked and timed end to end; the other is taken only
    # where it is clearly faster.
    direct, winograd = entry["winograd_speedups"]
    now, then = (winograd, direct) if first_on else (direct, winograd)
    on = first_on != (then > now * TuneOptions().min_speedup)
    assert bool(entry["winograd_sites"]) == on, entry
    assert bool(load_layout(out / "layout.json").winograd_sites) == on
    assert ("linalg.batch_matmul" in (out / "model_tuned.mlir").read_text()) == on
    text = (out / "report.txt").read_text()
    assert "the tuned model end to end: direct" in text, text
    assert "decided end to end on the tuned forms" in text, text
    if on != first_on:  # the other form handed back: it has no packed weight
        first = "Winograd" if first_on else "direct"
        assert packed[0]["status"].endswith(f", in the {first} form only: not handed back"), \
            packed[0]


def test_the_other_form_flips_winograd_and_moves_the_data_tiled_sites():
    first = ModelForms(None, False, Path("model.mlir"), frozenset(), (), (), "",
                       data_tiling=DataTilingChoice(True, 1.0, 0.5, sites=(1,)),
                       winograd=WinogradChoice(False, 1.0, 2.0, "slower", built=(0,)))
    other = flip_winograd(first, MATMUL_AFTER_CONV)
    assert other.winograd.on and other.winograd_sites == (0,)
    assert other.tiled_sites == (15,)  # after the rewrite's ops and the split bias's add
    assert other.layout().apply(MATMUL_AFTER_CONV).count("linalg.batch_matmul") == 1
    back = flip_winograd(other, MATMUL_AFTER_CONV)
    assert not back.winograd.on and back.winograd_sites == () and back.tiled_sites == (1,)


def test_a_task_absent_from_the_form_handed_back_says_why():
    """After the other form is taken, the first form's own dispatches and its packed
    weights (the other form is built without them) are named as not handed back."""
    from types import SimpleNamespace

    from mlir_ansor.tuner.layouts import Alternative
    from mlir_ansor.tuner.stages.reporting import absent_why
    from mlir_ansor.tuner.stages.state import OtherForm

    def task(key, layout_of="", form=""):
        return SimpleNamespace(key=key, layout_of=layout_of, form=form)

    fc = task("fc-packed", layout_of="site 11 (linalg.matmul)")
    first = ModelForms(None, False, Path("model.mlir"), frozenset(), (), (fc,), "")
    taken = ModelForms(  # the Winograd form, handed back; its other form is the first
        None, False, Path("model.mlir"), frozenset(), (), (), "",
        winograd=WinogradChoice(True, sites=(0,), speedups=(1.2, 1.5)),
        other=OtherForm(first, Alternative((), (("bmm", 1),), (("conv", 1),)), ()))
    state = SimpleNamespace(forms={"m": taken})
    assert absent_why(state, task("conv")) == "only in the direct form: not handed back"
    assert absent_why(state, fc) == ("packed site 11 (linalg.matmul), in the direct form "
                                     "only: not handed back")
    # Without a second form: a packed weight not used, a dispatch a packing replaced.
    state = SimpleNamespace(forms={"m": ModelForms(None, False, Path("model.mlir"), frozenset(),
                                                   (), (), "")})
    assert absent_why(state, fc) == "packed site 11 (linalg.matmul): not used"
    assert absent_why(state, task("other")) == "replaced by a packed layout"
