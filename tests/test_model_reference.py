"""What a tuned model must match: torch, or IREE's default where that differs a little."""
import numpy as np
import pytest

from mlir_ansor.errors import DefaultModuleError
from mlir_ansor.tuner import e2e
from mlir_ansor.tuner.measure import MeasureConfig

REF = np.array([[1.0, -2.0, 0.004517], [0.5, 3.0, 0.0]], dtype=np.float32)


def reference_with(monkeypatch, got):
    monkeypatch.setattr(e2e, "torch_reference", lambda model, xs: ([REF], [np.abs(REF)]))
    monkeypatch.setattr(e2e, "run_outputs", lambda *a: ([got], ""))
    return e2e.model_reference(None, e2e.Path("d.vmfb"), None, (), [], e2e.Path("."),
                               MeasureConfig())


def test_a_default_that_matches_torch_makes_torch_the_reference(monkeypatch):
    refs, _, err, why = reference_with(monkeypatch, REF + np.float32(1e-7))
    assert refs[0] is REF and why == "" and err < 1e-6


def test_a_default_a_little_off_becomes_the_reference_and_says_so(monkeypatch):
    got = REF.copy()
    got[0, 2] = 0.004548  # 3e-5 off a small element (GELU's tanh polynomial, say)
    refs, _, err, why = reference_with(monkeypatch, got)
    assert refs[0] is not REF and np.array_equal(refs[0], got)
    assert "differs from torch beyond the 1e-3 element bound" in why and err == pytest.approx(
        3.1e-5, rel=0.05)


@pytest.mark.parametrize("got", [REF * 1.05, REF[:, :2]])
def test_a_default_grossly_off_or_misshapen_stops_the_run(monkeypatch, got):
    with pytest.raises(DefaultModuleError, match="does not match torch"):
        reference_with(monkeypatch, got)


def test_a_model_iree_runs_differently_stops_before_tuning(tmp_path):
    """A forward that computes something else while torch.export traces it: IREE's default
    module then disagrees with torch. The run ends at the layout stage, before any task is
    formed or measured, with the reason."""
    import torch

    from mlir_ansor import api

    class TracedOtherwise(torch.nn.Module):
        def forward(self, x):
            return x * 2.0 if torch.compiler.is_exporting() else x

    out = tmp_path / "run"
    with pytest.raises(DefaultModuleError, match="does not match torch.*checked before tuning"):
        api.tune(TracedOtherwise(), (torch.ones(4, 8),), trials=4, out=out, policy="random")
    assert not (out / "records.jsonl").exists() or not (out / "records.jsonl").read_text()
    assert not (out / "tasks.json").exists()
