"""Tune each model of tools/unseen_models.py with a small budget and print where it stands:
a guard for the general case (models of kinds nothing here was built or trained on), not
a speed benchmark. Per model: the tuner's exit, the share of valid candidates and the
failures by kind, tasks whose every candidate failed, and the end-to-end latencies the run
measured side by side (torch eager, IREE's default, the module handed back). Exits 1 when
a run failed or a task got no valid candidate, naming them.

  python tools/sweep_models.py                       # every model, 24 trials each
  python tools/sweep_models.py --only lstm argmax_head --trials 48
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from module_check import run_tuner
from unseen_models import UNSEEN

HERE = Path(__file__).resolve().parent


def sweep_one(name: str, trials: int, out: Path, seed: int) -> dict:
    run_dir = out / name
    report_file = run_dir / "report.json"
    report_file.unlink(missing_ok=True)  # only a report this run writes counts
    rc, last = run_tuner([f"{HERE / 'unseen_models.py'}:{name}", "--trials", str(trials),
                          "--out", str(run_dir), "--seed", str(seed), "--batch", "8"])
    row: dict = {"model": name}
    if rc != 0:
        return {**row, "failed": f"the tuner exited with {rc}: {last}"}
    report = json.loads(report_file.read_text())
    (e2e,) = report["e2e"].values()
    rec_file = run_dir / "records.jsonl"
    statuses = Counter(json.loads(line)["status"] for line in
                       (rec_file.read_text().splitlines() if rec_file.exists() else ()) if line)
    total = sum(statuses.values())
    no_valid = [t["task"] for t in report["tasks"] if t["status"] == "no valid program"]
    back = e2e["tuned_s"] if e2e["handed_back"] == "tuned" else e2e["default_s"]
    return {**row, "trials": total, "valid": statuses.get("ok", 0) / total if total else None,
            "failures": {k: v for k, v in statuses.items() if k != "ok"},
            "no_valid": no_valid, "torch_s": e2e["torch_s"], "default_s": e2e["default_s"],
            "back_s": back, "handed_back": e2e["handed_back"]}


def _ms(x: float | None) -> str:
    return f"{x * 1e3:9.3f}" if x else f"{'-':>9s}"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:8.2f}x" if a and b else f"{'-':>9s}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--out", type=Path, default=Path("bench_out/sweep"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", default=[], help="model names (tools/unseen_models.py)")
    args = ap.parse_args()
    unknown = [n for n in args.only if n not in UNSEEN]
    if unknown:
        ap.error(f"unknown models {unknown}; known: {', '.join(UNSEEN)}")
    rows = [sweep_one(n, args.trials, args.out, args.seed) for n in (args.only or UNSEEN)]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(rows, indent=1))
    print(f"\nUnseen models, {args.trials} trials each (latencies: the tuner's end-to-end "
          "step, side by side; 'back' is the module handed back)")
    print(f"{'model':20s} {'valid':>6s}  {'torch ms':>9s} {'IREE ms':>9s} {'back ms':>9s} "
          f"{'vs torch':>9s} {'vs IREE':>9s}  failures")
    bad = []
    for r in rows:
        if "failed" in r:
            bad.append(f"{r['model']}: {r['failed']}")
            print(f"{r['model']:20s} FAILED {r['failed']}")
            continue
        if r["no_valid"]:
            bad.append(f"{r['model']}: no valid candidate for {', '.join(r['no_valid'])}")
        valid = f"{100 * r['valid']:5.1f}%" if r["valid"] is not None else f"{'-':>6s}"
        print(f"{r['model']:20s} {valid}  {_ms(r['torch_s'])} {_ms(r['default_s'])} "
              f"{_ms(r['back_s'])} {_ratio(r['torch_s'], r['back_s'])} "
              f"{_ratio(r['default_s'], r['back_s'])}  {r['failures'] or ''}"
              + (f" no valid program: {','.join(r['no_valid'])}" if r["no_valid"] else ""))
    for line in bad:
        print(f"FAILED {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
