"""1024^3 f32 matmul: IREE default vs data tiling vs tuned vs torch vs numpy.

Tunes with the chosen policy (default: evolutionary search with the cost model), or reuses
the records of `tools/tuning_curve.py` (--records). The top 3 programs are re-timed side by
side and the best one is compiled into the model. All five are then timed side by side in
one run (interleaved rounds, medians) and printed as GFLOP/s, ratios over IREE's default
and fractions of this machine's peak (measured with tools/peak_gflops.c when gcc is there).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from mlir_ansor.transform_scripts.library import TunedEntry, library_text
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.measure import MeasureConfig, TaskMeasurer, benchmark, compile_module
from mlir_ansor.tuner.records import RecordStore, top_programs
from mlir_ansor.tuner.policies import POLICIES
from mlir_ansor.tuner.search import SearchConfig, round_robin
from mlir_ansor.tuner.tasks import flow_source, extract_tasks
from mlir_ansor.tuner.toolchain import Toolchain
from mlir_ansor.examples import matmul_1024

N = 1024
FLOP = 2 * N ** 3


def host_time(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def peak_gflops(out: Path) -> float | None:
    """Measured f32 FMA peak of all cores (None without gcc or AVX-512)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    exe = out / "peak_gflops"
    src = Path(__file__).with_name("peak_gflops.c")
    res = subprocess.run([gcc, "-O3", "-funroll-all-loops", "-mavx512f", "-fopenmp", str(src),
                          "-o", str(exe)], capture_output=True, text=True)
    if res.returncode != 0:
        return None
    run = subprocess.run([str(exe)], capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": str(os.cpu_count() or 1)})
    return float(run.stdout.strip()) if run.returncode == 0 else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--out", type=Path, default=Path("bench_out/matmul"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--policy", choices=sorted(POLICIES), default="evolution")
    ap.add_argument("--records", type=Path, nargs="*", default=[],
                    help="extra records files to take programs from (e.g. a tuning-curve run)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tools, cfg = Toolchain.find(), MeasureConfig()
    model, inputs = matmul_1024()
    model_mlir = args.out / "model.mlir"
    model_mlir.write_text(import_model(model, inputs))
    task = [t for t in extract_tasks(flow_source(model_mlir, "llvm-cpu", tools, 300))
            if t.tunable][0]
    m = TaskMeasurer(task, args.out / "tasks", tools, cfg)
    m.prepare()
    store = RecordStore(args.out / "records.jsonl")
    records = store.load()
    done = sum(1 for r in records if r.task_key == task.key)
    round_robin([task], {task.key: m}, store,
                SearchConfig(trials=max(0, args.trials - done), batch=16), records,
                lambda t, r: print(f"\r{len(records)} trials", end="", flush=True),
                POLICIES[args.policy])
    print()
    for extra in args.records:
        records += [r for r in RecordStore(extra).load() if r.task_key == task.key]
    ok = [r for r in records if r.task_key == task.key and r.ok and
          r.to_program().sketch in task.sketches]
    top = top_programs(ok, task.key, 3)
    res = m.remeasure(top)
    if res is None or all(t is None for t in res[1]):
        print("no valid tuned program", file=sys.stderr)
        return 1
    best_t, best = min(((t, p) for t, p in zip(res[1], top) if t is not None),
                       key=lambda x: x[0])
    lib = args.out / "tuned_library.mlir"
    lib.write_text(library_text([TunedEntry(task.task_id, task.task_mlir, task.ops, best,
                                            task.view_mlir)]))
    vmfbs = {"IREE default": args.out / "default.vmfb", "IREE data tiling": args.out / "dt.vmfb",
             "tuned": args.out / "tuned.vmfb"}
    compile_module(tools, model_mlir, vmfbs["IREE default"], cfg)
    compile_module(tools, model_mlir, vmfbs["IREE data tiling"], cfg,
                   extra=["--iree-dispatch-creation-data-tiling"])
    compile_module(tools, model_mlir, vmfbs["tuned"], cfg, lib)
    in_paths = []
    for i, x in enumerate(inputs):
        p = args.out / f"in{i}.npy"
        np.save(p, x.numpy())
        in_paths.append(p)
    torch.set_num_threads(2)
    a, b = (x.numpy() for x in inputs)
    times: dict[str, list[float]] = {k: [] for k in [*vmfbs, "torch eager (2 threads)", "numpy"]}
    for _ in range(args.rounds):
        for k, v in vmfbs.items():
            t, err = benchmark(tools, v, in_paths, cfg)
            if t is None:
                print(f"{k}: {err}", file=sys.stderr)
                return 1
            times[k].append(statistics.median(t))
        times["torch eager (2 threads)"].append(host_time(lambda: model(*inputs), 10))
        times["numpy"].append(host_time(lambda: a @ b, 10))
    base = statistics.median(times["IREE default"])
    peak = peak_gflops(args.out)
    print(f"1024^3 f32 matmul, {len(ok)} valid programs recorded, best program {best.key}")
    print(f"machine peak (f32 FMA, {os.cpu_count()} cores, measured): "
          + (f"{peak:.1f} GFLOP/s" if peak else "unknown"))
    print(f"{'':26s} {'ms':>8s} {'GFLOP/s':>8s} {'vs IREE default':>16s} {'of peak':>8s}")
    for k, v in times.items():
        t = statistics.median(v)
        g = FLOP / t / 1e9
        share = f"{100 * g / peak:7.1f}%" if peak else "      -"
        print(f"{k:26s} {t * 1e3:8.3f} {g:8.1f} {base / t:15.2f}x {share}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
