"""Tuning curves: best GFLOP/s against the number of measurements, per search policy.

Workloads: the 1024^3 f32 matmul and the last 3x3 convolution of ResNet-50. Each
(workload, policy) keeps its own records file under --out, so a run resumes and the
curves of earlier runs are reused. `--report` prints the table of all runs found and
writes curves.png.

  python tools/tuning_curve.py --workload matmul --policy random --trials 1000
  python tools/tuning_curve.py --workload matmul --policy evolution --trials 300
  python tools/tuning_curve.py --workload conv --policy evolution --trials 64 \
      --cost-model model.json    # a saved cost model as the start (run: evolution-model)
  python tools/tuning_curve.py --workload matmul --policy evolution --trials 64 \
      --kernel-seeds     # the target's register-tile seeds first (run: evolution+seeds)
  python tools/tuning_curve.py --report
  python tools/tuning_curve.py --retime --within 32   # the best programs, timed again

A curve's best is the fastest of many noisy timings, random's after 1000 most of all (the
maximum of 1000 draws keeps the luckiest): `--retime` builds random's top 3 programs after
1000 and every other run's top 3 within its first `--within` measurements again (3 as the
tuner re-times its `top_k` before it hands a program back), validates them and times them
side by side in interleaved rounds with IREE's default (every program in every round: none
leaves the race early), and says whether each run's best re-timed program is as fast as
random's best re-timed one.

The task's key is written to OUT/WORKLOAD/task_key.txt, so a model can be trained without
it (`python -m mlir_ansor.train_cost_model ... --exclude-task KEY`). The report compares
every other run of a workload with its random run (random's best after 1000).

Only measurements the tuner's measurer accepted enter a curve (`Record.ok`): the candidate
compiled with exit 0, IREE's configuration dump showed its strategy applied, and its
outputs matched IREE's default build of the task on random inputs. The IREE default line
is that reference build, timed. Everything is written under --out (default
bench_out/curves, ignored by git). Relies on tuner.measure's TaskMeasurer (prepare,
time_default, the measurer round_robin drives) and tuner.search.round_robin.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlir_ansor.examples import matmul_1024, resnet50_last_conv
from mlir_ansor.targets import host
from mlir_ansor.tuner.cost_model import load_booster
from mlir_ansor.tuner.driver import TuneOptions
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.measure import MeasureConfig, TaskMeasurer
from mlir_ansor.tuner.records import Record, RecordStore
from mlir_ansor.tuner.search import SearchConfig, kernel_seeds, round_robin, with_seeds
from mlir_ansor.tuner.policies import POLICIES, make_policy
from mlir_ansor.tuner.tasks import extract_tasks, flow_source
from mlir_ansor.tuner.toolchain import Toolchain

WORKLOADS = {"matmul": matmul_1024, "conv": resnet50_last_conv}
CHECKPOINTS = (10, 25, 50, 100, 200, 300, 500, 1000)


def prepare(workload: str, out: Path, tools: Toolchain, cfg: MeasureConfig,
            seed: int = 0) -> TaskMeasurer:
    """The measurer of the workload's main (most FLOPs) task, prepared."""
    model, inputs = WORKLOADS[workload]()
    out.mkdir(parents=True, exist_ok=True)
    src = out / "model.mlir"
    if not src.exists():
        src.write_text(import_model(model, inputs))
    tasks = [t for t in extract_tasks(flow_source(src, cfg.target, tools, 300)) if t.tunable]
    task = max(tasks, key=lambda t: t.flops)
    m = TaskMeasurer(task, out / "tasks", tools, cfg, seed=seed)
    m.prepare()
    return m


def curve(records: list[Record], flops: int) -> list[float]:
    """Best GFLOP/s after each measurement (0 until the first valid one)."""
    best, out = 0.0, []
    for r in records:
        if r.ok:
            best = max(best, flops / r.latency_s / 1e9)
        out.append(best)
    return out


def report(root: Path) -> None:
    rows = []
    curves = {}
    for d in sorted(p for p in root.glob("*/*") if (p / "records.jsonl").exists()):
        workload, policy = d.parent.name, d.name
        flops = int((d.parent / "flops.txt").read_text())
        recs = RecordStore(d / "records.jsonl").load()
        c = curve(recs, flops)
        curves[(workload, policy)] = c
        valid = sum(r.ok for r in recs)
        rows.append((workload, policy, len(recs), valid,
                     [f"{c[n - 1]:.1f}" if len(c) >= n else "-" for n in CHECKPOINTS]))
    for w in sorted({k[0] for k in curves}):
        f = root / w / "default_s.txt"
        if f.exists():
            flops = int((root / w / "flops.txt").read_text())
            print(f"{w}: IREE default {flops / float(f.read_text()) / 1e9:.1f} GFLOP/s")
    wide = max([10] + [len(r[1]) for r in rows])
    print(f"{'workload':9s} {'policy':{wide}s} {'trials':>6s} {'valid':>6s}  best GFLOP/s after n: "
          + " ".join(f"{n:>6d}" for n in CHECKPOINTS))
    for w, p, n, v, cells in rows:
        print(f"{w:9s} {p:{wide}s} {n:6d} {v:6d}  {'':21s}" + " ".join(f"{x:>6s}" for x in cells))
    for (w, run), c in sorted(curves.items()):
        ref = curves.get((w, "random"))
        if run == "random" or not ref:
            continue
        target = ref[min(len(ref), 1000) - 1]
        hit = next((i + 1 for i, x in enumerate(c) if x >= target), None)
        print(f"{w}: random's best after {min(len(ref), 1000)} = {target:.1f} GFLOP/s; "
              f"{run} reaches it after {hit if hit else 'not within'} "
              f"{'' if hit else len(c)} measurements")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = sorted({k[0] for k in curves})
    fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4), squeeze=False)
    for ax, w in zip(axes[0], names):
        for (ww, p), c in sorted(curves.items()):
            if ww == w:
                ax.plot(range(1, len(c) + 1), c, label=p)
        f = root / w / "default_s.txt"
        if f.exists():
            flops = int((root / w / "flops.txt").read_text())
            ax.axhline(flops / float(f.read_text()) / 1e9, color="gray", linestyle="--",
                       label="IREE default")
        ax.set_title(w)
        ax.set_xlabel("measurements")
        ax.set_ylabel("best GFLOP/s")
        ax.legend()
    fig.tight_layout()
    fig.savefig(root / "curves.png", dpi=100)
    print(f"plot: {root / 'curves.png'}")


def best_programs(records: list[Record], within: int, top: int) -> list[Record]:
    """The `top` fastest valid records among the first `within` (distinct programs)."""
    ok = sorted((r for r in records[:within] if r.ok), key=lambda r: r.latency_s)
    out: list[Record] = []
    seen: set[str] = set()
    for r in ok:
        if r.program_key not in seen:
            seen.add(r.program_key)
            out.append(r)
    return out[:top]


def retime(root: Path, within: int, rounds: int, top: int = TuneOptions.top_k) -> None:
    """Random's `top` best after 1000 and each other run's `top` best within `within`
    measurements, re-built, validated and timed side by side (interleaved rounds); each
    run is judged by its fastest re-timed program, as the tuner hands back the fastest of
    its re-timed `TuneOptions.top_k`."""
    tools, cfg = Toolchain.find(), MeasureConfig()
    for wdir in sorted(p for p in root.iterdir() if (p / "random" / "records.jsonl").exists()):
        flops = int((wdir / "flops.txt").read_text())
        entries: list[tuple[str, Record]] = [
            ("random", r) for r in best_programs(
                RecordStore(wdir / "random" / "records.jsonl").load(), 1000, top)]
        for d in sorted(p for p in wdir.iterdir() if p.name != "random" and
                        (p / "records.jsonl").exists()):
            entries += [(d.name, r) for r in best_programs(
                RecordStore(d / "records.jsonl").load(), within, top)]
        m = prepare(wdir.name, wdir, tools, cfg)
        again = m.remeasure([r.to_program() for _, r in entries], rounds=rounds, race=False)
        if again is None:
            raise SystemExit(f"{wdir.name}: IREE's default failed to run again")
        gf = [flops / t / 1e9 if t else None for t in again.tuned]
        best: dict[str, float] = {}  # run -> its fastest re-timed program
        for (run, _), g in zip(entries, gf):
            if g:
                best[run] = max(best.get(run, 0.0), g)
        best_random = best.get("random")
        print(f"{wdir.name}: IREE default re-timed {flops / again.default_s / 1e9:.1f} "
              f"GFLOP/s; medians of {rounds} interleaved rounds, every program in each")
        print(f"  {'run':32s} {'program':14s} {'recorded':>9s} {'re-timed':>9s} "
              f"{'vs random best':>14s}")
        for (run, r), g in zip(entries, gf):
            rel = f"{g / best_random:.3f}" if g and best_random else "-"
            print(f"  {run:32s} {r.program_key[:12]:14s} {flops / r.latency_s / 1e9:9.1f} "
                  f"{(f'{g:.1f}' if g else 'failed'):>9s} {rel:>14s}")
        print(f"  each run's fastest re-timed program against random's ({top} of each re-timed):")
        for run, g in best.items():
            if run != "random" and best_random:
                print(f"  {run:32s} {g:9.1f} GFLOP/s {g / best_random:8.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=sorted(WORKLOADS))
    ap.add_argument("--policy", choices=sorted(POLICIES), default="random")
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("bench_out/curves"))
    ap.add_argument("--cost-model", type=Path, metavar="MODEL",
                    help="start the evolutionary search from this saved cost model")
    ap.add_argument("--kernel-seeds", action="store_true",
                    help="measure the target's register-tile seed programs first, as "
                         "`mlir_ansor.tune --kernel-seeds` does (run name gets +seeds)")
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--retime", action="store_true",
                    help="time random's best programs after 1000 and every other run's "
                         "best within --within measurements again, side by side")
    ap.add_argument("--within", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    if args.report:
        report(args.out)
        return 0
    if args.retime:
        retime(args.out, args.within, args.rounds)
        return 0
    if not args.workload:
        ap.error("--workload is required unless --report")
    if args.cost_model and args.policy != "evolution":
        ap.error("--cost-model needs --policy evolution")
    base = load_booster(args.cost_model, host().device_kind, same_arch=True) \
        if args.cost_model else None
    run = f"{args.policy}-{args.cost_model.stem}" if args.cost_model else args.policy
    run += "+seeds" if args.kernel_seeds else ""
    run += f"-s{args.seed}" if args.seed else ""  # several seeds of a policy side by side
    tools, cfg = Toolchain.find(), MeasureConfig()
    wdir = args.out / args.workload
    m = prepare(args.workload, wdir, tools, cfg, args.seed)
    (wdir / "flops.txt").write_text(str(m.task.flops))
    (wdir / "task_key.txt").write_text(m.task.key)
    default_s = m.time_default()
    if default_s:
        (wdir / "default_s.txt").write_text(repr(default_s))
    store = RecordStore(wdir / run / "records.jsonl")
    records = store.load()
    left = max(0, args.trials - len(records))
    round_robin([m.task], {m.task.key: m}, store,
                SearchConfig(trials=left, batch=args.batch, seed=args.seed), records,
                lambda t, r: print(f"\r{len(records)} trials", end="", flush=True),
                with_seeds(make_policy(args.policy, base),
                           *([kernel_seeds] if args.kernel_seeds else [])))
    print()
    report(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
