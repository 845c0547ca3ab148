"""Python API: tune returns a runnable tuned module; load rebuilds it from the records' run."""
import os

import numpy as np

from mlir_ansor import api
from mlir_ansor.tuner import idle_caller as idle
from tests.conftest import QUICK
from tests.data.small_mlp import make


def test_tune_then_load(tmp_path):
    model, inputs = make()
    out = tmp_path / "run"
    tuned = api.tune(model, inputs, trials=8, out=out, batch=4, policy="random", **QUICK)
    want = model(*inputs).detach().numpy()
    np.testing.assert_allclose(tuned(*inputs), want, rtol=1e-4, atol=1e-4)
    again = api.load(model, inputs, out)
    np.testing.assert_allclose(again(*inputs), want, rtol=1e-4, atol=1e-4)
    # The run hands back the model it compiled: packed weights where that was faster.
    assert (out / "model_tuned.mlir").exists() and (out / "layout.json").exists()
    lib = out / "tuned_library.mlir"
    if lib.exists():  # a strategy beat IREE's default: load must have applied it
        assert set(api.strategy_symbols(lib.read_text())) <= set(again.applied)
        assert again.applied
    else:
        assert again.applied == ()


def test_load_hands_back_iree_default_where_the_run_did(tmp_path, monkeypatch):
    """A run whose tuned module lost end to end handed back IREE's default: load must not
    apply the library left in the folder (defect 5)."""
    import json

    model, inputs = make()
    out = tmp_path / "run"
    out.mkdir()
    (out / "report.json").write_text(json.dumps({"e2e": {"SmallMLP": {"handed_back": "default"}}}))
    (out / "tuned_library.mlir").write_text("module { this library must not be read }")
    built = []
    real = api.compile_model
    monkeypatch.setattr(api, "compile_model",
                        lambda tools, src, vmfb, cfg, lib, flags: built.append((lib, flags))
                        or real(tools, src, vmfb, cfg, lib, flags))
    m = api.load(model, inputs, out)
    assert built == [(None, ())] and m.applied == ()
    np.testing.assert_allclose(m(*inputs), model(*inputs).detach().numpy(), rtol=1e-4,
                               atol=1e-4)
    # A local-task module is called from a thread of its own at idle priority (IREE's
    # waiting caller must not take a core from the workers); the user's thread keeps its
    # policy; local-sync computes on the calling thread, so it is called directly.
    if idle.supported():
        assert m._caller.submit(os.sched_getscheduler, 0).result() == os.SCHED_IDLE
        assert os.sched_getscheduler(0) == os.SCHED_OTHER
    assert api.TunedModule(m.vmfb, device="local-sync")._caller is None
    assert api.TunedModule(m.vmfb, idle_caller=False)._caller is None
    (out / "report.json").write_text(json.dumps({"e2e": {"a": {}, "b": {}}}))
    import pytest
    with pytest.raises(api.AnsorError, match="several models"):
        api.load(model, inputs, out)
