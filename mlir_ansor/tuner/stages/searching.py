"""Stage 4: spend the trials. The gradient task scheduler picks a task per round, the
policy (evolutionary search on the cost model, or random) proposes programs, the measurer
builds, validates and times them, and every record is appended at once.

Records of another device kind or IREE version (a `--reuse` file, or an output folder
moved to another machine) train the cost model and compete for export, where they are
measured again; they never count as measured here: not in the budget, not as a task's
best, not as "already measured".

The evolutionary policy ranks every task's programs with one cost model, started from a
saved or shipped model (`--cost-model`) and saved to cost_model.json at the end."""
from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path

import xgboost as xgb

from mlir_ansor.errors import AnsorError
from mlir_ansor.tuner.layouts import initial_latency
from mlir_ansor.tuner.cost_model import CostModelError, load_booster, shipped_model
from mlir_ansor.tuner.evolution import SharedEvolution
from mlir_ansor.tuner.policies import make_policy
from mlir_ansor.tuner.records import Record, RecordStore, best_by_task
from mlir_ansor.tuner.reporters import Measured, TrialsPlanned
from mlir_ansor.tuner.scheduler import (Latency, SchedulerConfig, TaskScheduler, faster_form,
                                        geomean_speedup, latency_requirements, summed,
                                        weighted_latency)
from mlir_ansor.tuner.search import (SearchConfig, iree_seeds, kernel_seeds, loop_signature,
                                     tune_tasks, with_hints, with_seeds)
from mlir_ansor.tuner.stages.state import RunState
from mlir_ansor.tuner.tasks import Task, dispatch_calls


def load_records(state: RunState) -> tuple[list[Record], RecordStore]:
    """This run's records (a resumed run's included) and the reused ones, of this target
    and of the tunable tasks."""
    store = RecordStore(state.out / "records.jsonl")
    keys = {t.key for t in state.tunable}
    records = [r for r in store.load() if r.target == state.opts.target]
    for f in state.opts.reuse:
        if not Path(f).is_file():
            raise AnsorError(f"records file to reuse not found: {f}")
        records += [r for r in RecordStore(f).load()
                    if r.target == state.opts.target and r.task_key in keys]
    return records, store


def starting_model(state: RunState) -> tuple[xgb.Booster | None, str]:
    """The cost model the search starts from, and a line for the report saying which. A
    model named with --cost-model must load; one found by "auto" is skipped (and the line
    says why) when it was saved for other features or another device kind."""
    choice, kind = state.opts.cost_model, state.context.device_kind
    if choice == "none":
        return None, "cost model: trained from this run's records only (--cost-model none)"
    if choice != "auto":
        return load_booster(Path(choice), kind), f"cost model: started from {choice}"
    found = [(Path(f).parent / "cost_model.json", f"beside --reuse {f}", False)
             for f in state.opts.reuse if (Path(f).parent / "cost_model.json").is_file()]
    shipped = shipped_model(kind)
    if shipped is not None:
        found.append((shipped, f"shipped for {shipped.stem}", True))
    skipped = []
    for path, why, same_arch in found:
        try:
            return (load_booster(path, kind, same_arch),
                    f"cost model: started from {path} ({why})")
        except CostModelError as e:
            skipped.append(str(e))
    return None, "; ".join(["cost model: trained from this run's records only"] + skipped)


def model_latencies(state: RunState) -> dict[str, Latency]:
    """Per model, its latency from its tasks' best: the calls of each of its tunable tasks
    summed, or where it is tuned in two forms (layout_choice.other_form), the soft minimum
    of the two forms' (scheduler.faster_form; calls per inference counted in each form's
    own flow, and what each form leaves to IREE where that differs): the hand-back keeps
    one of them. A task with no IREE default time starts at a
    guess (1 s) that would make its form look far behind: it is counted beside the soft
    minimum, not in it."""
    tunable = {t.key for t in state.tunable}
    out: dict[str, Latency] = {}
    for name, f in state.forms.items():
        ws = {k: n for k, n in ((k, state.usage[k].get(name)) for k in tunable) if n}
        if f.other is None:
            out[name] = weighted_latency(ws)
            continue
        first, other = dispatch_calls(f.flow), dispatch_calls(f.other.forms.flow)
        unknown = {k for k in tunable if not state.defaults.get(k)}
        pick = lambda c: {k: n for k, n in c.items() if k in tunable and k not in unknown}
        # Packed weights' dispatches (in neither flow) are the first form's alone; per site
        # the faster of its plain and its packed dispatches counts (the hand-back's choice).
        packed = {k: n for k, n in ws.items() if k not in first and k not in other}
        choices = [(pick(dict(alt.removed)), pick(dict(alt.added)))
                   for alt in f.alternatives]
        replaced = {k for plain, _ in choices for k in plain}
        apart = {k: n for k, n in {**first, **packed}.items() if k in unknown}
        apart.update({k: max(n, apart.get(k, 0)) for k, n in other.items() if k in unknown})
        a, b = pick(first), pick(other)
        fixed, scale = (0.0, 0.0), 1.0
        if f.other.default_s is not None and not unknown & (first.keys() | other.keys()):
            # What each form's tasks leave out at IREE's defaults. Dispatches timed alone
            # do not sum to the model's time (BERT's form without data tiling: 24.3 ms
            # of tasks, 29.6 end to end): the form its tasks cover most gives the ratio,
            # and each form's time beyond its tasks is counted at that ratio. (Taken as
            # a difference, that 5.3 ms was time the form would keep whatever its tasks
            # ran at; removed from both forms as common, it left the data-tiled form at a
            # third of its 7.9 ms, and the other form got no trial after its first.)
            # (The first form's own flow: what IREE's default build of it ran.)
            sums = [sum(n * state.defaults[k] for k, n in c.items()) for c in (a, b)]
            e2e = f.other.default_s
            if any(sums) and all(e2e):  # (a form may leave everything to IREE)
                ref = max((0, 1), key=lambda i: sums[i] / e2e[i])
                scale = e2e[ref] / sums[ref]
                fixed = (max(0.0, e2e[0] - scale * sums[0]),
                         max(0.0, e2e[1] - scale * sums[1]))
        a = {k: n for k, n in a.items() if k not in replaced}
        out[name] = _plus(faster_form(a, b, fixed=fixed, scale=scale, first_choices=choices),
                          weighted_latency(apart))
    return out


def _plus(a: Latency, b: Latency) -> Latency:
    return lambda g: a(g) + b(g)


def objective(state: RunState):
    """f1-f4 of the paper over the models (f4: f1 with early stopping)."""
    opts = state.opts
    per_model = model_latencies(state)
    if opts.objective in ("f1", "f4"):
        return summed(per_model)
    if opts.objective == "f2":
        return latency_requirements(per_model, dict.fromkeys(per_model,
                                                             opts.latency_requirement_s))
    defaults = {k: state.defaults.get(k) or 0.0 for k in (t.key for t in state.tunable)}
    reference = {name: lat(defaults) or 1.0 for name, lat in per_model.items()}
    return geomean_speedup(per_model, reference)


def search(state: RunState) -> RunState:
    opts, tunable = state.opts, state.tunable
    records, store = load_records(state)
    here = [r for r in records if state.context.holds(r)]
    keys = [t.key for t in tunable]
    key_set = set(keys)
    done = sum(1 for r in store.load() if r.task_key in key_set and state.context.holds(r))
    state.report(TrialsPlanned(opts.trials, done))
    by_key = {t.key: t for t in tunable}

    def on_record(task: Task, r: Record) -> None:
        best = best_by_task(here + [r], state.context).get(task.key)
        if state.context.holds(r):
            here.append(r)
        state.report(Measured(task.task_id, r, best.latency_s if best else None))

    # (An other form's dispatch starts at most at what it replaces, as a packed one does.)
    alts = [a for f in state.forms.values()
            for a in (*f.alternatives,
                      *([f.other.alternative] if f.other else []))]
    cap = initial_latency(alts, state.defaults)
    early = opts.early_stop or (3 if opts.objective == "f4" else 0)
    scheduler = TaskScheduler(
        keys, {k: by_key[k].flops for k in keys}, {k: loop_signature(by_key[k]) for k in keys},
        {k: min(state.defaults.get(k) or 1.0, cap.get(k, math.inf)) for k in keys},
        objective(state), SchedulerConfig(strategy=opts.scheduler, seed=opts.seed,
                                          early_stop=early))
    base, model_note = starting_model(state)
    factory = make_policy(opts.policy, base)
    policy = with_seeds(factory, *([kernel_seeds] if opts.kernel_seeds else []),
                        *([iree_seeds] if opts.iree_seeds else []))
    left, started = max(0, opts.trials - done), time.monotonic()
    spent = tune_tasks(tunable, state.measurers, store,
                       SearchConfig(trials=left, batch=opts.batch, seed=opts.seed,
                                    time_limit_s=60.0 * opts.search_minutes),
                       records, on_record, with_hints(policy, opts.hints), scheduler,
                       state.context, state.clock)
    notes = state.notes
    if opts.search_minutes and spent < left and \
            time.monotonic() - started >= 60.0 * opts.search_minutes:
        notes += (f"search stopped at --search-minutes {opts.search_minutes:g}: {spent} of "
                  f"the {left} trials planned were measured",)
    if isinstance(factory, SharedEvolution):
        model = factory.model
        if model is not None and model.trained:
            model.save(state.out / "cost_model.json", state.context.device_kind)
        notes += (model_note, factory.line()) + \
            ((factory.pruner.line(),) if factory.pruner else ())
    return replace(state, records=tuple(records), notes=notes)
