"""The tuning job behind the CLI, as stages with one purpose each, passing one `RunState`
(tuner/stages/state.py):

  load_models     the user's factories -> models and example inputs
  import_models   torch-mlir -> model.mlir
  choose_layouts  channels-last activations, packable weights (llvm-cpu) -> the forms tuned
  form_tasks      IREE dispatches -> tasks, each with its reference outputs and IREE's time;
                  tasks.json (what a cost model needs to learn from the records later)
  search          the trials: scheduler, policy (shared cost model + pruning + evolution),
                  measurement; records.jsonl, cost_model.json
  hand_back       library, model_tuned.mlir, build.sh, end-to-end check and timing
  write_report    report.txt, report.json, tuning_curve.png; the Reported event (tables)

Each stage lives in `tuner/stages/` and can be called alone on a state (the tests do).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from mlir_ansor.dynamic import parse_dynamic, read_shape_weights
from mlir_ansor.errors import OutputError, ToolchainError, UsageError
from mlir_ansor.sketch_passes.hints import AnnotationHints
from mlir_ansor.targets import TargetError, get_target, host
from mlir_ansor.tuner.cost_model import load_booster
from mlir_ansor.tuner.io_layout import IO_LAYOUTS
from mlir_ansor.tuner.measure import MeasureConfig
from mlir_ansor.tuner.ssh_runner import SshDevice, SshRunner
from mlir_ansor.tuner.policies import POLICIES
from mlir_ansor.tuner.records import Context, environment
from mlir_ansor.tuner.reporters import ConsoleReporter, Note, Reporter, StageStarted
from mlir_ansor.tuner.stages.hand_back import hand_back
from mlir_ansor.tuner.stages.importing import import_models, load_models
from mlir_ansor.tuner.stages.layout_choice import choose_layouts
from mlir_ansor.tuner.stages.reporting import write_report
from mlir_ansor.tuner.stages.searching import search
from mlir_ansor.tuner.stages.state import RunState
from mlir_ansor.tuner.stages.task_forming import form_tasks
from mlir_ansor.tuner.toolchain import emulated, toolchain_for

OBJECTIVES = ("f1", "f2", "f3", "f4")
DATA_TILING = ("auto", "on", "off")




@dataclass(frozen=True)
class TuneOptions:
    model: str = "resnet_block"
    models: tuple[str, ...] = ()  # several models tuned together (overrides `model`)
    trials: int = 96
    target: str = "llvm-cpu"
    out: Path = Path("ansor_out")
    seed: int = 0
    batch: int = 4
    policy: str = "evolution"
    scheduler: str = "gradient"  # or "round_robin"
    top_k: int = 3  # best candidates per task re-timed side by side before export
    reuse: tuple[Path, ...] = ()  # records of earlier runs: warm-start the cost model, and
    # their programs compete for export (apply-best); never counted in this run's budget
    # (dispatch-name pattern, AnnotationHints): restrict or bias the annotation of tasks
    hints: tuple[tuple[str, AnnotationHints], ...] = ()
    # A strategy is exported only if it beat IREE's default on its task by this factor when
    # re-timed side by side: a smaller gain is within this machine's noise and may lose in
    # the model.
    min_speedup: float = 1.03
    # Layout rewrite (llvm-cpu): NCHW convolutions' activations channels-last where IREE's
    # default build of that form is faster; constant weights packed: packed dispatches are
    # tuned next to the plain ones and used where faster; `layout_tile` lanes of the packed
    # loop.
    layout_rewrite: bool = True
    # The physical layout of the model's rank-4/5 inputs and outputs (tuner/io_layout.py):
    # "as-imported" (NCHW, the model's signature) or "channels-last" (NHWC / NDHWC, torch's
    # channels_last memory format: the module takes and returns those tensors permuted).
    io_layout: str = "as-imported"
    layout_tile: int | None = None  # None: the target's (layout_rewrite.pack_tile)
    # IREE's data tiling (packed mmt4d kernels for contractions) on llvm-cpu: "auto" where
    # its default build is clearly faster with it (timed side by side, at the size samples
    # of a dynamic model), "on" wherever it changes the model, "off" never (tuner/layouts.py).
    data_tiling: str = "auto"
    # Static branches for a dynamic model's smallest sizes (contractions padded to 1, 2, 4,
    # ... 64 rows): "auto" where IREE's default build is clearly faster with them at those
    # sizes (timed side by side), "off" never (tuner/layouts.py).
    small_sizes: str = "auto"
    # IREE's pad fusion (a padded conv's pad formed into the conv's dispatch) on llvm-cpu:
    # "auto": the tuned model is built both ways at the hand-back and the faster kept (one
    # static model timed here); "on" from the start wherever the model has a pad; "off"
    # never. A fused dispatch stays IREE's (IREE's transform-dialect path turns the pad
    # into a fill and copy of the whole padded input before a strategy runs).
    pad_fusion: str = "auto"
    # IREE's transpose propagation (llvm-cpu): "auto" folds constant weights' transposes at
    # compile time instead where that leaves fewer contractions reading a weight across
    # their vector lanes (tuner/layouts.py: decide_fold_transposes); "on" wherever it
    # changes the dispatches; "off" leaves IREE's default.
    fold_transposes: str = "auto"
    # IREE's aggressive transpose propagation (llvm-cpu; where weights' transposes are not
    # folded): activations' transposes become the indexing maps of the contractions that
    # read them, generics then, instead of dispatches of their own. "auto" where that forms
    # fewer dispatches and IREE's default build is clearly faster with it (tuner/layouts.py:
    # decide_propagation); "on" wherever it forms fewer dispatches; "off" never.
    propagate_transposes: str = "auto"
    # IREE's Winograd F(6x6, 3x3) for 3x3 stride-1 f32 convolutions (llvm-cpu): "auto"
    # where IREE's default build of the model is clearly faster with it (both timed side by
    # side; the batch matmuls it forms are tuned like any task); "on" wherever it builds and
    # matches torch; "off" never.
    winograd: str = "auto"
    # Padded convolutions split into interior and border rows, each with the taps that meet
    # the image (llvm-cpu; dialect_helpers/padded_borders.py: where the split skips at least
    # a tenth of a conv's taps in at most 3 convolutions): "auto" decides on the tuned forms
    # end to end where the model can be tuned in two forms (else split); "on" wherever it
    # builds and matches torch; "off" never.
    split_borders: str = "auto"
    # Each task's first batch starts with the programs closest to IREE's own tile sizes.
    # Off by default: on ResNet-50 at 300 trials it lifted most 1x1-conv tasks from 0.2-0.8x
    # to 0.85-1.1x of IREE's default, but end to end it measured 64.4 ms against 61.4 ms
    # without (the seeds' trials came out of the strided convs, where the gains are).
    iree_seeds: bool = False
    # Measure each task's micro-kernel seeds first (sketch_passes/kernel_seed.py). On by
    # default since they reach 74-76% of the peak on BERT's packed linear layers in their
    # first batch, where 8 trials of search found 51-58% (docs/results.md).
    kernel_seeds: bool = True
    # The scheduler's objective (paper §6): f1 summed latency of the models, f2 each model
    # only until it meets `latency_requirement_s`, f3 geometric mean of the speedups over
    # IREE's default, f4 f1 with early stopping (`early_stop` rounds, 3 if not given).
    objective: str = "f1"
    latency_requirement_s: float = 0.0
    early_stop: int = 0  # stop a task after this many rounds without improvement (0: never)
    # Wall minutes the search stage may take (0: no limit): no batch starts after that, and
    # `trials` becomes an upper bound. Import, layout and hand-back come on top.
    search_minutes: float = 0.0
    # The cost model the run starts from: "auto" (the cost_model.json next to the first
    # --reuse file that has one, else the model shipped for the target, else none), "none",
    # or a path to a model a run saved (cost_model.json).
    cost_model: str = "auto"
    # Dynamic input dimensions, `INPUT:DIM=LO..HI[@NAME]` (mlir_ansor/dynamic.py), applied to
    # every model: one module serves every size of the range; it is checked at sizes across
    # it. Dynamic dispatches get one micro-kernel each, measured at size samples.
    dynamic: tuple[str, ...] = ()
    # `--shape-weights FILE`: observed sizes and their counts (dynamic.read_shape_weights);
    # they weight the size samples of the joint objective ("": uniform).
    shape_weights: str = ""
    # How many sizes of each range a dynamic task is measured at (dynamic.tune_sizes): more
    # cover the range better, each costs a run per candidate.
    size_samples: int = 5
    # A CPU of another architecture (aarch64 here) without a runner on that device:
    # candidates are checked under qemu and ranked by llvm-mca (tuner/mca.py), never
    # timed; the proxy's picks are handed back only when the user accepts that (without
    # it the run hands back IREE's default and the report lists what it withheld).
    allow_unmeasured: bool = False
    # A Ray cluster ("auto" or an address) that compiles (nodes with a `builder` resource)
    # and measures (an actor on a node offering the device kind as a resource); "": here.
    ray: str = ""
    # A device reached by ssh ("[user@]host[:port]") that checks and times the candidates
    # with its own IREE runtime tools (in `ssh_tools`, else on its PATH).
    ssh: str = ""
    ssh_key: str = ""
    ssh_tools: str = ""
    ssh_options: tuple[str, ...] = ()  # more `ssh -o` options
    # How each module is timed (TVM's runner `repeat` and `min_repeat_ms`): timed
    # repetitions per benchmark run, each of back-to-back calls over at least
    # `min_repeat_ms`; the interleaved rounds of each task's best programs against IREE's
    # default before hand-back, and of the end-to-end comparison with torch and IREE's
    # default. Fewer and shorter: quicker and noisier.
    repeat: int = 5
    min_repeat_ms: float = 50.0
    retime_rounds: int = 4
    e2e_rounds: int = 11

    def check(self) -> None:
        """Bad options end here, before any work, with one line naming the problem."""
        if self.trials < 0:
            raise UsageError(f"--trials must be >= 0 (got {self.trials})")
        if self.batch < 1:
            raise UsageError(f"--batch must be >= 1 (got {self.batch})")
        if self.top_k < 1:
            raise UsageError(f"top_k must be >= 1 (got {self.top_k})")
        if self.pad_fusion not in ("auto", "on", "off"):
            raise UsageError(f"unknown --pad-fusion {self.pad_fusion!r} (auto, on or off)")
        if self.fold_transposes not in ("auto", "on", "off"):
            raise UsageError(f"unknown --fold-transposes {self.fold_transposes!r} "
                             "(auto, on or off)")
        if self.propagate_transposes not in ("auto", "on", "off"):
            raise UsageError(f"unknown --propagate-transposes {self.propagate_transposes!r} "
                             "(auto, on or off)")
        if self.winograd not in ("auto", "on", "off"):
            raise UsageError(f"unknown --winograd {self.winograd!r} (auto, on or off)")
        if self.split_borders not in ("auto", "on", "off"):
            raise UsageError(f"unknown --split-borders {self.split_borders!r} (auto, on or "
                             "off)")
        if self.small_sizes not in ("auto", "off"):
            raise UsageError(f"unknown --small-sizes {self.small_sizes!r} (auto or off)")
        if self.io_layout not in IO_LAYOUTS:
            raise UsageError(f"unknown --io-layout {self.io_layout!r} "
                             f"(choose from {', '.join(IO_LAYOUTS)})")
        if self.data_tiling not in DATA_TILING:
            raise UsageError(f"unknown --data-tiling {self.data_tiling!r} "
                             f"(choose from {', '.join(DATA_TILING)})")
        if self.policy not in POLICIES:
            raise UsageError(f"unknown policy {self.policy!r} (choose from {sorted(POLICIES)})")
        if self.scheduler not in ("gradient", "round_robin"):
            raise UsageError(f"unknown scheduler {self.scheduler!r} "
                             "(choose from gradient, round_robin)")
        if self.objective not in OBJECTIVES:
            raise UsageError(f"unknown objective {self.objective!r} (choose from "
                             f"{', '.join(OBJECTIVES)})")
        if self.objective == "f2" and self.latency_requirement_s <= 0:
            raise UsageError("--objective f2 needs --latency-requirement-ms > 0")
        if self.early_stop < 0:
            raise UsageError(f"--early-stop must be >= 0 (got {self.early_stop})")
        if not self.search_minutes >= 0:  # (NaN too)
            raise UsageError(f"--search-minutes must be >= 0 (got {self.search_minutes})")
        if min(self.repeat, self.retime_rounds, self.e2e_rounds) < 1:
            raise UsageError(f"--repeat, --retime-rounds and --e2e-rounds must be >= 1 (got "
                             f"{self.repeat}, {self.retime_rounds}, {self.e2e_rounds})")
        if not self.min_repeat_ms > 0:
            raise UsageError(f"--min-repeat-ms must be > 0 (got {self.min_repeat_ms})")
        names = list(self.models or (self.model,))
        if len(set(names)) != len(names):
            raise UsageError(f"a model is named twice: {names}")
        for f in self.reuse:
            if not Path(f).is_file():
                raise UsageError(f"records file to reuse not found: {f}")
        try:
            target = get_target(self.target)
        except TargetError as e:
            raise UsageError(str(e)) from e
        here = host()
        if self.ssh:
            SshDevice.parse(self.ssh)  # a bad spec ends here
            if self.ray:
                raise UsageError("--ssh and --ray: choose one runner")
            if self.allow_unmeasured:
                raise UsageError("--allow-unmeasured with --ssh: the ssh device times the "
                                 "candidates")
            # Reference outputs are made here: natively, or under qemu for another arch.
            if target.backend != "llvm-cpu" or (not emulated(target)
                                                and target.device_kind != here.device_kind):
                raise UsageError(f"--ssh with --target {self.target} ({target.device_kind}): "
                                 "the reference outputs are computed on this "
                                 f"{here.device_kind} machine, natively or under qemu, "
                                 "which cannot run that target")
        elif emulated(target):
            pass  # checked under qemu, ranked by llvm-mca; --allow-unmeasured decides the
            # hand-back (this branch also keeps it from the native-target error below)
        elif target.device_kind != here.device_kind:
            via = (f"; tune it through an offline batch: python -m mlir_ansor.offline "
                   f"prepare MODEL --target {self.target} ..." if target.backend == "cuda"
                   else " (its reference outputs could not be computed here)")
            raise UsageError(f"--target {self.target} ({target.device_kind}): tuning needs a "
                             f"runner for that device, and this machine is "
                             f"{here.device_kind}{via}")
        elif self.allow_unmeasured:
            raise UsageError(f"--allow-unmeasured is for a target this machine cannot run "
                             f"natively; {self.target} runs here and is timed")
        if self.ray and emulated(target):
            raise UsageError(f"--ray with --target {self.target}: a target checked here under "
                             "emulation is measured on this machine only")
        if self.ray:
            from mlir_ansor.tuner.distributed import _ray
            try:
                _ray()
            except ToolchainError as e:
                raise UsageError(str(e)) from None
        for spec in self.dynamic:
            parse_dynamic(spec)  # a bad spec ends here, before any work
        if self.size_samples < 2:
            raise UsageError(f"--size-samples must be >= 2 (got {self.size_samples}): the "
                             "ends of each range")
        if self.shape_weights:
            if not self.dynamic:
                raise UsageError("--shape-weights needs --dynamic")
            read_shape_weights(self.shape_weights)  # (sizes against the ranges: at import)
        if self.cost_model not in ("auto", "none"):
            if not Path(self.cost_model).is_file():
                raise UsageError(f"cost model file not found: {self.cost_model}")
            load_booster(Path(self.cost_model), target.device_kind)  # or a one-line error


@dataclass(frozen=True)
class TuneResult:
    report: str  # the printed tables
    out: Path
    library: Path | None  # the exported transform library (None: nothing beat IREE)
    tuned_vmfb: Path  # the compiled tuned model
    device: str = ""  # the IREE runtime device it runs fastest on ("": local-task)


def remote_note(state: RunState) -> str:
    """What Ray did: where work went and what was lost."""
    b, r = state.builder, state.runner
    return (f"Ray ({state.opts.ray}): candidates compiled on the cluster's builder nodes, "
            f"measured on a {r.device_kind} runner node; after a lost worker "
            f"{b.resent + r.resent} sent again, {b.lost + r.lost} recorded as "
            "'run_error: worker lost'; the end-to-end check ran on this machine")


def prepare_output(out: Path) -> None:
    """The output folder exists and is writable (checked before any work: a tuning run
    must not fail at its first record)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write_test"
        with open(probe, "w") as f:
            f.write("x")
            f.flush()
        probe.unlink()
    except OSError as e:
        raise OutputError(f"cannot write to the output folder {out}: {e.strerror or e}") from e


STAGES = (
    ("import", "importing {models} with torch-mlir", import_models),
    ("layout", "choosing layouts", choose_layouts),
    ("tasks", "forming IREE dispatches (tasks) and their baselines", form_tasks),
    ("search", "tuning {tunable} of {tasks} tasks, {trials} trials", search),
    ("hand back", "best programs against IREE's default, side by side; end to end: torch "
                  "eager, IREE default, tuned", hand_back),
    ("report", "report", write_report),
)


def start(opts: TuneOptions, reporter: Reporter | None = None) -> RunState:
    """The state before the first stage: options checked, output folder, tools."""
    opts.check()
    prepare_output(Path(opts.out))
    target = get_target(opts.target)
    tools = toolchain_for(target)  # a cross target: its runtime under qemu, or an error
    # Proxy ratings are a device kind of their own: never compared with real timings.
    kind = target.device_kind + ("-mca" if tools.emulated and not opts.ssh else "")
    cfg = MeasureConfig(target=opts.target, device_kind=kind, repetitions=opts.repeat,
                        min_time_s=opts.min_repeat_ms / 1e3)
    builder = runner = None
    if opts.ssh:
        device = replace(SshDevice.parse(opts.ssh, opts.ssh_key, opts.ssh_tools),
                         ssh_options=tuple(opts.ssh_options))
        runner = SshRunner.from_config(device, cfg)
        runner.prepare(kind)  # the device is the target's kind and has the tools
    if opts.ray:
        from mlir_ansor.tuner.distributed import RayBuilder, RayRunner, connect
        owns = connect(opts.ray)
        builder = RayBuilder.from_config(cfg, owns_connection=owns)
        runner = RayRunner.from_config(kind, cfg)
    state = RunState(opts, tools, cfg, Context(kind, environment()["iree"]),
                     reporter or ConsoleReporter(), builder=builder, runner=runner)
    if state.proxied:
        state.report(Note(
            f"no runner on {target.device_kind} hardware: candidates are checked under qemu "
            "and ranked by llvm-mca, never timed (UNMEASURED); the proxy's strategies are "
            + ("handed back (--allow-unmeasured)" if opts.allow_unmeasured else
               "not handed back without --allow-unmeasured")))
    return state


def run(opts: TuneOptions, factory: Callable[[], tuple] | None = None,
        reporter: Reporter | None = None) -> TuneResult:
    """The whole job for `opts.models` (or `opts.model`), tuned together: identical
    dispatches are one task. `factory` (returns (model, inputs)) replaces loading the model."""
    state = start(opts, reporter)
    try:
        with state.clock.stage("load"):
            state = load_models(state, factory)
        for i, (name, detail, stage) in enumerate(STAGES, 1):
            if name == "report" and opts.ray:
                state = replace(state, notes=state.notes + (remote_note(state),))
            state.report(StageStarted(i, len(STAGES), name, detail.format(
                models=", ".join(m.name for m in state.models), tunable=len(state.tunable),
                tasks=len(state.tasks), trials=opts.trials)))
            with state.clock.stage(name):  # (the report stage writes before it ends)
                state = stage(state)
    finally:
        state.report.close()
        if opts.ray and state.builder is not None:
            from mlir_ansor.tuner.distributed import disconnect
            state.runner.close()
            if state.builder.owns_connection:
                disconnect()
    first = state.models[0]
    won = state.handback.wins[first.name]
    e2e = state.handback.e2e[first.name]
    ours = won and not e2e.tuned_is_default  # (else IREE's default, maybe on another device)
    return TuneResult(state.summary, state.out, state.handback.library,
                      first.dir / "e2e" / ("tuned.vmfb" if ours else "default.vmfb"),
                      e2e.device if won else "")
