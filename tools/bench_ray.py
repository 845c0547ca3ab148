"""Tuning throughput: trials per minute in local mode against Ray with N local builder nodes
(tuner/distributed.py), interleaved repeats, printed side by side.

  python tools/bench_ray.py --model GMM-b1 --trials 24 --repeats 3 --builders 2

Each repeat tunes the same model with the same seed, once locally and once through a local
Ray cluster (a head with no CPUs, N worker nodes with one CPU and a `builder` resource each,
the first also offering this machine's device kind for the runner actor), alternating which
goes first. Trials per minute are taken from the records' timestamps (first to last
measurement: the steady state, without import, task forming and hand-back), so cluster
start-up is not counted; the search-stage wall time is printed too. Writes under --out
(default bench_out/ray)."""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

from mlir_ansor.targets import host
from mlir_ansor.tuner.driver import TuneOptions, run
from mlir_ansor.tuner.reporters import Silent


def trials_per_minute(out: Path) -> float:
    times = sorted(json.loads(line)["time"] for line in
                   (out / "records.jsonl").read_text().splitlines())
    return 60.0 * (len(times) - 1) / (times[-1] - times[0])


def tune(model: str, trials: int, out: Path, ray_address: str = "") -> tuple[float, float]:
    start = time.monotonic()
    # Data tiling off: it would hand a matmul to IREE's mmt4d kernels with no trial measured
    # (this measures the search's throughput, not the layout choice).
    run(TuneOptions(model=model, trials=trials, out=out, ray=ray_address, top_k=1,
                    data_tiling="off"), reporter=Silent())
    if not (out / "records.jsonl").exists():
        raise SystemExit(f"{model}: the run measured no trial (see {out}/report.txt)")
    return trials_per_minute(out), time.monotonic() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="GMM-b1")
    p.add_argument("--trials", type=int, default=24)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--builders", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("bench_out/ray"))
    args = p.parse_args()
    kind = host().device_kind
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0,
                                                      "include_dashboard": False})
    for i in range(args.builders):
        c.add_node(num_cpus=1, resources={"builder": 1, **({kind: 1} if i == 0 else {})})
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    rows = {"local": [], "ray": []}
    walls = {"local": [], "ray": []}
    try:
        for r in range(args.repeats):
            order = ["local", "ray"] if r % 2 == 0 else ["ray", "local"]
            for mode in order:
                out = args.out / f"{mode}{r}"
                tpm, wall = tune(args.model, args.trials, out,
                                 c.address if mode == "ray" else "")
                rows[mode].append(tpm)
                walls[mode].append(wall)
                print(f"repeat {r} {mode:5s}: {tpm:6.1f} trials/min, run {wall:6.1f} s",
                      flush=True)
    finally:
        ray.shutdown()
        c.shutdown()
    lo, ra = statistics.median(rows["local"]), statistics.median(rows["ray"])
    print(f"\n{args.model}, {args.trials} trials, {args.repeats} interleaved repeats, "
          f"{args.builders} Ray builder nodes on this {kind} machine "
          f"({host().cores} cores):")
    print(f"{'mode':6s} {'trials/min (median)':>20s} {'each repeat':>30s} {'run s (median)':>15s}")
    for mode, v in (("local", lo), ("ray", ra)):
        each = ", ".join(f"{x:.1f}" for x in rows[mode])
        print(f"{mode:6s} {v:20.1f} {each:>30s} {statistics.median(walls[mode]):15.1f}")
    print(f"ray / local: {ra / lo:.2f}x")


if __name__ == "__main__":
    main()
