"""End-to-end benchmark of bundled models: torch eager (2 threads), IREE default, IREE with
data tiling, IREE with its channels-last rewrite (models with NCHW convs), and tuned modules,
timed side by side in one run (interleaved rounds).

  python tools/bench_models.py resnet50 --tuned gradient=runs/r50_gradient
  python tools/bench_models.py resnet50 --compare-schedulers --trials 600 --out runs/sched

`--tuned LABEL=DIR` takes DIR/tuned_library.mlir from an earlier `mlir_ansor.tune` run.
`--compare-schedulers` first tunes the model twice with the same budget (gradient task
scheduler and round robin, same seed), then times both tuned modules side by side.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from mlir_ansor.dialect_helpers.activation_layout import (CHANNELS_LAST_FLAG,
                                                          channels_first_convs)
from mlir_ansor.examples import EXAMPLES
from mlir_ansor.tuner.e2e import compile_model, module_times, save_inputs, torch_times
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.measure import (MeasureConfig, compile_module, lower_quartile,
                                      outputs_match, run_outputs)
from mlir_ansor.tuner.toolchain import Toolchain


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", choices=sorted(EXAMPLES))
    ap.add_argument("--tuned", nargs="*", default=[], metavar="LABEL=DIR")
    ap.add_argument("--compare-schedulers", action="store_true")
    ap.add_argument("--trials", type=int, default=600)
    ap.add_argument("--out", type=Path, default=Path("bench_out/models"))
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    out = args.out / args.model
    out.mkdir(parents=True, exist_ok=True)
    tuned = dict(t.split("=", 1) for t in args.tuned)
    if args.compare_schedulers:
        for sched in ("gradient", "round_robin"):
            run_dir = out / f"tune_{sched}"
            cmd = [sys.executable, "-m", "mlir_ansor.tune", args.model, "--trials",
                   str(args.trials), "--scheduler", sched, "--out", str(run_dir)]
            print("$", " ".join(cmd), flush=True)
            if subprocess.run(cmd).returncode != 0:
                return 1
            tuned[f"tuned ({sched})"] = str(run_dir)
    tools, cfg = Toolchain.find(), MeasureConfig()
    model, inputs = EXAMPLES[args.model]()
    src = out / "model.mlir"
    src.write_text(import_model(model, inputs))
    vmfbs: dict[str, Path] = {"IREE default": out / "default.vmfb",
                              "IREE data tiling": out / "dt.vmfb"}
    compile_model(tools, src, vmfbs["IREE default"], cfg, None)
    anchors = {"IREE data tiling": ["--iree-dispatch-creation-data-tiling"]}
    if channels_first_convs(src.read_text()):
        # IREE's own channels-last rewrite with its default codegen (what our tuner starts
        # from when it picks that layout): separates the layout's gain from the tuning's.
        vmfbs["IREE channels-last"] = out / "cl.vmfb"
        anchors["IREE channels-last"] = [CHANNELS_LAST_FLAG]
    for label, flags in anchors.items():
        res = compile_module(tools, src, vmfbs[label], cfg, extra=flags,
                             timeout_s=cfg.model_compile_timeout_s)
        if res.returncode != 0:
            print(f"{label} compile failed: {res.stderr[-300:]}", file=sys.stderr)
            del vmfbs[label]
    for label, d in tuned.items():
        lib = Path(d) / "tuned_library.mlir"
        v = out / f"{label.replace(' ', '_').replace('(', '').replace(')', '')}.vmfb"
        # The run's model with its packed weights (layout rewrite), else the plain one.
        tsrc = Path(d) / "model_tuned.mlir"
        applied = compile_model(tools, tsrc if tsrc.exists() else src, v, cfg,
                                lib if lib.exists() else None)
        print(f"{label}: {len(applied)} tuned dispatches applied")
        vmfbs[label] = v
    in_paths = save_inputs(inputs, out)
    ref = model(*inputs).detach().numpy()
    for label, v in vmfbs.items():
        outs, err = run_outputs(tools, v, in_paths, 1, out, cfg)
        bad = err or outputs_match(outs, [ref], MeasureConfig())
        if bad:
            print(f"{label}: output does not match torch: {bad}", file=sys.stderr)
            return 1
    times: dict[str, list[float]] = {k: [] for k in ["torch eager (2 threads)", *vmfbs]}
    for _ in range(args.rounds):
        times["torch eager (2 threads)"] += torch_times(model, inputs, cfg)
        for label, v in vmfbs.items():
            times[label] += module_times(tools, v, in_paths, cfg)
    base = lower_quartile(times["IREE default"])
    print(f"\n{args.model}, end to end, {args.rounds} interleaved rounds "
          f"(lower quartile of all repetitions):")
    print(f"{'':28s} {'ms':>9s} {'vs IREE default':>16s}")
    for label, ts in times.items():
        t = lower_quartile(ts)
        print(f"{label:28s} {t * 1e3:9.3f} {base / t:15.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
