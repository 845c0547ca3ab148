"""Stage 5: what the user gets back. The best programs of each task are built, validated
and re-timed against IREE's default side by side; strategies that clearly won go into the
library, packed weight sites where their dispatches run faster; every model is built with
them, checked against torch and timed against IREE's default end to end. A strategy that
breaks a model is found by bisecting with that same whole check (build, applied, outputs)
and dropped; IREE's default module is handed back where the tuned one is not faster.
Each output folder gets `build.sh` (stock iree-compile rebuilds the handed-back module)."""
from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from mlir_ansor.dialect_helpers.size_dispatch import branch_by_size, branch_index, retag
from mlir_ansor.dynamic import size_sets, with_sizes
from mlir_ansor.errors import (CompileError, DefaultModuleError, StrategiesFailed,
                               StrategiesNotApplied)
from mlir_ansor.targets import get_target
from mlir_ansor.transform_scripts.build_script import write_build_script
from mlir_ansor.transform_scripts.library import TunedEntry, library_text, strategy_name
from mlir_ansor.tuner.e2e import (EndToEnd, check_outputs, check_tuned, end_to_end,
                                  model_reference, save_inputs)
from mlir_ansor.tuner.layouts import (Alternative, ModelLayout, PackingChoice,
                                      PadFusionChoice, choose_sites, decide_pad_fusion,
                                      model_flow, save_layout)
from mlir_ansor.tuner.measure import MeasureConfig
from mlir_ansor.tuner.records import top_programs
from mlir_ansor.tuner.reporters import Note
from mlir_ansor.tuner.size_plan import (SizePlan, SizeTimes, per_size_choice, plan_axis,
                                        plan_sizes)
from mlir_ansor.tuner.stages.state import (HandBack, ModelForms, ModelIn, RunState,
                                          what_runs)
from mlir_ansor.tuner.stages.layout_choice import FLOW_TIMEOUT_S
from mlir_ansor.tuner.tasks import dispatch_keys, flow_source, tagged_dispatches
from mlir_ansor.tuner.toolchain import target_flags
from mlir_ansor.tuner.torch_ops import torch_counterpart, torch_op_seconds

T = TypeVar("T")
LIBRARY = "tuned_library.mlir"
REJECTED_LIBRARY = "tuned_library.rejected.mlir"
LIBRARY_FAILURES = "library_failures.log"  # in the run folder: each failed library build
# Torch's op per task: short repetitions (about 1 s a task), rounds interleaved.
TORCH_OP_TIMING = MeasureConfig(repetitions=3, min_time_s=0.02, warmup_s=0.05)


def find_culprit(entries: Sequence[T], fails: Callable[[Sequence[T]], bool]) -> T | None:
    """An entry that makes `fails` true on its own, given that all of `entries` together
    do and that the empty set does not (the caller checks that first: otherwise
    every half fails and an innocent entry is blamed), by halving (each probe is a whole
    check, not just a compile: a strategy that compiles but computes wrong results is
    found too). None if no half fails alone (only a combination fails)."""
    cands = list(entries)
    while len(cands) > 1:
        half, rest = cands[:len(cands) // 2], cands[len(cands) // 2:]
        if fails(half):
            cands = half
        elif fails(rest):
            cands = rest
        else:
            return None
    return cands[0] if cands else None


# A task under this share of the model's time (IREE's default, weighted by calls) has
# little at stake: only its best program races the default, over two rounds (about a
# quarter of the full re-time; BERT's six small dispatches took 4/5 of it).
LOW_STAKE_SHARE = 0.01
LOW_STAKE_ROUNDS = 2


def low_stake(state: RunState) -> set[str]:
    """Keys of the tunable tasks under LOW_STAKE_SHARE of the model's default time."""
    cost = {t.key: t.weight * state.defaults[t.key] for t in state.tunable
            if state.defaults.get(t.key)}
    total = sum(cost.values())
    return {k for k, c in cost.items() if total and c < LOW_STAKE_SHARE * total}


def retime_best(state: RunState) -> tuple[dict[str, tuple[float, float, object]],
                                           dict[str, SizeTimes]]:
    """Task key -> (default s, best s, best program) re-measured side by side; and for a
    dynamic task, the default and every candidate at each size sample (the dispatcher's
    choice). A low-stake task (`low_stake`) re-times its best program only."""
    out, at = {}, {}
    here = [r for r in state.records if state.context.holds(r)]
    elsewhere = [r for r in state.records if not state.context.holds(r)]
    small = low_stake(state)
    if small:
        state.report(Note(f"{len(small)} tasks under {LOW_STAKE_SHARE:.0%} of the model's "
                          f"time each: only their best program is re-timed, over "
                          f"{LOW_STAKE_ROUNDS} rounds"))
    for t in state.tunable:
        # This run's best, and the best measured elsewhere (timings of another device do
        # not rank against ours: both are measured again side by side).
        top = top_programs(here, t.key, state.opts.top_k)
        top += [p for p in top_programs(elsewhere, t.key, state.opts.top_k) if p not in top]
        rounds = state.opts.retime_rounds
        if t.key in small:
            top, rounds = top[:1], min(LOW_STAKE_ROUNDS, rounds)
        res = (state.measurers[t.key].remeasure(top, rounds=rounds,
                                                    margin=state.opts.min_speedup)
               if top else None)
        if res is None:
            continue
        ok = [(s, p) for s, p in zip(res.tuned, top) if s is not None]
        if ok:
            best_s, prog = min(ok, key=lambda x: x[0])
            out[t.key] = (res.default_s, best_s, prog)
            if t.dynamic and res.default_at:
                won = res.default_s > best_s * state.opts.min_speedup
                at[t.key] = SizeTimes(
                    dict(res.default_at),
                    tuple((p, dict(a)) for p, a in zip(top, res.tuned_at) if a),
                    prog if won else None)
    return out, at


def plan_model(state: RunState, m: ModelIn, at: dict[str, SizeTimes]
               ) -> tuple[SizePlan | None, str]:
    """The size dispatcher of a model (None: one kernel per task serves every size) and
    why there is none."""
    if m.dynamic is None:
        return None, ""
    if state.forms[m.name].small is not None:
        return None, ("no size dispatcher: the model already has static branches for its "
                      "smallest sizes (one kernel per task above them)")
    specs = [(d.symbol, (pos, d.dim)) for d, pos in zip(m.dynamic.dims, m.dynamic.positions)]
    axis = plan_axis(m.samples, m.dynamic.symbols, specs)
    if axis is None:
        return None, ("no size dispatcher: no dynamic symbol tells the size samples apart "
                      "(one kernel per task serves all sizes)")
    symbol, (arg, dim), size_of = axis
    keys = state.forms[m.name].plain_keys
    choices = {k: per_size_choice(v.along(size_of), state.opts.min_speedup)
               for k, v in at.items() if k in keys and v.default_at}
    if not choices:
        return None, ""
    cuts, per = plan_sizes(choices)
    if not cuts:
        return None, ""
    others = [s for s in m.dynamic.symbols if s != symbol]
    why = (f"the size dispatcher cuts along {symbol}; {', '.join(others)} vary within each "
           "branch" if others else "")
    return SizePlan(symbol, arg, dim, cuts, per, size_of), why


def planned_latency(state: RunState, key: str, plan: SizePlan, times: SizeTimes) -> float:
    """A task's latency with the dispatcher: at each size sample (by label), the time of
    what its branch runs there, weighed as the search weighed the samples."""
    at = {}
    for label, d in times.default_at.items():
        prog = plan.choices[key][plan.branch_of(plan.size_of[label])]
        at[label] = d if prog is None else next(a[label] for p, a in times.candidates
                                                if p == prog)
    return state.measurers[key].weighted_latency(at)


class _Export:
    """The library and model forms being handed back, revised per model as strategies
    that break it drop out (a strategy that fails in one model may serve another)."""

    def __init__(self, state: RunState, timed: dict, winners: dict[str, object],
                 plans: dict[str, SizePlan]):
        self.state, self.timed, self.winners, self.plans = state, timed, winners, plans
        # Sites are chosen on what would run if every winner kept its strategy (none where
        # the form without them won end to end).
        runs_s = what_runs(timed, winners, state.defaults)
        self.sites = {name: () if f.packing is not None and not f.packing.on else
                      tuple(choose_sites(f.alternatives, runs_s, state.opts.min_speedup))
                      for name, f in state.forms.items()}
        self.present: dict[str, frozenset[str]] = {}
        # Per dispatched model, (task key, branch tag or "", the dispatch's pattern) of
        # every dispatch.
        self.tagged: dict[str, list[tuple[str, str, str]]] = {}
        for m in state.models:
            self.write_model(m)
        self.entries: list[TunedEntry] = []
        self.entry_key: dict[str, str] = {}  # task id -> task key
        for t in state.tunable:
            if t.key in winners and any(t.key in self.untagged(m.name) for m in state.models):
                self._add(TunedEntry(t.task_id, t.task_mlir, t.ops, winners[t.key],
                                     t.view_mlir), t.key)
            for tag, pattern, prog in self._branch_programs(t):
                view = ("" if not t.view_mlir else pattern if t.view_mlir == t.task_mlir
                        else retag(t.view_mlir, pattern))
                self._add(TunedEntry(f"{t.task_id}_{tag}", pattern, t.ops, prog, view), t.key)
        self.excluded: dict[str, set[str]] = {m.name: set() for m in state.models}
        self.dropped: dict[str, str] = {}  # task id -> why

    def untagged(self, name: str) -> set[str]:
        """Task keys of a model's dispatches outside any size branch."""
        if name not in self.tagged:
            return set(self.present[name])
        return {k for k, tag, _ in self.tagged[name] if not tag}

    def _add(self, entry: TunedEntry, key: str) -> None:
        if entry.task_id not in self.entry_key:
            self.entries.append(entry)
            self.entry_key[entry.task_id] = key

    def _branch_programs(self, t) -> list[tuple[str, str, object]]:
        """(tag, tagged pattern, program) of each branch copy of task `t` in the dispatched
        models that runs a program of ours (a branch left to IREE's default has none)."""
        out = []
        for name, seen in self.tagged.items():
            plan = self.plans[name]
            for key, tag, pattern in seen:
                if key != t.key or not tag or not pattern:
                    continue
                i = branch_index(tag)
                prog = plan.choices[key][i] if key in plan.choices else self.winners.get(key)
                if prog is not None:
                    out.append((tag, pattern, prog))
        return out

    def rewritten(self, name: str) -> bool:
        """Whether the tuned form of the model differs from the imported one."""
        return self.layout(name).changed or name in self.plans

    def layout(self, name: str) -> ModelLayout:
        return self.state.forms[name].layout(self.sites[name])

    def write_model(self, m: ModelIn) -> None:
        st = self.state
        path = m.dir / "model_tuned.mlir"
        text = self.layout(m.name).apply((m.dir / "model.mlir").read_text())
        plan = self.plans.get(m.name)
        if plan is not None:
            text = branch_by_size(text, plan.arg, plan.dim, plan.cuts)
        if self.sites[m.name] or plan is not None:
            seen = tagged_dispatches(model_flow(text, path, st.opts.target, st.tools, 600,
                                                st.forms[m.name].flags))
            self.present[m.name] = frozenset(k for k, _, _ in seen)
            if plan is not None:
                self.tagged[m.name] = [(k, tag, d.pattern.task_mlir if d.pattern else "")
                                       for k, tag, d in seen]
        else:
            self.present[m.name] = st.forms[m.name].plain_keys
        path.write_text(text)
        save_layout(m.dir / "layout.json", self.layout(m.name))

    def mine(self, name: str) -> list[TunedEntry]:
        return [e for e in self.entries if self.entry_key[e.task_id] in self.present[name]
                and e.task_id not in self.excluded[name]]

    def kept(self, wins: dict[str, bool]) -> list[TunedEntry]:
        """The strategies of the models whose tuned module is handed back."""
        return [e for e in self.entries if any(e in self.mine(n) for n in wins if wins[n])]

    def drop(self, m: ModelIn, ids: set[str], why: str) -> None:
        self.excluded[m.name] |= ids
        self.dropped.update(dict.fromkeys(ids, why if self.state.single else
                                          f"{why} ({m.name})"))
        gone = {self.entry_key[i] for i in ids}
        alts = self.state.forms[m.name].alternatives
        keep = tuple(s for a in alts for s in a.sites  # no packed dispatch without its
                     if s in self.sites[m.name] and not gone & {k for k, _ in a.added})
        if keep != self.sites[m.name]:  # strategy: unpack
            self.sites[m.name] = keep
            self.write_model(m)


def write_library(path: Path, entries: Sequence[TunedEntry]) -> Path | None:
    if not entries:
        path.unlink(missing_ok=True)
        return None
    path.write_text(library_text(list(entries)))
    return path


def _also_at(sets: list[dict[str, int]], symbol: str, sizes: set[int]
             ) -> list[dict[str, int]]:
    """`sets` and one more per size of `symbol` they do not check yet (`with_sizes`)."""
    have = {s[symbol] for s in sets}
    return with_sizes(sets, symbol, sorted(sizes - have))


def model_e2e(state: RunState, ex: _Export, m: ModelIn,
              sizes_of: SizePlan | None = None, repairs: int | None = None) -> EndToEnd:
    """End-to-end check and timing of one model; drops the strategies that break it.
    `sizes_of`: the dispatcher whose branch ends are checked too (default: the model's).
    `repairs`: at most this many failed builds are repaired (each costs a bisection of
    whole-model builds) before a CompileError gives the form up; None: no limit."""
    cfg, tools = state.cfg, state.tools
    # IREE's local-sync device is a choice for CPU modules timed on this machine.
    sync_margin = state.opts.min_speedup if _cpu_timed_here(state) else None
    prebuilt = m.baseline_dir / "default.vmfb"
    probe_dir = m.dir / "e2e" / "bisect"
    checks, ends = [], []
    if m.dynamic is not None:
        # Timed at the check sizes, spread over the range (the speedup that decides the
        # hand-back is their geometric mean); branch ends are checked, not timed: they
        # crowd the small sizes (a dozen branches' ends would outweigh the spread) and
        # timing them was a quarter of the dynamic MLP's end-to-end step.
        sets = size_sets(m.dynamic)
        more = sets
        plan = sizes_of or ex.plans.get(m.name)
        if plan is not None:  # every branch is checked, at both of its ends
            lo, hi = m.dynamic.range_of(plan.symbol)
            more = _also_at(more, plan.symbol, {x for r in plan.ranges(lo, hi) for x in r})
        small = state.forms[m.name].small
        if small is not None:  # so is every static small-size branch, and the rest's start
            symbol = next(d.symbol for d, pos in zip(m.dynamic.dims, m.dynamic.positions)
                          if (pos, d.dim) == (small.arg, small.dim))
            lo, _ = m.dynamic.range_of(symbol)
            more = _also_at(more, symbol, {lo, *small.tops, *(t + 1 for t in small.tops)})
        for i, sizes in enumerate(more):
            label = ", ".join(f"{s}={v}" for s, v in sizes.items())
            (checks if i < len(sets) else ends).append(
                (label, m.dynamic.inputs_at(m.inputs, sizes, seed=i)))
    builds_alone: bool | None = None  # the form without any strategy of ours builds
    for attempt in range(len(ex.entries) + 1):  # each failed try drops a strategy or more
        mine = ex.mine(m.name)
        library = write_library(m.dir / LIBRARY, mine)
        try:
            return end_to_end(tools, m.model, m.inputs, m.dir / "model.mlir", library,
                              m.dir / "e2e", cfg, [strategy_name(e.task_id) for e in mine],
                              tuned_mlir=(m.dir / "model_tuned.mlir"
                                          if ex.rewritten(m.name) else None),
                              prebuilt_default=prebuilt, checks=checks, check_only=ends,
                              rounds=state.opts.e2e_rounds, flags=state.forms[m.name].flags,
                              sync_margin=sync_margin)
        except DefaultModuleError:
            raise  # IREE's own module: nothing of ours to drop
        except CompileError as err:
            if not mine:
                raise
            if repairs is not None and attempt >= repairs:
                raise CompileError(f"still failing after dropping {sorted(ex.dropped)}: "
                                   f"{str(err)[:200]}") from err
            named = ({e.task_id for e in mine if strategy_name(e.task_id) in err.strategies}
                     if isinstance(err, StrategiesFailed) else set())
            if isinstance(err, StrategiesNotApplied):
                # Matched alone, not inside the model: IREE's default stays there.
                drop = {e.task_id for e in mine if strategy_name(e.task_id) in err.missing}
                why = "not applied in the model: default kept"
            elif named:
                # IREE named the dispatches that failed: no bisection of model builds.
                drop = named
                why = "failed to compile inside the model: default kept"
            else:
                # The same references end_to_end used (torch's, or IREE's default's where
                # that differs from torch a little), at every checked size.
                default = m.dir / "e2e" / "default.vmfb"
                refs = []
                for i, xs in enumerate([m.inputs] + [x for _, x in [*checks, *ends]]):
                    d = probe_dir / f"check{i}"
                    paths = save_inputs(xs, d)
                    r, mg, _, _ = model_reference(tools, default, m.model, xs, paths, d, cfg)
                    refs.append((paths, r, mg, d))

                def fails(subset: Sequence[TunedEntry]) -> bool:
                    lib = write_library(probe_dir / "lib.mlir", subset)
                    try:
                        paths, r, mg, _ = refs[0]
                        check_tuned(tools, m.dir / "model_tuned.mlir", lib, probe_dir / "m.vmfb",
                                    cfg, [strategy_name(e.task_id) for e in subset],
                                    paths, r, mg, state.forms[m.name].flags)
                        for paths, r, mg, d in refs[1:]:  # the other sizes too
                            check_outputs(tools, probe_dir / "m.vmfb", paths, r, mg, d, cfg)
                        return False
                    except CompileError:
                        return True

                if builds_alone is None:  # (the same form each attempt: probed once)
                    builds_alone = not fails([])
                if not builds_alone:
                    # The form fails with no strategy of ours (IREE's own codegen, e.g. on
                    # a dispatch that took in a pad): bisecting would blame an innocent one.
                    raise CompileError(f"{m.name} fails to build or check in this form "
                                       f"with no tuned strategy (IREE's own codegen): "
                                       f"{str(err)[:200]}") from err
                culprit = find_culprit(mine, fails)
                drop = {culprit.task_id} if culprit else {e.task_id for e in mine}
                why = ("failed inside the model: default kept" if culprit else
                       "failed inside the model together with others: default kept")
            # The whole error, for a look later (the note keeps its start; a form that
            # loses may leave no folder behind).
            with (state.out / LIBRARY_FAILURES).open("a") as log:
                log.write(f"--- {m.name} ({m.dir.name}), dropping {sorted(drop)}:\n{err}\n")
            state.report(Note(f"the library failed on {m.name} ({str(err)[:200]}; in full in "
                              f"{LIBRARY_FAILURES}); exporting again without {sorted(drop)}"))
            ex.drop(m, drop, why)
    raise CompileError(f"the tuned library still fails on {m.name} after dropping "
                       f"{sorted(ex.dropped)}")


# What a size dispatcher's module is built against: the same model with one kernel per task.
WITHOUT_DISPATCHER = "without_dispatcher"


def _cpu_timed_here(state: RunState) -> bool:
    """Whether the run's modules are CPU modules timed on this machine."""
    return (get_target(state.opts.target).backend == "llvm-cpu" and state.runner is None
            and not state.tools.emulated)


def _in_folder(m: ModelIn, name: str) -> ModelIn:
    """`m` again in its folder's subfolder `name`, for another form of it to be exported,
    built and checked there: its imported model and IREE's baseline build copied in."""
    d = m.dir / name
    (d / "e2e" / "baseline").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(m.dir / "model.mlir", d / "model.mlir")
    if (m.baseline_dir / "default.vmfb").exists():
        shutil.copyfile(m.baseline_dir / "default.vmfb", d / "e2e" / "baseline" / "default.vmfb")
    return replace(m, dir=d)


def _without_dispatcher(state: RunState, plans: dict[str, SizePlan], single: dict,
                        winners: dict) -> tuple[_Export, dict, dict[str, Path]]:
    """A size dispatcher is not free: IREE runs each branch's copy of the dynamic work in a
    region of its own (a BERT layer's dispatcher of IREE's kernels alone: 0.6-1.2 ms more a
    call at 16-64 tokens, 15-20%). The models built again with one kernel per task, each
    in a folder of its own, checked and timed at the same sizes as with the dispatcher:
    (their export, end-to-end results, folders) by model name."""
    alts = [_in_folder(m, WITHOUT_DISPATCHER) for m in state.models]
    sub = replace(state, models=tuple(alts))
    ex = _Export(sub, single, winners, {})
    e2es = {a.name: model_e2e(sub, ex, a, sizes_of=plans[a.name]) for a in alts}
    return ex, e2es, {a.name: a.dir for a in alts}


WITH_PAD_FUSION = "with_pad_fusion"
PAD_FUSION_REPAIRS = 2  # failed builds of the form with pad fusion repaired before giving up


def _pad_fusion_pays(state: RunState, e2e: EndToEnd) -> bool:
    """Whether the one model of the run is worth building again with IREE's pad fusion
    (--pad-fusion auto): a static model timed on this machine whose tuned form has a pad
    that is not fused yet."""
    if state.opts.pad_fusion != "auto" or not state.single or not e2e.measured:
        return False
    m = state.models[0]
    return (_cpu_timed_here(state) and m.dynamic is None and state.opts.layout_rewrite
            and not state.forms[m.name].fused
            and "tensor.pad" in (m.dir / "model_tuned.mlir").read_text())


def _with_pad_fusion(state: RunState, timed: dict, winners: dict
                     ) -> tuple[_Export, EndToEnd]:
    """The one model built again with IREE's pad fusion (layouts.PAD_FUSION_FLAGS), in its
    folder's WITH_PAD_FUSION, checked and timed as the tuned form was: a padded conv then
    reads its padding in place, and its strategy (made for the unfused dispatch) no longer
    applies there and drops out (IREE's kernel runs it); the other strategies stay. Which
    wins depends on the tuning: IREE's fused depthwise conv beat our tuned one plus the
    pad's copy, a tuned grouped conv beats IREE's fused one 7x."""
    m = state.models[0]
    alt = _in_folder(m, WITH_PAD_FUSION)
    fused = replace(state.forms[m.name], pad_fusion=PadFusionChoice(True))
    # Its own dispatches: a conv that took its pad in is another task, and the strategy
    # made for it alone is not exported there (it failed the fused build, one model
    # compile per strategy).
    flow = flow_source(fused.base, state.opts.target, state.tools, FLOW_TIMEOUT_S,
                       fused.flags)
    fused = replace(fused, flow=flow, plain_keys=frozenset(dispatch_keys(flow)))
    sub = replace(state, models=(alt,), forms={**state.forms, m.name: fused})
    ex = _Export(sub, timed, winners, {})
    # An alternative form, not the run's result: given up after a few repairs. On the NCHW
    # ResNet-50 one IREE dispatch failed with every strategy in turn, one bisection of
    # whole-model builds each (48 minutes into the run it had dropped 5 of 34).
    return ex, model_e2e(sub, ex, alt, repairs=PAD_FUSION_REPAIRS)


OTHER_FORM_FOLDER = "other_form"


def _other_form_pays(state: RunState, e2e: EndToEnd) -> bool:
    """Whether the one model of the run has an other form (layout_choice.other_form) whose
    dispatches were tuned, to be built and timed end to end against the form tuned first."""
    m = state.models[0]
    return (state.single and e2e.measured and _cpu_timed_here(state)
            and state.forms[m.name].other is not None)


def _with_other_form(state: RunState, timed: dict, winners: dict
                     ) -> tuple[_Export, EndToEnd, ModelForms]:
    """The one model in its other form (one choice the other way, formed at the layout
    stage: layout_choice.other_form) with the strategies of that form's dispatches, in its
    folder's OTHER_FORM_FOLDER, checked and timed as the tuned form was: (its export,
    end-to-end result, forms; the first form is their other form)."""
    m = state.models[0]
    f = state.forms[m.name]
    alt = _in_folder(m, OTHER_FORM_FOLDER)
    a, d = f.other.alternative, f.other.default_s  # seen from the other form: they swap
    other = replace(f.other.forms, other=replace(
        f.other, forms=replace(f, other=None), alternative=Alternative((), a.added, a.removed),
        tasks=(), default_s=d[::-1] if d else None))
    sub = replace(state, models=(alt,), forms={**state.forms, m.name: other})
    ex = _Export(sub, timed, winners, {})
    return ex, model_e2e(sub, ex, alt, repairs=PAD_FUSION_REPAIRS), other


def _recorded(f: ModelForms, flips: str, why: str,
              speedups: tuple[float, float] | None = None) -> ModelForms:
    """`f` with how the choice `flips` was decided: `why`, and the tuned model's speedups
    end to end (without, with: Winograd or data tiling) where both forms were built."""
    c = f.choice(flips)
    return f.with_choice(flips, replace(c, why=why, speedups=speedups or c.speedups))


WITHOUT_PACKING = "without_packing"


def _unpacked_pays(state: RunState, ex: _Export, e2e: EndToEnd) -> bool:
    """Whether the one model of the run has packed weight sites, so that the form without
    them is worth building and timing end to end against it."""
    m = state.models[0]
    return (state.single and e2e.measured and _cpu_timed_here(state)
            and bool(ex.sites[m.name]))


def _without_packing(state: RunState, timed: dict, winners: dict
                     ) -> tuple[_Export, EndToEnd, ModelForms]:
    """The one model without packed weight sites (the plain tasks' strategies where they
    won), in its folder's WITHOUT_PACKING, checked and timed as the tuned form was: (its
    export, end-to-end result, forms with packing off)."""
    m = state.models[0]
    alt = _in_folder(m, WITHOUT_PACKING)
    plain = replace(state.forms[m.name], packing=PackingChoice(False, (0.0, 0.0)))
    sub = replace(state, models=(alt,), forms={**state.forms, m.name: plain})
    ex = _Export(sub, timed, winners, {})
    return ex, model_e2e(sub, ex, alt, repairs=PAD_FUSION_REPAIRS), plain


FUSED_AWAY = "IREE's pad fusion put a pad into this dispatch: IREE's kernel runs it"


def _fused_drops(fused: _Export, plain: _Export, name: str) -> None:
    """Say why a strategy of the unfused form (the tasks the report lists) is not in the
    form with IREE's pad fusion: its dispatch took in a pad (another task there), or it
    dropped out of that build only."""
    mine = {e.task_id for e in fused.mine(name)}
    for e in plain.mine(name):
        if e.task_id not in mine and e.task_id not in fused.dropped:
            fused.dropped[e.task_id] = FUSED_AWAY
    for task_id, why in fused.dropped.items():
        if task_id not in plain.dropped and why != FUSED_AWAY:
            fused.dropped[task_id] = f"{FUSED_AWAY} ({why})"


def _move_forms(src: Path, dst: Path) -> None:
    """The tuned form, library, layout and end-to-end results of `src` in place of `dst`'s
    (IREE's baseline build and its reference outputs stay)."""
    for name in ("model_tuned.mlir", LIBRARY, "layout.json"):
        if (src / name).exists():
            shutil.copyfile(src / name, dst / name)
        else:
            (dst / name).unlink(missing_ok=True)
    for item in (src / "e2e").iterdir():
        if item.name == "baseline":
            continue
        target = dst / "e2e" / item.name
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
        (shutil.copytree if item.is_dir() else shutil.copyfile)(item, target)


def torch_per_task(state: RunState) -> dict[str, tuple[str, float]]:
    """Task key -> (torch's op for the task's contraction, its time in torch eager), for
    the report's roofline: static tasks in the model's own layout, measured on this
    machine natively, whose contraction one torch op computes (`torch_ops`)."""
    if state.runner is not None or state.tools.emulated or state.proxied:
        return {}
    out = {}
    for t in state.tunable:
        # (A packed task's operands are in our blocked layout, not one a torch user has.)
        op = None if t.dynamic or t.layout_of else torch_counterpart(t.ops)
        if op is not None:
            out[t.key] = (op.describe(), torch_op_seconds(op, TORCH_OP_TIMING))
    return out


def hand_back(state: RunState) -> RunState:
    opts, clock = state.opts, state.clock
    with clock.stage("hand back/re-time"):
        best, at = retime_best(state)
    with clock.stage("hand back/torch ops"):
        torch = torch_per_task(state)  # right after, on the same machine state
    timed = {k: (d, b) for k, (d, b, _) in best.items()}
    # Keep a strategy only where it clearly beat IREE's default on this machine.
    winners = {k: p for k, (d, b, p) in best.items() if d > b * opts.min_speedup}
    # Ranked by llvm-mca, never timed: IREE's default is handed back unless the user
    # accepts unmeasured strategies (the records keep them for a later --reuse).
    withhold = state.proxied and not opts.allow_unmeasured
    withheld = tuple(t.task_id for t in state.tunable if withhold and t.key in winners)
    if withheld:
        line = (f"Withheld, unmeasured: {len(withheld)} strategies ranked above IREE's default "
                f"by llvm-mca (no runner on the device), tasks {', '.join(withheld)}; to hand "
                f"them back without searching again: --allow-unmeasured --trials 0 --reuse "
                f"{state.out / 'records.jsonl'} --out ANOTHER_FOLDER")
        state.report(Note(line))
        state = replace(state, notes=state.notes + (line,))
    if withhold:
        winners = {}
    plans: dict[str, SizePlan] = {}
    single = dict(timed)  # one kernel per task over every size
    for m in state.models:
        # (a size dispatcher's branches take programs too: none of them when withheld)
        plan, why = (None, "") if withhold else plan_model(state, m, at)
        if why:
            state.report(Note(f"{m.name}: {why}"))
        if plan is not None:
            plans[m.name] = plan
            for key in plan.choices:  # what the branches run, weighed
                timed[key] = (timed[key][0], planned_latency(state, key, plan, at[key]))
    ex = _Export(state, timed, winners, plans)
    with clock.stage("hand back/end to end"):
        e2es = {m.name: model_e2e(state, ex, m) for m in state.models}
    compared: dict[str, tuple[float, float]] = {}
    rejected: dict[str, SizePlan] = {}
    if plans and all(m.name in plans and e2es[m.name].measured for m in state.models):
        # (Strategies are shared between models: with or without dispatchers, all alike.)
        try:
            with clock.stage("hand back/without dispatcher"):
                alt, alt_e2es, folders = _without_dispatcher(state, plans, single, winners)
        except (CompileError, DefaultModuleError) as e:  # the dispatcher form stands
            state.report(Note(f"the forms without a size dispatcher failed ({e}): the "
                              "dispatcher is kept"))
            alt = None
        if alt is not None:
            compared = {n: (e2es[n].speedup, alt_e2es[n].speedup) for n in e2es}
            for n, (a, b) in compared.items():
                state.report(Note(f"{n}: with the size dispatcher {a:.2f}x IREE's default "
                                  f"over the sizes, with one kernel per task {b:.2f}x"))
            # The dispatcher stays only where it clearly wins (the export margin).
            if not any(a > b * opts.min_speedup for a, b in compared.values()):
                rejected, plans, timed, ex, e2es = plans, {}, single, alt, alt_e2es
                for m in state.models:  # the forms without it take the folder's place
                    _move_forms(folders[m.name], m.dir)
            for d in folders.values():
                shutil.rmtree(d, ignore_errors=True)
    if not plans and _other_form_pays(state, e2es[state.models[0].name]):
        m = state.models[0]
        folder = m.dir / OTHER_FORM_FOLDER
        f = state.forms[m.name]
        flips = f.other.flips
        this, that = f.form_name(flips), f.other.forms.form_name(flips)
        try:
            with clock.stage(f"hand back/{flips}"):
                alt_ex, alt_e2e, other = _with_other_form(state, timed, winners)
        except (CompileError, DefaultModuleError) as e:  # the form tuned first stands
            state.report(Note(f"the {that} form failed ({e}): not taken"))
            why = f.choice(flips).why
            f = _recorded(f, flips, f"{why}; the other form failed end to end" if why
                          else "the other form failed end to end")
        else:
            now, then = e2es[m.name].speedup, alt_e2e.speedup
            speedups = (then, now) if f.is_on(flips) else (now, then)  # without, with
            take = then > now * opts.min_speedup  # the form tuned first is kept on a tie
            state.report(Note(f"{m.name}: the {this} form {now:.2f}x IREE's default end to "
                              f"end, the {that} form {then:.2f}x: "
                              + ("the latter taken" if take else "the former kept")))
            if take:
                ex, e2es, f = alt_ex, {m.name: alt_e2e}, other
                _move_forms(folder, m.dir)
            f = _recorded(f, flips, "decided end to end on the tuned forms", speedups)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        state = replace(state, forms={**state.forms, m.name: f})
        ex.state = state
    if not plans and _unpacked_pays(state, ex, e2es[state.models[0].name]):
        m = state.models[0]
        folder = m.dir / WITHOUT_PACKING
        try:
            with clock.stage("hand back/without packing"):
                alt_ex, alt_e2e, plain = _without_packing(state, timed, winners)
        except (CompileError, DefaultModuleError) as e:  # the packed form stands
            state.report(Note(f"the form without packed weights failed ({e}): not taken"))
        else:
            now, then = e2es[m.name].speedup, alt_e2e.speedup
            take = then > now * opts.min_speedup  # the packed form is kept on a tie
            state.report(Note(f"{m.name}: with {len(ex.sites[m.name])} packed weight sites "
                              f"{now:.2f}x IREE's default end to end, without {then:.2f}x: "
                              + ("unpacked" if take else "packed kept")))
            f = replace(plain if take else state.forms[m.name],
                        packing=PackingChoice(not take, (now, then)))
            if take:
                ex, e2es = alt_ex, {m.name: alt_e2e}
                _move_forms(folder, m.dir)
            state = replace(state, forms={**state.forms, m.name: f})
            ex.state = state
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    if not plans and _pad_fusion_pays(state, e2es[state.models[0].name]):
        m = state.models[0]
        folder = m.dir / WITH_PAD_FUSION
        try:
            with clock.stage("hand back/pad fusion"):
                alt_ex, alt_e2e = _with_pad_fusion(state, timed, winners)
        except (CompileError, DefaultModuleError) as e:  # the unfused form stands
            state.report(Note(f"the form with IREE's pad fusion failed ({e}): not taken"))
        else:
            speedups = (e2es[m.name].speedup, alt_e2e.speedup)
            on = decide_pad_fusion(1 / speedups[0], 1 / speedups[1], opts.min_speedup).on
            state.report(Note(f"{m.name}: with IREE's pad fusion {speedups[1]:.2f}x "
                              f"IREE's default end to end, without {speedups[0]:.2f}x"
                              f": {'taken' if on else 'not taken'}"))
            choice = PadFusionChoice(on, "decided end to end on the tuned forms", speedups)
            if on:
                _fused_drops(alt_ex, ex, m.name)
                ex, e2es = alt_ex, {m.name: alt_e2e}
                _move_forms(folder, m.dir)
            state = replace(state, forms={**state.forms, m.name: replace(
                state.forms[m.name], pad_fusion=choice)})
            ex.state = state
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    wins = {}
    flags = target_flags(opts.target)
    cl_io = state.opts.io_layout == "channels-last"
    changed = {m.name: (bool(e2es[m.name].applied) or ex.layout(m.name).changed
                        or bool(e2es[m.name].device)) for m in state.models}
    for m in state.models:
        # Unmeasured (--allow-unmeasured): what the proxy ranked above IREE's default.
        wins[m.name] = changed[m.name] and (not e2es[m.name].measured
                                            or e2es[m.name].speedup >= 1.0)
        lib = m.dir / LIBRARY
        if wins[m.name]:
            write_build_script(m.dir, (*flags, *ex.layout(m.name).flags),
                               device=e2es[m.name].device, channels_last_io=cl_io)
        else:  # IREE's default is handed back: nothing may apply the library by accident
            if lib.exists():
                lib.replace(m.dir / REJECTED_LIBRARY)
            write_build_script(m.dir, flags, model_file="model.mlir",
                               channels_last_io=cl_io)
    kept = ex.kept(wins)
    for e in ex.entries:
        if e not in kept:
            ex.dropped.setdefault(e.task_id, "won alone; the tuned model was slower end to "
                                             "end: IREE's default handed back")
    library = None
    if not state.single and kept:  # all models' strategies, for a shared IREE build
        library = write_library(state.out / LIBRARY, kept)
    elif state.single and (state.models[0].dir / LIBRARY).exists():
        library = state.models[0].dir / LIBRARY
    hb = HandBack(timed, tuple(kept), {e.task_id: ex.entry_key[e.task_id] for e in kept},
                  dict(ex.sites), dict(ex.present), library, e2es, dict(ex.dropped), wins,
                  dict(plans), torch, rejected, compared, changed, withheld,
                  winners=frozenset(winners))
    return replace(state, handback=hb)
