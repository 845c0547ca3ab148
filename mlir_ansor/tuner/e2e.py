"""Whole-model check: compile with and without the tuned library, confirm the tuned
dispatches were configured with our strategies, compare with torch, time side by side."""
from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from mlir_ansor.errors import (CompileError, DefaultModuleError, StrategiesFailed,
                               StrategiesNotApplied)
from mlir_ansor.tuner.builder import (failing_strategies, first_error_line,
                                     misplaced_branch_strategies)
from mlir_ansor.tuner.measure import (FAR_BEHIND, MeasureConfig, applied_strategies,
                                      benchmark, compile_module, lower_quartile, run_outputs)
from mlir_ansor.tuner.toolchain import Toolchain
from mlir_ansor.tuner.validation import outputs_match


@dataclass(frozen=True)
class EndToEnd:
    torch_s: float
    default_s: float
    tuned_s: float
    applied: tuple[str, ...]
    max_error: float
    checked: tuple[str, ...] = ()  # the other input sizes both modules matched torch at
    # "" when IREE's default matches torch; else how it differs: the tuned module was then
    # checked against IREE's default (what the user's IREE build computes anyway).
    default_differs: str = ""
    # A dynamic model, timed at every checked size too: (label, torch s, default s, tuned s).
    by_size: tuple[tuple[str, float, float, float], ...] = ()
    # False: checked only (a cross target run under qemu); the times are NaN.
    measured: bool = True
    # IREE's runtime device the tuned module runs fastest on: "" (local-task, a worker per
    # core) or "local-sync" (the caller's thread alone: no hand-off to the workers, which
    # costs a small model more than the second core gives it); tuned_s is its time there.
    device: str = ""
    tuned_task_s: float = math.nan  # the tuned module on local-task, when device is set
    # The tuned module is IREE's default one (nothing of ours in it: only a device may
    # differ); its file is then default.vmfb, no tuned.vmfb is built.
    tuned_is_default: bool = False

    @property
    def speedup(self) -> float:
        """Tuned over IREE's default: at the example inputs, or for a dynamic model the
        geometric mean over the example and every checked size (each size counts alike)."""
        pairs = [(self.default_s, self.tuned_s)] + [(d, t) for _, _, d, t in self.by_size]
        return math.exp(sum(math.log(d / t) for d, t in pairs) / len(pairs))


# IREE's default may differ from torch beyond the element bound (polynomial tanh/exp, other
# summation orders) by a little; beyond this share of the output's largest magnitude it is
# taken as broken and the run stops.
GROSS_DIFFERENCE = 1e-2
# Interleaved rounds at each size of a dynamic model (its example too; a static model's
# gets end_to_end's `rounds`), each of SIZE_REPETITIONS shorter repetitions (`size_timing`):
# with a dozen sizes this timing was most of a dynamic run's hand-back (the MLP's: 94 of
# 161 s), and these rows are the report's; tools/bench_dynamic.py times its own.
SIZE_ROUNDS = 3
SIZE_REPETITIONS = 3
# A static model's modules are timed in `rounds` rounds; one far behind another after this
# many leaves the race (`interleaved`).
SETTLE_ROUNDS = 3


def size_timing(cfg: MeasureConfig) -> MeasureConfig:
    """How each size of a dynamic model is timed: fewer, shorter repetitions after a
    shorter warm-up (9 pooled samples over 3 rounds, against 55 at a static model's
    example)."""
    return replace(cfg, repetitions=min(cfg.repetitions, SIZE_REPETITIONS),
                   min_time_s=cfg.min_time_s / 2, warmup_s=cfg.warmup_s / 2)
# A static model whose tuned module takes less than this a call on local-task is also
# timed on IREE's local-sync device (tools/call_floor.py on the 2-core Zen 5 VM with the
# waiting caller at idle priority: a call's floor 1.7-3.0 us there against 11.9-14.2 us on
# local-task; a ReLU of 0.8 MB 20.9 against 31.1 us).
SYNC_PROBE_S = 2e-3
SYNC_DEVICE = "local-sync"


def model_reference(tools: Toolchain, default_vmfb: Path, model, inputs: tuple,
                    in_paths: Sequence[Path], out_dir: Path, cfg: MeasureConfig
                    ) -> tuple[list[np.ndarray], list[np.ndarray], float, str]:
    """What a tuned module must match on `inputs`: torch's outputs (their magnitude bound,
    IREE's default's max abs error, ""), or, when IREE's default differs from torch beyond
    the element bound but not grossly, the default's outputs and how it differs."""
    refs, mags = torch_reference(model, inputs)
    outs, err = run_outputs(tools, default_vmfb, in_paths, len(refs), out_dir, cfg)
    if outs is None:
        raise DefaultModuleError(f"IREE's default build of the model: running "
                                 f"{default_vmfb.name} failed: {err}")
    bad = outputs_match(outs, refs, mags, cfg.model_rtol, cfg.atol)
    shapes_ok = len(outs) == len(refs) and all(o.shape == r.shape for o, r in zip(outs, refs))
    diffs = [float(np.max(np.abs(o.astype(np.float64) - r))) if r.size else 0.0
             for o, r in zip(outs, refs)] if shapes_ok else []
    if not bad:
        return refs, mags, max(diffs, default=0.0), ""
    scale = max((float(np.max(np.abs(r))) for r in refs if r.size), default=0.0)
    exact = [o for o, r in zip(outs, refs) if r.dtype.kind != "f" and not np.array_equal(o, r)]
    if not shapes_ok or exact or max(diffs) > GROSS_DIFFERENCE * scale:
        raise DefaultModuleError(f"IREE's default build of the model: {default_vmfb.name} "
                                 f"does not match torch: {bad}")
    return list(outs), mags, max(diffs), (
        f"IREE's default differs from torch beyond the 1e-3 element bound ({bad}; max abs "
        f"{max(diffs):.2e} of outputs up to {scale:.2e}): the tuned module is checked "
        "against IREE's default")


def compile_model(tools: Toolchain, model_mlir: Path, out: Path, cfg: MeasureConfig,
                  library: Path | None, flags: Sequence[str] = ()) -> set[str]:
    """Compile (`flags`: the model's own build flags, e.g. data tiling); return the
    strategy symbols IREE applied (empty without a library).

    With a library, in two steps: up to global optimization without it, then the rest with
    it. In one step IREE 3.13 can deadlock (seen as a compile asleep at 0% CPU): its
    constant evaluation JIT-compiles on worker threads that wait on the library's loading
    lock."""
    cfg_dir = out.parent / (out.stem + "_configs")
    shutil.rmtree(cfg_dir, ignore_errors=True)  # an earlier build's dump must not vouch
    extra = [*flags, f"--iree-hal-dump-executable-configurations-to={cfg_dir}"]
    if library is not None:
        staged = out.parent / (out.stem + "_global_opt.mlir")
        res = compile_module(tools, model_mlir, staged, cfg, None,
                             [*flags, "--compile-to=global-optimization"],
                             timeout_s=cfg.model_compile_timeout_s)
        if res.returncode != 0:
            raise CompileError(f"iree-compile failed on {model_mlir}: "
                               f"{first_error_line(res.stderr)}")
        model_mlir = staged
        # Single-threaded: with several dispatches configured in parallel, IREE 3.13 also
        # deadlocked in the second step (gdb: a worker in MaterializeUserConfigs waits on
        # getOrLoadTransformLibraryModule's mutex while the thread holding it waits for
        # the worker pool).
        extra += ["--compile-from=global-optimization", "--mlir-disable-threading"]
    res = compile_module(tools, model_mlir, out, cfg, library, extra,
                         timeout_s=cfg.model_compile_timeout_s)
    if res.returncode != 0:
        message = f"iree-compile failed on {model_mlir}: {first_error_line(res.stderr)}"
        failed = failing_strategies(res.stderr, cfg_dir) if library is not None else set()
        if failed:
            raise StrategiesFailed(message, sorted(failed))
        raise CompileError(message)
    return applied_strategies(cfg_dir)


def save_inputs(inputs: tuple, out_dir: Path) -> list[Path]:
    """The model's example inputs as .npy files for the IREE tools."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, x in enumerate(inputs):
        p = out_dir / f"input{i}.npy"
        np.save(p, x.detach().numpy())
        paths.append(p)
    return paths


def torch_reference(model, inputs: tuple) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Torch's outputs, and their magnitude bound: the outputs on the absolute values of
    the float inputs (`validation`)."""
    import torch

    def outputs(args) -> list[np.ndarray]:
        with torch.no_grad():
            out = model(*args)
        return [o.detach().numpy() for o in (out if isinstance(out, (tuple, list)) else (out,))]

    absolute = [x.abs() if x.is_floating_point() else x for x in inputs]
    return outputs(inputs), outputs(absolute)


def torch_threads() -> int:
    """Torch eager's intra-op threads: its default, one per physical core, as IREE's task
    executor runs one worker per physical core (`--task_topology_mode=physical_cores`)."""
    import torch

    return torch.get_num_threads()


def torch_times(model, inputs: tuple, cfg: MeasureConfig) -> list[float]:
    """Torch eager (its default threads: `torch_threads`) timed like `benchmark` times a
    module: after `cfg.warmup_s` of untimed calls, `cfg.repetitions` repetitions, each the
    mean of back-to-back calls over at least `cfg.min_time_s`."""
    import torch

    with torch.no_grad():
        end = time.perf_counter() + cfg.warmup_s
        model(*inputs)
        while time.perf_counter() < end:
            model(*inputs)
        times = []
        for _ in range(cfg.repetitions):
            n, start = 0, time.perf_counter()
            while True:
                model(*inputs)
                n += 1
                elapsed = time.perf_counter() - start
                if elapsed >= cfg.min_time_s:
                    break
            times.append(elapsed / n)
    return times


def interleaved(timers: Mapping[str, Callable[[], list[float]]],
                rounds: int, settle: int = 0) -> dict[str, list[float]]:
    """Each timer's pooled times over `rounds` rounds, all timers in every round, the order
    alternating between rounds (a noisy machine's drift hits all alike). With `settle`,
    after that many rounds a timer whose fastest time is FAR_BEHIND times another's slowest
    leaves the race (its times are those of the rounds it ran): ResNet-50's IREE default
    (about 1 s a call, 6 times the tuned module) took a minute of each model check's 11
    rounds, and no decision turns on its exact latency."""
    times: dict[str, list[float]] = {k: [] for k in timers}
    order = list(timers)
    for r in range(rounds):
        for k in (order if r % 2 == 0 else order[::-1]):
            times[k] += timers[k]()
        if settle and r + 1 >= settle:
            slowest = min(max(times[k]) for k in order)
            order = [k for k in order if min(times[k]) <= FAR_BEHIND * slowest]
    return times


def module_times(tools: Toolchain, vmfb: Path, inputs: Sequence[Path],
                 cfg: MeasureConfig) -> list[float]:
    """The timed repetitions of one `benchmark` run of a whole model."""
    times, err = benchmark(tools, vmfb, inputs, cfg)
    if not times:
        raise CompileError(f"benchmarking {vmfb.name} failed: {err}")
    return times


def check_outputs(tools: Toolchain, vmfb: Path, in_paths: Sequence[Path],
                  refs: Sequence[np.ndarray], mags: Sequence[np.ndarray], out_dir: Path,
                  cfg: MeasureConfig) -> float:
    """Run a model module and compare every result with torch's; the max abs error."""
    outs, err = run_outputs(tools, vmfb, in_paths, len(refs), out_dir, cfg)
    if outs is None:
        raise CompileError(f"running {vmfb.name} failed: {err}")
    bad = outputs_match(outs, refs, mags, cfg.model_rtol, cfg.atol)
    if bad:
        raise CompileError(f"{vmfb.name} does not match the reference (torch's outputs, or "
                           f"IREE's default's where those differ a little): {bad}")
    return max(float(np.max(np.abs(o.astype(np.float64) - r))) if r.size else 0.0
               for o, r in zip(outs, refs))


def check_tuned(tools: Toolchain, model_mlir: Path, library: Path | None, vmfb: Path,
                cfg: MeasureConfig, expected: Sequence[str], in_paths: Sequence[Path],
                refs: Sequence[np.ndarray], mags: Sequence[np.ndarray],
                flags: Sequence[str] = ()) -> tuple[set[str], float]:
    """Build a model with `library` (and its build `flags`), require the `expected`
    strategies applied and its results to match torch; (applied strategies, max abs
    error)."""
    applied = compile_model(tools, model_mlir, vmfb, cfg, library, flags)
    missing = set(expected) - applied
    if missing:
        raise StrategiesNotApplied(sorted(missing))
    wrong = misplaced_branch_strategies(vmfb.parent / (vmfb.stem + "_configs"))
    if wrong:
        raise CompileError(f"size-branch strategies on another branch's dispatch: {wrong}")
    return applied, check_outputs(tools, vmfb, in_paths, refs, mags, vmfb.parent, cfg)


def check_default(tools: Toolchain, model, inputs: tuple, model_mlir: Path, out_dir: Path,
                  cfg: MeasureConfig) -> Path:
    """IREE's default build of a model (`out_dir`/default.vmfb), run on the example inputs
    and compared with torch before any tuning: a model that IREE cannot compile or run as
    imported (e.g. a reshape torch-mlir got wrong) ends the run here, not after the search.
    Raises DefaultModuleError."""
    in_paths = save_inputs(inputs, out_dir)
    vmfb = out_dir / "default.vmfb"
    try:
        compile_model(tools, model_mlir, vmfb, cfg, None)
    except CompileError as e:
        raise DefaultModuleError(f"IREE's default build of the model: {e} (checked "
                                 "before tuning; nothing was tuned)") from e
    try:
        model_reference(tools, vmfb, model, inputs, in_paths, out_dir, cfg)
    except DefaultModuleError as e:
        raise DefaultModuleError(f"{e} (checked before tuning, on {model_mlir.name} as "
                                 "imported by torch-mlir; nothing was tuned)") from e
    return vmfb


def end_to_end(tools: Toolchain, model, inputs: tuple, model_mlir: Path, library: Path | None,
               out_dir: Path, cfg: MeasureConfig, expected: Sequence[str],
               rounds: int = 11, tuned_mlir: Path | None = None,
               prebuilt_default: Path | None = None,
               checks: Sequence[tuple[str, tuple]] = (),
               flags: Sequence[str] = (), sync_margin: float | None = None,
               check_only: Sequence[tuple[str, tuple]] = ()) -> EndToEnd:
    """Compile `model_mlir` with IREE's defaults (or take `prebuilt_default`, a module an
    earlier step built from it that way) and `tuned_mlir` (default: the same model, else
    e.g. with packed weights) with `library` and the tuned form's build `flags` (e.g. data
    tiling); check both against torch, on `inputs` and on every (label, inputs) of `checks`
    (other sizes of a dynamic model) and `check_only` (sizes checked, not timed: a
    dispatcher's branch ends); time torch and both modules side by side on `inputs` and
    at every size of `checks`. With `sync_margin` (a CPU target timed here), a static
    model whose tuned module is small is also timed on IREE's local-sync device, which is
    taken if it is faster by that factor."""
    in_paths = save_inputs(inputs, out_dir)
    default_vmfb = out_dir / "default.vmfb"
    tuned_vmfb = out_dir / "tuned.vmfb"
    try:
        if prebuilt_default is not None and prebuilt_default.exists():
            shutil.copyfile(prebuilt_default, default_vmfb)
        else:
            compile_model(tools, model_mlir, default_vmfb, cfg, None)
    except CompileError as e:
        raise DefaultModuleError(f"IREE's default build of the model: {e}") from e
    refs, mags, max_err, differs = model_reference(tools, default_vmfb, model, inputs,
                                                   in_paths, out_dir, cfg)
    applied: set[str] = set()
    same = library is None and tuned_mlir is None and not flags
    if same:  # nothing beat IREE's default: the tuned module is the default one
        tuned_vmfb = default_vmfb
    else:
        applied, err = check_tuned(tools, tuned_mlir or model_mlir, library, tuned_vmfb, cfg,
                                   expected, in_paths, refs, mags, flags)
        max_err = max(max_err, err)
    checked = [*checks, *check_only]
    labels = tuple(label for label, _ in checked)
    check_paths = []
    for i, (label, xs) in enumerate(checked):
        d = out_dir / f"check{i}"
        paths = save_inputs(xs, d)
        check_paths.append(paths)
        r, mg, e, why = model_reference(tools, default_vmfb, model, xs, paths, d, cfg)
        max_err = max(max_err, e)
        differs = differs or (f"at {label}: {why}" if why else "")
        if not same:
            max_err = max(max_err, check_outputs(tools, tuned_vmfb, paths, r, mg, d, cfg))
    def timers(xs: tuple, paths: Sequence[Path], c: MeasureConfig = cfg
               ) -> dict[str, Callable[[], list[float]]]:
        out = {"torch": lambda: torch_times(model, xs, c),
               "default": lambda: module_times(tools, default_vmfb, paths, c)}
        if not same:  # else the tuned module is the default one
            out["tuned"] = lambda: module_times(tools, tuned_vmfb, paths, c)
        return out

    if tools.emulated:  # checked under qemu: emulated time says nothing of the device
        nan = math.nan
        return EndToEnd(nan, nan, nan, tuple(sorted(applied)), max_err, labels, differs, (),
                        measured=False,
                        tuned_is_default=same)
    # A dynamic model's example is one size of many (all count alike in `speedup`): timed
    # as each further size is (at full length it was 14 of the dynamic MLP's 60 s here).
    at_size, size_rounds = size_timing(cfg), min(SIZE_ROUNDS, rounds)
    dynamic = bool(checked)
    tm = timers(inputs, in_paths, at_size) if dynamic else timers(inputs, in_paths)
    sync = replace(cfg, device=SYNC_DEVICE)
    probe = tuned_vmfb  # (IREE's default module when `same`)
    if sync_margin is not None and not dynamic and not cfg.device and \
            lower_quartile(module_times(tools, probe, in_paths, cfg)) < SYNC_PROBE_S:
        tm["sync"] = lambda: module_times(tools, probe, in_paths, sync)
    t = interleaved(tm, size_rounds) if dynamic else interleaved(tm, rounds, SETTLE_ROUNDS)
    device, task_s = "", math.nan
    tuned_s = lower_quartile(t.get("tuned", t["default"]))
    if "sync" in t and lower_quartile(t["sync"]) * sync_margin < tuned_s:
        # (The same module; its outputs are checked on that device too.)
        max_err = max(max_err, check_outputs(tools, probe, in_paths, refs, mags,
                                             out_dir / "sync", sync))
        device, task_s, tuned_s = SYNC_DEVICE, tuned_s, lower_quartile(t["sync"])
    by_size = []
    for (label, xs), paths in zip(checks, check_paths):
        # Every size of a dynamic model counts (the example is one size of many).
        ts = interleaved(timers(xs, paths, at_size), size_rounds)
        by_size.append((label, lower_quartile(ts["torch"]), lower_quartile(ts["default"]),
                        lower_quartile(ts.get("tuned", ts["default"]))))
    return EndToEnd(lower_quartile(t["torch"]), lower_quartile(t["default"]), tuned_s,
                    tuple(sorted(applied)), max_err,
                    labels, differs, tuple(by_size), device=device, tuned_task_s=task_s,
                    tuned_is_default=same)
