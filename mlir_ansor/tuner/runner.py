"""The Runner: loads a built candidate, checks its outputs against the reference, times it.

Each run is its own process (timeout, memory cap). The search sees only the `Runner`
protocol; a runner on another machine takes the same `RunInput` (files: module, inputs,
expected outputs and their magnitude bound)."""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from mlir_ansor.tuner import mca
from mlir_ansor.tuner.idle_caller import idle_caller as lower_caller
from mlir_ansor.tuner.procs import ProcResult, run_isolated, signal_name
from mlir_ansor.tuner.status import Status, is_out_of_memory
from mlir_ansor.tuner.validation import outputs_match


@dataclass(frozen=True)
class Timing:
    repetitions: int = 5
    min_time_s: float = 0.05
    # Untimed runs first: the first repetitions of a fresh process run up to 2x slower
    # (thread pool and caches warming up).
    warmup_s: float = 0.1
    # The quick look that decides whether a candidate is clearly slow (RunInput.
    # slow_cutoff_s) is warm too: a fresh process's first call of a 0.09 ms dispatch took
    # 0.40 ms (page faults, thread pool start), over 3x the best, so every candidate of a
    # small task after its first good one was cut off and recorded at its cold time.
    quick_warmup_s: float = 0.02
    quick_min_time_s: float = 0.005
    # A dispatch whose quick look is under `spread_below_s` runs at one speed per process
    # that differs between processes by up to 1.5x on a shared VM (the same module 0.054,
    # 0.082 and 0.080 ms in three processes, each within 1-2% over its repetitions): one
    # process's timing of it is a draw of that speed, and the search keeps the luckiest.
    # It is timed in `spread_processes` short processes instead (after `quick_warmup_s`,
    # each 2/5 of `repetitions` of 3/5 of `min_time_s`: at the defaults 4 x 2 x 30 ms, about
    # one full timing's cost), their repetitions pooled. 1 process: off. A dynamic task's
    # size samples are not spread: their weighted mean averages that noise already.
    spread_below_s: float = 0.5e-3
    spread_processes: int = 4

    @property
    def spread_repetitions(self) -> int:
        return max(1, math.ceil(2 * self.repetitions / 5))

    @property
    def spread_min_time_s(self) -> float:
        return 0.6 * self.min_time_s


@dataclass(frozen=True)
class RunInput:
    artifact: Path
    inputs: tuple[Path, ...]
    reference: tuple[Path, ...] = ()  # expected outputs; empty: do not validate
    magnitude: tuple[Path, ...] = ()  # per-element magnitude bound of each output
    time: bool = True
    # Timed once when its quick look (a short warm repetition) is slower than this (its
    # exact latency changes no decision, and slow candidates would otherwise take most of
    # the tuning time).
    slow_cutoff_s: float | None = None
    # This run's part of the timing budget (`Timing.min_time_s` scaled by it; the warm-up
    # is not): a dynamic task's size samples split one candidate's budget between them.
    timing_share: float = 1.0


@dataclass(frozen=True)
class RunResult:
    status: Status
    samples_s: tuple[float, ...] = ()
    error: str = ""

    @property
    def latency_s(self) -> float | None:
        return statistics.median(self.samples_s) if self.samples_s else None


class Runner(Protocol):
    def run(self, item: RunInput) -> RunResult:
        ...


def failure(res: ProcResult, timeout_s: float) -> RunResult:
    if res.timed_out:
        return RunResult(Status.RUN_TIMEOUT, (), f"run exceeded {timeout_s}s")
    if is_out_of_memory(res.stderr):
        return RunResult(Status.OUT_OF_MEMORY, (), res.stderr.strip()[-300:])
    tail = res.stderr.strip()[-300:]
    return RunResult(Status.RUN_ERROR, (), f"{signal_name(res.returncode)}: {tail}".strip())


@dataclass(frozen=True)
class LocalRunner:
    """Runs with IREE's tools on this machine."""

    run_tool: str
    benchmark_tool: str
    timeout_s: float = 60.0
    mem_bytes: int | None = 8 << 30
    timing: Timing = field(default_factory=Timing)
    rtol: float = 1e-4
    atol: float = 1e-5
    # Prepended to every tool command: e.g. qemu for another architecture's tools
    # (tuner/emulation.py); such a runner validates, its timings mean nothing.
    launcher: tuple[str, ...] = ()
    # IREE's runtime device (`--device`): "" for the module's default (local-task on CPU:
    # a worker per core), "local-sync" runs a call on the caller's thread alone.
    device: str = ""
    # Time with the tool's waiting main thread at idle priority (tuner/idle_caller.py):
    # on local-task it otherwise takes CPU from the workers.
    idle_caller: bool = True

    @property
    def _device_flags(self) -> list[str]:
        return [f"--device={self.device}"] if self.device else []

    def run(self, item: RunInput) -> RunResult:
        if item.reference:
            res = self.validate(item)
            if res.status != Status.OK:
                return res
        if not item.time:
            return RunResult(Status.OK)
        return self.time(item)

    def outputs(self, artifact: Path, inputs: Sequence[Path], n_out: int,
                out_dir: Path) -> tuple[list[np.ndarray] | None, RunResult | None]:
        """The module's results on `inputs` (written under `out_dir`), or the failure."""
        out_dir.mkdir(parents=True, exist_ok=True)
        outs = [out_dir / f"out{i}.npy" for i in range(n_out)]
        for p in outs:  # a stale file must not pass for this run's result
            p.unlink(missing_ok=True)
        cmd = [*self.launcher, self.run_tool, f"--module={artifact}", "--function=main",
               *self._device_flags,
               *[f"--input=@{p}" for p in inputs], *[f"--output=@{p}" for p in outs]]
        res = run_isolated(cmd, self.timeout_s, self.mem_bytes)
        if res.timed_out or res.returncode != 0:
            return None, failure(res, self.timeout_s)
        missing = [p.name for p in outs if not p.exists()]
        if missing:
            return None, RunResult(Status.RUN_ERROR, (), f"no results written: {missing}")
        return [np.load(p) for p in outs], None

    def validate(self, item: RunInput) -> RunResult:
        got, failed = self.outputs(item.artifact, item.inputs, len(item.reference),
                                   item.artifact.parent)
        if failed:
            return failed
        ref = [np.load(p) for p in item.reference]
        mag = [np.load(p) for p in item.magnitude] if item.magnitude else None
        err = outputs_match(got, ref, mag, self.rtol, self.atol)
        return RunResult(Status.WRONG_ANSWER, (), err) if err else RunResult(Status.OK)

    def benchmark(self, artifact: Path, inputs: Sequence[Path],
                  kind: str = "full", share: float = 1.0) -> RunResult:
        """One process's timed repetitions, of `kind` (`benchmark_flags`): "full"
        (`timing.repetitions`, each at least `timing.min_time_s` x `share`), "quick" (one
        short warm repetition) or "spread" (one of a small dispatch's short processes)."""
        cmd = [*self.launcher, self.benchmark_tool, f"--module={artifact}", "--function=main",
               *self._device_flags,
               *[f"--input=@{p}" for p in inputs], "--benchmark_format=json",
               *benchmark_flags(self.timing, kind, share)]
        lower = self.idle_caller and not self.launcher and self.device != "local-sync"
        res = run_isolated(cmd, self.timeout_s, self.mem_bytes,
                           on_start=lower_caller if lower else None)
        if res.timed_out or res.returncode != 0:
            return failure(res, self.timeout_s)
        scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
        try:
            data = json.loads(res.stdout)
            times = tuple(b["real_time"] * scale[b["time_unit"]] for b in data["benchmarks"]
                          if b.get("run_type") == "iteration")
        except (ValueError, KeyError, TypeError) as e:  # the tool's output, not our state
            return RunResult(Status.RUN_ERROR, (), f"unreadable benchmark output ({e!r}): "
                                                   f"{res.stdout[-200:]}")
        if not times:
            return RunResult(Status.RUN_ERROR, (), "the benchmark reported no repetition")
        return RunResult(Status.OK, times)

    @property
    def spreads(self) -> bool:
        """Whether small dispatches are timed over several processes (not under an
        emulator, whose timings mean nothing)."""
        return self.timing.spread_processes > 1 and not self.launcher

    def time(self, item: RunInput) -> RunResult:
        """A quick look first where it decides something (the slow cutoff; whether the
        dispatch is small), then the full timing: one process, or several short ones for a
        small dispatch (`Timing.spread_below_s`)."""
        spread = self.spreads and item.timing_share >= 1.0  # (size samples: one process)
        first = None
        if item.slow_cutoff_s is not None or spread:
            first = self.benchmark(item.artifact, item.inputs, "quick")
            if first.status != Status.OK or (item.slow_cutoff_s is not None and
                                             first.samples_s[0] > item.slow_cutoff_s):
                return first
        if spread and first.samples_s[0] < self.timing.spread_below_s:
            samples: list[float] = []
            for _ in range(self.timing.spread_processes):
                res = self.benchmark(item.artifact, item.inputs, "spread", item.timing_share)
                if res.status != Status.OK:
                    return res
                samples += res.samples_s
            return RunResult(Status.OK, tuple(samples))
        return self.benchmark(item.artifact, item.inputs, "full", item.timing_share)


BENCHMARK_KINDS = ("full", "quick", "spread")


def benchmark_flags(t: Timing, kind: str = "full", share: float = 1.0) -> list[str]:
    """The benchmark tool's repetition and warm-up flags. "full": `t.repetitions` of at
    least `t.min_time_s` x `share` after `t.warmup_s` of untimed calls; "quick": one short
    repetition after a short warm-up (never a cold first call); "spread": one of a small
    dispatch's processes (`Timing.spread_processes`)."""
    if kind == "quick":
        reps, min_time, warmup = 1, t.quick_min_time_s, t.quick_warmup_s
    elif kind == "spread":
        reps, min_time, warmup = (t.spread_repetitions, t.spread_min_time_s * share,
                                  t.quick_warmup_s)
    elif kind == "full":
        reps, min_time, warmup = t.repetitions, t.min_time_s * share, t.warmup_s
    else:
        raise ValueError(f"benchmark kind {kind!r}: not one of {BENCHMARK_KINDS}")
    flags = [f"--benchmark_repetitions={reps}", f"--benchmark_min_time={min_time:.6g}s"]
    if warmup > 0:
        flags.append(f"--benchmark_min_warmup_time={warmup:.6g}")
    return flags


def asm_dir(artifact: Path) -> Path:
    """Where a candidate's executable files (assembly) are dumped: beside its module, one
    module per folder."""
    return artifact.parent / "files"


@dataclass(frozen=True)
class ProxyRunner:
    """For a device this machine cannot time: outputs are checked by `validator` (the
    device's tools under qemu), and the "time" is llvm-mca's estimate of the task on the
    target CPU from the assembly dumped beside the module (`mca.estimate`). Its results
    are unmeasured: records carry a device kind of their own (`<kind>-mca`)."""

    validator: LocalRunner
    task_flops: float
    triple: str
    cpu: str
    mca: str

    def run(self, item: RunInput) -> RunResult:
        res = self.validator.run(replace(item, time=False))  # the check, never its timing
        if res.status != Status.OK or not item.time:
            return res
        try:
            est = mca.estimate(sorted(asm_dir(item.artifact).glob("*.s")), self.task_flops,
                               self.triple, self.cpu, self.mca)
        except mca.ProxyError as e:
            return RunResult(Status.RUN_ERROR, (), f"llvm-mca proxy: {e}")
        return RunResult(Status.OK, (est.seconds,))
