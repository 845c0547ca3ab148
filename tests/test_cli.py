"""Bad input ends with a one-line error and never touches existing records."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "mlir_ansor.tune", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture()
def out_with_records(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "records.jsonl").write_text('{"keep": "me"}\n')
    return out


def _one_line_error(res):
    assert res.returncode == 2
    lines = [l for l in res.stderr.strip().splitlines() if l.startswith("error:")]
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr
    return lines[0]


def test_missing_factory(tmp_path, out_with_records):
    f = tmp_path / "m.py"
    f.write_text("x = 1\n")
    err = _one_line_error(run_cli(f"{f}:make_model", "--out", str(out_with_records)))
    assert "make_model" in err
    assert (out_with_records / "records.jsonl").read_text() == '{"keep": "me"}\n'


def test_missing_file(out_with_records):
    err = _one_line_error(run_cli("nowhere.py:f", "--out", str(out_with_records)))
    assert "not found" in err


def test_unknown_target(out_with_records):
    err = _one_line_error(run_cli("matmul_1024", "--target", "tpu", "--out", str(out_with_records)))
    assert "tpu" in err
    assert (out_with_records / "records.jsonl").read_text() == '{"keep": "me"}\n'


def test_model_that_cannot_be_imported(tmp_path, out_with_records):
    f = tmp_path / "m.py"
    f.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.linalg.eigh(x)[0]\n"  # no linalg lowering in torch-mlir
        "def make():\n"
        "    return M(), (torch.randn(4, 4),)\n")
    err = _one_line_error(run_cli(f"{f}:make", "--out", str(out_with_records)))
    assert "cannot import" in err and "eigh" in err
    assert (out_with_records / "records.jsonl").read_text() == '{"keep": "me"}\n'
