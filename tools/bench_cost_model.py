"""What the starting cost model is worth in a real search: the same workload tuned with each
`--cost-model` choice, and the model's summed best latency after k measurements.

  python tools/bench_cost_model.py tools/heldout_models.py:gpt2_block --trials 64 \
      [--models none,auto] [--out bench_out/cost_model]

Each (workload, choice) is a normal `python -m mlir_ansor.tune` run under --out (it resumes
if run again), run one after another, never two at once. The table gives, after k
measurements, sum over tasks of (calls x best latency so far), each task at IREE's default
until a measured program beats it, relative to IREE's default (lower is better). Every
latency is one the measurer checked (compiled, strategy applied, output matched).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from mlir_ansor.tuner.records import RecordStore


def run_tuner(workload: str, choice: str, trials: int, out: Path) -> None:
    cmd = [sys.executable, "-m", "mlir_ansor.tune", workload, "--trials", str(trials),
           "--cost-model", choice, "--out", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["?"])[-1]
        raise SystemExit(f"{workload} --cost-model {choice} failed: {last}")


def curve(out: Path, ks: list[int]) -> list[float]:
    """Summed (calls x best latency) after each k, relative to IREE's default."""
    report = json.loads((out / "report.json").read_text())
    key_of = {t["task_id"]: t["key"] for t in json.loads((out / "tasks.json").read_text())}
    weight, default = {}, {}
    for t in report["tasks"]:
        if t["task"] in key_of and t["default_ms"] not in ("-", None):
            weight[key_of[t["task"]]] = t["weight"]
            default[key_of[t["task"]]] = float(t["default_ms"]) / 1e3
    records = [r for r in RecordStore(out / "records.jsonl").load() if r.task_key in default]
    total = sum(weight[k] * default[k] for k in default)
    rows = []
    for k in ks:
        best = dict(default)
        for r in records[:k]:
            if r.ok and r.latency_s < best[r.task_key]:
                best[r.task_key] = r.latency_s
        rows.append(sum(weight[t] * best[t] for t in best) / total)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workloads", nargs="+")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--models", default="none,auto")
    ap.add_argument("--out", type=Path, default=Path("bench_out/cost_model"))
    args = ap.parse_args()
    ks = [k for k in (8, 16, 24, 32, 48, 64, 96, 128, 192, 256) if k <= args.trials]
    print(f"{'workload':34s} {'--cost-model':12s} " + " ".join(f"{'k=' + str(k):>6s}"
                                                               for k in ks))
    for w in args.workloads:
        for choice in args.models.split(","):
            out = args.out / Path(w.replace(":", "_")).name / choice
            run_tuner(w, choice, args.trials, out)
            row = curve(out, ks)
            print(f"{w[-34:]:34s} {choice:12s} " + " ".join(f"{v:6.3f}" for v in row),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
