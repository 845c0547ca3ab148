"""Several models tuned together: identical dispatches are one task, each model is
checked end to end."""
import json
from pathlib import Path

import numpy as np

from mlir_ansor import api
from tests.conftest import QUICK_CLI, tune_cli
from tests.data.small_mlp import make, make_head

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "small_mlp.py"


def test_two_models_share_tasks(tmp_path):
    out = tmp_path / "out"
    # (Random search: what is tested is the sharing, not the search.)
    res = tune_cli(f"{DATA}:make", f"{DATA}:make_head", "--trials", "6", "--batch", "3",
                   "--policy", "random", "--out", str(out), *QUICK_CLI)
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert len(report["e2e"]) == 2
    shared = [t for t in report["tasks"] if "," in t["models"]]
    assert shared, report["tasks"]  # the 64->128+ReLU layer is one task for both
    assert all(t["weight"] == 2 for t in shared)
    # The roofline's torch column: each Linear's matmul is one torch op, timed in the run.
    linear = [t for t in report["tasks"] if t["torch_op"]]
    assert linear and all(t["torch_op"].startswith("einsum ") for t in linear)
    assert all(float(t["torch_ms"]) > 0 and t["vs_torch"].endswith("x") for t in linear
               if t["share"] != "-")
    assert "torch ms: torch eager" in res.stdout
    assert res.stdout.count("End to end (model") == 2
    # api.load of one model takes that model's own folder (its layout and library), as
    # handed back.
    for name, factory in ((f"{DATA}:make", make), (f"{DATA}:make_head", make_head)):
        model, inputs = factory()
        m = api.load(model, inputs, out, model_name=name)
        np.testing.assert_allclose(m(*inputs), model(*inputs).detach().numpy(), rtol=1e-4,
                                   atol=1e-4)

