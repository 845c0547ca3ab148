"""IREE's pad fusion as a model build choice: the decision, the layout file, a dispatch
holding a fused pad left to IREE's kernel, and every build of a fused form with the flag."""
import json

import pytest
import torch
from torch import nn

from mlir_ansor.errors import UsageError
from mlir_ansor.tuner.driver import TuneOptions
from mlir_ansor.tuner.layouts import (PAD_FUSION_FLAGS, PAD_FUSION_MARGIN, ModelLayout,
                                      decide_pad_fusion, load_layout, save_layout)
from tests.conftest import QUICK_CLI, tune_cli


def test_pad_fusion_is_taken_only_when_clearly_faster():
    assert decide_pad_fusion(1.0e-3, 0.5e-3).on
    tie = decide_pad_fusion(1.0e-3, 1.0e-3 / (PAD_FUSION_MARGIN * 0.99))
    assert not tie.on and "not over" in tie.why


def test_the_layout_carries_the_flag_to_every_build(tmp_path):
    layout = ModelLayout(channels_last=True, fuse_pads=True)
    assert set(PAD_FUSION_FLAGS) <= set(layout.flags)
    assert layout.codegen_flags == PAD_FUSION_FLAGS and layout.changed
    assert ModelLayout().codegen_flags == ()
    save_layout(tmp_path / "layout.json", layout)
    assert load_layout(tmp_path / "layout.json") == layout
    # A layout file from before pad fusion: off.
    data = json.loads((tmp_path / "layout.json").read_text())
    del data["fuse_pads"]
    (tmp_path / "layout.json").write_text(json.dumps(data))
    assert not load_layout(tmp_path / "layout.json").fuse_pads


def test_unknown_pad_fusion_is_a_usage_error():
    with pytest.raises(UsageError, match="--pad-fusion"):
        TuneOptions(pad_fusion="maybe").check()


def make_padded_depthwise():
    torch.manual_seed(0)
    return (nn.Sequential(nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False)).eval(),
            (torch.randn(2, 32, 14, 14),))


def test_a_fused_pad_is_left_to_iree_and_every_build_passes_the_flag(tmp_path):
    out = tmp_path / "run"
    quick = [a for a in QUICK_CLI]
    i = quick.index("--pad-fusion")
    quick[i + 1] = "on"
    res = tune_cli(f"{__file__}:make_padded_depthwise", "--io-layout", "channels-last",
                   "--trials", "2", "--batch", "2", "--out", str(out), *quick)
    assert res.returncode == 0, res.stderr[-2000:]
    entry = next(iter(json.loads((out / "report.json").read_text())["e2e"].values()))
    assert entry["pad_fusion"]
    text = (out / "report.txt").read_text()
    assert "IREE pad fusion" in text and "--pad-fusion on" in text
    # One dispatch holds the pad and the conv: no strategy of ours applies to it (every
    # candidate was "not configured"), so it is left to IREE's kernel, not measured.
    report = json.loads((out / "report.json").read_text())
    statuses = [t["status"] for t in report["tasks"]]
    assert any("a pad fused into the dispatch" in s for s in statuses), statuses
    assert not (out / "records.jsonl").exists() or not (out / "records.jsonl").read_text()
    assert PAD_FUSION_FLAGS[0] in (out / "build.sh").read_text()


def test_auto_decides_end_to_end_on_the_tuned_forms(tmp_path):
    """--pad-fusion auto: the tuned model is built again with the flag at the hand-back,
    checked and timed; whichever way it went, the report, layout.json and build.sh agree,
    and the handed-back module computes torch's numbers (the e2e step checked it)."""
    out = tmp_path / "run"
    quick = [a for a in QUICK_CLI]
    quick[quick.index("--pad-fusion") + 1] = "auto"
    res = tune_cli(f"{__file__}:make_padded_depthwise", "--io-layout", "channels-last",
                   "--trials", "4", "--batch", "2", "--out", str(out), *quick)
    assert res.returncode == 0, res.stderr[-2000:]
    text = (out / "report.txt").read_text()
    assert "the tuned model end to end" in text and "decided end to end" in text, text
    entry = next(iter(json.loads((out / "report.json").read_text())["e2e"].values()))
    on = entry["pad_fusion"]
    assert json.loads((out / "layout.json").read_text())["fuse_pads"] == on
    if entry["handed_back"] == "tuned":
        assert (PAD_FUSION_FLAGS[0] in (out / "build.sh").read_text()) == on
    assert not (out / "with_pad_fusion").exists()


def test_a_strategy_lost_only_to_pad_fusion_says_so():
    """The report lists the unfused form's tasks: a strategy absent from the fused form
    (its dispatch took in a pad) or dropped only in its build is explained by the fusion,
    the others keep their reason."""
    from types import SimpleNamespace as NS

    from mlir_ansor.tuner.stages.hand_back import FUSED_AWAY, _fused_drops

    def export(ids, dropped):
        return NS(mine=lambda name: [NS(task_id=i) for i in ids], dropped=dropped)

    plain = export(["t0", "t1", "t3"], {"t2": "slower in the model"})
    fused = export(["t0"], {"t1": "not applied in the model: default kept",
                            "t2": "slower in the model"})
    _fused_drops(fused, plain, "m")
    assert fused.dropped["t2"] == "slower in the model"
    assert fused.dropped["t1"] == f"{FUSED_AWAY} (not applied in the model: default kept)"
    assert fused.dropped["t3"] == FUSED_AWAY and "t0" not in fused.dropped
