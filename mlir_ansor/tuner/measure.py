"""Measure candidates of one task: the Builder compiles them (isolated, parallel) and
confirms the strategy was applied, the Runner validates them against the reference output
and times them (serially).

A candidate counts only if (1) iree-compile succeeded, (2) the configuration dump shows
our strategy as the dispatch's codegen_spec (a library that fails to parse makes IREE fall
back to its default silently), (3) its outputs match the reference (`validation`).
"""
from __future__ import annotations

import re
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from mlir_ansor.errors import UnsupportedDispatch
from mlir_ansor.sketch_passes.program import Program
from mlir_ansor.transform_scripts.library import TunedEntry, library_text, strategy_name
from mlir_ansor.transform_scripts.tuning_spec import (SpecEntry, is_template, lowering_config,
                                                      tuning_spec_text)
from mlir_ansor.tuner import records as rec
from mlir_ansor.tuner.builder import (CANDIDATE_ARTIFACT, CONFIG_DUMP_FLAG, Builder,
                                      BuildInput, BuildResult, Check, LibraryKind,
                                      LocalBuilder, applied_strategies,
                                      emit_and_build, first_error_line,
                                      single_configuration)
from mlir_ansor.tuner.procs import ProcResult, run_isolated
from mlir_ansor.targets import get_target
from mlir_ansor.tuner.mca import find_mca
from mlir_ansor.tuner.runner import (LocalRunner, ProxyRunner, Runner, RunInput, RunResult,
                                     Timing, asm_dir)
from mlir_ansor.tuner.status import Status
from mlir_ansor.tuner.tasks import SizeSample, Task, parse_tensor_type, with_codegen_view
from mlir_ansor.tuner.toolchain import Toolchain, target_flags
from mlir_ansor.tuner.validation import (absolute, index_bounds, outputs_match,
                                         random_inputs, summed_divisor_inputs)
from mlir_ansor.tuner.wall_time import WallTime

__all__ = ["MeasureConfig", "TaskMeasurer", "applied_strategies", "benchmark",
           "compile_module", "lower_quartile", "outputs_match", "run_outputs"]


@dataclass(frozen=True)
class MeasureConfig:
    target: str = "llvm-cpu"
    device_kind: str = ""  # the records' key for where timings compare (targets.Target)
    compile_timeout_s: float = 10.0  # one candidate (valid ones take 0.3-3 s)
    # IREE's default build of a task (reference and baseline): a slow one must not drop
    # the task as a candidate's timeout would.
    prepare_timeout_s: float = 600.0
    model_compile_timeout_s: float = 900.0  # a whole model (end-to-end checks)
    run_timeout_s: float = 60.0
    compile_mem_bytes: int = 6 << 30
    run_mem_bytes: int = 8 << 30
    repetitions: int = 5
    min_time_s: float = 0.05
    # Untimed runs first: the first repetitions of a fresh process run up to 2x slower
    # (thread pool and caches warming up), which swamped differences between modules.
    warmup_s: float = 0.1
    # A candidate whose first run is this many times slower than the task's best so far is
    # timed once: its exact latency does not change any decision, and slow candidates would
    # otherwise take most of the tuning time.
    slow_factor: float = 3.0
    # A dispatch under half a millisecond is timed in this many short processes, pooled
    # (runner.Timing.spread_below_s: its speed differs between processes); 1: one process.
    spread_processes: int = 4
    parallel_compiles: int = 2
    rtol: float = 1e-4  # of the per-element magnitude (validation.outputs_match)
    atol: float = 1e-5
    model_rtol: float = 1e-3  # whole models against torch (other math implementations)
    device: str = ""  # IREE's runtime device for local runs ("": the module's default)
    # iree-compile flags of the model form a task came from that its own builds pass too
    # (IREE's pad fusion: a task of a fused form is built as the model is).
    compile_flags: tuple[str, ...] = ()

    def builder(self, tools: Toolchain) -> LocalBuilder:
        return LocalBuilder(tools.compile, self.parallel_compiles, self.compile_timeout_s,
                            self.compile_mem_bytes)

    @property
    def timing(self) -> Timing:
        return Timing(self.repetitions, self.min_time_s, self.warmup_s,
                      spread_processes=self.spread_processes)

    def runner(self, tools: Toolchain) -> LocalRunner:
        return LocalRunner(tools.run, tools.benchmark, self.run_timeout_s, self.run_mem_bytes,
                           self.timing, self.rtol, self.atol, tools.launcher, self.device)


def default_pipeline(configured: str) -> str:
    """IREE's codegen pipeline in a configuration dump, e.g. #iree_cpu.pipeline<...>."""
    m = re.search(r"pipeline = (#iree_cpu\.pipeline<\w+>)", configured)
    return m.group(1) if m else ""


TASK_RESUME_FLAG = "--compile-from=global-optimization"
FILES_DUMP_FLAG = "--iree-hal-dump-executable-files-to"


def compile_module(tools: Toolchain, src: Path, out: Path, cfg: MeasureConfig,
                   library: Path | None = None, extra: Sequence[str] = (),
                   tuning_spec: Path | None = None,
                   timeout_s: float | None = None) -> ProcResult:
    cmd = [tools.compile, str(src), *target_flags(cfg.target), *cfg.compile_flags, "-o",
           str(out), *extra]
    if library is not None:
        cmd.append(f"--iree-codegen-transform-dialect-library={library}")
    if tuning_spec is not None:
        cmd.append(f"--iree-codegen-tuning-spec-path={tuning_spec}")
    return run_isolated(cmd, timeout_s or cfg.compile_timeout_s, cfg.compile_mem_bytes)


def run_outputs(tools: Toolchain, vmfb: Path, inputs: Sequence[Path], n_out: int, out_dir: Path,
                cfg: MeasureConfig) -> tuple[list[np.ndarray] | None, str]:
    """The module's results (None and the reason if it failed)."""
    outs, failed = cfg.runner(tools).outputs(vmfb, inputs, n_out, out_dir)
    return outs, (failed.error if failed else "")


def benchmark(tools: Toolchain, vmfb: Path, inputs: Sequence[Path],
              cfg: MeasureConfig, quick: bool = False) -> tuple[list[float] | None, str]:
    """Times of `cfg.repetitions` runs (each at least `cfg.min_time_s`); `quick`: one short
    warm repetition (runner.benchmark_flags)."""
    res = cfg.runner(tools).benchmark(vmfb, inputs, "quick" if quick else "full")
    return (list(res.samples_s), "") if res.status == Status.OK else (None, res.error)


def lower_quartile(times: Sequence[float]) -> float:
    """A module's latency from all its timed repetitions (pooled over interleaved rounds):
    their 25th percentile. Interference on a shared machine only adds time, and on this
    2-vCPU VM a sub-millisecond model's repetitions are bimodal (about 0.4 or 1.0-1.3 ms
    each, for every module): a median lands on whichever mode came up."""
    if not times:
        raise ValueError("no timed repetitions")
    return float(np.percentile(np.asarray(times, dtype=np.float64), 25))


def task_inputs(task: Task, seed: int, sample: SizeSample | None = None) -> list[np.ndarray]:
    """Random inputs of a task's module (a dynamic one's at `sample`), index arguments over
    their whole tables."""
    types = [parse_tensor_type(t) for t in (
        task.input_types_at(sample) if sample is not None else task.input_types)]
    return random_inputs(types, seed, module_index_bounds(task),
                         module_positive_inputs(task))


def _module_position(task: Task, pos: int) -> int | None:
    """The runnable @main's input that argument `pos` of the analyzed task function loads
    from (a slice of it, or in another order); None for a constant hoisted out."""
    return task.arg_sources[pos] if pos < len(task.arg_sources) else None


def module_index_bounds(task: Task) -> dict[int, int]:
    """Input position of the runnable @main -> exclusive bound, for inputs that index a
    tensor: the analyzed function's index arguments (validation.index_bounds) mapped to
    the dispatch arguments they are loaded from (`_module_position`)."""
    if not task.task_mlir:
        return {}
    if not task.arg_sources:  # (a task from before the mapping: positions must agree)
        return index_bounds(task.task_mlir, task.input_types)
    out: dict[int, int] = {}
    for pos, bound in index_bounds(task.task_mlir).items():
        src = _module_position(task, pos)
        if src is not None:
            out[src] = min(out.get(src, bound), bound)
    return out


def module_positive_inputs(task: Task) -> frozenset[int]:
    """Input positions of the runnable @main drawn from [0, 1): the analyzed function's
    arguments a sum adds into a divisor (validation.summed_divisor_inputs), mapped as
    `module_index_bounds` maps its bounds."""
    if not task.task_mlir:
        return frozenset()
    if not task.arg_sources:
        return summed_divisor_inputs(task.task_mlir, task.input_types)
    sources = (_module_position(task, p) for p in summed_divisor_inputs(task.task_mlir))
    return frozenset(src for src in sources if src is not None)


@dataclass(frozen=True)
class Remeasured:
    """Re-timed side by side: IREE's default and each program (None: failed now), and for
    a dynamic task the same per size sample (label -> median s)."""

    default_s: float
    tuned: list[float | None]
    default_at: dict[str, float]
    tuned_at: list[dict[str, float]]


def _medians(runs: Sequence[dict[str, float]]) -> dict[str, float]:
    labels = runs[0].keys() if runs else ()
    return {k: statistics.median(r[k] for r in runs) for k in labels}


def outclassed(mine: Sequence[float], theirs: Sequence[float],
               mine_at: Sequence[dict[str, float]], theirs_at: Sequence[dict[str, float]]
               ) -> bool:
    """Whether a candidate cannot win any more: after two or more interleaved rounds its
    fastest run is slower than the default's slowest, overall and at every size sample (a
    dynamic task's dispatcher may pick it for one size). Racing it further only costs time:
    a program is kept only where its median beats the default's by a margin."""
    if min(len(mine), len(theirs)) < 2 or min(mine) <= max(theirs):
        return False
    return all(min(r[k] for r in mine_at) > max(r[k] for r in theirs_at)
               for k in (theirs_at[0] if theirs_at else ()))


# A re-timed program whose first run is this many times slower than another's (at every
# size sample) cannot be the one kept: timings on a noisy machine drift by 10-20%, not 50%.
FAR_BEHIND = 1.5


def far_behind(mine: Sequence[float], theirs: Sequence[float],
               mine_at: Sequence[dict[str, float]], theirs_at: Sequence[dict[str, float]]
               ) -> bool:
    """Whether a candidate's first run is over FAR_BEHIND times another's, overall and at
    every size sample."""
    if not mine or not theirs or mine[0] <= FAR_BEHIND * theirs[0]:
        return False
    return all(mine_at[0][k] > FAR_BEHIND * theirs_at[0][k] for k in theirs_at[0])


def clear_win(mine: Sequence[float], theirs: Sequence[float],
              mine_at: Sequence[dict[str, float]], theirs_at: Sequence[dict[str, float]],
              margin: float) -> bool:
    """Whether a candidate has won beyond doubt: after two or more interleaved rounds its
    slowest run is over `margin` times faster than the default's fastest, overall and at
    every size sample. Its median then beats the default's by the margin whatever further
    rounds measure near these, so they would only cost time."""
    if min(len(mine), len(theirs)) < 2 or max(mine) * margin >= min(theirs):
        return False
    return all(max(r[k] for r in mine_at) * margin < min(r[k] for r in theirs_at)
               for k in (theirs_at[0] if theirs_at else ()))


@dataclass(frozen=True)
class Point:
    """Where a task is measured: one set of inputs (a static task has one; a dynamic task
    one per size sample) with its expected outputs. A candidate's latency is the weighted
    mean over the points."""

    label: str  # "" for a static task, else the sample's sizes
    weight: float
    inputs: tuple[Path, ...]
    reference: tuple[Path, ...] = ()
    magnitude: tuple[Path, ...] = ()


class TaskMeasurer:
    """Owns one task's work directory: inputs, reference outputs, default-codegen baseline.
    Candidates go to `builder` and `runner` (local ones from `cfg` unless given)."""

    def __init__(self, task: Task, workdir: Path, tools: Toolchain, cfg: MeasureConfig,
                 seed: int = 0, builder: Builder | None = None, runner: Runner | None = None,
                 clock: WallTime | None = None, keep_best: int = 0):
        self.task, self.tools, self.cfg = task, tools, cfg
        # The modules of this measurer's `keep_best` fastest valid candidates, by program
        # key (latency, path): re-timing them before export needs no second build.
        self.keep_best = keep_best
        self.kept: dict[str, tuple[float, Path]] = {}
        self.clock = clock or WallTime()  # compile and measure time of the candidates
        self.builder = builder or cfg.builder(tools)
        self.runner = runner or cfg.runner(tools)
        if runner is None and tools.emulated:  # checked under qemu, rated by llvm-mca
            target = get_target(cfg.target)
            self.runner = ProxyRunner(self.runner, float(task.flops), target.triple,
                                      target.cpu, find_mca())
        self.dir = Path(workdir) / task.task_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.src = self.dir / "task.mlir"
        self.src.write_text(task.module_mlir)
        if task.dynamic and not task.samples:
            raise UnsupportedDispatch(f"{task.name}: a dynamic task without size samples")
        samples = task.samples if task.dynamic else (None,)
        # Reference outputs and magnitudes are filled in by prepare().
        self.points = [Point(s.label if s else "", s.weight if s else 1.0, tuple(self._save(
            task_inputs(task, seed + i, s), self._point_dir(i), "in")))
            for i, s in enumerate(samples)]
        self.best_s: float | None = None  # fastest valid candidate measured by this measurer
        self.best_at: dict[str, float] = {}  # and the fastest at each point
        self.default_at: dict[str, float] = {}  # IREE's default at each size sample
        self.pipeline = ""  # IREE's default codegen pipeline (set by prepare)

    def _point_dir(self, i: int) -> Path:
        """Where point i's inputs and outputs live (a dynamic task: one folder per size)."""
        return self.dir / (f"size{i}" if self.task.dynamic else "")

    @staticmethod
    def _save(arrays: Sequence[np.ndarray], d: Path, stem: str) -> list[Path]:
        d.mkdir(parents=True, exist_ok=True)
        paths = []
        for i, a in enumerate(arrays):
            paths.append(d / f"{stem}{i}.npy")
            np.save(paths[-1], a)
        return paths

    def prepare(self) -> None:
        """Compile with IREE's default codegen: the payload a strategy will see (the task's
        ops and sketches come from it), reference outputs and the baseline."""
        # Global optimization must not run again on the dispatch: it rewrites some dispatch
        # bodies (a strided 1x1 conv becomes slice + matmul), so codegen would see another
        # form than in the model. Compile to the ABI once, then resume after global-opt.
        abi_src = self.dir / "task_abi.mlir"
        res = compile_module(self.tools, self.dir / "task.mlir", abi_src, self.cfg,
                             extra=["--compile-to=abi"], timeout_s=self.cfg.prepare_timeout_s)
        if res.returncode != 0:
            raise UnsupportedDispatch(f"IREE could not lower the task module of {self.task.name} "
                                      f"to its ABI: {self._why(res)}")
        self.src = abi_src
        vmfb = self.dir / "default.vmfb"
        cfg_dir = self.dir / "default_configs"
        res = self._compile(vmfb, extra=[f"{CONFIG_DUMP_FLAG}={cfg_dir}",
                                         *self._asm_flags(vmfb)],
                            timeout_s=self.cfg.prepare_timeout_s)
        if res.returncode != 0:
            raise UnsupportedDispatch(f"IREE's default build of {self.task.name} failed: "
                                      f"{self._why(res)}")
        configured = single_configuration(cfg_dir, self.task.name)
        self.task = with_codegen_view(self.task, configured, self.task.target)
        self.pipeline = default_pipeline(configured)
        n_out = len(self.task.output_types)
        runner = self.cfg.runner(self.tools)  # the reference is always made here
        for i, pt in enumerate(self.points):
            d = self._point_dir(i)  # (a dispatch may take no input: an iota, a constant)
            outs, failed = runner.outputs(vmfb, pt.inputs, n_out, d / "reference")
            if outs is None:
                raise UnsupportedDispatch(f"IREE's default build of {self.task.name} failed on "
                                          f"random inputs{self._at(pt)} ({failed.error[:200]}): "
                                          "no reference")
            abs_inputs = self._save(absolute([np.load(p) for p in pt.inputs]), d / "abs", "in")
            mags, failed = runner.outputs(vmfb, abs_inputs, n_out, d / "magnitude")
            if mags is None:
                raise UnsupportedDispatch(f"IREE's default build of {self.task.name} failed on "
                                          f"the absolute inputs{self._at(pt)} "
                                          f"({failed.error[:200]})")
            self.points[i] = replace(
                pt, reference=tuple(d / "reference" / f"out{k}.npy" for k in range(n_out)),
                magnitude=tuple(d / "magnitude" / f"out{k}.npy" for k in range(n_out)))
        self.default_vmfb = vmfb

    @staticmethod
    def _at(pt: Point) -> str:
        return f" at size {pt.label}" if pt.label else ""

    def _why(self, res: ProcResult) -> str:
        if res.timed_out:
            return f"timed out after {self.cfg.prepare_timeout_s}s"
        return first_error_line(res.stderr)

    def _compile(self, out: Path, extra: Sequence[str] = (), **kw) -> ProcResult:
        """Compile the task module as the model's compile treats the dispatch (see prepare)."""
        return compile_module(self.tools, self.src, out, self.cfg,
                              extra=[TASK_RESUME_FLAG, *extra], **kw)

    def time_default(self) -> float | None:
        """IREE's default build, timed by the same runner as the candidates. Its first
        timing at each size sample is what a dynamic task's sizes are weighed by
        (`weighted_latency`)."""
        latency, by = self.timed(self.default_vmfb)
        if latency is not None and not self.default_at and any(by):
            self.default_at = dict(by)
            latency = self.weighted_latency(by)
        return latency

    def timed(self, artifact: Path) -> tuple[float | None, dict[str, float]]:
        """Weighted mean latency over the points (None if any run failed) and each point's
        latency by label (timed only: validation is `validated`)."""
        by: dict[str, float] = {}
        for pt in self.points:
            res = self.runner.run(self.run_input(artifact, pt, validate=False))
            if res.latency_s is None:
                return None, by
            by[pt.label] = res.latency_s
        return self.weighted_latency(by), by

    def weighted_latency(self, by: dict[str, float]) -> float:
        """A dynamic task's latency: each size sample counts by its weight in time relative
        to IREE's default there (a plain mean would be the largest sizes' alone), scaled
        back to seconds by the default's mean (so the default's own is its mean)."""
        total = sum(pt.weight for pt in self.points) or 1.0
        if not self.default_at:
            return sum(pt.weight * by[pt.label] for pt in self.points) / total
        base = sum(pt.weight * self.default_at[pt.label] for pt in self.points) / total
        return base * sum(pt.weight * by[pt.label] / self.default_at[pt.label]
                          for pt in self.points) / total

    def validated(self, artifact: Path) -> bool:
        """Whether the artifact's outputs match the reference at every point."""
        return self.check(artifact).status == Status.OK

    def _asm_flags(self, artifact: Path) -> tuple[str, ...]:
        """The assembly dump a proxy runner rates (only where the module cannot be timed)."""
        if not isinstance(self.runner, ProxyRunner):  # (a real runner on the device: no)
            return ()
        return (f"{FILES_DUMP_FLAG}={asm_dir(artifact)}",)

    def build_input(self, program: Program, out_dir: Path) -> BuildInput:
        """The candidate for the builder: our emitter's library for `program`."""
        flags = (*target_flags(self.cfg.target), *self.cfg.compile_flags, TASK_RESUME_FLAG,
                 *self._asm_flags(out_dir / CANDIDATE_ARTIFACT))
        if is_template(program):
            text = tuning_spec_text([SpecEntry(self.task.task_id, self.task.task_mlir,
                                               self.task.ops, program, self.pipeline)])
            marker = lowering_config(self.task.ops, program).removeprefix("#iree_cpu.")
            return BuildInput(self.src, text, LibraryKind.TUNING_SPEC, marker, out_dir, flags)
        text = library_text([TunedEntry(self.task.task_id, self.task.task_mlir, self.task.ops,
                                        program, self.task.view_mlir)])
        return BuildInput(self.src, text, LibraryKind.STRATEGY, strategy_name(self.task.task_id),
                          out_dir, flags)

    def build(self, programs: Sequence[Program], dirs: Sequence[Path],
              then: Check | None = None) -> list[BuildResult]:
        """Emit and compile (`emit_and_build`; `then`: a check run in the compile slot)."""
        return emit_and_build(self.builder, [partial(self.build_input, p, d)
                                             for p, d in zip(programs, dirs)], then)

    @property
    def checks_while_building(self) -> bool:
        """Whether a candidate's outputs are checked in its compile slot, while later
        candidates compile (item 6 of issue 19): only where both run on this machine and
        the runner is a plain local one (the timing runs still come after, one at a time)."""
        return isinstance(self.builder, LocalBuilder) and isinstance(self.runner, LocalRunner)

    def check(self, artifact: Path) -> RunResult:
        """The artifact's outputs against the reference at every point (no timing)."""
        for pt in self.points:
            res = self.runner.run(self.run_input(artifact, pt, time=False))
            if res.status != Status.OK:
                return replace(res, error=res.error + self._at(pt))
        return RunResult(Status.OK)

    def run_input(self, artifact: Path, point: Point, time: bool = True,
                  slow_cutoff_s: float | None = None, validate: bool = True) -> RunInput:
        """A run at `point`. The points of a dynamic task share one candidate's timing
        budget (each times for 1/P of `min_time_s`): a candidate then costs about what a
        static one does (5 sizes each at the full budget took BERT's search 2.75 s a
        trial), and the weighted mean over the points averages their noise."""
        return RunInput(artifact, point.inputs, point.reference if validate else (),
                        point.magnitude if validate else (), time, slow_cutoff_s,
                        timing_share=1.0 / max(1, len(self.points)))

    def remeasure(self, programs: Sequence[Program], rounds: int = 4,
                  margin: float | None = None, race: bool = True) -> Remeasured | None:
        """Build and validate `programs` again, then re-time the default and them in
        interleaved rounds (a noisy machine drifts between measurements taken minutes
        apart; records of another machine or IREE version were never run here); a program
        `outclassed` by the default or by another program leaves the race, and the rounds
        end when none is left, or when one is left with a `clear_win` by `margin` over the
        default (the caller's threshold for keeping a program: the decision is made; None:
        all rounds run for it). Without `race` every program runs every round (a
        comparison of all of them, not a choice of one: one unlucky first run must not end
        a program's timing on a noisy machine).
        Medians of the default and of each program over the rounds it ran (None where it
        failed now), also per size sample of a dynamic task; None if the default failed."""
        base = self.dir / "best"
        shutil.rmtree(base, ignore_errors=True)
        # This run's own top candidates were built and validated in the search.
        again = [i for i, p in enumerate(programs) if p.key not in self.kept]
        built = dict(zip(again, self.build([programs[i] for i in again],
                                           [base / f"c{i}" for i in again])))
        vmfbs: list[Path | None] = []
        for i, p in enumerate(programs):
            if i not in built:
                vmfbs.append(self.kept[p.key][1])
                continue
            b = built[i]
            ok = b.status == Status.OK and self.validated(b.artifact)
            vmfbs.append(b.artifact if ok else None)
        t_def: list[float] = []
        t_new: list[list[float]] = [[] for _ in programs]
        at_def: list[dict[str, float]] = []
        at_new: list[list[dict[str, float]]] = [[] for _ in programs]
        racing = [v is not None for v in vmfbs]
        for r in range(rounds):
            if r >= 1 and not any(racing):
                break
            order = [-1, *range(len(vmfbs))]  # -1: the default
            for i in (order if r % 2 == 0 else order[::-1]):  # alternating: drift cancels
                if i < 0:
                    if not self.default_at and any(pt.label for pt in self.points):
                        self.time_default()  # sets the sizes' weights (see weighted_latency)
                    a, by = self.timed(self.default_vmfb)
                    if a is None:
                        return None
                    t_def.append(a)
                    at_def.append(by)
                    continue
                if vmfbs[i] is None or not racing[i]:
                    continue
                latency, by = self.timed(vmfbs[i])
                if latency is None:
                    vmfbs[i] = None
                else:
                    t_new[i].append(latency)
                    at_new[i].append(by)
            if not race:
                continue
            racing = [go and not outclassed(t, t_def, a, at_def)
                      for go, t, a in zip(racing, t_new, at_new)]
            if r == 0:  # a program far behind another in the first round leaves at once
                racing = [go and not any(racing[j] and j != i and far_behind(
                    t_new[i], t_new[j], at_new[i], at_new[j]) for j in range(len(racing)))
                    for i, go in enumerate(racing)]
            # Only the fastest program can be kept: one that another still racing beats in
            # every run (at every size) leaves too.
            racing = [go and not any(racing[j] and j != i and outclassed(
                t_new[i], t_new[j], at_new[i], at_new[j]) for j in range(len(racing)))
                for i, go in enumerate(racing)]
            left = [i for i, go in enumerate(racing) if go]
            if margin is not None and len(left) == 1 and clear_win(
                    t_new[left[0]], t_def, at_new[left[0]], at_def, margin):
                break
        ok = [bool(v and t) for v, t in zip(vmfbs, t_new)]
        return Remeasured(statistics.median(t_def),
                          [statistics.median(t) if k else None for k, t in zip(ok, t_new)],
                          _medians(at_def),
                          [_medians(a) if k else {} for k, a in zip(ok, at_new)])

    def measure(self, programs: Sequence[Program]) -> list[rec.Record]:
        return list(self.measure_iter(programs))

    def measure_iter(self, programs: Sequence[Program]) -> Iterator[rec.Record]:
        """Build all (in parallel; with a local builder and runner each build's outputs are
        checked in its compile slot), then time (and validate, where not checked yet) one at
        a time, yielding each record as soon as it is known (the caller appends it at once)."""
        tmp = Path(tempfile.mkdtemp(prefix="cand_", dir=self.dir))
        with self.clock.timing("compile"):
            built = self.build(programs, [tmp / f"c{i}" for i in range(len(programs))],
                               self.check if self.checks_while_building else None)
        env = rec.environment()
        for prog, b in zip(programs, built):
            status, err, samples, by = b.status, b.error, (), {}
            if status == Status.OK and b.checked is not None and \
                    b.checked.status != Status.OK:
                status, err = b.checked.status, b.checked.error
            if status == Status.OK:
                with self.clock.timing("measure"):
                    status, err, samples, by = self._measure_built(
                        b.artifact, validate=b.checked is None)
            latency = (self.weighted_latency(by) if by else statistics.median(samples)) \
                if status == Status.OK else None
            if latency is not None:
                self.best_s = latency if self.best_s is None else min(self.best_s, latency)
                self._keep(prog.key, latency, b.artifact)
            yield rec.Record(task_key=self.task.key, program=prog.to_json(), program_key=prog.key,
                             status=status, latency_s=latency, samples_s=tuple(samples),
                             error=err, target=self.cfg.target, env=env, time=time.time(),
                             device_kind=self.cfg.device_kind, by_size=by)
        shutil.rmtree(tmp, ignore_errors=True)

    def _keep(self, key: str, latency: float, artifact: Path) -> None:
        """Keep a valid candidate's module if it is among the `keep_best` fastest so far
        (a proxy runner rates an assembly dump beside the module: not kept there)."""
        if self.keep_best < 1 or isinstance(self.runner, ProxyRunner):
            return
        ranked = sorted({**self.kept, key: (latency, artifact)}.items(),
                        key=lambda kv: kv[1][0])
        if key not in dict(ranked[:self.keep_best]):
            return
        d = self.dir / "kept"
        d.mkdir(exist_ok=True)
        shutil.copyfile(artifact, d / f"{key}.vmfb")
        self.kept[key] = (latency, d / f"{key}.vmfb")
        for gone, (_, path) in ranked[self.keep_best:]:
            if gone in self.kept:
                path.unlink(missing_ok=True)
                del self.kept[gone]

    def _measure_built(self, artifact: Path, validate: bool = True
                       ) -> tuple[Status, str, tuple[float, ...], dict[str, float]]:
        """Validate (unless checked already) and time a built candidate at every point:
        (status, error, timed repetitions of a static task, latency per size of a dynamic
        one). A slow candidate (first run over slow_factor x the best at that point so far)
        is timed once there."""
        by: dict[str, float] = {}
        samples: tuple[float, ...] = ()
        for pt in self.points:
            # (best_s None: no best yet, or reset: no cutoff.)
            cutoff = None if self.best_s is None else \
                self.cfg.slow_factor * self.best_at.get(pt.label, self.best_s)
            res = self.runner.run(self.run_input(artifact, pt, slow_cutoff_s=cutoff,
                                                 validate=validate))
            if res.status != Status.OK:
                return res.status, res.error + self._at(pt), (), {}
            samples = res.samples_s
            if pt.label:
                by[pt.label] = res.latency_s
        for pt in self.points:  # only once every point ran
            t = by.get(pt.label, statistics.median(samples))
            self.best_at[pt.label] = min(self.best_at.get(pt.label, t), t)
        return Status.OK, "", samples, by
