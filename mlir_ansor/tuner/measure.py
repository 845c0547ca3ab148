"""Measure candidates of one task: compile (isolated, parallel), confirm the strategy was
applied, validate against the reference output, then time (serially).

A candidate counts only if (1) iree-compile succeeded, (2) the configuration dump shows
our strategy as the dispatch's codegen_spec (a library that fails to parse makes IREE fall
back to its default silently), (3) its outputs match the reference.
"""
from __future__ import annotations

import json
import re
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from mlir_ansor.sketch_passes.program import Program
from mlir_ansor.transform_scripts.library import TunedEntry, library_text, strategy_name
from mlir_ansor.transform_scripts.tuning_spec import (SpecEntry, is_template, lowering_config,
                                                      tuning_spec_text)
from mlir_ansor.tuner import records as rec
from mlir_ansor.errors import UnsupportedDispatch
from mlir_ansor.tuner.tasks import Task, random_inputs, with_codegen_view
from mlir_ansor.tuner.toolchain import Toolchain, run_isolated, target_flags


@dataclass(frozen=True)
class MeasureConfig:
    target: str = "llvm-cpu"
    compile_timeout_s: float = 10.0  # one candidate (valid ones take 0.3-3 s)
    model_compile_timeout_s: float = 900.0  # a whole model (end-to-end checks)
    run_timeout_s: float = 60.0
    compile_mem_bytes: int = 6 << 30
    repetitions: int = 5
    min_time_s: float = 0.05
    # Untimed runs first: the first repetitions of a fresh process run up to 2x slower
    # (thread pool and caches warming up), which swamped differences between modules.
    warmup_s: float = 0.1
    # A candidate whose first run is this many times slower than the task's best so far is
    # timed once: its exact latency does not change any decision, and slow candidates would
    # otherwise take most of the tuning time.
    slow_factor: float = 3.0
    parallel_compiles: int = 2
    rtol: float = 1e-3
    atol: float = 1e-3


def _last_error(stderr: str) -> str:
    """The first error line of a compiler's stderr (or its tail)."""
    lines = [line.strip() for line in stderr.splitlines() if "error" in line]
    return (lines[0] if lines else stderr.strip()[-300:])[:300]


def applied_strategies(config_dir: Path) -> set[str]:
    """codegen_spec symbols IREE attached to dispatches (from the configuration dump)."""
    found: set[str] = set()
    for f in config_dir.glob("*.mlir"):
        text = f.read_text(errors="replace")
        for part in text.split("codegen_spec = @")[1:]:
            found.add(part.split(">")[0].split(",")[0].strip())
    return found


def default_pipeline(configured: str) -> str:
    """IREE's codegen pipeline in a configuration dump, e.g. #iree_cpu.pipeline<...>."""
    m = re.search(r"pipeline = (#iree_cpu\.pipeline<\w+>)", configured)
    return m.group(1) if m else ""


TASK_RESUME_FLAG = "--compile-from=global-optimization"


def compile_module(tools: Toolchain, src: Path, out: Path, cfg: MeasureConfig,
                   library: Path | None = None, extra: Sequence[str] = (),
                   tuning_spec: Path | None = None, timeout_s: float | None = None):
    cmd = [tools.compile, str(src), *target_flags(cfg.target), "-o", str(out), *extra]
    if library is not None:
        cmd.append(f"--iree-codegen-transform-dialect-library={library}")
    if tuning_spec is not None:
        cmd.append(f"--iree-codegen-tuning-spec-path={tuning_spec}")
    return run_isolated(cmd, timeout_s or cfg.compile_timeout_s, cfg.compile_mem_bytes)


def run_outputs(tools: Toolchain, vmfb: Path, inputs: Sequence[Path], n_out: int, out_dir: Path,
                cfg: MeasureConfig) -> tuple[list[np.ndarray] | None, str]:
    outs = [out_dir / f"out{i}.npy" for i in range(n_out)]
    cmd = [tools.run, f"--module={vmfb}", "--function=main",
           *[f"--input=@{p}" for p in inputs], *[f"--output=@{p}" for p in outs]]
    res = run_isolated(cmd, cfg.run_timeout_s)
    if res.timed_out:
        return None, "timeout"
    if res.returncode != 0:
        return None, res.stderr.strip()[-500:] or f"exit {res.returncode}"
    return [np.load(p) for p in outs], ""


def benchmark(tools: Toolchain, vmfb: Path, inputs: Sequence[Path],
              cfg: MeasureConfig, quick: bool = False) -> tuple[list[float] | None, str]:
    """Times of `cfg.repetitions` runs (each at least `cfg.min_time_s`); `quick`: one run of
    one iteration."""
    reps, min_time = (1, "1x") if quick else (cfg.repetitions, f"{cfg.min_time_s}s")
    cmd = [tools.benchmark, f"--module={vmfb}", "--function=main",
           *[f"--input=@{p}" for p in inputs], "--benchmark_format=json",
           f"--benchmark_repetitions={reps}", f"--benchmark_min_time={min_time}"]
    if not quick and cfg.warmup_s > 0:
        cmd.append(f"--benchmark_min_warmup_time={cfg.warmup_s}")
    res = run_isolated(cmd, cfg.run_timeout_s)
    if res.timed_out:
        return None, "timeout"
    if res.returncode != 0:
        return None, res.stderr.strip()[-500:]
    data = json.loads(res.stdout)
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    times = [b["real_time"] * scale[b["time_unit"]] for b in data["benchmarks"]
             if b.get("run_type") == "iteration"]
    return times, ""


def median_time(tools: Toolchain, vmfb: Path, inputs: Sequence[Path],
                cfg: MeasureConfig) -> float | None:
    """Median of one `benchmark` run; None if it failed."""
    times, _ = benchmark(tools, vmfb, inputs, cfg)
    return statistics.median(times) if times else None


def lower_quartile(times: Sequence[float]) -> float:
    """A module's latency from all its timed repetitions (pooled over interleaved rounds):
    their 25th percentile. Interference on a shared machine only adds time, and on this
    2-vCPU VM a sub-millisecond model's repetitions are bimodal (about 0.4 or 1.0-1.3 ms
    each, for every module): a median lands on whichever mode came up."""
    if not times:
        raise ValueError("no timed repetitions")
    return float(np.percentile(np.asarray(times, dtype=np.float64), 25))


def outputs_match(got: Sequence[np.ndarray], ref: Sequence[np.ndarray], cfg: MeasureConfig) -> str:
    """'' if they match, else a one-line reason."""
    for i, (g, r) in enumerate(zip(got, ref)):
        if g.shape != r.shape:
            return f"output {i}: shape {g.shape} != {r.shape}"
        scale = max(1.0, float(np.max(np.abs(r)))) if r.size else 1.0
        if not np.allclose(g, r, rtol=cfg.rtol, atol=cfg.atol * scale, equal_nan=True):
            err = float(np.max(np.abs(g.astype(np.float64) - r.astype(np.float64))))
            return f"output {i}: max abs error {err:.3g}"
    return ""


class TaskMeasurer:
    """Owns one task's work directory: inputs, reference outputs, default-codegen baseline."""

    def __init__(self, task: Task, workdir: Path, tools: Toolchain, cfg: MeasureConfig,
                 seed: int = 0):
        self.task, self.tools, self.cfg = task, tools, cfg
        self.dir = Path(workdir) / task.task_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.src = self.dir / "task.mlir"
        self.src.write_text(task.module_mlir)
        self.inputs = []
        for i, a in enumerate(random_inputs(task.input_types, seed)):
            p = self.dir / f"in{i}.npy"
            np.save(p, a)
            self.inputs.append(p)
        self.reference: list[np.ndarray] = []
        self.best_s: float | None = None  # fastest valid candidate measured by this measurer
        self.pipeline = ""  # IREE's default codegen pipeline (set by prepare)

    def prepare(self) -> None:
        """Compile with IREE's default codegen: the payload a strategy will see (the task's
        ops and sketches come from it), reference outputs and the baseline."""
        # Global optimization must not run again on the dispatch: it rewrites some dispatch
        # bodies (a strided 1x1 conv becomes slice + matmul), so codegen would see another
        # form than in the model. Compile to the ABI once, then resume after global-opt.
        abi_src = self.dir / "task_abi.mlir"
        res = compile_module(self.tools, self.dir / "task.mlir", abi_src, self.cfg,
                             extra=["--compile-to=abi"])
        if res.returncode != 0:
            raise UnsupportedDispatch(f"IREE could not lower the task module of {self.task.name} "
                                      f"to its ABI: {_last_error(res.stderr)}")
        self.src = abi_src
        vmfb = self.dir / "default.vmfb"
        cfg_dir = self.dir / "default_configs"
        res = self._compile(vmfb, extra=[f"--iree-hal-dump-executable-configurations-to={cfg_dir}"])
        if res.returncode != 0:
            raise UnsupportedDispatch(f"IREE's default build of {self.task.name} failed: "
                                      f"{_last_error(res.stderr)}")
        dumps = sorted(cfg_dir.glob("*.mlir"))
        if len(dumps) != 1:
            raise UnsupportedDispatch(f"{self.task.name}: the task module formed {len(dumps)} "
                                      "executables")
        configured = dumps[0].read_text()
        self.task = with_codegen_view(self.task, configured)
        self.pipeline = default_pipeline(configured)
        ref_dir = self.dir / "reference"
        ref_dir.mkdir(exist_ok=True)
        outs, err = run_outputs(self.tools, vmfb, self.inputs, len(self.task.output_types),
                                ref_dir, self.cfg)
        if outs is None:
            raise UnsupportedDispatch(f"IREE's default build of {self.task.name} failed on random "
                                      f"inputs ({err.strip()[:200]}): no reference")
        self.reference = outs
        self.default_vmfb = vmfb

    def _compile(self, out: Path, extra: Sequence[str] = (), **kw):
        """Compile the task module as the model's compile treats the dispatch (see prepare)."""
        return compile_module(self.tools, self.src, out, self.cfg,
                              extra=[TASK_RESUME_FLAG, *extra], **kw)

    def time_default(self) -> float | None:
        return median_time(self.tools, self.default_vmfb, self.inputs, self.cfg)

    def remeasure(self, programs: Sequence[Program],
                  rounds: int = 4) -> tuple[float, list[float | None]] | None:
        """Re-time the default and `programs` in interleaved rounds (a noisy machine drifts
        between measurements taken minutes apart). Returns the default's median and each
        program's median (None where it failed now); None if the default failed."""
        base = self.dir / "best"
        shutil.rmtree(base, ignore_errors=True)
        vmfbs: list[Path | None] = []
        for i, p in enumerate(programs):
            d = base / f"c{i}"
            d.mkdir(parents=True)
            status, _ = self._compile_candidate(p, d)
            vmfbs.append(d / "cand.vmfb" if status == rec.OK else None)
        t_def: list[float] = []
        t_new: list[list[float]] = [[] for _ in programs]
        for r in range(rounds):
            order = [-1, *range(len(vmfbs))]  # -1: the default
            for i in (order if r % 2 == 0 else order[::-1]):  # alternating: drift cancels
                if i < 0:
                    a = self.time_default()
                    if a is None:
                        return None
                    t_def.append(a)
                    continue
                b = median_time(self.tools, vmfbs[i], self.inputs, self.cfg) if vmfbs[i] else None
                if b is None:
                    vmfbs[i] = None
                else:
                    t_new[i].append(b)
        return statistics.median(t_def), [statistics.median(t) if v and t else None
                                          for v, t in zip(vmfbs, t_new)]

    def _compile_candidate(self, program: Program, cand_dir: Path):
        template = is_template(program)
        try:
            if template:
                lib = cand_dir / "spec.mlir"
                lib.write_text(tuning_spec_text([SpecEntry(
                    self.task.task_id, self.task.task_mlir, self.task.ops, program,
                    self.pipeline)]))
            else:
                lib = cand_dir / "library.mlir"
                lib.write_text(library_text([TunedEntry(self.task.task_id, self.task.task_mlir,
                                                        self.task.ops, program,
                                                        self.task.view_mlir)]))
        except Exception as e:  # an emitter bug must not stop the search
            return "compile_error", f"emit: {type(e).__name__}: {e}"
        cfg_dir = cand_dir / "configs"
        res = self._compile(cand_dir / "cand.vmfb", library=None if template else lib,
                            extra=[f"--iree-hal-dump-executable-configurations-to={cfg_dir}"],
                            tuning_spec=lib if template else None)
        if res.timed_out:
            return "timeout", f"compile exceeded {self.cfg.compile_timeout_s}s"
        if res.returncode != 0:
            lines = [l for l in res.stderr.splitlines() if "error" in l]
            return "compile_error", (lines[0] if lines else res.stderr[-300:])[:500]
        if template:
            want = lowering_config(self.task.ops, program).removeprefix("#iree_cpu.")
            if not any(want in f.read_text(errors="replace") for f in cfg_dir.glob("*.mlir")):
                return "not_applied", "the dispatch was not configured with our lowering config"
        elif strategy_name(self.task.task_id) not in applied_strategies(cfg_dir):
            return "not_applied", "the dispatch was not configured with our strategy"
        return rec.OK, ""

    def measure(self, programs: Sequence[Program]) -> list[rec.Record]:
        return list(self.measure_iter(programs))

    def measure_iter(self, programs: Sequence[Program]) -> Iterator[rec.Record]:
        """Compile all in parallel, then validate and time one at a time, yielding each
        record as soon as it is known (the caller appends it at once)."""
        tmp = Path(tempfile.mkdtemp(prefix="cand_", dir=self.dir))
        dirs = [tmp / f"c{i}" for i in range(len(programs))]
        for d in dirs:
            d.mkdir()
        with ThreadPoolExecutor(self.cfg.parallel_compiles) as pool:
            compiled = list(pool.map(self._compile_candidate, programs, dirs))
        env = rec.environment()
        for prog, d, (status, err) in zip(programs, dirs, compiled):
            latency, samples = None, ()
            if status == rec.OK:
                outs, run_err = run_outputs(self.tools, d / "cand.vmfb", self.inputs,
                                            len(self.task.output_types), d, self.cfg)
                if outs is None:
                    status = "timeout" if run_err == "timeout" else "runtime_error"
                    err = run_err
                else:
                    err = outputs_match(outs, self.reference, self.cfg)
                    if err:
                        status = "wrong_answer"
            if status == rec.OK:
                times, berr = benchmark(self.tools, d / "cand.vmfb", self.inputs, self.cfg,
                                        quick=True)
                if times is not None and not (self.best_s is not None and
                                              times[0] > self.cfg.slow_factor * self.best_s):
                    times, berr = benchmark(self.tools, d / "cand.vmfb", self.inputs, self.cfg)
                if times is None:
                    status, err = "runtime_error", berr
                else:
                    samples = tuple(times)
                    latency = statistics.median(times)
                    self.best_s = latency if self.best_s is None else min(self.best_s, latency)
            yield rec.Record(task_key=self.task.key, program=prog.to_json(), program_key=prog.key,
                             status=status, latency_s=latency, samples_s=samples, error=err,
                             target=self.cfg.target, env=env, time=time.time())
        shutil.rmtree(tmp, ignore_errors=True)
