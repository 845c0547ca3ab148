"""What every benchmark under tools/ checks before it times a module.

A module is timed only if (a) iree-compile exited 0, (b) every tuned strategy it should
carry shows in IREE's configuration dump as a dispatch's `codegen_spec = @strategy_...`
(a library that fails to parse makes iree-compile warn, build IREE's default codegen and
exit 0), and (c) its outputs match a reference within the tuner's tolerance. A module that
fails prints one `FAILED <label>: <why>` line on stderr and is left out of the timing.

Each build gets a directory of its own, emptied first, so that a configuration dump left by
an earlier build can never confirm a strategy this build did not apply.

The benchmarks tune through the CLI (`python -m mlir_ansor.tune`, its flags --trials
--policy --batch --out --seed --scheduler and a repeatable `--reuse FILE`), which checks
every candidate and the end-to-end module itself. Besides that, tools/ relies on these parts
of mlir_ansor (if one is renamed, these are the places to adapt):
  tuner.measure: MeasureConfig (target, rtol/atol, model_compile_timeout_s, run_timeout_s),
      compile_module(tools, src, out, cfg, extra=, timeout_s=) -> .returncode/.stderr/
      .timed_out, applied_strategies(dump_dir) -> set of symbols,
      outputs_match(got, ref, magnitude, rtol, atol) -> '' or a reason (the bound is
      per element: atol + rtol * max(|ref|, magnitude), magnitude = the computation on
      the absolute values of the inputs);
  tuner.e2e: compile_model(tools, src, out, cfg, library) -> applied symbols (two-step
      build with a library; raises CompileError), which dumps configurations to
      `<out's stem>_configs` beside `out`;
  tuner.toolchain: Toolchain.find() -> .compile, .run;
  errors: CompileError;
and the benchmarks themselves on tuner.measure.lower_quartile, tuner.e2e.{save_inputs,
torch_reference, module_times, torch_times}; tuning_curve.py and cost_model_accuracy.py on
tuner.measure.TaskMeasurer (prepare, time_default), tuner.search.round_robin,
tuner.records.RecordStore and tuner.cost_model.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from mlir_ansor.errors import CompileError
from mlir_ansor.tuner.builder import first_error_line
from mlir_ansor.tuner.e2e import compile_model
from mlir_ansor.tuner.measure import (MeasureConfig, applied_strategies, compile_module,
                                      outputs_match)
from mlir_ansor.tuner.stages.importing import safe_dir_name
from mlir_ansor.tuner.toolchain import Toolchain

DUMP_FLAG = "--iree-hal-dump-executable-configurations-to"


class CheckFailed(Exception):
    """A module that must not be timed; the message names it and says why."""


@dataclass(frozen=True)
class Built:
    label: str
    vmfb: Path
    applied: frozenset[str]  # strategy symbols IREE's configuration dump shows


def library_strategies(library: Path) -> set[str]:
    """The strategies a tuned library's selector hands to dispatches."""
    return set(re.findall(r"codegen_spec\s*=\s*@([\w$.-]+)", library.read_text()))


def build(tools: Toolchain, cfg: MeasureConfig, label: str, src: Path, out_dir: Path,
          library: Path | None = None, extra: Sequence[str] = (),
          expected: Sequence[str] | None = None) -> Built:
    """Compile `src` into a fresh `out_dir/<label>/module.vmfb`.

    Without a library: one iree-compile call with `extra`; the module must carry no tuned
    strategy. With one: the tuner's two-step build, and every strategy in `expected`
    (default: every strategy the library names) must be applied. Raises CheckFailed."""
    d = out_dir / safe_dir_name(label)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    vmfb = d / "module.vmfb"
    if library is None:
        dump = d / "module_configs"
        res = compile_module(tools, src, vmfb, cfg, extra=[*extra, f"{DUMP_FLAG}={dump}"],
                             timeout_s=cfg.model_compile_timeout_s)
        if res.timed_out:
            raise CheckFailed(f"{label}: iree-compile timed out after "
                              f"{cfg.model_compile_timeout_s:.0f} s")
        if res.returncode != 0:
            raise CheckFailed(f"{label}: iree-compile exited with {res.returncode}: "
                              f"{first_error_line(res.stderr)}")
        applied = applied_strategies(dump)
        if applied:
            raise CheckFailed(f"{label}: built without a library but carries strategies "
                              f"{sorted(applied)}")
        return Built(label, vmfb, frozenset())
    if expected is None:
        want = library_strategies(library)
        if not want:
            raise CheckFailed(f"{label}: {library} names no strategy")
    else:  # e.g. a run that tuned several models: only some of its strategies fit this one
        want = set(expected)
    try:
        applied = compile_model(tools, src, vmfb, cfg, library, extra)  # (e.g. data tiling)
    except CompileError as e:
        raise CheckFailed(f"{label}: {e}") from e
    missing = want - applied
    if missing:
        raise CheckFailed(f"{label}: strategies not applied (IREE built its default codegen "
                          f"for them): {sorted(missing)}")
    return Built(label, vmfb, frozenset(applied))


def run_outputs(tools: Toolchain, cfg: MeasureConfig, built: Built, inputs: Sequence[Path],
                n_out: int) -> list[np.ndarray]:
    """Run the module's `main` once on `inputs` (.npy files); its outputs."""
    for i in range(n_out):  # a stale output must not pass for this run's
        (built.vmfb.parent / f"out{i}.npy").unlink(missing_ok=True)
    # The tuner's runner: own session, timeout, memory cap.
    outs, failed = cfg.runner(tools).outputs(built.vmfb, inputs, n_out, built.vmfb.parent)
    if failed is not None:
        raise CheckFailed(f"{built.label}: running it failed ({failed.status}): "
                          f"{failed.error}")
    return outs


def check_outputs(label: str, got: Sequence[np.ndarray], ref: Sequence[np.ndarray],
                  magnitude: Sequence[np.ndarray], cfg: MeasureConfig) -> None:
    """Raise CheckFailed unless every output of `got` matches `ref` within the tuner's
    bound (`magnitude`: the computation on the absolute values of the inputs)."""
    if len(got) != len(ref):
        raise CheckFailed(f"{label}: {len(got)} outputs, the reference has {len(ref)}")
    # Against torch (another implementation of exp, erf, tanh): the tuner's model bound.
    bad = outputs_match([np.asarray(g) for g in got], [np.asarray(r) for r in ref],
                        [np.asarray(m) for m in magnitude], cfg.model_rtol, cfg.atol)
    if bad:
        raise CheckFailed(f"{label}: output does not match the reference: {bad}")


def checked(tools: Toolchain, cfg: MeasureConfig, label: str, src: Path, out_dir: Path,
            inputs: Sequence[Path], ref: Sequence[np.ndarray], magnitude: Sequence[np.ndarray],
            library: Path | None = None, extra: Sequence[str] = (),
            expected: Sequence[str] | None = None) -> Built | None:
    """`build`, run and compare with `ref`; None (after a FAILED line) if any check fails."""
    try:
        built = build(tools, cfg, label, src, out_dir, library, extra, expected)
        check_outputs(label, run_outputs(tools, cfg, built, inputs, len(ref)), ref, magnitude,
                      cfg)
    except CheckFailed as e:
        report_failure(str(e))
        return None
    return built


def report_failure(line: str) -> None:
    print(f"FAILED {line}", file=sys.stderr, flush=True)


def run_tuner(args: Sequence[str]) -> tuple[int, str]:
    """Run `python -m mlir_ansor.tune ARGS` with its output passed through; its exit code
    and last stderr line (where the tuner names a problem)."""
    cmd = [sys.executable, "-m", "mlir_ansor.tune", *args]
    print("$", " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE)
    tail = b""
    for chunk in iter(lambda: proc.stderr.read1(4096), b""):  # progress bars stay live
        sys.stderr.buffer.write(chunk)
        sys.stderr.flush()
        tail = (tail + chunk)[-4096:]
    rc = proc.wait()
    lines = [line for line in tail.decode(errors="replace").replace("\r", "\n").splitlines()
             if line.strip()]
    return rc, (lines[-1].strip() if lines else "")
