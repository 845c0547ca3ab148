"""1024^3 f32 matmul: IREE default vs data tiling vs tuned vs torch vs numpy.

Tunes the bundled `matmul_1024` with `python -m mlir_ansor.tune` (its search, its final
re-timing of the top programs and its end-to-end check) under OUT/tune, optionally reusing
the records of `tools/tuning_curve.py` runs (--records). Then builds IREE's default, IREE's
data tiling and the tuned module, and times the five side by side (interleaved rounds,
lower quartile of all repetitions), printed as GFLOP/s, ratios over IREE's default and
shares of this machine's peak (measured with mlir_ansor/tuner/peak_gflops.c when gcc is there).

Nothing is timed unchecked (tools/module_check.py): every module must compile with exit 0,
the tuned one must show its strategies applied in IREE's configuration dump, and every
module, torch and numpy must match a float64 reference. A failure prints a FAILED line and
its row is left out. Everything is written under --out (default bench_out/matmul, ignored
by git).

  python tools/bench_matmul.py --trials 300
  python tools/bench_matmul.py --trials 0 --records bench_out/curves/matmul/evolution/records.jsonl
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from mlir_ansor.examples import matmul_1024
from mlir_ansor.tuner.e2e import module_times, save_inputs, torch_threads, torch_times
from mlir_ansor.tuner.layouts import DATA_TILING_FLAGS
from mlir_ansor.tuner.measure import MeasureConfig, lower_quartile
from mlir_ansor.tuner.peak import measure_peak_gflops
from mlir_ansor.tuner.toolchain import Toolchain
from module_check import (Built, CheckFailed, check_outputs, checked, report_failure,
                          run_tuner)

N = 1024
FLOP = 2 * N ** 3


def tune_args(args: argparse.Namespace, tune_dir: Path) -> list[str]:
    # Our kernels: IREE's data tiling is a row of its own (the tuner's default, --data-tiling
    # auto, may hand the whole matmul to it).
    out = ["matmul_1024", "--trials", str(args.trials), "--policy", args.policy, "--batch",
           str(args.batch), "--out", str(tune_dir), "--data-tiling", "off"]
    for f in args.records:  # one flag per file: the CLI's --reuse takes one file each time
        out += ["--reuse", str(f)]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--out", type=Path, default=Path("bench_out/matmul"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16, help="programs per round")
    ap.add_argument("--policy", choices=["evolution", "random"], default="evolution")
    ap.add_argument("--records", type=Path, action="append", default=[], metavar="RECORDS",
                    help="a records file to take programs from (e.g. a tuning-curve run); "
                         "repeatable")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tune_dir = args.out / "tune"
    rc, last = run_tuner(tune_args(args, tune_dir))
    if rc != 0:
        report_failure(f"tuned: the tuner exited with {rc}: {last}")
        return 1
    tools, cfg = Toolchain.find(), MeasureConfig()
    model, inputs = matmul_1024()
    a, b = (x.numpy() for x in inputs)
    ref = [a.astype(np.float64) @ b.astype(np.float64)]
    magnitude = [np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)]
    in_paths = save_inputs(inputs, args.out / "inputs")
    src = tune_dir / "model.mlir"
    builds = args.out / "modules"
    candidates = [("IREE default", src, None, ()),
                  ("IREE data tiling", src, None, DATA_TILING_FLAGS)]
    library = tune_dir / "tuned_library.mlir"
    if library.exists():
        tuned_src = tune_dir / "model_tuned.mlir"  # with any packed weights
        candidates.append(("tuned", tuned_src if tuned_src.exists() else src, library, ()))
    else:
        print("tuned: no strategy beat IREE's default by the tuner's margin; the tuned "
              "module would be IREE's default (no row)")
    modules: dict[str, Built] = {}
    failed: list[str] = []
    for label, path, lib, extra in candidates:
        built = checked(tools, cfg, label, path, builds, in_paths, ref, magnitude, lib, extra)
        if built is None:
            failed.append(label)
        else:
            modules[label] = built
    if "IREE default" not in modules:
        report_failure("IREE default is the baseline of every ratio; nothing timed")
        return 1
    host = {f"torch eager ({torch_threads()} threads)": (model, inputs),
            "numpy": (np.matmul, (a, b))}
    for label, (fn, xs) in list(host.items()):
        try:
            check_outputs(label, [np.asarray(fn(*xs))], ref, magnitude, cfg)
        except CheckFailed as e:
            report_failure(str(e))
            failed.append(label)
            del host[label]
    times: dict[str, list[float]] = {k: [] for k in [*modules, *host]}
    for r in range(args.rounds):
        order = list(modules.items())
        for label, built in (order if r % 2 == 0 else order[::-1]):  # drift cancels
            times[label] += module_times(tools, built.vmfb, in_paths, cfg)
        for label, (fn, xs) in host.items():
            times[label] += torch_times(fn, xs, cfg)
    base = lower_quartile(times["IREE default"])
    peak = measure_peak_gflops()
    applied = sorted(modules["tuned"].applied) if "tuned" in modules else "-"
    print(f"\n1024^3 f32 matmul, {args.rounds} interleaved rounds (lower quartile of all "
          f"repetitions); strategies applied in the tuned module: {applied}")
    print(f"machine peak (f32 FMA, {os.cpu_count()} cores, measured): "
          + (f"{peak:.1f} GFLOP/s" if peak else "unknown"))
    print(f"{'':26s} {'ms':>8s} {'GFLOP/s':>8s} {'vs IREE default':>16s} {'of peak':>8s}")
    for label, ts in times.items():
        t = lower_quartile(ts)
        g = FLOP / t / 1e9
        share = f"{100 * g / peak:7.1f}%" if peak else "      -"
        print(f"{label:26s} {t * 1e3:8.3f} {g:8.1f} {base / t:15.2f}x {share}")
    for label in failed:
        print(f"{label:26s} {'FAILED (see above), not timed':>43s}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
