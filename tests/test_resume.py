"""A tuning run killed with SIGKILL resumes from its records when started again."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import QUICK_CLI

ROOT = Path(__file__).resolve().parents[1]
MODEL = f"{ROOT / 'tests' / 'data' / 'small_mlp.py'}:make"


def _cmd(out: Path, trials: int) -> list[str]:
    # Random search and no packed-weight alternatives: what is tested is the records, not
    # the search (the evolution's cost-model rounds and the packed tasks' baselines and
    # re-timing would double the test's time).
    return [sys.executable, "-m", "mlir_ansor.tune", MODEL, "--trials", str(trials),
            "--batch", "2", "--policy", "random", "--no-layout-rewrite", "--out", str(out),
            *QUICK_CLI]


def _lines(path: Path) -> list[dict]:
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


def test_killed_run_resumes(tmp_path):
    out = tmp_path / "out"
    records = out / "records.jsonl"
    proc = subprocess.Popen(_cmd(out, 12), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        if records.exists() and len(_lines(records)) >= 2:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = records.read_text()
    n_before = len(_lines(records))
    assert 2 <= n_before < 12, "the run was meant to be killed in the middle of tuning"

    res = subprocess.run(_cmd(out, 12), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    after = records.read_text()
    assert after.startswith(before)  # nothing lost or rewritten
    recs = _lines(records)
    assert len(recs) == 12  # the budget counts what was measured before the kill
    keys = [(r["task_key"], r["program_key"]) for r in recs]
    assert len(set(keys)) == len(keys)  # nothing measured twice
    assert "End to end" in res.stdout
