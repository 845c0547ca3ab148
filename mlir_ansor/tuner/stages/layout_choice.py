"""Stage 2: the forms a model is tuned in. llvm-cpu: NCHW convolutions' activations
channels-last unless IREE's default build of that form is clearly slower (timed side by
side; always with --io-layout channels-last); constant weights' transposes folded where
that leaves fewer contractions reading them across their vector lanes, else activations'
transposes propagated into the contractions where that forms fewer dispatches and IREE's
default build is clearly faster with it; pads fused into their consumers' dispatches
with --pad-fusion on (auto decides at the hand-back); 3x3 convolutions by Winograd where
IREE's default build is clearly faster with it (else tuned as the other form); IREE's data
tiling where its default build is clearly faster with it (at the size samples of a dynamic
model), except that a model with packable constant weights is then tuned first with them,
data-tiled as its other form; static branches for the smallest sizes of a dynamic model
where IREE's default build is clearly faster with them; and, without
data tiling or such branches, the packable constant weights with the dispatches each packing brings
(`layouts`).
Tasks are formed from these forms, so this stage comes before task forming. "Matches
torch" below is `reference`: IREE's default build's outputs stand in for torch's where
they differ from torch a little, as at the hand-back."""
from __future__ import annotations

import math
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from mlir_ansor.dialect_helpers.activation_layout import channels_first_convs
from mlir_ansor.dialect_helpers.data_tiling_hints import (DataTilingHintError, hint_sites,
                                                          same_contractions, with_hints)
from mlir_ansor.dialect_helpers.layout_rewrite import LayoutRewriteError, find_sites, pack_tile
from mlir_ansor.dialect_helpers.padded_borders import border_sites, with_border_split
from mlir_ansor.dialect_helpers.size_dispatch import DispatcherError
from mlir_ansor.dialect_helpers.small_sizes import SmallSizes, with_small_sizes
from mlir_ansor.dialect_helpers.winograd import (WinogradError,
                                                 WinogradSite, winograd_sites, with_winograd)
from mlir_ansor.errors import CompileError, DefaultModuleError
from mlir_ansor.targets import get_target
from mlir_ansor.tuner.e2e import (check_default, check_outputs, compile_model,
                                  model_reference, save_inputs, size_timing)
from mlir_ansor.tuner.layouts import (BORDERS, CHANNELS_LAST_TOLERANCE, DATA_TILING,
                                      DATA_TILING_FLAGS, FLIPS, WINOGRAD, BorderChoice,
                                      FOLD_TRANSPOSES_FLAGS, PAD_FUSION_FLAGS,
                                      PROPAGATE_TRANSPOSES_FLAGS,
                                      Alternative, DataTilingChoice, ModelLayout,
                                      PadFusionChoice, PropagationChoice, TransposeChoice,
                                      WinogradChoice, decide_fold_transposes,
                                      decide_propagation, decide_winograd, dispatch_change,
                                      weighted_side_by_side,
                                      SmallSizesChoice, alternatives, choose_activation_layout,
                                      choose_data_tiling, data_tiled_contractions,
                                      keep_small_branches, model_flow, side_by_side,
                                      small_size_tops)
from mlir_ansor.tuner.measure import MeasureConfig
from mlir_ansor.tuner.stages.state import ModelForms, ModelIn, OtherForm, RunState
from mlir_ansor.tuner.tasks import dispatch_keys, extract_tasks, flow_source

FLOW_TIMEOUT_S = 600
OTHER_FORM = "model_other_form.mlir"  # the model with one choice the other way (other_form)
T = TypeVar("T")


def model_forms(state: RunState, m: ModelIn, packing_first: bool = True
                ) -> tuple[ModelForms, list[str]]:
    """The forms `m` is tuned in, and notes for the report. `packing_first`: whether a
    model IREE's defaults data-tile may be tuned first with packed weights instead
    (`_packing_first`); where that form or its data-tiled other form cannot be formed,
    the forms are chosen again without it, data-tiled first as IREE's defaults chose."""
    opts, tools = state.opts, state.tools
    notes = []
    base = m.dir / "model.mlir"
    # The layouts are chosen by timing whole models: not where modules cannot be timed.
    relayout = (opts.layout_rewrite and get_target(opts.target).backend == "llvm-cpu"
                and not tools.emulated)
    if opts.layout_rewrite and tools.emulated:
        notes.append(f"Layout rewrite skipped for {m.name}: its choice times whole models, "
                     "and this target's modules run here only under emulation")
    # Before any tuning: IREE's default build runs the example and matches torch.
    clock = state.clock
    with clock.stage("layout/default check"):
        plain = check_default(tools, m.model, m.inputs, base, m.baseline_dir, state.cfg)
    activation = None
    if relayout and channels_first_convs(base.read_text()):
        try:
            with clock.stage("layout/channels-last"):
                # With channels-last inputs and outputs the channels-last form is the one
                # without transposes: taken whatever IREE's defaults make of both (both
                # still timed, for the report). GRP-b1's defaults, 7.2 against 8.1 ms, sent
                # it to the NCHW form, whose tuned module then ran 1.5x slower.
                tolerance = (math.inf if opts.io_layout == "channels-last"
                             else CHANNELS_LAST_TOLERANCE)
                activation = choose_activation_layout(
                    base, save_inputs(m.inputs, m.dir / "e2e"), m.dir / "e2e" / "layout",
                    tools, state.cfg, tolerance=tolerance, plain_vmfb=plain)
        except LayoutRewriteError as e:
            notes.append(f"Channels-last skipped for {m.name}: {e}")
    channels_last = bool(activation and activation.channels_last)
    base_vmfb = plain
    if channels_last:
        base = m.dir / "model_channels_last.mlir"
        base_vmfb = m.dir / "e2e" / "layout" / "channels_last.vmfb"
    pad, flags = None, ()
    transposes, flow = None, None  # flow: `base` after dispatch formation with `flags`
    if opts.fold_transposes != "off" and relayout:
        with clock.stage("layout/transposes"):
            transposes, flow, folded_vmfb = fold_transposes(state, m, base)
        if folded_vmfb is not None:
            flags, base_vmfb = FOLD_TRANSPOSES_FLAGS, folded_vmfb
    propagation = None
    if opts.propagate_transposes == "on" and flags:
        notes.append(f"Activation transposes of {m.name} left to IREE: --propagate-transposes "
                     "on has no effect where weight transposes are folded (IREE's "
                     "propagation is off)")
    # (Only a model with a transpose op: IREE propagates those; convnets skip a compile.)
    elif (opts.propagate_transposes != "off" and relayout and not flags
          and "linalg.transpose" in base.read_text()):
        with clock.stage("layout/transposes"):
            propagation, flow, propagated_vmfb = propagate_transposes(state, m, base,
                                                                     base_vmfb, flow)
        if propagated_vmfb is not None:
            flags, base_vmfb = PROPAGATE_TRANSPOSES_FLAGS, propagated_vmfb
    wino = None
    sites = winograd_sites(base.read_text()) if opts.winograd != "off" and relayout else []
    if sites:
        with clock.stage("layout/winograd"):
            wino, marked = winograd(state, m, base, sites, base_vmfb, flags)
        if marked is not None:
            base, flow, base_vmfb = marked
    borders = None
    if opts.split_borders != "off" and relayout:
        with clock.stage("layout/border split"):
            borders, marked = split_borders(state, m, base, flags)
        if marked is not None:
            base, flow, base_vmfb = marked
    if opts.pad_fusion == "on" and relayout and "tensor.pad" in base.read_text():
        with clock.stage("layout/pad fusion"):
            pad, fused_vmfb = pad_fusion(state, m, base, base_vmfb, flags)
        if fused_vmfb is not None:
            flags, base_vmfb, flow = (*flags, *PAD_FUSION_FLAGS), fused_vmfb, None
    tiling, tiled_flow = None, None
    if opts.data_tiling != "off" and relayout:
        try:
            with clock.stage("layout/data tiling"):
                tiling, tiled_flow = data_tiling(state, m, base, base_vmfb, flags)
        except DataTilingHintError as e:
            notes.append(f"Data tiling skipped for {m.name}: {e}")
    packed_first = bool(packing_first and tiling and tiling.on and
                        _packing_first(state, m, base, channels_last, wino, pad, tiling))
    if packed_first:
        notes.append(f"IREE's default builds of {m.name} take data tiling, but they do not "
                     "show its constant weights packed by mlir-ansor: the form with them is "
                     "tuned first and the data-tiled form beside it")
        tiling = replace(tiling, on=False, why="the form with packed weights tuned first")
    if tiling and tiling.on:  # tasks come from the hinted model the choice built
        hinted = m.dir / "model_data_tiled.mlir"
        shutil.copyfile(tiled_flow[0], hinted)
        base, flow, base_vmfb = hinted, tiled_flow[1], tiled_flow[2]
        flags = (*flags, *DATA_TILING_FLAGS)
    elif flow is None:
        flow = flow_source(base, opts.target, tools, FLOW_TIMEOUT_S, flags)
    small = None
    if opts.small_sizes != "off" and relayout and m.dynamic is not None:
        with clock.stage("layout/small sizes"):
            small = small_sizes(state, m, base, base_vmfb, flags)
        if small.failed:  # (our rewrite or IREE on it: worth a look, the run goes on)
            notes.append(f"Static small-size branches of {m.name} failed: {small.why}")
        if small.small is not None:
            branched = m.dir / "model_small_sizes.mlir"
            branched.write_text(with_small_sizes(base.read_text(), small.small))
            base = branched
            flow = flow_source(base, opts.target, tools, FLOW_TIMEOUT_S, flags)
    alts, packed = [], []
    if tiling and tiling.on:
        notes.append(f"Constant weights of {m.name} not packed by mlir-ansor: IREE's data "
                     "tiling packs its contractions' weights (its form without data tiling, "
                     "where tuned too, is tuned without packed weights)")
    elif small is not None and small.small is not None:
        notes.append(f"Constant weights of {m.name} not packed by mlir-ansor: packing is "
                     "not combined with static small-size branches")
    elif pad is not None and pad.on:
        notes.append(f"Constant weights of {m.name} not packed by mlir-ansor: packing is "
                     "not combined with IREE's pad fusion")
    elif relayout:
        try:
            tile, convs = _packing(state, channels_last, wino)
            alts, packed = alternatives(base.read_text(), flow, m.dir, opts.target, tools,
                                        FLOW_TIMEOUT_S, tile, convolutions=convs, flags=flags)
        except LayoutRewriteError as e:  # tuned in its own layout; the report says why
            notes.append(f"Layout rewrite skipped for {m.name}: {e}")
    if packed_first and not packed:
        return _data_tiled_first(state, m, "no packed weight changes a dispatch")
    forms = ModelForms(activation, channels_last, base, frozenset(dispatch_keys(flow)),
                       tuple(alts), tuple(packed), flow, tiling, small, pad, transposes, wino,
                       propagation=propagation, borders=borders)
    if opts.winograd == "auto" and wino is not None and wino.built:
        with clock.stage("layout/winograd other form"):
            other = other_form(state, m, forms, WINOGRAD)
        if isinstance(other, str):
            notes.append(f"Winograd of {m.name} decided on IREE's default builds only: {other}")
        else:
            forms = replace(forms, other=other)
    # Data tiling the other way where IREE's default builds took it (one other form: after
    # Winograd's). Its contractions then go to IREE's mmt4d kernels untuned, and our tuned
    # ones may be faster still: the 1024^3 matmul (operands packed at run time) ran 10.25
    # ms data-tiled against 6.64 tuned without (Xeon VM, 2026-11-29).
    if (forms.other is None and opts.data_tiling == "auto" and (forms.tiled or packed_first)
            and tiling.plain_s and tiling.tiled_s):
        with clock.stage("layout/data tiling other form"):
            other = other_form(state, m, forms, DATA_TILING)
        if isinstance(other, str) and packed_first:
            return _data_tiled_first(state, m, other)
        if isinstance(other, str):
            notes.append(f"Data tiling of {m.name} decided on IREE's default builds only: "
                         f"{other}")
        else:
            forms = replace(forms, other=other)
            notes.append(f"The form of {m.name} {'with' if packed_first else 'without'} "
                         "data tiling is tuned too: the hand-back keeps the faster tuned form "
                         "end to end")
    # The padded form beside the split one (one other form: after the two above). IREE's
    # default kernels of both say nothing of the tuned ones (C3D-b16: 35 ms either way,
    # 1.6 tuned).
    if (forms.other is None and opts.split_borders == "auto" and borders is not None
            and borders.on):
        with clock.stage("layout/border split other form"):
            other = other_form(state, m, forms, BORDERS)
        if isinstance(other, str):
            notes.append(f"Border split of {m.name} not checked against the padded form: "
                         f"{other}")
        else:
            forms = replace(forms, other=other)
    return forms, notes


def _data_tiled_first(state: RunState, m: ModelIn, why: str
                      ) -> tuple[ModelForms, list[str]]:
    """The forms chosen again, data-tiled first as IREE's defaults chose, where the form
    with packed weights or its data-tiled other form could not be formed (`why`)."""
    forms, notes = model_forms(state, m, packing_first=False)
    return forms, [f"{m.name} not tuned first with packed weights ({why}): data-tiled "
                   "first, as IREE's default builds chose", *notes]


def _packing_first(state: RunState, m: ModelIn, base: Path, channels_last: bool,
                   wino: WinogradChoice | None, pad: PadFusionChoice | None,
                   tiling: DataTilingChoice) -> bool:
    """Whether a model that IREE's default builds data-tile is tuned first without data
    tiling, with our packed weights, and data-tiled as its other form: where it has
    packable constant weights and the data-tiled other form can be formed (one static
    model, no Winograd other form, no pad fusion). IREE's default builds judge our packed
    weights by IREE's kernels on them (BERT's MLP up-projection: 19.8 ms packed against
    9.0 plain), not by the tuned ones (1.87 ms packed, 2.0 ms torch): the form IREE's
    defaults dropped is tuned without packed weights and lost (8.83 ms, 0.85x torch), where
    tuned with them it ran 6.65 ms (1.14x; Xeon VM, 2026-11-29)."""
    opts = state.opts
    if (opts.data_tiling != "auto" or no_other_form(state, m) is not None
            or (pad is not None and pad.on)
            or (opts.winograd == "auto" and wino is not None and wino.built)):
        return False
    # At least half as many packable weights as data-tiled contractions: not a whole
    # model's data tiling given up for one small classifier head.
    tile, convs = _packing(state, channels_last, wino)
    sites = find_sites(base.read_text(), tile, convolutions=convs)
    return bool(sites) and 2 * len(sites) >= len(tiling.sites)


def _packing(state: RunState, channels_last: bool, wino: WinogradChoice | None
             ) -> tuple[int, bool]:
    """The packed weights' panel width, and whether convolutions' weights are packed too:
    not the convs of a channels-last model (packing them doubled ResNet-50's tasks, 33 ->
    72, and at 600 trials it ended at 80.0 ms against 54.3 ms without; IREE's default
    232.3 ms in both runs), nor of one with Winograd."""
    opts = state.opts
    return (opts.layout_tile or pack_tile(get_target(opts.target)),
            not (channels_last or (wino and wino.on)))


def no_other_form(state: RunState, m: ModelIn) -> str | None:
    """Why `m` cannot be tuned in two forms (None where it can)."""
    if m.dynamic is not None:
        return "a dynamic model is tuned in one form"
    if not state.single:
        return "several models are tuned in one form each"
    if state.runner is not None:
        return "the tuned forms are not timed end to end on this machine"
    return None


def flip_winograd(f: ModelForms, model_text: str) -> ModelForms:
    """`f` with Winograd the other way: on for the convolutions built and checked with it
    (`WinogradChoice.built`) where it is off, off where it is on; its data-tiled
    contractions at their positions in that form (the rewrite adds ops).
    `model_text`: the model as imported. Its flow and dispatch keys are still `f`'s."""
    w = f.winograd
    on = not w.on
    sites = w.built if on else ()
    # (Border sites are positions after the Winograd rewrite: that form is not split.)
    borders = (replace(f.borders, on=False, sites=(), built=(),
                       why="not with Winograd the other way")
               if f.borders is not None else None)
    return replace(f, winograd=replace(w, on=on, sites=sites),
                   data_tiling=_tiling_moved(f, model_text, sites, ()), borders=borders)


def _tiling_moved(f: ModelForms, model_text: str, winograd_sites: tuple[int, ...],
                  border_sites: tuple[int, ...]) -> DataTilingChoice | None:
    """`f`'s data tiling with its contractions at their positions in the form with these
    Winograd and border-split sites (both rewrites add ops). `model_text`: as imported."""
    if not f.tiled:
        return f.data_tiling
    before = ModelLayout(f.channels_last, winograd_sites=f.winograd_sites,
                         border_sites=f.border_sites).apply(model_text)
    after = ModelLayout(f.channels_last, winograd_sites=winograd_sites,
                        border_sites=border_sites).apply(model_text)
    return replace(f.data_tiling,
                   sites=same_contractions(before, after, f.data_tiling.sites))


def flip_borders(f: ModelForms, model_text: str) -> ModelForms:
    """`f` with its padded convolutions split where they are not and back where they
    are; its data-tiled contractions at their positions in that form (the split adds ops).
    `model_text`: the model as imported. Its flow and dispatch keys are still `f`'s."""
    b = f.borders
    on = not b.on
    sites = b.built if on else ()
    return replace(f, borders=replace(b, on=on, sites=sites),
                   data_tiling=_tiling_moved(f, model_text, f.winograd_sites, sites))


def flip_data_tiling(f: ModelForms) -> ModelForms:
    """`f` with IREE's data tiling the other way (on: on the contractions it was checked
    on, `DataTilingChoice.sites`). Its flow and dispatch keys are still `f`'s."""
    return replace(f, data_tiling=replace(f.data_tiling, on=not f.data_tiling.on))


def other_form(state: RunState, m: ModelIn, f: ModelForms, flips: str) -> OtherForm | str:
    """The form of the model with the choice `flips` (WINOGRAD: flip_winograd, DATA_TILING:
    flip_data_tiling) the other way, its dispatches formed, so that both are tuned and the
    hand-back keeps the faster end to end: IREE's default builds decide nothing about
    tuned kernels (C2D-b16: IREE's direct conv ran 269 ms, Winograd 15.5; tuned direct,
    24). Why there is none, where there is none."""
    if flips not in FLIPS:
        raise ValueError(f"no other form flips {flips!r}: one of {FLIPS}")
    why_not = no_other_form(state, m)
    if why_not is not None:
        return why_not
    base, text = m.dir / OTHER_FORM, (m.dir / "model.mlir").read_text()
    try:
        # Without packed weights: their sites are positions among the linalg ops, which
        # marking a conv with a bias moves, and the packing decision is the first form's
        # (on ResNet-50 it is the classifier's weight alone, about 0.1% of the FLOPs).
        flipped = (flip_winograd(f, text) if flips == WINOGRAD
                   else flip_borders(f, text) if flips == BORDERS else flip_data_tiling(f))
        other = replace(flipped, alternatives=(), packed_tasks=())
        flow = model_flow(other.layout().apply(text), base, state.opts.target, state.tools,
                          FLOW_TIMEOUT_S, other.flags)
    except (CompileError, DataTilingHintError, WinogradError) as e:
        return f"the other form: {e}"[:300]
    plain, alt = Counter(dispatch_keys(f.flow)), Counter(dispatch_keys(flow))
    added = alt - plain
    if not added:
        return "the other form has no dispatch of its own"
    name = other.form_name(flips)
    tasks = tuple(replace(t, name=f"{t.name} ({name})", form=name)
                  for t in extract_tasks(flow, state.opts.target) if t.key in added)
    d = f.data_tiling
    default_s = None
    if flips == DATA_TILING:  # (first form's, other form's)
        default_s = (d.tiled_s, d.plain_s) if f.tiled else (d.plain_s, d.tiled_s)
    return OtherForm(replace(other, base=base, flow=flow, plain_keys=frozenset(alt)),
                     Alternative((), tuple(sorted((plain - alt).items())),
                                 tuple(sorted(added.items()))), tasks, flips, default_s)


def reference(state: RunState, m: ModelIn, xs: tuple, where: Path
              ) -> tuple[list[Path], list, list]:
    """`xs` saved under `where`, and what a build of the model must match on them: torch's
    outputs, or IREE's default build's where that differs from torch beyond the element
    bound but not grossly (e2e.model_reference), as the tuned module is checked at the
    hand-back. Against torch alone, GPT-2's data-tiled build was refused for the 9 of
    98,304 outputs where IREE's default itself differs (IREE's default builds: 9.285 ms
    without, 5.410 with it). DefaultModuleError where IREE's default is grossly off."""
    paths = save_inputs(xs, where)
    out = where / "reference"  # (not where the build under check writes its outputs)
    out.mkdir(parents=True, exist_ok=True)
    refs, mags, _, _ = model_reference(state.tools, m.baseline_dir / "default.vmfb",
                                       m.model, xs, paths, out, state.cfg)
    return paths, refs, mags


def checked_build(state: RunState, m: ModelIn, base: Path, vmfb: Path,
                  flags: tuple[str, ...]) -> list[tuple[list[Path], float]]:
    """IREE's default build of `base` with `flags` into `vmfb`, checked on the example
    (every size sample of a dynamic model; inputs and outputs saved next to it) against
    `reference`; CompileError where it does not build or does not match. The saved inputs
    and their weights, per sample (what `weighted_side_by_side` times on)."""
    vmfb.parent.mkdir(parents=True, exist_ok=True)
    compile_model(state.tools, base, vmfb, state.cfg, None, flags)
    saved = []
    for i, (xs, weight) in enumerate(sample_inputs(m)):
        where = vmfb.parent / f"sample{i}"
        paths, refs, mags = reference(state, m, xs, where)
        check_outputs(state.tools, vmfb, paths, refs, mags, where, state.cfg)
        saved.append((paths, weight))
    return saved


def fold_transposes(state: RunState, m: ModelIn, base: Path
                    ) -> tuple[TransposeChoice, str, Path | None]:
    """Whether IREE folds `base`'s constant transposes instead of propagating them
    (layouts.decide_fold_transposes on both forms' dispatches), the flow of the form
    chosen, and, where folded, IREE's default build of it, which must match torch on the
    example (every size sample of a dynamic model)."""
    opts, tools = state.opts, state.tools
    plain_flow = flow_source(base, opts.target, tools, FLOW_TIMEOUT_S)
    folded_flow = flow_source(base, opts.target, tools, FLOW_TIMEOUT_S, FOLD_TRANSPOSES_FLAGS)
    choice = decide_fold_transposes(extract_tasks(plain_flow, opts.target),
                                    extract_tasks(folded_flow, opts.target),
                                    opts.fold_transposes)
    if not choice.on:
        return choice, plain_flow, None
    vmfb = m.dir / "e2e" / "transposes" / "folded.vmfb"
    try:
        checked_build(state, m, base, vmfb, FOLD_TRANSPOSES_FLAGS)
    except DefaultModuleError:
        raise  # IREE's default itself is off at a size: no choice to make
    except CompileError as e:
        return (replace(choice, on=False, why=f"IREE's build with it: {e}"[:300]),
                plain_flow, None)
    return choice, folded_flow, vmfb


def propagate_transposes(state: RunState, m: ModelIn, base: Path, base_vmfb: Path,
                         plain_flow: str | None) -> tuple[PropagationChoice, str, Path | None]:
    """Whether IREE propagates `base`'s activation transposes into the contractions that
    read them (layouts.decide_propagation: fewer dispatches, and IREE's default builds
    timed side by side against `base_vmfb` under "auto"), the flow of the form chosen
    (`plain_flow`: `base`'s, where formed already), and, where propagated, IREE's default
    build of it, which must match torch on the example (every size sample). Where IREE
    fails to form, build or time the propagated form, it is not taken."""
    opts, tools = state.opts, state.tools
    if plain_flow is None:
        plain_flow = flow_source(base, opts.target, tools, FLOW_TIMEOUT_S)
    try:
        flow = flow_source(base, opts.target, tools, FLOW_TIMEOUT_S,
                           PROPAGATE_TRANSPOSES_FLAGS)
    except CompileError as e:
        return (PropagationChoice(False, f"IREE's dispatches with it: {e}"[:300]), plain_flow,
                None)
    plain, propagated = (extract_tasks(f, opts.target) for f in (plain_flow, flow))
    choice = decide_propagation(plain, propagated, opts.propagate_transposes)
    if choice is not None and not choice.on:
        return choice, plain_flow, None
    counts, _ = dispatch_change(plain, propagated)
    vmfb = m.dir / "e2e" / "transposes" / "propagated.vmfb"
    try:
        samples = checked_build(state, m, base, vmfb, PROPAGATE_TRANSPOSES_FLAGS)
        if choice is None:
            times = weighted_side_by_side([base_vmfb, vmfb], samples, tools,
                                          sample_timing(state, m))
            choice = decide_propagation(plain, propagated, opts.propagate_transposes, times)
    except DefaultModuleError:
        raise  # IREE's default itself is off at a size: no choice to make
    except CompileError as e:
        return (PropagationChoice(False, f"IREE's build with it: {e}"[:300], counts),
                plain_flow, None)
    if not choice.on:
        return choice, plain_flow, None
    return choice, flow, vmfb


def all_or_groups(sites: Sequence, attempt: Callable[[str, tuple[int, ...]], T | str | None]
                  ) -> tuple[T | str | None, tuple[int, ...], list[str]]:
    """A build choice on model sites (`index`, `signature`): `attempt` (name, site indices)
    builds and checks the model with those sites, and gives its result, the error, or None
    where nothing changed. All sites first; where that fails, each group of one signature
    alone and then the groups that worked together. (result, sites in it, "signature: why"
    of each group left out)."""
    chosen = tuple(s.index for s in sites)
    left: list[str] = []
    got = attempt("all", chosen)
    if isinstance(got, str):
        groups: dict[str, list[int]] = {}
        for s in sites:
            groups.setdefault(s.signature, []).append(s.index)
        keep: list[int] = []
        for g, (sig, idx) in enumerate(groups.items()):
            alone = attempt(f"group{g}", tuple(idx))
            if isinstance(alone, str) or alone is None:
                left.append(f"{sig}: {alone or 'no dispatch changed'}")
            else:
                keep += idx
        chosen = tuple(sorted(keep))
        got = attempt("kept", chosen) if chosen else got
    return got, chosen, left


def winograd(state: RunState, m: ModelIn, base: Path, sites: Sequence[WinogradSite],
             base_vmfb: Path, flags: tuple[str, ...] = ()
             ) -> tuple[WinogradChoice, tuple[Path, str, Path] | None]:
    """Whether `base`'s 3x3 stride-1 convolutions (`sites`) are computed by Winograd,
    and where they are, `base` rewritten (model_winograd.mlir), its flow-level module
    and IREE's default build of it. Every eligible convolution is rewritten first; where IREE
    cannot build that or it does not match torch, each group of one signature is tried alone
    and the groups that work are rewritten together. The build must match torch on the example
    (every size sample of a dynamic model); with --winograd auto it must also be clearly
    faster than `base_vmfb` (IREE's default build of `base`), timed side by side. `flags`:
    the form's build flags so far."""
    opts, tools = state.opts, state.tools
    text = base.read_text()
    work = m.dir / "e2e" / "winograd"
    build_flags = flags

    def attempt(name: str, chosen: tuple[int, ...]) -> tuple[Path, str, Path, list] | str:
        src = work / f"{name}.mlir"
        vmfb = work / name / "winograd.vmfb"
        try:
            work.mkdir(parents=True, exist_ok=True)
            src.write_text(with_winograd(text, chosen))
            samples = checked_build(state, m, src, vmfb, build_flags)
            flow = flow_source(src, opts.target, tools, FLOW_TIMEOUT_S, build_flags)
        except DefaultModuleError:
            raise
        except (CompileError, WinogradError) as e:
            return str(e)[:300]
        return src, flow, vmfb, samples

    got, chosen, left = all_or_groups(sites, attempt)
    if isinstance(got, str):
        return WinogradChoice(False, why=f"IREE's build with it: {got}", left=tuple(left)), None
    src, flow, vmfb, samples = got
    if opts.winograd == "on":
        choice = WinogradChoice(True, why="--winograd on", sites=chosen)
    else:
        try:
            plain_s, wino_s = weighted_side_by_side([base_vmfb, vmfb], samples, tools,
                                                    sample_timing(state, m))
        except CompileError as e:
            return WinogradChoice(False, why=str(e)[:300], left=tuple(left)), None
        choice = decide_winograd(plain_s, wino_s, chosen)
    choice = replace(choice, left=tuple(left), built=chosen)
    if not choice.on:
        return choice, None
    marked = m.dir / "model_winograd.mlir"
    shutil.copyfile(src, marked)
    return choice, (marked, flow, vmfb)


def split_borders(state: RunState, m: ModelIn, base: Path, flags: tuple[str, ...] = ()
                  ) -> tuple[BorderChoice | None, tuple[Path, str, Path] | None]:
    """Whether `base`'s padded convolutions are split into interior and borders
    (padded_borders.border_sites offers them), and where they are, `base` split
    (model_borders.mlir), its flow-level module and IREE's default build of it, which must
    match torch on the example (every size sample of a dynamic model). None where the rule
    offers no convolution. IREE's default builds are not timed against each other: its
    kernels of such convs are far from the tuned ones either way; with --split-borders auto
    the padded form is tuned too where it can be (model_forms), and the faster handed back."""
    opts, tools = state.opts, state.tools
    text = base.read_text()
    sites = border_sites(text)
    if not sites:
        return None, None
    chosen = tuple(s.index for s in sites)
    saved = sum(s.saved * s.taps for s in sites) / sum(s.taps for s in sites)
    work = m.dir / "e2e" / "borders"
    src, vmfb = work / "model_borders.mlir", work / "split" / "borders.vmfb"
    try:
        work.mkdir(parents=True, exist_ok=True)
        src.write_text(with_border_split(text, chosen))
        checked_build(state, m, src, vmfb, flags)
        flow = flow_source(src, opts.target, tools, FLOW_TIMEOUT_S, flags)
    except DefaultModuleError:
        raise
    except CompileError as e:  # (a BorderSplitError here is a bug of ours: raised)
        return BorderChoice(False, why=f"IREE's build with it: {e}"[:300]), None
    why = "--split-borders on" if opts.split_borders == "on" else "offered by the rule"
    choice = BorderChoice(True, why, chosen, saved, built=chosen)
    marked = m.dir / "model_borders.mlir"
    shutil.copyfile(src, marked)
    return choice, (marked, flow, vmfb)


def pad_fusion(state: RunState, m: ModelIn, base: Path, base_vmfb: Path,
               flags: tuple[str, ...] = ()) -> tuple[PadFusionChoice, Path | None]:
    """--pad-fusion on: `base` built with IREE's pad fusion (PAD_FUSION_FLAGS), which must
    match torch on the example (every size sample of a dynamic model); the choice and that
    build where it does. (--pad-fusion auto decides later, end to end on the tuned forms:
    stages/hand_back.py.)"""
    vmfb = m.dir / "e2e" / "pad_fusion" / "fused.vmfb"
    try:
        checked_build(state, m, base, vmfb, (*flags, *PAD_FUSION_FLAGS))
    except DefaultModuleError:
        raise
    except CompileError as e:
        return PadFusionChoice(False, f"IREE's build with pad fusion: {e}"[:300]), None
    return PadFusionChoice(True, "--pad-fusion on"), vmfb


def data_tiling(state: RunState, m: ModelIn, base: Path, base_vmfb: Path,
                flags: tuple[str, ...] = ()
                ) -> tuple[DataTilingChoice | None, tuple[Path, str, Path] | None]:
    """Whether `base` is tuned with IREE's data tiling (on which contractions), and where it
    is, `base` with those hints, its flow-level module and IREE's default build of it. None
    where data tiling changes no dispatch of the model.

    Every contraction is hinted first; where IREE cannot build that (or its result does not
    match torch), each group of contractions of one signature is tried alone and the groups
    that work are hinted together. The data-tiled default build must match torch on the
    example (and, for a dynamic model, at every size sample); with --data-tiling auto it
    must also be clearly faster than `base_vmfb` (IREE's default build of `base`) there,
    weighted as the samples are. `flags`: the form's build flags so far (pad fusion)."""
    opts, tools = state.opts, state.tools
    text = base.read_text()
    sites = hint_sites(text)
    if not sites:
        return None, None
    work = m.dir / "e2e" / "data_tiling"
    work.mkdir(parents=True, exist_ok=True)
    samples = []  # (inputs, weight, where, saved inputs, (reference outputs, magnitudes))
    for i, (xs, weight) in enumerate(sample_inputs(m)):
        where = work / f"sample{i}"
        where.mkdir(exist_ok=True)
        paths, refs, mags = reference(state, m, xs, where)
        samples.append((xs, weight, where, paths, (refs, mags)))

    def attempt(name: str, chosen: tuple[int, ...]) -> tuple[Path, Path, str] | str | None:
        """(hinted model, module, flow) of IREE's data-tiled default build with `chosen`
        hinted; None where the hints change no dispatch; the error where it fails."""
        src = work / f"{name}.mlir"
        src.write_text(with_hints(text, chosen))
        try:
            flow = flow_source(src, opts.target, tools, FLOW_TIMEOUT_S,
                               (*flags, *DATA_TILING_FLAGS))
            if not data_tiled_contractions(flow):
                return None
            vmfb = work / f"{name}.vmfb"
            compile_model(tools, src, vmfb, state.cfg, None, (*flags, *DATA_TILING_FLAGS))
            for _, _, where, paths, (refs, mags) in samples:
                check_outputs(tools, vmfb, paths, refs, mags, where, state.cfg)
        except CompileError as e:
            return str(e)[:300]
        return src, vmfb, flow

    got, chosen, left = all_or_groups(sites, attempt)
    if got is None:
        return None, None
    if isinstance(got, str):
        return DataTilingChoice(False, None, None, f"IREE's data-tiled build: {got}",
                                left=tuple(left)), None
    src, vmfb, flow = got
    if opts.data_tiling == "on":
        return DataTilingChoice(True, None, None, "--data-tiling on", chosen,
                                tuple(left)), (src, flow, vmfb)
    choice = choose_data_tiling(base_vmfb, vmfb, [(p, w) for _, w, _, p, _ in samples],
                                tools, sample_timing(state, m))
    choice = replace(choice, sites=chosen, left=tuple(left))
    return choice, ((src, flow, vmfb) if choice.on else None)


def small_sizes(state: RunState, m: ModelIn, base: Path, base_vmfb: Path,
                flags: tuple[str, ...]) -> SmallSizesChoice:
    """Which of the smallest sizes of a dynamic symbol get static branches
    (dialect_helpers/small_sizes.py; the first symbol whose branches would pad some
    contraction). IREE's default build of `base` with a branch per
    candidate top (`flags`: the form's build flags) must match torch at each branch's lowest
    size and top; it is timed there side by side with `base_vmfb` (IREE's default build of
    `base`), and the branches are kept from the smallest up while each is clearly faster."""
    tools = state.tools
    dyn = m.dynamic
    text = base.read_text()
    whys = []
    for symbol in dyn.symbols:  # the first whose small sizes change some contraction
        lo, hi = dyn.range_of(symbol)
        tops = small_size_tops(lo, hi)
        if not tops:
            whys.append(f"the range {lo}..{hi} of {symbol} has no small sizes to branch on")
            continue
        same = tuple((pos, d.dim) for d, pos in zip(dyn.dims, dyn.positions)
                     if d.symbol == symbol)
        tried = SmallSizes(same[0][0], same[0][1], tops, same)
        try:
            branched = with_small_sizes(text, tried)
        except DispatcherError as e:
            whys.append(f"{symbol}: {e}")
            continue
        break
    else:
        return SmallSizesChoice(None, why="; ".join(whys)[:300])
    work = m.dir / "e2e" / "small_sizes"
    work.mkdir(parents=True, exist_ok=True)
    src = work / "branched.mlir"
    vmfb = work / "branched.vmfb"
    try:
        src.write_text(branched)
        compile_model(tools, src, vmfb, state.cfg, None, flags)
    except CompileError as e:
        return SmallSizesChoice(None, why=str(e)[:300], failed=True)
    example = {d.symbol: int(m.inputs[pos].shape[d.dim]) for d, pos in zip(dyn.dims,
                                                                           dyn.positions)}
    timed = []
    low = lo
    for i, top in enumerate(tops):
        for n in sorted({low, top}):
            xs = dyn.inputs_at(m.inputs, {**example, symbol: n}, seed=i)
            where = work / f"size{n}"
            paths, refs, mags = reference(state, m, xs, where)
            try:
                check_outputs(tools, vmfb, paths, refs, mags, where, state.cfg)
                without, with_ = side_by_side([base_vmfb, vmfb], paths, tools,
                                              sample_timing(state, m),
                                              rounds=3)
            except CompileError as e:
                return SmallSizesChoice(None, tuple(timed), f"at {symbol}={n}: {e}"[:300],
                                        failed=True)
            timed.append((n, top, without, with_))
        low = top + 1
        if keep_small_branches(timed) <= i:  # this branch is not kept: nor any above it
            break
    kept = keep_small_branches(timed)
    if not kept:
        return SmallSizesChoice(None, tuple(timed), "not clearly faster with IREE's defaults "
                                                    "at the smallest sizes")
    return SmallSizesChoice(replace(tried, tops=tops[:kept]), tuple(timed))


def sample_timing(state: RunState, m: ModelIn) -> MeasureConfig:
    """How a whole-model choice times each sample: a dynamic model's choices rest on
    several sizes (a dozen for its small-size branches), each timed as the hand-back times
    a further size (`e2e.size_timing`): at full length these timings were 68 of the MLP's
    180 s run."""
    return state.cfg if m.dynamic is None else size_timing(state.cfg)


def sample_inputs(m: ModelIn) -> list[tuple[tuple, float]]:
    """(inputs, weight) a model's whole-model choices are checked and timed on: its example
    for a static model; for a dynamic one its size samples (the sizes its dynamic tasks are
    tuned at, weighted by --shape-weights)."""
    if m.dynamic is None or not m.samples:
        return [(m.inputs, 1.0)]
    symbol = {(pos, d.dim): d.symbol for d, pos in zip(m.dynamic.dims, m.dynamic.positions)}
    return [(m.dynamic.inputs_at(m.inputs, {symbol[k]: n for k, n in s.sizes}, seed=i),
             s.weight) for i, s in enumerate(m.samples)]


def choose_layouts(state: RunState) -> RunState:
    forms, notes = {}, list(state.notes)
    for m in state.models:
        forms[m.name], more = model_forms(state, m)
        notes += more
    return replace(state, forms=forms, notes=tuple(notes))
