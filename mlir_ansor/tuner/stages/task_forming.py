"""Stage 3: one task per distinct dispatch over all models (and their packed and other
forms), each prepared: IREE's default build of it gives the payload a strategy sees, the
reference outputs and the baseline time."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from mlir_ansor.errors import OutputError, UnsupportedDispatch
from mlir_ansor.tuner.measure import TaskMeasurer
from mlir_ansor.tuner.stages.state import RunState
from mlir_ansor.tuner.tasks import SizeSample, Task, extract_tasks


def merge_tasks(per_model: dict[str, list[Task]]) -> tuple[list[Task], dict[str, dict]]:
    """One task per distinct dispatch over all models (ids t0, t1, ... in first-seen order);
    weight = calls per inference summed over the models. Also: weight per model per task."""
    merged: dict[str, Task] = {}
    usage: dict[str, dict[str, int]] = {}
    for name, tasks in per_model.items():
        for t in tasks:
            usage.setdefault(t.key, {})[name] = t.weight
            if t.key not in merged:
                merged[t.key] = t
    out = [replace(t, task_id=f"t{i}", weight=sum(usage[t.key].values()))
           for i, t in enumerate(merged.values())]
    return out, usage


def with_samples(task: Task, samples: tuple[SizeSample, ...]) -> Task:
    """A dynamic task with its model's size samples (`ModelIn.samples`); a dynamic task of
    a model without --dynamic ranges is left to IREE. Only the samples the dispatch can run
    at (`Task.runs_at`: a dispatch of a small-size branch reads buffers as large as its
    branch's top) are kept."""
    if not task.dynamic or not task.tunable:
        return task
    if not samples:
        return replace(task, skip_reason="dynamic shapes without --dynamic ranges: left to "
                                         "IREE's default codegen")
    runnable = tuple(s for s in samples if task.runs_at(s))
    if not runnable:
        return replace(task, skip_reason="its buffers are smaller than every size sample "
                                         f"(workload bounds {dict(task.ordinal_bounds)}): "
                                         "left to IREE's default codegen")
    return replace(task, samples=runnable)


def form_tasks(state: RunState) -> RunState:
    samples = {m.name: m.samples for m in state.models}
    per_model = {name: [with_samples(t, samples.get(name, ()))
                        for t in [*extract_tasks(f.flow, state.opts.target),
                                  *f.packed_tasks,
                                  *(f.other.tasks if f.other else ())]]
                 for name, f in state.forms.items()}
    tasks, usage = merge_tasks(per_model)
    measurers: dict[str, TaskMeasurer] = {}
    defaults: dict[str, float | None] = {}
    for i, t in enumerate(tasks):
        if not t.tunable:
            continue
        # Built with the codegen flags of the first model form it came from (a task of a
        # pad-fused form is one no other form has).
        first = next(iter(usage[t.key]))
        cfg = replace(state.cfg, compile_flags=state.forms[first].codegen_flags)
        m = TaskMeasurer(t, state.out / "tasks", state.tools, cfg, seed=state.opts.seed,
                         builder=state.builder, runner=state.runner, clock=state.clock,
                         keep_best=state.opts.top_k)  # (re-timed before export)
        try:
            m.prepare()  # re-reads the task on the payload codegen will see
        except UnsupportedDispatch as e:  # no baseline or reference: left to IREE
            tasks[i] = replace(t, skip_reason=str(e))
            continue
        tasks[i] = m.task
        if m.task.tunable:
            measurers[t.key] = m
            defaults[t.key] = m.time_default()
    write_task_index(state.out / "tasks.json", [m.task for m in measurers.values()])
    return replace(state, tasks=tuple(tasks), usage=usage, measurers=measurers,
                   defaults=defaults)


def write_task_index(path: Path, tasks: list[Task]) -> None:
    """What a cost model needs to learn from this folder's records later (`tools/
    train_cost_model.py`): per task key, the function its ops were read from."""
    try:
        path.write_text(json.dumps([{"key": t.key, "task_id": t.task_id, "target": t.target,
                                     "ops_mlir": t.view_mlir or t.task_mlir}
                                    for t in tasks], indent=1))
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror}") from e
