"""Layout alternatives of a model.

Activations: a model with NCHW convolutions is also compiled in channels-last form
(dialect_helpers/activation_layout.py); both are built with IREE's defaults and timed side by
side, and tuning starts from channels-last unless IREE's default is clearly slower in it
(`choose_activation_layout`). Why the lean: our sketches vectorize the output's contiguous
dim, which channels-last makes the channels (64..2048: whole vectors) and NCHW the image
width (56, 28, 14, 7 in ResNet: 7 fills no 8-lane vector); and IREE's defaults of the two
forms were within this VM's noise on the ResNet basic block, so a strict "faster" flipped
the choice between runs (14.19 vs 12.68 ms one day, 11.40 vs 11.69 ms the next).

IREE's data tiling (`--iree-dispatch-creation-data-tiling`): IREE packs the operands of a
model's contractions into tiles of its mmt4d micro-kernels (constant weights once, at
compile time) and runs those kernels. It is a model build choice, like channels-last, on
the contractions hinted for it (dialect_helpers/data_tiling_hints.py): both builds of
IREE's default are timed side by side, and tuning starts from the data-tiled form where it
is clearly faster (`choose_data_tiling`). Its data-tiled dispatches (encoded tensors) are
left to IREE; the others are tuned as usual, and every later build of the model (the
end-to-end check, `build.sh`) passes the flag.

Winograd (dialect_helpers/winograd.py): the chosen 3x3 stride-1 convolutions are rewritten
into Winograd F(6x6, 3x3) in linalg: transform contractions around a batch matmul, all
tuned as tasks. A build choice taken on IREE's default builds timed side by side
(`decide_winograd`) and, where both forms are built, again on the tuned forms end to end.

Padded borders (dialect_helpers/padded_borders.py): a convolution whose windows hang over
its zero padding on a small image (a 3x3x3 conv over a depth of 4: a sixth of its taps read
zeros) is split into its interior and its border rows, each with the taps that meet the
image. Taken where the rule offers it and IREE's default build of the split form matches
torch, and, where the model can be tuned in two forms, decided end to end on both forms
tuned (IREE's default kernels are no guide: 35 ms against 1.6 tuned on that conv).

Small sizes of a dynamic model (dialect_helpers/small_sizes.py): the smallest sizes of
one dynamic dimension get static branches whose contractions are padded to the branch's
top (1, 2, 4, 8, ... rows), so IREE and the tuner build kernels for those exact shapes.
Both builds of IREE's default are timed side by side at each branch's ends, and the
branches are kept from the smallest up while each is clearly faster (`keep_small_branches`).

Constant weights: which dispatches a packed weight (dialect_helpers/layout_rewrite.py)
brings, and which it replaces.

Packing one contraction's weight changes more than its own dispatch: IREE propagates the
new shapes through reshapes, so a fused bias may split off, or a neighbouring layer norm
changes form. Each site is therefore compiled to flow alone, and its alternative is the
difference of the two dispatch lists: the dispatches it removes from the plain model and
those it adds. The added dispatches are tuned as tasks like any other; the export packs a
site only where its added dispatches (tuned or default, whichever runs) are faster than the
ones it removes, and the end-to-end check has the last word.
"""
from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from mlir_ansor.dialect_helpers.activation_layout import to_channels_last
from mlir_ansor.dialect_helpers.data_tiling_hints import with_hints
from mlir_ansor.dialect_helpers.layout_rewrite import (LayoutRewriteError, PackSite,
                                                       find_sites, rewrite, site_signatures)
from mlir_ansor.dialect_helpers.padded_borders import with_border_split
from mlir_ansor.dialect_helpers.small_sizes import SmallSizes, with_small_sizes
from mlir_ansor.dialect_helpers.winograd import with_winograd
from mlir_ansor.errors import CompileError
from mlir_ansor.tuner.e2e import compile_model, interleaved, module_times
from mlir_ansor.tuner.measure import MeasureConfig, lower_quartile
from mlir_ansor.tuner.tasks import Task, dispatch_keys, extract_tasks, flow_source
from mlir_ansor.tuner.toolchain import Toolchain


DATA_TILING_FLAGS = ("--iree-dispatch-creation-data-tiling",)
# IREE forms a padded conv's `tensor.pad` into the conv's dispatch (the window reads the
# padding in place) instead of a dispatch of its own that copies the whole input into a
# padded buffer: DEP-b16 channels-last 1.0 -> 0.3-0.5 ms with IREE's defaults.
PAD_FUSION_FLAGS = ("--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops",)
# IREE propagates transposes into the ops that read them (on by default): a constant
# weight's transpose becomes the contraction's indexing map, so a linear layer or a
# channels-last 1x1 conv reads its weight [N, K] while the vector lanes run along N, one
# strided load per lane (196x1024 @ 1024x256 tuned: 96 GFLOP/s reading [N, K], 157 reading
# [K, N]). Off, the transpose stays on the constant and IREE's constant evaluation folds it
# at compile time.
FOLD_TRANSPOSES_FLAGS = ("--iree-global-opt-propagate-transposes=false",)
# IREE propagates a transpose into a named contraction only where it stays a named op;
# aggressively, also where the contraction becomes a generic with permuted maps. An
# activation's transpose that feeds a batch matmul (attention's heads split off the
# sequence) is then the contraction's indexing map instead of a dispatch of its own: the
# TBS-b1 operator forms 2 dispatches instead of 4 (a BERT layer 12 instead of 14 with its
# weight transposes left unfolded).
PROPAGATE_TRANSPOSES_FLAGS = ("--iree-opt-aggressively-propagate-transposes",)


@dataclass(frozen=True)
class ModelLayout:
    """The layout of the model handed back: activations channels-last or as imported, the
    constant weights packed at `sites` (found on the model after the first rewrite), and
    whether IREE builds it with its data tiling (`flags`), on the contractions at
    `tiled_sites` (data_tiling_hints; positions in the model after the activation layout),
    and the static branches of its smallest dynamic sizes (`small_sizes`, built last)."""

    channels_last: bool = False
    sites: tuple[PackSite, ...] = ()
    data_tiling: bool = False
    tiled_sites: tuple[int, ...] = ()
    small_sizes: SmallSizes | None = None
    fuse_pads: bool = False  # IREE fuses pads into their consumers' dispatches
    fold_transposes: bool = False  # constant weights' transposes folded, not propagated
    # the 3x3 convolutions computed by Winograd (dialect_helpers/winograd.py sites;
    # positions in the model after the activation layout)
    winograd_sites: tuple[int, ...] = ()
    # activations' transposes propagated into contractions that become generics
    propagate_transposes: bool = False
    # the padded convolutions split into interior and borders (padded_borders.py sites;
    # positions in the model after the activation layout and Winograd)
    border_sites: tuple[int, ...] = ()

    @property
    def flags(self) -> tuple[str, ...]:
        """iree-compile flags every build of the model in this layout needs."""
        return ((FOLD_TRANSPOSES_FLAGS if self.fold_transposes else ())
                + (PROPAGATE_TRANSPOSES_FLAGS if self.propagate_transposes else ())
                + (PAD_FUSION_FLAGS if self.fuse_pads else ())
                + (DATA_TILING_FLAGS if self.data_tiling else ()))

    def apply(self, model_mlir: str) -> str:
        base = to_channels_last(model_mlir) if self.channels_last else model_mlir
        if self.winograd_sites:  # (before the hints: their sites are found on the rewritten text)
            base = with_winograd(base, self.winograd_sites)
        if self.border_sites:
            base = with_border_split(base, self.border_sites)
        if self.data_tiling:  # (no packed weights then: IREE packs the contractions')
            base = with_hints(base, self.tiled_sites)
        base = rewrite(base, self.sites)
        return with_small_sizes(base, self.small_sizes) if self.small_sizes else base

    @property
    def codegen_flags(self) -> tuple[str, ...]:
        """The flags of `flags` a task of this form passes in its own builds too (built
        as the model is; a dispatch holding a fused pad is no task: dispatch.py)."""
        return PAD_FUSION_FLAGS if self.fuse_pads else ()

    @property
    def changed(self) -> bool:
        return (self.channels_last or bool(self.sites) or self.data_tiling
                or self.small_sizes is not None or self.fuse_pads or self.fold_transposes
                or bool(self.winograd_sites) or self.propagate_transposes
                or bool(self.border_sites))


@dataclass(frozen=True)
class ActivationChoice:
    channels_last: bool
    plain_s: float  # IREE's default build of the model as imported
    channels_last_s: float | None  # ... and of its channels-last form (None: it failed)
    why: str = ""  # why channels-last was not measured or not taken


# Channels-last is taken unless IREE's default build of it is more than this much slower.
# IREE's defaults predict the tuned forms badly: ResNet-50's channels-last default ran
# 1.21x slower than its NCHW one (1126 vs 933 ms), and the NCHW form, tuned, ran 310.5 ms
# against 156.7 ms for the tuned channels-last form of an earlier run (AVX2 VM, 2026-11-27);
# GRP-b1's tuned NCHW form ran 1.5x slower after a 1.125x default. Our sketches vectorize
# the innermost dimension, which channels-last makes the channels (NCHW: the image width,
# 7-56, fills few vectors). The margin only keeps out a channels-last form IREE makes
# pathologically slow.
CHANNELS_LAST_TOLERANCE = 1.5


def choose_activation_layout(model_mlir: Path, inputs: Sequence[Path], workdir: Path,
                             tools: Toolchain, cfg: MeasureConfig,
                             tolerance: float = CHANNELS_LAST_TOLERANCE,
                             rounds: int = 3, plain_vmfb: Path | None = None
                             ) -> ActivationChoice:
    """Compile the model as imported and in channels-last form, both with IREE's defaults,
    time them side by side (interleaved, order alternating) and keep channels-last unless
    it is more than `tolerance` times slower. The channels-last text lands next to the model as
    `model_channels_last.mlir`. Tuning then starts from the chosen form. `plain_vmfb`:
    the model as imported, already built with IREE's defaults (not compiled again)."""
    workdir.mkdir(parents=True, exist_ok=True)
    cl_path = model_mlir.parent / "model_channels_last.mlir"
    cl_path.write_text(to_channels_last(model_mlir.read_text()))
    vmfbs = [workdir / "as_imported.vmfb", workdir / "channels_last.vmfb"]
    try:
        for src, vmfb in zip((model_mlir, cl_path), vmfbs):
            if src is model_mlir and plain_vmfb is not None:
                shutil.copyfile(plain_vmfb, vmfb)
            else:
                compile_model(tools, src, vmfb, cfg, None)
    except CompileError as e:  # (the model as imported fails later, with its own error)
        return ActivationChoice(False, 0.0, None, f"channels-last failed: {e}"[:300])
    try:
        plain, cl = side_by_side(vmfbs, inputs, tools, cfg, rounds)
    except CompileError as e:
        return ActivationChoice(False, 0.0, None, str(e)[:300])
    ok = cl < plain * tolerance
    return ActivationChoice(ok, plain, cl, "" if ok else
                            f"over {tolerance:.2f}x slower with IREE's defaults")


@dataclass(frozen=True)
class DataTilingChoice:
    on: bool
    plain_s: float | None  # IREE's default build of the model (None: not timed)
    tiled_s: float | None  # ... with data tiling (None: not timed, or it failed)
    why: str = ""  # why it was not taken, or not measured
    sites: tuple[int, ...] = ()  # the contractions data-tiled (data_tiling_hints positions)
    left: tuple[str, ...] = ()  # contractions left out: "signature: why"
    # The tuned model end to end, without and with data tiling: speedups over IREE's
    # default (stages/hand_back.py; where both forms were tuned and built).
    speedups: tuple[float, float] | None = None


# Data tiling is taken where IREE's default build with it is this much faster: the form
# without it keeps every contraction tunable, which tuning often speeds up by more than
# a few percent.
DATA_TILING_MARGIN = 1.05
# ... and saves at least this much per call: a small model's builds differ by a few
# microseconds, within the noise of a module call (tools/call_floor.py: about 30 us here),
# and such a choice flipped between two runs (0.054 against 0.051 ms, then 0.052 / 0.054).
DATA_TILING_MIN_SAVING_S = 50e-6


@dataclass(frozen=True)
class SmallSizesChoice:
    small: SmallSizes | None  # the branches kept (None: none)
    # per branch measured: (lowest size, top, IREE's default without, with the branches; s)
    timed: tuple[tuple[int, int, float, float], ...] = ()
    why: str = ""  # why no branch was kept, or none measured
    failed: bool = False  # the branched model failed to build or to match torch


# A static branch is kept where IREE's default build with it is this much faster at its
# sizes (geometric mean of its lowest size and its top).
SMALL_SIZES_MARGIN = 1.05
# The branch tops tried: powers of two, the smallest sizes first (data tiling's narrow
# tiles and our static tasks take them exactly).
SMALL_SIZE_TOPS = (1, 2, 4, 8, 16, 32, 64)


def small_size_tops(lo: int, hi: int) -> tuple[int, ...]:
    """The branch tops tried for a dynamic range lo..hi: above them the dynamic model
    still serves some size."""
    return tuple(t for t in SMALL_SIZE_TOPS if lo <= t < hi)


def keep_small_branches(timed: Sequence[tuple[int, int, float, float]],
                        margin: float = SMALL_SIZES_MARGIN) -> int:
    """How many branches to keep, from the smallest up: while each is over `margin` times
    faster with the branches (geometric mean over its measured sizes)."""
    kept = 0
    tops = sorted({top for _, top, _, _ in timed})
    for top in tops:
        rows = [(a, b) for _, t, a, b in timed if t == top]
        ratio = float(np.exp(np.mean([np.log(a / b) for a, b in rows])))
        if ratio <= margin:
            break
        kept += 1
    return kept


def data_tiled_contractions(flow: str) -> bool:
    """Whether data tiling changes anything in a flow-level module built with it (some
    tensor carries IREE's encoding)."""
    return "#iree_encoding." in flow


def side_by_side(vmfbs: Sequence[Path], inputs: Sequence[Path], tools: Toolchain,
                 cfg: MeasureConfig, rounds: int) -> tuple[float, ...]:
    """Each module's latency on `inputs` (lower quartile), timed in interleaved rounds; a
    CompileError names the module whose timing failed."""
    def timer(vmfb: Path):
        def run() -> list[float]:
            try:
                return module_times(tools, vmfb, inputs, cfg)
            except CompileError as e:
                raise CompileError(f"timing {vmfb.name} failed: {e}") from e
        return run

    times = interleaved({str(v): timer(v) for v in vmfbs}, rounds)
    return tuple(lower_quartile(times[str(v)]) for v in vmfbs)


@dataclass(frozen=True)
class PadFusionChoice:
    on: bool
    why: str = ""  # why it was not taken, or not measured
    # Decided end to end (--pad-fusion auto): the tuned model's speedups over IREE's
    # default without and with it, each timed side by side with that default.
    speedups: tuple[float, float] | None = None


@dataclass(frozen=True)
class PackingChoice:
    """Whether the packed weight sites chosen per site (by their tasks' timings) stay, as
    decided end to end: a packed layout also changes the dispatches around a site, which
    the per-site timings do not see (an MLP-Mixer block: IREE's own kernels 0.05 ms slower
    a call with one packed site). `speedups`: the tuned model's over IREE's default with
    and without the packed sites, each timed side by side with that default."""

    on: bool
    speedups: tuple[float, float]


@dataclass(frozen=True)
class TransposeChoice:
    """Whether IREE folds constant weights' transposes (FOLD_TRANSPOSES_FLAGS) instead of
    propagating them into the contractions, and the MFLOP of contractions that read an
    input across their vector lanes (`lane_strided_mflop`) without and with."""

    on: bool
    why: str = ""
    strided_mflop: tuple[float, float] | None = None


def lane_strided_mflop(tasks: Sequence[Task]) -> float:
    """MFLOP (times each dispatch's count) of the contractions with an input that indexes
    the output's innermost loop, the one our kernels' vector lanes run along, in a dim that
    is not its own innermost: every vector of it is a gather of strided elements."""
    total = 0.0
    for t in tasks:
        for op in t.ops:
            if not op.is_linalg or not op.reduction_dims or not op.output.map_results:
                continue
            last = op.output.map_results[-1]
            if len(last) != 1:
                continue
            lane = last[0][0]
            for o in op.operands:
                if o.is_output:
                    continue
                dims = [i for i, terms in enumerate(o.map_results)
                        if any(loop == lane for loop, _ in terms)]
                if dims and dims[-1] != len(o.map_results) - 1:
                    total += op.flops * t.weight / 1e6
                    break
    return total


def dispatch_change(plain: Sequence[Task], other: Sequence[Task]
                    ) -> tuple[tuple[int, int], str]:
    """The dispatches of two forms of a model, counted with their weights, and why a flag
    that makes the second of the first is no choice ("" where it changes a dispatch)."""
    n = (sum(t.weight for t in plain), sum(t.weight for t in other))
    same = sorted(t.key for t in plain) == sorted(t.key for t in other)
    return n, "no dispatch changes with it" if same else ""


def decide_fold_transposes(plain: Sequence[Task], folded: Sequence[Task], mode: str
                           ) -> TransposeChoice:
    """Fold where it changes the dispatches at all (`mode` "on"), or ("auto") where it
    leaves fewer MFLOP reading across the vector lanes and forms no more dispatches (a
    transpose of an activation that propagation would have fused away then needs its own)."""
    a, b = lane_strided_mflop(plain), lane_strided_mflop(folded)
    (n_plain, n_folded), why = dispatch_change(plain, folded)
    if why:
        return TransposeChoice(False, why, (a, b))
    if mode == "on":
        return TransposeChoice(True, "--fold-transposes on", (a, b))
    if n_folded > n_plain:
        return TransposeChoice(False, f"it forms {n_folded} dispatches against {n_plain}",
                               (a, b))
    if b >= a:
        return TransposeChoice(False, "no fewer contractions read across their vector lanes",
                               (a, b))
    return TransposeChoice(True, "", (a, b))


@dataclass(frozen=True)
class PropagationChoice:
    """Whether IREE propagates activations' transposes into the contractions that read
    them even where those become generics (PROPAGATE_TRANSPOSES_FLAGS); the dispatches of
    the model without and with (counted with their weights), and IREE's default builds
    without and with, timed side by side (s)."""

    on: bool
    why: str = ""
    dispatches: tuple[int, int] | None = None
    default_s: tuple[float, float] | None = None


# Taken where IREE's default build is this much faster with it. Each dispatch it saves
# costs a tuned module as much as IREE's (25-50 us to bring the second worker in on the
# 2-core Xeon VM, thirty-sixth session), and IREE's default build shows what the
# contractions' new strided reads cost. Not on a tie: the propagated form can block a later
# choice (IREE's data-tiled build of a small attention failed on it, over its stack limit,
# where IREE's defaults ran 0.094 and 0.095 ms); TBS-b1 took it at 1.08-1.09x.
PROPAGATION_MARGIN = 1.03


def decide_propagation(plain: Sequence[Task], propagated: Sequence[Task], mode: str,
                       default_s: tuple[float, float] | None = None,
                       margin: float = PROPAGATION_MARGIN) -> PropagationChoice | None:
    """Propagate where it forms fewer dispatches (`mode` "on"), or ("auto") where IREE's
    default build (`default_s`: without, with) is also over `margin` times faster with it.
    None: "auto" with fewer dispatches, to be timed (`default_s` not given)."""
    n, why = dispatch_change(plain, propagated)
    if why:
        return PropagationChoice(False, why, n)
    if n[1] >= n[0]:
        return PropagationChoice(False, f"it forms {n[1]} dispatches against {n[0]}", n)
    if mode == "on":
        return PropagationChoice(True, "--propagate-transposes on", n, default_s)
    if default_s is None:
        return None
    without, with_it = default_s
    if without <= with_it * margin:
        return PropagationChoice(False, f"IREE's default build is {without / with_it:.2f}x "
                                 f"as fast with it, not over {margin:.2f}x", n, default_s)
    return PropagationChoice(True, "", n, default_s)


@dataclass(frozen=True)
class WinogradChoice:
    """Whether 3x3 convolutions are computed by Winograd (dialect_helpers/winograd.py),
    on which sites, and IREE's default build without and with, timed side by side."""

    on: bool
    plain_s: float | None = None
    winograd_s: float | None = None
    why: str = ""  # why it was not taken, or not measured
    sites: tuple[int, ...] = ()  # the convolutions rewritten
    left: tuple[str, ...] = ()  # convolutions left out: "signature: why"
    # The convolutions built and checked with Winograd (the other form's, when off).
    built: tuple[int, ...] = ()
    # The tuned model end to end, direct and by Winograd: speedups over IREE's default
    # (stages/hand_back.py; where both forms were tuned and built).
    speedups: tuple[float, float] | None = None


def winograd_form_name(winograd: bool) -> str:
    """How the report and the other form's tasks name a form of a model."""
    return "Winograd" if winograd else "direct"


# the choices a model's other form flips
WINOGRAD, DATA_TILING, BORDERS = "winograd", "data tiling", "border split"
FLIPS = (WINOGRAD, DATA_TILING, BORDERS)


@dataclass(frozen=True)
class BorderChoice:
    """Whether padded convolutions are split into interior and borders
    (dialect_helpers/padded_borders.py), on which sites."""

    on: bool
    why: str = ""  # why it was not taken, or how it was decided
    sites: tuple[int, ...] = ()  # the convolutions split
    saved: float = 0.0  # the share of those convolutions' taps the split skips
    # The convolutions built and checked split (the other form's, when off).
    built: tuple[int, ...] = ()
    # The tuned model end to end, unsplit and split: speedups over IREE's default
    # (stages/hand_back.py; where both forms were tuned and built).
    speedups: tuple[float, float] | None = None


def form_name(flips: str, on: bool) -> str:
    """How the report and the other form's tasks name the form of a model with the choice
    `flips` on or off."""
    if flips == WINOGRAD:
        return winograd_form_name(on)
    if flips == DATA_TILING:
        return "data-tiled" if on else "not data-tiled"
    if flips == BORDERS:
        return "borders split" if on else "padded"
    raise ValueError(f"no form flips {flips!r}: one of {FLIPS}")


# Winograd is taken where IREE's default build with it is this much faster: the direct
# convolutions left otherwise are tuned too, and Winograd costs a little accuracy.
WINOGRAD_MARGIN = 1.05


def decide_winograd(plain_s: float, winograd_s: float, sites: tuple[int, ...],
                    margin: float = WINOGRAD_MARGIN) -> WinogradChoice:
    """On where IREE's default build with Winograd at `sites` is over `margin` times
    faster than without."""
    on = plain_s > winograd_s * margin
    return WinogradChoice(on, plain_s, winograd_s,
                          "" if on else f"not over {margin:.2f}x faster with IREE's defaults",
                          sites if on else ())


# Pad fusion is taken where the tuned model is this much faster with it end to end
# (hand_back; the export's margin by default).
PAD_FUSION_MARGIN = 1.03


def decide_pad_fusion(plain_s: float, fused_s: float,
                      margin: float = PAD_FUSION_MARGIN) -> PadFusionChoice:
    """On where the build with pad fusion is over `margin` times faster (latencies, or
    their inverse speedups over one baseline)."""
    on = plain_s > fused_s * margin
    return PadFusionChoice(on, "" if on else f"not over {margin:.2f}x faster")


def choose_data_tiling(plain_vmfb: Path, tiled_vmfb: Path,
                       samples: Sequence[tuple[Sequence[Path], float]], tools: Toolchain,
                       cfg: MeasureConfig, margin: float = DATA_TILING_MARGIN,
                       rounds: int = 3) -> DataTilingChoice:
    """Time IREE's default builds of a model without and with data tiling side by side
    (interleaved, order alternating) on each of `samples` (input files, weight: one for a
    static model, its size samples for a dynamic one); data tiling is taken where it is more
    than `margin` times faster on the weighted geometric mean. Both modules must already be
    built and checked."""
    try:
        plain, tiled = weighted_side_by_side([plain_vmfb, tiled_vmfb], samples, tools, cfg,
                                             rounds)
    except CompileError as e:
        return DataTilingChoice(False, None, None, str(e)[:300])
    return decide_data_tiling(plain, tiled, margin)


def weighted_side_by_side(vmfbs: Sequence[Path],
                          samples: Sequence[tuple[Sequence[Path], float]], tools: Toolchain,
                          cfg: MeasureConfig, rounds: int = 3) -> tuple[float, ...]:
    """Each module's latency, timed side by side (`side_by_side`) on each of `samples`
    (input files, weight), as the weighted geometric mean over the samples."""
    weights = np.asarray([w for _, w in samples], dtype=np.float64)
    if not len(weights) or weights.sum() <= 0:
        raise ValueError("timing whole models needs samples with a positive weight")
    per = [side_by_side(vmfbs, inputs, tools, cfg, rounds) for inputs, _ in samples]
    return tuple(float(np.exp(np.average(np.log([t[k] for t in per]), weights=weights)))
                 for k in range(len(vmfbs)))


def decide_data_tiling(plain_s: float, tiled_s: float,
                       margin: float = DATA_TILING_MARGIN) -> DataTilingChoice:
    """On where the data-tiled build is over `margin` times faster and saves at least
    DATA_TILING_MIN_SAVING_S per call."""
    if plain_s <= tiled_s * margin:
        return DataTilingChoice(False, plain_s, tiled_s,
                                f"not over {margin:.2f}x faster with IREE's defaults")
    if plain_s - tiled_s < DATA_TILING_MIN_SAVING_S:
        return DataTilingChoice(False, plain_s, tiled_s, "saves under "
                                f"{DATA_TILING_MIN_SAVING_S * 1e6:.0f} us a call: within noise")
    return DataTilingChoice(True, plain_s, tiled_s)


@dataclass(frozen=True)
class Alternative:
    sites: tuple[PackSite, ...]  # packed together: ops of one signature (same op, same types)
    removed: tuple[tuple[str, int], ...]  # (task key, calls) of the plain model it replaces
    added: tuple[tuple[str, int], ...]  # (task key, calls) it brings


def model_flow(text: str, path: Path, target: str, tools: Toolchain, timeout_s: float,
               flags: Sequence[str] = ()) -> str:
    """Flow-level module of a model text (written to `path` for iree-compile)."""
    path.write_text(text)
    return flow_source(path, target, tools, timeout_s, flags)


def alternatives(model_mlir: str, plain_flow: str, workdir: Path, target: str,
                 tools: Toolchain, timeout_s: float, tile: int, convolutions: bool = True,
                 flags: Sequence[str] = ()) -> tuple[list[Alternative], list[Task]]:
    """The packable contractions of the model with what packing each changes, and the
    dispatches the plain model lacks as tasks (`layout_of` names their sites;
    `convolutions`: see find_sites). Sites of one signature (the same op on the same operand
    types, e.g. the repeated 1x1 convs of a ResNet stage) are one alternative, packed
    together: one dispatch formation of the whole model each, and one decision; `flags`:
    the model's build flags, with which `plain_flow` was formed."""
    plain = Counter(dispatch_keys(plain_flow))
    alts: list[Alternative] = []
    tasks: dict[str, Task] = {}
    scratch = workdir / "model_packed.mlir"
    sites = find_sites(model_mlir, tile, convolutions)
    groups: dict[str, list[PackSite]] = {}
    for s, sig in zip(sites, site_signatures(model_mlir, sites)):
        groups.setdefault(sig, []).append(s)
    try:
        for group in groups.values():
            flow = model_flow(rewrite(model_mlir, group), scratch, target, tools, timeout_s,
                              flags)
            packed = Counter(dispatch_keys(flow))
            added = packed - plain
            label = f"site {','.join(str(s.index) for s in group)} ({group[0].op_name})"
            if not added:
                raise LayoutRewriteError(f"packing {label} changed no dispatch")
            alts.append(Alternative(tuple(group), tuple(sorted((plain - packed).items())),
                                    tuple(sorted(added.items()))))
            for t in extract_tasks(flow, target):
                if t.key in added and t.key not in tasks:
                    tasks[t.key] = replace(t, name=f"{t.name} (packed)", layout_of=label)
    finally:
        scratch.unlink(missing_ok=True)
    return alts, list(tasks.values())


def choose_sites(alts: Sequence[Alternative], latency: Callable[[str], float | None],
                 margin: float) -> list[PackSite]:
    """The sites whose added dispatches run at least `margin` times faster than the ones they
    remove (`latency`: what runs for a task key, None if unknown: then the site stays)."""
    chosen = []
    for a in alts:
        new = [latency(k) for k, _ in a.added]
        if any(x is None for x in new):
            continue
        old = sum((latency(k) or 0.0) * n for k, n in a.removed)
        if sum(x * n for x, (_, n) in zip(new, a.added)) * margin < old:
            chosen.extend(a.sites)
    return chosen


def initial_latency(alts: Sequence[Alternative], defaults: Mapping[str, float | None]
                    ) -> dict[str, float]:
    """A start value for the scheduler per added task: at most what the dispatches its site
    removes cost (IREE's default of a packed contraction can be far slower than the plain
    one it replaces, and nothing ever runs it unless tuning beats the plain one)."""
    cap: dict[str, float] = {}
    for a in alts:
        if any(not defaults.get(k) for k, _ in a.removed):
            continue  # a removed dispatch of unknown cost (one left to IREE): no cap
        old = sum(defaults[k] * n for k, n in a.removed)
        for k, n in a.added:
            if old:
                cap[k] = max(cap.get(k, 0.0), old / n)  # per call, like the latencies
    return cap


def save_layout(path: Path, layout: ModelLayout) -> None:
    """The layout of the model handed back (`load_layout` re-applies it)."""
    path.write_text(json.dumps({"channels_last": layout.channels_last,
                                "sites": [asdict(s) for s in layout.sites],
                                "data_tiling": layout.data_tiling,
                                "data_tiled_sites": list(layout.tiled_sites),
                                "small_sizes": (asdict(layout.small_sizes)
                                                if layout.small_sizes else None),
                                "fuse_pads": layout.fuse_pads,
                                "fold_transposes": layout.fold_transposes,
                                "winograd_sites": list(layout.winograd_sites),
                                "propagate_transposes": layout.propagate_transposes,
                                "border_sites": list(layout.border_sites)},
                               indent=1))


def load_layout(path: Path) -> ModelLayout:
    """What `save_layout` wrote (a plain list: the packed sites of an earlier version);
    no file: the model as imported."""
    if not path.exists():
        return ModelLayout()
    try:
        data = json.loads(path.read_text())
        if isinstance(data, list):
            data = {"channels_last": False, "sites": data}
        sites = tuple(PackSite(**{**d, "outer_perm": tuple(d["outer_perm"])})
                      for d in data["sites"])
        small = data.get("small_sizes")
        if small is not None:
            small = SmallSizes(int(small["arg"]), int(small["dim"]),
                               tuple(int(t) for t in small["tops"]),
                               tuple((int(a), int(d)) for a, d in small["same"]))
        return ModelLayout(bool(data["channels_last"]), sites,
                           bool(data.get("data_tiling", False)),
                           tuple(int(i) for i in data.get("data_tiled_sites", ())), small,
                           bool(data.get("fuse_pads", False)),
                           bool(data.get("fold_transposes", False)),
                           tuple(int(i) for i in data.get("winograd_sites", ())),
                           bool(data.get("propagate_transposes", False)),
                           tuple(int(i) for i in data.get("border_sites", ())))
    except (ValueError, TypeError, KeyError) as e:
        raise LayoutRewriteError(f"corrupt layout file {path}: {e}") from e
