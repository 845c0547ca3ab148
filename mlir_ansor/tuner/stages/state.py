"""The one value the stages pass on: what the run knows so far. Each stage returns a new
`RunState` with its part filled in (`dataclasses.replace`); nothing else is shared."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Container, Mapping

from mlir_ansor.dialect_helpers.layout_rewrite import PackSite
from mlir_ansor.transform_scripts.library import TunedEntry
from mlir_ansor.tuner.e2e import EndToEnd
from mlir_ansor.dialect_helpers.small_sizes import SmallSizes
from mlir_ansor.tuner.layouts import (BORDERS, DATA_TILING, WINOGRAD, ActivationChoice,
                                      Alternative, BorderChoice, DataTilingChoice, ModelLayout, PackingChoice,
                                      PadFusionChoice, PropagationChoice, SmallSizesChoice,
                                      TransposeChoice,
                                      WinogradChoice, form_name)
from mlir_ansor.tuner.builder import Builder
from mlir_ansor.tuner.measure import MeasureConfig, TaskMeasurer
from mlir_ansor.tuner.records import Context, Record
from mlir_ansor.tuner.reporters import Reporter
from mlir_ansor.tuner.runner import Runner
from mlir_ansor.tuner.size_plan import SizePlan
from mlir_ansor.tuner.tasks import SizeSample, Task
from mlir_ansor.tuner.toolchain import Toolchain
from mlir_ansor.tuner.wall_time import WallTime


@dataclass(frozen=True)
class ModelIn:
    """A model to tune: the user's module, its example inputs, its output folder."""

    name: str
    model: Any  # torch.nn.Module
    inputs: tuple
    dir: Path
    dynamic: Any = None  # dynamic.Resolved: the --dynamic dimensions of its inputs
    # What its dynamic tasks are measured at (weighted by --shape-weights, else uniform).
    samples: tuple[SizeSample, ...] = ()
    # Its bf16 inputs and outputs, exchanged as f32 (tuner/io_dtypes.py).
    bf16_as_f32: tuple[str, ...] = ()

    @property
    def baseline_dir(self) -> Path:
        """Where IREE's default build of the model as imported lands (checked before
        tuning, reused by the layout choice and the end-to-end step)."""
        return self.dir / "e2e" / "baseline"


# The ModelForms field that holds each decision an other form flips.
_CHOICE_FIELDS = {WINOGRAD: "winograd", DATA_TILING: "data_tiling", BORDERS: "borders"}


@dataclass(frozen=True)
class OtherForm:
    """A second form of a model (layout_choice.other_form): its forms, dispatches formed,
    what its dispatches replace and add against the first form's, and the ones it adds as
    tasks (named by form). Both forms are tuned; the hand-back keeps the faster end to end."""

    forms: ModelForms
    alternative: Alternative
    tasks: tuple[Task, ...] = ()
    flips: str = WINOGRAD  # the choice the other form makes the other way (FLIPS)
    # IREE's default builds of the first and the other form end to end (s), where their
    # dispatches left to IREE differ (data tiling's encoded ones, no task): the scheduler
    # counts what the tasks do not account for (searching.model_latencies). None: alike.
    default_s: tuple[float, float] | None = None


@dataclass(frozen=True)
class ModelForms:
    """What the layout stage decided for one model, and the forms tasks come from."""

    activation: ActivationChoice | None  # None: no NCHW conv, or not measured
    channels_last: bool
    base: Path  # the model file tuning starts from
    plain_keys: frozenset[str]  # dispatch keys of `base`
    alternatives: tuple[Alternative, ...]  # packable weight sites
    packed_tasks: tuple[Task, ...]  # dispatches only a packed form has
    flow: str  # `base` after dispatch formation (with `flags`)
    data_tiling: DataTilingChoice | None = None  # None: not considered (see the notes)
    small_sizes: SmallSizesChoice | None = None  # None: not considered (a static model...)
    pad_fusion: PadFusionChoice | None = None  # None: not considered (no pad, not llvm-cpu)
    transposes: TransposeChoice | None = None  # None: not considered (--fold-transposes off)
    winograd: WinogradChoice | None = None  # None: not considered (no eligible conv...)
    # The form with Winograd (--winograd auto) or else IREE's data tiling (--data-tiling
    # auto) the other way: both forms are tuned, the hand-back keeps the faster end to end
    # (None: not formed, see the notes).
    other: OtherForm | None = None
    # Packed weight sites checked end to end against none (None: not checked; the sites
    # are chosen by their tasks' timings).
    packing: PackingChoice | None = None
    # IREE's aggressive transpose propagation (None: not considered: --propagate-transposes
    # off, or weights' transposes folded)
    propagation: PropagationChoice | None = None
    # Padded convolutions split into interior and borders (None: not considered: none the
    # rule offers, or --split-borders off)
    borders: BorderChoice | None = None

    def layout(self, sites: tuple[PackSite, ...] = ()) -> ModelLayout:
        """The layout of this form with the packed weight `sites`."""
        return ModelLayout(self.channels_last, sites, self.tiled, self.tiled_sites, self.small,
                           self.fused, self.folded, self.winograd_sites, self.propagated,
                           self.border_sites)

    @property
    def flags(self) -> tuple[str, ...]:
        """iree-compile flags of every build of this model's tuned form."""
        return ModelLayout(data_tiling=self.tiled, fuse_pads=self.fused,
                           fold_transposes=self.folded, propagate_transposes=self.propagated,
                           winograd_sites=self.winograd_sites).flags

    @property
    def border_sites(self) -> tuple[int, ...]:
        """The padded convolutions split into interior and borders, none without."""
        return self.borders.sites if self.borders and self.borders.on else ()

    @property
    def winograd_sites(self) -> tuple[int, ...]:
        """The 3x3 convolutions IREE computes by Winograd, none without."""
        return self.winograd.sites if self.winograd and self.winograd.on else ()

    def choice(self, flips: str) -> WinogradChoice | DataTilingChoice | BorderChoice | None:
        """The decision an other form flips (layouts.FLIPS) as this form holds it."""
        return getattr(self, _CHOICE_FIELDS[flips])

    def with_choice(self, flips: str, choice: WinogradChoice | DataTilingChoice | BorderChoice) -> ModelForms:
        """This form with the decision `flips` replaced by `choice`."""
        return replace(self, **{_CHOICE_FIELDS[flips]: choice})

    def is_on(self, flips: str) -> bool:
        """Whether the choice an other form flips (layouts.FLIPS) is on in this form."""
        c = self.choice(flips)
        return bool(c and c.on)

    def form_name(self, flips: str) -> str:
        """This form's name by the choice `flips` ("direct", "data-tiled", ...)."""
        return form_name(flips, self.is_on(flips))

    @property
    def folded(self) -> bool:
        """Whether IREE folds constant weights' transposes instead of propagating them."""
        return bool(self.transposes and self.transposes.on)

    @property
    def propagated(self) -> bool:
        """Whether IREE propagates activations' transposes into contractions as generics."""
        return bool(self.propagation and self.propagation.on)

    @property
    def codegen_flags(self) -> tuple[str, ...]:
        """Build flags this form's tasks need in their own builds (measure.MeasureConfig)."""
        return ModelLayout(fuse_pads=self.fused).codegen_flags

    @property
    def fused(self) -> bool:
        """Whether IREE fuses pads into their consumers' dispatches in this form."""
        return bool(self.pad_fusion and self.pad_fusion.on)

    @property
    def tiled(self) -> bool:
        return bool(self.data_tiling and self.data_tiling.on)

    @property
    def small(self) -> SmallSizes | None:
        """The static branches of the smallest dynamic sizes, if taken."""
        return self.small_sizes.small if self.small_sizes else None

    @property
    def tiled_sites(self) -> tuple[int, ...]:
        """The contractions IREE data-tiles (hinted), none without data tiling."""
        return self.data_tiling.sites if self.tiled else ()


def what_runs(timed: Mapping[str, tuple[float, float]], tuned: Container[str],
              defaults: Mapping[str, float | None]) -> Callable[[str], float | None]:
    """Task key -> the time of what runs for it: its re-timed strategy where `tuned` holds
    it, else IREE's default (re-timed where it was, else as first measured)."""
    def runs_s(k: str) -> float | None:
        if k in timed:
            d, b = timed[k]
            return b if k in tuned else d
        return defaults.get(k)
    return runs_s


@dataclass(frozen=True)
class HandBack:
    """What the run gives back: per task the re-timed default and best, the library."""

    timed: Mapping[str, tuple[float, float]]  # task key -> (default s, best program s)
    entries: tuple[TunedEntry, ...]  # strategies of the models whose tuned module won
    entry_key: Mapping[str, str]  # task id -> task key, of the entries
    sites: Mapping[str, tuple[PackSite, ...]]  # model -> packed weight sites
    present: Mapping[str, frozenset[str]]  # model -> task keys its handed-back form runs
    library: Path | None
    e2e: Mapping[str, EndToEnd]
    dropped: Mapping[str, str]  # task id -> why its strategy was taken out
    wins: Mapping[str, bool]  # model -> the tuned module is the one handed back
    # model -> the size dispatcher its tuned form was built and checked with
    plans: Mapping[str, SizePlan] = field(default_factory=dict)
    # task key -> (torch's op for its contraction, torch eager's seconds), timed in this run
    torch: Mapping[str, tuple[str, float]] = field(default_factory=dict)
    # model -> a size dispatcher built, checked and measured slower end to end than one
    # kernel per task (not handed back)
    rejected_plans: Mapping[str, SizePlan] = field(default_factory=dict)
    # model -> (with the dispatcher, with one kernel per task): speedups over IREE's
    # default over the sizes, where both were built
    dispatcher_speedups: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    # model -> its tuned module differs from IREE's default one (strategies applied, a
    # layout, a runtime device): what `wins` was decided on
    changed: Mapping[str, bool] = field(default_factory=dict)
    # task ids whose proxy-ranked (unmeasured) strategy was not handed back for want of
    # --allow-unmeasured
    withheld: tuple[str, ...] = ()
    # task keys whose re-timed best beat IREE's default by --min-speedup: what the packed
    # sites were chosen on, a task of an unchosen site included (none where unmeasured
    # strategies were withheld)
    winners: frozenset[str] = frozenset()

    def runs_s(self, defaults: Mapping[str, float | None]) -> Callable[[str], float | None]:
        """What runs for each task in the handed-back models (`what_runs`)."""
        return what_runs(self.timed, set(self.entry_key.values()), defaults)

    def decided_s(self, defaults: Mapping[str, float | None]
                  ) -> Callable[[str], float | None]:
        """Per task, the time the packed sites were chosen on (`what_runs` over every
        winner, handed back or not)."""
        return what_runs(self.timed, self.winners, defaults)


@dataclass(frozen=True)
class RunState:
    opts: Any  # driver.TuneOptions
    tools: Toolchain
    cfg: MeasureConfig
    context: Context  # where this run's measurements count
    report: Reporter
    models: tuple[ModelIn, ...] = ()
    forms: Mapping[str, ModelForms] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # for the report (e.g. why a layout was skipped)
    tasks: tuple[Task, ...] = ()
    usage: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # key -> model -> n
    measurers: Mapping[str, TaskMeasurer] = field(default_factory=dict)
    defaults: Mapping[str, float | None] = field(default_factory=dict)  # IREE's, per task
    records: tuple[Record, ...] = ()  # this run's (resumed included) and reused ones
    clock: WallTime = field(default_factory=WallTime)  # where the search's time went
    handback: HandBack | None = None
    summary: str = ""  # the printed report
    # Where candidates are compiled and measured (None: on this machine, MeasureConfig's
    # local builder and runner), e.g. Ray's (tuner/distributed.py).
    builder: Builder | None = None
    runner: Runner | None = None

    @property
    def out(self) -> Path:
        return Path(self.opts.out)

    @property
    def proxied(self) -> bool:
        """Candidates are rated by llvm-mca, not timed: run here under emulation with no
        runner on the device."""
        return self.tools.emulated and self.runner is None

    @property
    def single(self) -> bool:
        return len(self.models) == 1

    @property
    def tunable(self) -> tuple[Task, ...]:
        return tuple(t for t in self.tasks if t.tunable)
