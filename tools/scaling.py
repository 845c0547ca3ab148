"""Trials per hour against the number of builders and runners, on paper, from measured
per-candidate costs.

  python tools/scaling.py RUN_DIR [RUN_DIR...] [--plot docs/scaling.png]

From each run's report.json (`wall_time_s`: compile, measure, train, search) and its
records: per candidate, C = compile wall time x the run's parallel compiles / candidates
(one builder's CPU time per candidate), R = measure wall time / candidates (one runner),
D = (train + search) / candidates (the driver's own work per result). With B builders and
M runners:

  as built (a batch is compiled, then measured, then the next batch is searched):
      trials/h = 3600 / (C/B + R/M + D)
  pipelined (compiles of the next batch overlap measurement and search; an upper bound):
      trials/h = 3600 / max(C/B, R/M, D)

and the count past which adding builders and runners gains under 5% ("saturates")."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from mlir_ansor.tuner.measure import MeasureConfig

COUNTS = (1, 2, 4, 8, 16, 32, 64)


def costs(run: Path) -> tuple[float, float, float, int]:
    report = json.loads((run / "report.json").read_text())
    wall = report["wall_time_s"]
    n = sum(1 for _ in (run / "records.jsonl").read_text().splitlines())
    par = MeasureConfig().parallel_compiles
    return wall["compile"] * par / n, wall["measure"] / n, \
        (wall["train"] + wall["search"]) / n, n


def per_hour(c: float, r: float, d: float, k: int, pipelined: bool) -> float:
    parts = (c / k, r / k, d)
    return 3600 / (max(parts) if pipelined else sum(parts))


def saturation(c: float, r: float, d: float, pipelined: bool) -> int:
    for a, b in zip(COUNTS, COUNTS[1:]):
        if per_hour(c, r, d, b, pipelined) < 1.05 * per_hour(c, r, d, a, pipelined):
            return a
    return COUNTS[-1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", type=Path, nargs="+")
    p.add_argument("--plot", type=Path, default=None)
    args = p.parse_args()
    series = []
    for run in args.runs:
        c, r, d, n = costs(run)
        print(f"{run}: {n} candidates; per candidate: compile {c:.2f} s (one builder), "
              f"measure {r:.2f} s (one runner), driver {d:.3f} s")
        head = ["builders = runners", *map(str, COUNTS)]
        rows = [[mode, *[f"{per_hour(c, r, d, k, mode == 'pipelined'):.0f}" for k in COUNTS]]
                for mode in ("as built", "pipelined")]
        widths = [max(len(x) for x in col) for col in zip(head, *rows)]
        for row in [head, *rows]:
            print("  " + "  ".join(x.rjust(w) for x, w in zip(row, widths)))
        for mode in ("as built", "pipelined"):
            k = saturation(c, r, d, mode == "pipelined")
            print(f"  {mode}: saturates at {k} builders and runners "
                  f"({per_hour(c, r, d, k, mode == 'pipelined'):.0f} trials/h; the driver's "
                  f"{d:.3f} s per result bounds it at {3600 / d:.0f})")
        series.append((run.name, c, r, d))
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.5, 4))
        for name, c, r, d in series:
            for mode, style in (("as built", "-o"), ("pipelined", "--s")):
                ax.plot(COUNTS, [per_hour(c, r, d, k, mode == "pipelined") for k in COUNTS],
                        style, label=f"{name}, {mode}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("builders = runners")
        ax.set_ylabel("trials per hour")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
