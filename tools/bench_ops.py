"""Benchmark of the paper's operator suite (mlir_ansor.examples.operators): per workload,
the best of N programs (random ones, the paper's setup, or with `--policy evolution` the
tuner's default search on the cost model; spread over tasks by the task scheduler) against IREE's
default and torch eager, end to end and side by side (the tuner's e2e step), and the rate of
sampled programs that compiled, were confirmed applied and validated.

  python tools/bench_ops.py --trials 200                 # the whole suite
  python tools/bench_ops.py --trials 50 --only C2D GMM   # some operators
  python tools/bench_ops.py --trials 48 --policy evolution  # the tuner's default search
  python tools/bench_ops.py --io-layout channels-last    # images NHWC in and out, torch too

Each workload is a normal `python -m mlir_ansor.tune` run (`--policy`) under
OUT/<workload> (default bench_out/ops, ignored by git); an interrupted benchmark keeps the
rows already in OUT/summary.json and resumes the rest (failed rows are run again). Its
latencies are the tuner's own end-to-end step, which times a module only after it compiled,
showed its strategies applied in IREE's configuration dump and matched torch; this script
also requires the run's report.json to be fresh and its applied strategies to be exactly
those of the run's library. A workload that fails prints a FAILED line and is left out of
the means. Prints one row per workload, then the geometric means per operator and over the
suite.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from pathlib import Path

from mlir_ansor.examples.operators import OPERATORS, SUITE
from module_check import library_strategies, report_failure, run_tuner


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


# The operators whose 4-D/5-D inputs are images (not TBS's batched matrices, not CAP's 6-D
# capsules): --io-layout channels-last applies to these.
IMAGE_OPERATORS = ("C2D", "C3D", "GRP", "DIL", "DEP", "T2D", "ConvLayer")


def io_layout_of(name: str, asked: str) -> str:
    """The --io-layout a workload runs with: channels-last only where asked and the
    workload is an image operator."""
    return asked if SUITE[name].operator in IMAGE_OPERATORS else "as-imported"


def bench_workload(name: str, trials: int, out: Path, seed: int, policy: str,
                   io_layout: str = "as-imported") -> dict:
    """One workload's row; a row with "failed" set when the tuner or a check failed."""
    run_dir = out / name
    report_file = run_dir / "report.json"
    report_file.unlink(missing_ok=True)  # only a report this run writes counts
    row = {"workload": name, "operator": SUITE[name].operator, "io_layout": io_layout}
    rc, last = run_tuner([name, "--trials", str(trials), "--policy", policy, "--out",
                          str(run_dir), "--seed", str(seed), "--batch", "8",
                          "--io-layout", io_layout])
    if rc != 0:
        return {**row, "failed": f"the tuner exited with {rc}: {last}"}
    # The tuner writes report.json only after its end-to-end step: the tuned module
    # compiled, the strategies it carries were confirmed applied in IREE's configuration
    # dump, and its outputs matched torch's.
    report = json.loads(report_file.read_text())
    e2e = report["e2e"].get(name)
    if e2e is None:
        return {**row, "failed": "report.json has no end-to-end result for it"}
    library = run_dir / "tuned_library.mlir"
    want = library_strategies(library) if library.exists() else set()
    if e2e["handed_back"] == "default":  # the library is set aside (.rejected.mlir)
        want = set(library_strategies(run_dir / "tuned_library.rejected.mlir")) \
            if (run_dir / "tuned_library.rejected.mlir").exists() else set()
    if want != set(e2e["applied"]):
        return {**row, "failed": f"library strategies {sorted(want)} but the end-to-end "
                                 f"check applied {sorted(e2e['applied'])}"}
    rec_file = run_dir / "records.jsonl"  # absent when no task was tunable
    statuses = Counter(json.loads(line)["status"] for line in
                       (rec_file.read_text().splitlines() if rec_file.exists() else ()) if line)
    total = sum(statuses.values())
    return {**row, "trials": total,
            "valid": statuses.get("ok", 0) / total if total else 0.0,
            "failures": dict((k, v) for k, v in statuses.items() if k != "ok"),
            "torch_s": e2e["torch_s"], "default_s": e2e["default_s"], "tuned_s": e2e["tuned_s"],
            "applied": len(e2e["applied"]), "handed_back": e2e["handed_back"],
            "flops": model_flops(report, name), "peak_gflops": report.get("peak_gflops"),
            "policy": policy}


def roof(r: dict, seconds: float) -> str:
    """GFLOP/s of a call and its share of the peak measured in the same tuner run (the
    roofline columns; '-' for rows saved before they were recorded)."""
    if not r.get("flops"):
        return f"{'-':>8s} {'-':>7s}"
    g = r["flops"] / seconds / 1e9
    share = f"{100 * g / r['peak_gflops']:6.1f}%" if r.get("peak_gflops") else f"{'-':>7s}"
    return f"{g:8.1f} {share}"


def model_flops(report: dict, model: str) -> float:
    """FLOPs of one call of the model: the FLOPs of the tasks (dispatches) it runs times how
    often it runs each (the report's weight)."""
    return sum(float(t["MFLOP"]) * 1e6 * t["weight"] for t in report["tasks"]
               if model in t.get("models", model).split(",") and not unused(t["status"]))


def unused(status: str) -> bool:
    """A task the handed-back model does not run: the other form of a packed layout or of
    Winograd (reporting.absent_why's statuses). Counting a Winograd form's batch matmul
    beside the direct conv put C2D-b16 at 121% of the peak."""
    return (status.startswith("replaced by a packed layout") or status.endswith(": not used")
            or status.endswith(": not handed back"))


def delivered_s(r: dict) -> float:
    """Latency of the module the tool handed back (the report's `handed_back`)."""
    back = r.get("handed_back")
    if back is None:  # a row saved before reports said it: the driver's rule
        back = "tuned" if r["applied"] and r["tuned_s"] <= r["default_s"] else "default"
    return r["tuned_s"] if back == "tuned" else r["default_s"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=200, help="programs measured per workload")
    ap.add_argument("--policy", choices=["random", "evolution"], default="random",
                    help="random programs (the paper's setup, default) or the tuner's "
                         "evolutionary search on the cost model")
    ap.add_argument("--only", nargs="*", default=[], help="operators (e.g. C2D TBS)")
    ap.add_argument("--out", type=Path, default=Path("bench_out/ops"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--io-layout", choices=["as-imported", "channels-last"],
                    default="as-imported",
                    help="channels-last: workloads with 4-D/5-D inputs exchange them (and "
                         "their outputs) NHWC, and torch eager runs on channels_last tensors "
                         "alike (the tuner's --io-layout)")
    args = ap.parse_args()
    unknown = [o for o in args.only if o not in OPERATORS]
    if unknown:
        ap.error(f"unknown operators {unknown}; choose from {list(OPERATORS)}")
    names = [n for n, w in SUITE.items() if not args.only or w.operator in args.only]
    args.out.mkdir(parents=True, exist_ok=True)
    summary = args.out / "summary.json"
    done = {r["workload"]: r for r in json.loads(summary.read_text())} if summary.exists() else {}
    rows = []
    for name in names:
        io = io_layout_of(name, args.io_layout)
        if name in done and "failed" not in done[name] and \
                done[name]["trials"] >= min(args.trials, 1) and \
                done[name].get("policy", "random") == args.policy and \
                done[name].get("io_layout", "as-imported") == io:
            rows.append(done[name])  # measured by an earlier, interrupted run
            continue
        print(f"=== {name}", flush=True)
        rows.append(bench_workload(name, args.trials, args.out, args.seed, args.policy, io))
        summary.write_text(json.dumps(rows + [r for n, r in done.items()
                                              if n not in {x["workload"] for x in rows}],
                                      indent=2))
    print(f"\nOperator suite, {args.trials} trials per workload ({args.policy}), llvm-cpu (latencies: "
          "lower quartile of all repetitions, measured side by side in one run per "
          "workload; 'tuned' is the module compiled with the exported library, 'handed "
          "back' the one the tool returns: IREE's default where the tuned module was slower end to end)")
    hdr = (f"{'workload':15s} {'trials':>6s} {'valid':>6s} {'torch ms':>9s} {'IREE ms':>9s} "
           f"{'tuned ms':>9s} {'tuned/IREE':>10s} {'back/IREE':>9s} {'back/torch':>10s} "
           f"{'GFLOP/s':>8s} {'of peak':>7s} {'torch %':>7s} {'I/O':>5s}  failures")
    print(hdr)
    failed = [r for r in rows if "failed" in r]
    for r in failed:
        report_failure(f"{r['workload']}: {r['failed']}")
    rows = [r for r in rows if "failed" not in r]  # never timed as if valid
    for r in rows:
        valid = f"{100 * r['valid']:5.1f}%" if r["trials"] else "    - "
        print(f"{r['workload']:15s} {r['trials']:6d} {valid} "
              f"{r['torch_s'] * 1e3:9.3f} {r['default_s'] * 1e3:9.3f} {r['tuned_s'] * 1e3:9.3f} "
              f"{r['default_s'] / r['tuned_s']:9.2f}x {r['default_s'] / delivered_s(r):8.2f}x "
              f"{r['torch_s'] / delivered_s(r):9.2f}x {roof(r, delivered_s(r))} "
              f"{roof(r, r['torch_s'])[-7:]} "
              f"{'NHWC' if r.get('io_layout') == 'channels-last' else 'as-is':>5s}  "
              f"{r['failures'] or ''}")
    print(f"\n{'operator':10s} {'valid':>6s} {'tuned/IREE':>10s} {'back/IREE':>9s} "
          f"{'back/torch':>10s}  (geometric means)")
    groups = {op: [r for r in rows if r["operator"] == op]
              for op in dict.fromkeys(r["operator"] for r in rows)}
    for op, rs in list(groups.items()) + [("suite", rows)]:
        n = sum(r["trials"] for r in rs)
        valid = (f"{100 * sum(r['valid'] * r['trials'] for r in rs) / n:5.1f}%" if n and
                 op != "suite" else "      ")
        print(f"{op:10s} {valid} {_geomean([r['default_s'] / r['tuned_s'] for r in rs]):9.2f}x "
              f"{_geomean([r['default_s'] / delivered_s(r) for r in rs]):8.2f}x "
              f"{_geomean([r['torch_s'] / delivered_s(r) for r in rs]):9.2f}x")
    if failed:
        print(f"{len(failed)} workloads failed and are left out of the means: "
              f"{[r['workload'] for r in failed]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
