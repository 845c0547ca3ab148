"""Records of an earlier run are reused: no new measurement, and their best programs
compete for export."""
import json
import subprocess
from pathlib import Path

from tests.conftest import QUICK_CLI, tune_cli

ROOT = Path(__file__).resolve().parents[1]
MODEL = f"{ROOT / 'tests' / 'data' / 'small_mlp.py'}:make"


def tune(out: Path, *extra: str) -> subprocess.CompletedProcess:
    # (Random search, no packed-weight alternatives: reuse is about the records.)
    return tune_cli(MODEL, "--batch", "2", "--policy", "random", "--no-layout-rewrite",
                    "--out", str(out), *QUICK_CLI, *extra)


def test_reuse_earlier_records(tmp_path):
    first = tune(tmp_path / "a", "--trials", "4")
    assert first.returncode == 0, first.stderr[-2000:]
    old = tmp_path / "a" / "records.jsonl"
    n_old = len(old.read_text().splitlines())
    second = tune(tmp_path / "b", "--trials", "0", "--reuse", str(old))
    assert second.returncode == 0, second.stderr[-2000:]
    assert not (tmp_path / "b" / "records.jsonl").exists() or \
        not (tmp_path / "b" / "records.jsonl").read_text().strip()
    tasks = json.loads((tmp_path / "b" / "report.json").read_text())["tasks"]
    assert sum(t["trials"] for t in tasks) == n_old  # the reused records are what it saw
    assert any(t["tuned_ms"] != "-" for t in tasks)  # and their best programs were re-timed
    missing = tune(tmp_path / "c", "--trials", "0", "--reuse", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and "nope.jsonl" in missing.stderr
