"""End-to-end benchmark of bundled models: torch eager (its default threads, one per core;
also in channels-last memory format for models with 4-D inputs: torch is often faster
so), torch.compile
(Inductor, CPU), IREE default, IREE with data tiling, IREE with its channels-last rewrite
(models with NCHW convs), our channels-last form of the model (also depthwise, grouped, 1-D
and 3-D convs) with IREE's default codegen, and tuned modules, timed side by side in one run (interleaved
rounds, lower quartile of all repetitions).

  python tools/bench_models.py resnet50 --tuned gradient=runs/r50_gradient
  python tools/bench_models.py resnet50 --compare-schedulers --trials 600 --out runs/sched

`--tuned LABEL=DIR` takes DIR/tuned_library.mlir and the handed-back model
(DIR/model_tuned.mlir, or DIR/<model>/ for a run that tuned several models) from an earlier
`mlir_ansor.tune` run. `--compare-schedulers` first tunes the model twice with the same
budget (gradient task scheduler and round robin, same seed), then times both tuned modules
side by side.

Nothing is timed unchecked (tools/module_check.py): every module must compile with exit 0,
a tuned module must show in IREE's configuration dump the strategies its run applied to
this model (report.json; else every strategy of the library), and every module's outputs
must match torch's; so must torch's channels-last and compiled forms. Where IREE's
default differs from torch beyond the element bound but not grossly (its exp or tanh is
another implementation), it says so and the other IREE modules must match IREE's default
instead, as in the tuner (e2e.model_reference). A failure prints a FAILED line and its row
is left out; IREE's default is the baseline, so its failure stops the benchmark. Everything is written under --out
(default bench_out/models, ignored by git).
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from mlir_ansor.dialect_helpers.activation_layout import (CHANNELS_LAST_FLAG,
                                                          channels_first_convs,
                                                          to_channels_last)
from mlir_ansor.dialect_helpers.layout_rewrite import LayoutRewriteError
from mlir_ansor.errors import DefaultModuleError
from mlir_ansor.tuner.e2e import (model_reference, module_times, save_inputs, torch_reference,
                                  torch_threads, torch_times)
from mlir_ansor.tuner.frontend import import_model, load_factory
from mlir_ansor.tuner.layouts import DATA_TILING_FLAGS, load_layout
from mlir_ansor.tuner.measure import MeasureConfig, lower_quartile
from mlir_ansor.tuner.stages.importing import safe_dir_name
from mlir_ansor.tuner.toolchain import Toolchain
from mlir_ansor.tuner.validation import outputs_match
from module_check import Built, CheckFailed, build, checked, report_failure, run_tuner


def tuned_run(model: str, run_dir: Path, plain_src: Path
              ) -> tuple[Path, Path | None, tuple[str, ...], list[str] | None]:
    """(model to compile, library or None, its build flags (e.g. IREE's data tiling),
    strategies expected applied or None = all of the library's) of an earlier tuner run on
    `model`."""
    report = run_dir / "report.json"
    e2e = json.loads(report.read_text()).get("e2e", {}).get(model) if report.exists() else None
    if e2e is not None and e2e.get("handed_back") == "default":
        return plain_src, None, (), []  # the run handed back IREE's default build
    safe = safe_dir_name(model)
    mdir = run_dir / safe if (run_dir / safe / "model.mlir").exists() else run_dir
    src = mdir / "model_tuned.mlir"  # with its packed weights / channels-last activations
    lib = mdir / "tuned_library.mlir"  # the model's own strategies
    expected = list(e2e["applied"]) if e2e is not None else None
    layout = mdir / "layout.json"
    flags = load_layout(layout).flags if layout.exists() else ()
    return ((src if src.exists() else plain_src), (lib if lib.exists() else None), flags,
            expected)


def torch_forms(model, inputs: tuple, refs, magnitude, cfg: MeasureConfig,
                failed: list[str]) -> dict[str, tuple]:
    """label -> (callable, inputs) of each torch form whose outputs match eager's."""
    import torch

    forms = {f"torch eager ({torch_threads()} threads)": (model, inputs)}
    if any(x.dim() == 4 for x in inputs):
        cl = torch.channels_last
        forms["torch eager channels-last"] = (
            copy.deepcopy(model).to(memory_format=cl),
            tuple(x.contiguous(memory_format=cl) if x.dim() == 4 else x for x in inputs))
    try:
        forms["torch.compile (Inductor)"] = (torch.compile(model), inputs)
        with torch.no_grad():
            forms["torch.compile (Inductor)"][0](*inputs)  # compiles now, not in a round
    except Exception as e:  # torch's compiler, not ours: a FAILED row, the others go on
        report_failure(f"torch.compile (Inductor): {type(e).__name__}: {str(e)[:200]}")
        forms.pop("torch.compile (Inductor)", None)
        failed.append("torch.compile (Inductor)")
    for label, (m, xs) in list(forms.items())[1:]:
        with torch.no_grad():
            out = m(*xs)
        outs = [o.detach().contiguous().numpy()
                for o in (out if isinstance(out, (tuple, list)) else (out,))]
        bad = outputs_match(outs, refs, magnitude, cfg.model_rtol, cfg.atol)
        if bad:
            report_failure(f"{label}: does not match torch eager: {bad}")
            forms.pop(label)
            failed.append(label)
    return forms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a bundled example or path/to/file.py:factory (e.g. "
                    "tools/heldout_models.py:vit_block)")
    ap.add_argument("--tuned", nargs="*", default=[], metavar="LABEL=DIR")
    ap.add_argument("--compare-schedulers", action="store_true")
    ap.add_argument("--trials", type=int, default=600)
    ap.add_argument("--out", type=Path, default=Path("bench_out/models"))
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    out = args.out / safe_dir_name(args.model)
    out.mkdir(parents=True, exist_ok=True)
    bad = [t for t in args.tuned if "=" not in t]
    if bad:
        ap.error(f"--tuned takes LABEL=DIR, got {bad}")
    tuned = dict(t.split("=", 1) for t in args.tuned)
    if args.compare_schedulers:
        for sched in ("gradient", "round_robin"):
            run_dir = out / f"tune_{sched}"
            rc, last = run_tuner([args.model, "--trials", str(args.trials), "--scheduler",
                                  sched, "--out", str(run_dir)])
            if rc != 0:
                report_failure(f"tuned ({sched}): the tuner exited with {rc}: {last}")
                return 1
            tuned[f"tuned ({sched})"] = str(run_dir)
    tools, cfg = Toolchain.find(), MeasureConfig()
    model, inputs = load_factory(args.model)()
    src = out / "model.mlir"
    src.write_text(import_model(model, inputs))
    in_paths = save_inputs(inputs, out / "inputs")
    refs, magnitude = torch_reference(model, inputs)
    failed: list[str] = []
    # IREE's default is the baseline: checked against torch as the tuner checks it, and
    # where it differs beyond the element bound but not grossly (another exp or tanh),
    # the other IREE modules are checked against its outputs, as the tuner's are.
    try:
        default = build(tools, cfg, "IREE default", src, out / "modules")
        iree_refs, iree_mags, _, note = model_reference(tools, default.vmfb, model, inputs,
                                                        in_paths, default.vmfb.parent, cfg)
    except (CheckFailed, DefaultModuleError) as e:
        report_failure(f"IREE default is the baseline of every ratio; nothing timed: {e}")
        return 1
    if note:
        print(note)
    # (label, model, library, extra flags, expected strategies)
    candidates = [("IREE data tiling", src, None, DATA_TILING_FLAGS, None)]
    if channels_first_convs(src.read_text()):
        # IREE's own channels-last rewrite with its default codegen (what our tuner starts
        # from when it picks that layout): separates the layout's gain from the tuning's.
        candidates.append(("IREE channels-last", src, None, (CHANNELS_LAST_FLAG,), None))
        # Our channels-last form (also depthwise, grouped, 1-D and 3-D convs) with IREE's
        # default codegen: what the tuner starts from when it picks that layout.
        ours = out / "model_channels_last.mlir"
        try:
            ours.write_text(to_channels_last(src.read_text()))
            candidates.append(("channels-last form", ours, None, (), None))
        except LayoutRewriteError as e:
            report_failure(f"channels-last form: {e}")
            failed.append("channels-last form")
    for label, d in tuned.items():
        tsrc, lib, flags, expected = tuned_run(args.model, Path(d), src)
        if lib is None:
            print(f"{label}: {d} has no tuned library (nothing beat IREE's default): its "
                  "module is IREE's default of its model")
        candidates.append((label, tsrc, lib, flags, expected))
    modules: dict[str, Built] = {"IREE default": default}
    for label, path, lib, extra, expected in candidates:
        built = checked(tools, cfg, label, path, out / "modules", in_paths, iree_refs,
                        iree_mags, lib, extra, expected)
        if built is None:
            failed.append(label)
            continue
        if lib is not None:
            print(f"{label}: {len(built.applied)} tuned dispatches applied, outputs match "
                  + ("IREE's default" if note else "torch"))
        modules[label] = built
    forms = torch_forms(model, inputs, refs, magnitude, cfg, failed)
    times: dict[str, list[float]] = {k: [] for k in [*forms, *modules]}
    for r in range(args.rounds):
        order = list(modules.items())
        for label, built in (order if r % 2 == 0 else order[::-1]):  # drift cancels
            times[label] += module_times(tools, built.vmfb, in_paths, cfg)
        for label, (m, xs) in forms.items():
            times[label] += torch_times(m, xs, cfg)
    base = lower_quartile(times["IREE default"])
    best_torch = min(lower_quartile(times[k]) for k in forms)
    print(f"\n{args.model}, end to end, {args.rounds} interleaved rounds "
          f"(lower quartile of all repetitions):")
    print(f"{'':28s} {'ms':>9s} {'vs IREE default':>16s} {'vs best torch':>14s}")
    for label, ts in times.items():
        t = lower_quartile(ts)
        print(f"{label:28s} {t * 1e3:9.3f} {base / t:15.2f}x {best_torch / t:13.2f}x")
    for label in failed:
        print(f"{label:28s} FAILED (see above), not timed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
