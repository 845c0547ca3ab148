"""Activations' transposes propagated into the contractions that read them (IREE's
aggressive transpose propagation) instead of forming dispatches of their own: the
decision, the layout file (with the weight-transpose fold's), and a tuning run that carries
the flag to every build."""
import json

import pytest
import torch
from torch import nn

from mlir_ansor.errors import UsageError
from mlir_ansor.tuner.driver import TuneOptions
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.layouts import (FOLD_TRANSPOSES_FLAGS, PROPAGATE_TRANSPOSES_FLAGS,
                                      ModelLayout,
                                      decide_propagation, load_layout, save_layout)
from mlir_ansor.tuner.tasks import extract_tasks, flow_source
from tests.conftest import QUICK_CLI, tune_cli


class HeadScores(nn.Module):
    """Attention scores of inputs in (batch, seq, heads, dim): the heads split off the
    sequence by transposes IREE's default leaves as dispatches of their own."""

    def forward(self, q, k):
        return torch.matmul(q.transpose(1, 2), k.permute(0, 2, 3, 1))


def make_scores():
    return HeadScores().eval(), (torch.randn(1, 32, 4, 16), torch.randn(1, 32, 4, 16))


def _tasks(tmp_path, tools, flags=()):
    model, inputs = make_scores()
    src = tmp_path / "model.mlir"
    src.write_text(import_model(model, inputs))
    return extract_tasks(flow_source(src, "llvm-cpu", tools, 300, flags))


def test_fewer_dispatches_are_timed_then_taken_where_clearly_faster(tmp_path, tools):
    plain = _tasks(tmp_path, tools)
    propagated = _tasks(tmp_path, tools, PROPAGATE_TRANSPOSES_FLAGS)
    assert len(propagated) < len(plain)
    # The transposes are the contraction's indexing maps now: one dispatch, a generic.
    assert len(propagated) == 1 and "linalg.generic" in propagated[0].task_mlir
    assert decide_propagation(plain, propagated, "auto") is None  # to be timed
    on = decide_propagation(plain, propagated, "auto", (1.1e-4, 1.0e-4))
    assert on.on and on.dispatches == (len(plain), 1) and on.default_s == (1.1e-4, 1.0e-4)
    tie = decide_propagation(plain, propagated, "auto", (1.01e-4, 1.0e-4))
    assert not tie.on and "1.01x as fast with it" in tie.why
    assert decide_propagation(plain, propagated, "on").on  # untimed
    # More dispatches, or the same ones, are never taken.
    for mode in ("auto", "on"):
        more = decide_propagation(propagated, plain, mode, (1.0e-4, 0.5e-4))
        assert not more.on and "dispatches against" in more.why
        same = decide_propagation(plain, plain, mode, (1.0e-4, 0.5e-4))
        assert not same.on and "no dispatch changes" in same.why


@pytest.mark.parametrize("field, flags", [("fold_transposes", FOLD_TRANSPOSES_FLAGS),
                                          ("propagate_transposes", PROPAGATE_TRANSPOSES_FLAGS)])
def test_the_layout_carries_the_flag(tmp_path, field, flags):
    layout = ModelLayout(**{field: True})
    assert layout.flags == flags and layout.changed
    assert layout.codegen_flags == ()  # a task's own build starts after dispatch formation
    save_layout(tmp_path / "layout.json", layout)
    assert load_layout(tmp_path / "layout.json") == layout
    data = json.loads((tmp_path / "layout.json").read_text())
    del data[field]  # a layout file from before: IREE's default
    (tmp_path / "layout.json").write_text(json.dumps(data))
    assert not getattr(load_layout(tmp_path / "layout.json"), field)


@pytest.mark.parametrize("option", ["fold_transposes", "propagate_transposes"])
def test_unknown_mode_is_a_usage_error(option):
    with pytest.raises(UsageError, match="--" + option.replace("_", "-")):
        TuneOptions(**{option: "maybe"}).check()


def test_a_tuning_run_propagates_and_every_build_passes_the_flag(tmp_path):
    out = tmp_path / "run"
    res = tune_cli(f"{__file__}:make_scores", "--trials", "2", "--batch", "2",
                   "--out", str(out), *QUICK_CLI, "--propagate-transposes", "on")
    assert res.returncode == 0, res.stderr[-2000:]
    text = (out / "report.txt").read_text()
    assert "Activation transposes of" in text and "3 dispatches without, 1 with" in text, text
    entry = next(iter(json.loads((out / "report.json").read_text())["e2e"].values()))
    assert entry["propagate_transposes"]
    assert load_layout(out / "layout.json").propagate_transposes
    # build.sh builds what is handed back: the propagated form where the tuned module won
    # end to end, else IREE's default, flag-free.
    build = (out / "build.sh").read_text()
    assert (PROPAGATE_TRANSPOSES_FLAGS[0] in build) == (entry["handed_back"] == "tuned"), entry
    # The one task read the inputs as they come, (batch, seq, heads, dim).
    tasks = json.loads((out / "tasks.json").read_text())
    assert len(tasks) == 1 and "tensor<32x4x16xf32>, tensor<32x4x16xf32>" in tasks[0]["ops_mlir"]
