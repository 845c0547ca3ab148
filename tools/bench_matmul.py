"""1024^3 f32 matmul: IREE default vs data tiling vs tuned (random search) vs torch vs numpy.

All five are timed side by side in one run (interleaved rounds, medians) and printed as
GFLOP/s and ratios over IREE's default.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from mlir_ansor.transform_scripts.library import TunedEntry, library_text
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.measure import MeasureConfig, TaskMeasurer, benchmark, compile_module
from mlir_ansor.tuner.records import RecordStore, best_by_task
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--out", type=Path, default=Path("bench_out/matmul"))
    ap.add_argument("--rounds", type=int, default=5)
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
                SearchConfig(trials=max(0, args.trials - done), batch=8), records,
                lambda t, r: print(f"\r{len(records)} trials", end="", flush=True))
    print()
    best = best_by_task(records)[task.key]
    lib = args.out / "tuned_library.mlir"
    lib.write_text(library_text([TunedEntry(task.task_id, task.task_mlir, task.ops,
                                            best.to_program())]))
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
    print(f"1024^3 f32 matmul, {len(records)} trials recorded, best program {best.program_key}")
    print(f"{'':26s} {'ms':>8s} {'GFLOP/s':>8s} {'vs IREE default':>16s}")
    for k, v in times.items():
        t = statistics.median(v)
        print(f"{k:26s} {t * 1e3:8.3f} {FLOP / t / 1e9:8.1f} {base / t:15.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
