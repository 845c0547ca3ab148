"""The tuning job behind the CLI: import, form tasks, measure, search, export, report."""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tqdm import tqdm

from mlir_ansor.errors import AnsorError, FrontendError
from mlir_ansor.transform_scripts.library import TunedEntry, library_text, strategy_name
from mlir_ansor.tuner.e2e import end_to_end
from mlir_ansor.tuner.frontend import import_model, load_factory
from mlir_ansor.tuner.measure import MeasureConfig, TaskMeasurer
from mlir_ansor.tuner.records import Record
from mlir_ansor.tuner.report_plot import plot_tuning_curveStore, best_by_task
from mlir_ansor.tuner.policies import POLICIES
from mlir_ansor.tuner.records import Record
from mlir_ansor.tuner.report_plot import plot_tuning_curve
from mlir_ansor.tuner.scheduler import SchedulerConfig, TaskScheduler, weighted_latency
from mlir_ansor.tuner.search import SearchConfig, loop_signature, tune_tasks
from mlir_ansor.tuner.tasks import Task, flow_source, extract_tasks
from mlir_ansor.tuner.toolchain import Toolchain, target_flags


@dataclass(frozen=True)
class TuneOptions:
    model: str = "resnet_block"
    trials: int = 96
    target: str = "llvm-cpu"
    out: Path = Path("ansor_out")
    seed: int = 0
    batch: int = 4
    policy: str = "evolution"
    scheduler: str = "gradient"  # or "round_robin"
    top_k: int = 3  # best candidates per task re-timed side by side before export


def _fmt_ms(s: float | None) -> str:
    return f"{s * 1e3:.3f}" if s else "-"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths))
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _top_programs(records: list[Record], task_key: str, k: int):
    """The `k` fastest distinct valid programs of a task, by their search-time latency."""
    ok = sorted((r for r in records if r.task_key == task_key and r.ok),
                key=lambda r: r.latency_s)
    out, seen = [], set()
    for r in ok:
        if r.program_key not in seen:
            seen.add(r.program_key)
            out.append(r.to_program())
        if len(out) == k:
            break
    return out


@dataclass(frozen=True)
class TuneResult:
    report: str  # the printed tables
    out: Path
    library: Path | None  # the exported transform library (None: nothing beat IREE)
    tuned_vmfb: Path  # the compiled tuned model


def run(opts: TuneOptions, factory: Callable[[], tuple] | None = None) -> TuneResult:
    """The whole job. `factory` (returns (model, inputs)) replaces loading `opts.model`."""
    target_flags(opts.target)  # unknown target: fail before any work
    if opts.trials < 0:
        raise AnsorError("--trials must be >= 0")
    if opts.policy not in POLICIES:
        raise AnsorError(f"unknown policy {opts.policy!r} (choose from {sorted(POLICIES)})")
    factory = factory or load_factory(opts.model)
    try:
        model, inputs = factory()
    except Exception as e:
        raise FrontendError(f"model factory failed: {type(e).__name__}: {e}") from e
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    tools = Toolchain.find()
    cfg = MeasureConfig(target=opts.target)

    print(f"[1/5] importing {opts.model} with torch-mlir", flush=True)
    model_mlir = out / "model.mlir"
    model_mlir.write_text(import_model(model, inputs))

    print("[2/5] forming IREE dispatches (tasks)", flush=True)
    tasks = extract_tasks(flow_source(model_mlir, opts.target, tools, 600))
    measurers: dict[str, TaskMeasurer] = {}
    defaults: dict[str, float | None] = {}
    for i, t in enumerate(tqdm(tasks, desc="baselines", unit="task")):
        if not t.tunable:
            continue
        m = TaskMeasurer(t, out / "tasks", tools, cfg, seed=opts.seed)
        m.prepare()  # re-reads the task on the payload codegen will see
        tasks[i] = m.task
        if m.task.tunable:
            measurers[t.key] = m
            defaults[t.key] = m.time_default()
    tunable = [t for t in tasks if t.tunable]

    print(f"[3/5] tuning {len(tunable)} of {len(tasks)} tasks, {opts.trials} trials", flush=True)
    store = RecordStore(out / "records.jsonl")
    records = [r for r in store.load() if r.target == opts.target]
    keys = {t.key for t in tunable}
    done = sum(1 for r in records if r.task_key in keys)
    bar = tqdm(total=opts.trials, initial=min(done, opts.trials), desc="trials", unit="trial")

    def on_record(task: Task, r) -> None:
        bar.update(1)
        best = best_by_task(records).get(task.key)
        bar.set_postfix_str(f"{task.task_id} {r.status} best={_fmt_ms(best and best.latency_s)}ms")

    keys = [t.key for t in tunable]
    # f1: the model's latency; each task starts at IREE's default (kept where nothing wins).
    scheduler = TaskScheduler(
        keys, {t.key: t.flops for t in tunable}, {t.key: loop_signature(t) for t in tunable},
        {k: defaults.get(k) or 1.0 for k in keys},
        weighted_latency({t.key: t.weight for t in tunable}),
        SchedulerConfig(strategy=opts.scheduler, seed=opts.seed))
    tune_tasks(tunable, measurers, store,
               SearchConfig(trials=max(0, opts.trials - done), batch=opts.batch, seed=opts.seed),
               records, on_record, POLICIES[opts.policy], scheduler)
    bar.close()

    print(f"[4/5] top {opts.top_k} programs per task against IREE's default, side by side; "
          "exporting", flush=True)
    timed: dict[str, tuple[float, float]] = {}
    entries = []
    for t in tunable:
        top = _top_programs(records, t.key, opts.top_k)
        res = measurers[t.key].remeasure(top) if top else None
        if res is None:
            continue
        default_s, tuned = res
        ok = [(s, p) for s, p in zip(tuned, top) if s is not None]
        if not ok:
            continue
        best_s, best_p = min(ok, key=lambda x: x[0])
        timed[t.key] = (default_s, best_s)
        # Keep a strategy only where it beat IREE's default on this machine.
        if best_s < default_s:
            entries.append(TunedEntry(t.task_id, t.task_mlir, t.ops, best_p))
    library = None
    if entries:
        library = out / "tuned_library.mlir"
        library.write_text(library_text(entries))

    print("[5/5] end to end: torch eager, IREE default, tuned (side by side)", flush=True)
    e2e = end_to_end(tools, model, inputs, model_mlir, library, out / "e2e", cfg,
                     [strategy_name(e.task_id) for e in entries])
    tuned_ids = {e.task_id for e in entries}

    kept = {t.key: (min(timed[t.key]) if t.task_id in tuned_ids else timed[t.key][0])
            if t.key in timed else defaults.get(t.key) for t in tasks}
    total = sum(t.weight * kept[t.key] for t in tasks if kept[t.key]) or 1.0
    rows = []
    for t in tasks:
        d, b = timed.get(t.key, (defaults.get(t.key), None))
        n = sum(1 for r in records if r.task_key == t.key)
        status = "tuned" if t.task_id in tuned_ids else (t.skip_reason or "default kept")
        if t.tunable and t.key not in timed:
            status = "not tuned (no trials left)" if n == 0 else "no valid program"
        speed = f"{d / b:.2f}x" if (b and d) else "-"
        share = f"{100 * t.weight * kept[t.key] / total:.1f}%" if kept[t.key] else "-"
        rows.append([t.task_id, t.name[:48], t.weight, f"{t.flops / 1e6:.1f}", n, share,
                     _fmt_ms(d), _fmt_ms(b), speed, status[:40]])
    task_table = _table(["task", "dispatch", "weight", "MFLOP", "trials", "share",
                         "default ms", "tuned ms", "speedup", "status"], rows)
    plot_tuning_curve(out / "tuning_curve.png", records, {t.key: t.weight for t in tunable},
                      {k: v for k, v in defaults.items() if v}, {
                          "IREE default": e2e.default_s, "tuned": e2e.tuned_s,
                          "torch eager": e2e.torch_s},
                      f"{opts.model}: {len(records)} measurements")
    e2e_table = _table(["", "torch eager (2 threads)", "IREE default", "tuned"],
                       [["latency ms", _fmt_ms(e2e.torch_s), _fmt_ms(e2e.default_s),
                         _fmt_ms(e2e.tuned_s)],
                        ["speedup vs IREE default", f"{e2e.default_s / e2e.torch_s:.2f}x", "1.00x",
                         f"{e2e.default_s / e2e.tuned_s:.2f}x"]])
    same = "" if library else " (no strategy beat IREE's default: tuned = default module)"
    report = (f"Per task ({opts.target}):\n{task_table}\n\nEnd to end (model {opts.model}, "
              f"outputs match torch, max abs error {e2e.max_error:.2e}){same}:\n{e2e_table}\n\n"
              f"Artifacts in {out}: records.jsonl, model.mlir, "
              f"{'tuned_library.mlir, ' if library else ''}e2e/tuned.vmfb, report.json, "
              "tuning_curve.png")
    (out / "report.txt").write_text(report + "\n")
    (out / "report.json").write_text(json.dumps({
        "model": opts.model, "target": opts.target,
        "tasks": [dict(zip(["task", "dispatch", "weight", "mflop", "trials", "share",
                            "default_ms", "tuned_ms", "speedup", "status"], r)) for r in rows],
        "e2e": {"torch_s": e2e.torch_s, "default_s": e2e.default_s, "tuned_s": e2e.tuned_s,
                "applied": list(e2e.applied), "max_abs_error": e2e.max_error}}, indent=2))
    return TuneResult(report, out, library,
                      out / "e2e" / ("tuned.vmfb" if library else "default.vmfb"))
