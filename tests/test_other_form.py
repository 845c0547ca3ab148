"""A model's other form with IREE's data tiling the other way (layout_choice.other_form):
what flips, how its form is named, and what the report says of the form not handed back."""
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from mlir_ansor.dialect_helpers.data_tiling_hints import HINT_ATTR
from mlir_ansor.tuner.driver import TuneOptions
from mlir_ansor.tuner.layouts import (DATA_TILING, DATA_TILING_FLAGS, WINOGRAD, Alternative,
                                      DataTilingChoice, form_name, load_layout)
from mlir_ansor.tuner.stages.layout_choice import flip_data_tiling
from mlir_ansor.tuner.stages.reporting import absent_why
from mlir_ansor.tuner.stages.state import ModelForms, OtherForm
from tests.conftest import MATMUL


def _tiled_form() -> ModelForms:
    return ModelForms(None, False, Path("model.mlir"), frozenset(), (), (), "",
                      data_tiling=DataTilingChoice(True, 2.0, 1.0, sites=(0,)))


def test_data_tiling_flips_to_the_form_without_it_and_back():
    first = _tiled_form()
    assert HINT_ATTR in first.layout().apply(MATMUL)
    assert set(DATA_TILING_FLAGS) <= set(first.flags)
    other = flip_data_tiling(first)
    assert not other.tiled and other.tiled_sites == ()
    assert HINT_ATTR not in other.layout().apply(MATMUL)
    assert not set(DATA_TILING_FLAGS) & set(other.flags)
    back = flip_data_tiling(other)  # the sites it was checked on come back with it
    assert back.tiled and back.tiled_sites == (0,) and set(DATA_TILING_FLAGS) <= set(back.flags)
    assert (first.form_name(DATA_TILING), other.form_name(DATA_TILING)) == \
        ("data-tiled", "not data-tiled")


def test_forms_are_named_by_the_choice_they_flip():
    assert form_name(WINOGRAD, True) == "Winograd" and form_name(WINOGRAD, False) == "direct"
    with pytest.raises(ValueError, match="no form flips 'layout'"):
        form_name("layout", True)


def test_the_data_tiled_form_handed_back_names_the_other_forms_tasks():
    """Data tiling kept after both forms were tuned: the contraction's task of the form
    without it is named as not handed back."""
    first = flip_data_tiling(_tiled_form())  # the other form: without data tiling
    kept = replace(_tiled_form(),
                   data_tiling=DataTilingChoice(True, 2.0, 1.0, sites=(0,), speedups=(1.1, 1.3)),
                   other=OtherForm(first, Alternative((), (("enc", 1),), (("mm", 1),)), (),
                                   DATA_TILING))
    state = SimpleNamespace(forms={"m": kept})
    task = SimpleNamespace(key="mm", layout_of="", form="")  # (named by the other form)
    assert absent_why(state, task) == "only in the not data-tiled form: not handed back"


class _Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(256, 128)

    def forward(self, x):
        return torch.relu(self.fc(x))


class _InputWeight(torch.nn.Module):
    def forward(self, x, w):
        return torch.relu(x @ w)


@pytest.mark.parametrize("model, packed_first", [(_Linear, True), (_InputWeight, False)])
def test_with_data_tiling_taken_by_iree_defaults_both_forms_are_tuned(monkeypatch, tmp_path,
                                                                      model, packed_first):
    """IREE's default builds take data tiling (forced here: that choice is a timing): the
    form without it is tuned too (its contraction a task named by its form), both tuned
    forms are built and timed end to end, and the one handed back is what every artifact
    says (report, layout.json, build flags). A model with a packable constant weight is
    tuned first without data tiling, its weight packed, and data-tiled as its other form
    (IREE's defaults do not show what packed weights give once tuned)."""
    from mlir_ansor import api
    from mlir_ansor.tuner.stages import layout_choice

    def chosen(plain_vmfb, tiled_vmfb, samples, tools, cfg, **_):
        return DataTilingChoice(True, 2e-3, 1e-3)  # (IREE's defaults: 2 ms without, 1 with)
    monkeypatch.setattr(layout_choice, "choose_data_tiling", chosen)
    out = tmp_path / "run"
    torch.manual_seed(0)
    inputs = (torch.randn(64, 256),) + ((torch.randn(256, 128),) if model is _InputWeight
                                        else ())
    api.tune(model().eval(), inputs, trials=6, out=out, batch=2,
             repeat=2, min_repeat_ms=10, retime_rounds=2, e2e_rounds=2, pad_fusion="off",
             small_sizes="off")
    report = json.loads((out / "report.json").read_text())
    entry = next(iter(report["e2e"].values()))
    without, with_ = entry["data_tiling_speedups"]  # both tuned forms built and timed
    margin = TuneOptions().min_speedup  # the form tuned first is kept on a tie
    on = with_ > without * margin if packed_first else not without > with_ * margin
    assert entry["data_tiling"] == on
    assert load_layout(out / "layout.json").data_tiling == on
    build = (out / "build.sh").read_text()
    assert all((flag in build) == on for flag in DATA_TILING_FLAGS), build
    names = [t["dispatch"] for t in report["tasks"]]
    other = "(data-tiled)" if packed_first else "(not data-tiled)"
    assert any(n.endswith(other) for n in names), names
    assert any(n.endswith("(packed)") for n in names) == packed_first, names
    text = (out / "report.txt").read_text()
    assert "the tuned model end to end: without" in text and \
        "decided end to end on the tuned forms" in text, text


def test_where_the_data_tiled_other_form_fails_data_tiling_comes_first_again(monkeypatch,
                                                                             tmp_path):
    """A model with a packable weight whose data-tiled other form cannot be formed is not
    left without the data tiling IREE's defaults chose: its forms are chosen again,
    data-tiled first, and the report says why."""
    from mlir_ansor import api
    from mlir_ansor.tuner.stages import layout_choice

    monkeypatch.setattr(layout_choice, "choose_data_tiling",
                        lambda *a, **k: DataTilingChoice(True, 2e-3, 1e-3))
    real = layout_choice.other_form

    def failing(state, m, f, flips):
        if flips == DATA_TILING and not f.tiled:  # the packed form's data-tiled other form
            return "the other form: it failed (a test)"
        return real(state, m, f, flips)
    monkeypatch.setattr(layout_choice, "other_form", failing)
    out = tmp_path / "run"
    torch.manual_seed(0)
    api.tune(_Linear().eval(), (torch.randn(64, 256),), trials=4, out=out, batch=2,
             repeat=2, min_repeat_ms=10, retime_rounds=2, e2e_rounds=2, pad_fusion="off",
             small_sizes="off")
    names = [t["dispatch"] for t in json.loads((out / "report.json").read_text())["tasks"]]
    assert any(n.endswith("(not data-tiled)") for n in names), names
    assert not any(n.endswith("(packed)") for n in names), names
    text = (out / "report.txt").read_text()
    assert "not tuned first with packed weights (the other form: it failed (a test))" in text
