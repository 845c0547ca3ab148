"""Constant weights' transposes folded at compile time instead of propagated into the
contractions (IREE's default), which then read the weight across their vector lanes: the
decision and a tuning run that carries the flag to every build (the layout file:
test_propagate_transposes.py)."""
import json

import pytest
import torch
from torch import nn

from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.layouts import (FOLD_TRANSPOSES_FLAGS, decide_fold_transposes,
                                      lane_strided_mflop, load_layout)
from mlir_ansor.tuner.tasks import extract_tasks, flow_source
from tests.conftest import QUICK_CLI, tune_cli


class MatMul(nn.Module):
    def forward(self, a, b):
        return a @ b


def _tasks(tmp_path, model, inputs, tools, flags=()):
    torch.manual_seed(0)
    src = tmp_path / "model.mlir"
    src.write_text(import_model(model.eval(), inputs))
    return extract_tasks(flow_source(src, "llvm-cpu", tools, 300, flags))


def test_a_linear_layer_reads_its_weight_across_the_lanes_unless_folded(tmp_path, tools):
    # nn.Linear computes x @ W^T with W [out, in]: IREE's propagation makes the matmul
    # read W[n, k] while the lanes run along n; folded, the weight is [k, n].
    model, x = nn.Linear(64, 48), torch.randn(32, 64)
    plain = _tasks(tmp_path, model, (x,), tools)
    folded = _tasks(tmp_path, model, (x,), tools, FOLD_TRANSPOSES_FLAGS)
    flops = 2 * 32 * 64 * 48 / 1e6
    assert lane_strided_mflop(plain) == pytest.approx(flops, rel=0.01)
    assert lane_strided_mflop(folded) == 0
    choice = decide_fold_transposes(plain, folded, "auto")
    assert choice.on and choice.strided_mflop == (lane_strided_mflop(plain), 0)
    # Nothing the other way round: folding must leave fewer strided reads.
    assert not decide_fold_transposes(folded, plain, "auto").on


def test_no_change_no_fold(tmp_path, tools):
    # Two activations, no constant transpose: the flag changes no dispatch.
    args = (torch.randn(16, 32), torch.randn(32, 64))
    plain = _tasks(tmp_path, MatMul(), args, tools)
    folded = _tasks(tmp_path, MatMul(), args, tools, FOLD_TRANSPOSES_FLAGS)
    for mode in ("auto", "on"):
        choice = decide_fold_transposes(plain, folded, mode)
        assert not choice.on and "no dispatch changes" in choice.why


def make_mlp():
    torch.manual_seed(0)
    return (nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32)).eval(),
            (torch.randn(16, 64),))


def test_a_tuning_run_folds_and_every_build_passes_the_flag(tmp_path):
    out = tmp_path / "run"
    res = tune_cli(f"{__file__}:make_mlp", "--trials", "2", "--batch", "2",
                   "--no-layout-rewrite", "--out", str(out), *QUICK_CLI)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Weight transposes" not in (out / "report.txt").read_text()  # not considered
    res = tune_cli(f"{__file__}:make_mlp", "--trials", "2", "--batch", "2",
                   "--out", str(out / "folded"), *QUICK_CLI)
    assert res.returncode == 0, res.stderr[-2000:]
    out = out / "folded"
    text = (out / "report.txt").read_text()
    assert "Weight transposes of" in text and "folded at compile time" in text, text
    entry = next(iter(json.loads((out / "report.json").read_text())["e2e"].values()))
    assert entry["fold_transposes"]
    assert load_layout(out / "layout.json").fold_transposes
    # build.sh builds what is handed back, a timed decision: the folded form where the
    # tuned module won end to end, else IREE's default, flag-free.
    build = (out / "build.sh").read_text()
    assert (FOLD_TRANSPOSES_FLAGS[0] in build) == (entry["handed_back"] == "tuned"), entry
    # The plain tasks' matmuls read both weights [k, n] (propagated: [n, k] through an
    # indexing map, tensor<128x64xf32> and tensor<32x128xf32>).
    ops = "".join(t["ops_mlir"] for t in json.loads((out / "tasks.json").read_text()))
    assert "tensor<16x64xf32>, tensor<64x128xf32>) outs" in ops, ops
    assert "tensor<16x128xf32>, tensor<128x32xf32>) outs" in ops, ops
