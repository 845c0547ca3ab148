"""`python -m mlir_ansor.offline` — tune for a device the tuner cannot reach, with batches.

  prepare MODEL --target T --trials N --out DIR [--wheel WHL]...
      import MODEL, form its dispatches for T, sample N programs over the tunable tasks
      (random annotation of each task's sketches, the same space the search draws from),
      compile them here (each must compile and show our strategy attached), and write
      DIR/batch: IREE's default and every candidate, with inputs and the expected outputs
      (computed here: IREE's llvm-cpu build of the same dispatch).
  (on the device)  python DIR/batch/run_batch.py [--install | --tools DIR]
  next DIR --trials N [--results FILE] [--wheel WHL]...
      import the last round's results and write the next round, DIR/batch_rK: per task the
      programs evolutionary search ranks best on a cost model trained on every result so
      far (the search's later rounds); run it on the device like the first. Repeatable.
  finish DIR [--results FILE]
      import the results of every round (records.jsonl, keyed by the device the batch
      reports), keep per task the candidate that beat its round's IREE default the most
      (by 3% and in every repetition), write
      tuned_library.mlir and build.sh, compile the model with it for T (every kept strategy
      must be applied), and write DIR/e2e_batch: the default and the tuned model, with
      torch's outputs.
  (on the device)  python DIR/e2e_batch/run_batch.py ...
  report DIR [--results FILE]
      the end-to-end speed the device measured, tuned against IREE's default.

Without results nothing is claimed: `finish` needs the device's results, `report` the
device's end-to-end results. Exit codes as `mlir_ansor.tune` (docs/cli.md).
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlir_ansor.errors import AnsorError, CompileError, UsageError, print_error
from mlir_ansor.sketch_passes.annotation import annotate
from mlir_ansor.sketch_passes.program import Program
from mlir_ansor.targets import TargetError, get_target
from mlir_ansor.transform_scripts.build_script import write_build_script
from mlir_ansor.transform_scripts.library import TunedEntry, library_text, strategy_name
from mlir_ansor.tuner.compile_check import check_programs, codegen_task
from mlir_ansor.tuner.e2e import compile_model, save_inputs, torch_reference
from mlir_ansor.tuner.evolution import SharedEvolution
from mlir_ansor.tuner.emulation import runtime_version
from mlir_ansor.tuner.frontend import import_model, load_factory
from mlir_ansor.tuner.measure import MeasureConfig, TaskMeasurer
from mlir_ansor.tuner.offline import (RESULTS, BatchItem, BatchResults, import_records,
                                      read_results,
                                      write_batch)
from mlir_ansor.tuner.records import RecordStore, environment
from mlir_ansor.tuner.runner import Timing
from mlir_ansor.tuner.stages.importing import call_factory
from mlir_ansor.tuner.status import Status
from mlir_ansor.tuner.tasks import Task, extract_tasks, flow_source
from mlir_ansor.tuner.toolchain import Toolchain, target_flags

STATE = "offline.json"
MIN_SPEEDUP = 1.03


@dataclass(frozen=True)
class Prepared:
    """A task as `finish` needs it again: its codegen view for the target."""

    task: Task
    default: Path


def _device(target: str) -> str:
    return "cuda" if get_target(target).backend == "cuda" else "local-task"


def _tasks(model_mlir: Path, target: str, work: Path, tools: Toolchain) -> list[Prepared]:
    """The tunable dispatches of the model for `target`, each re-read on the payload that
    target's codegen sees (deterministic: `finish` forms them again)."""
    flow = flow_source(model_mlir, target, tools, 900)
    out = []
    for t in extract_tasks(flow, target):
        if not t.tunable:
            continue
        ct = codegen_task(t, work, tools, target)
        if ct.tunable:
            out.append(Prepared(ct, work / t.task_id / "default.vmfb"))
    return out


def prepare(model: str, target: str, trials: int, out: Path, seed: int = 0,
            wheels: tuple[Path, ...] = ()) -> Path:
    try:
        tgt = get_target(target)
    except TargetError as e:
        raise UsageError(str(e)) from None
    if trials < 1:
        raise UsageError(f"--trials must be >= 1 (got {trials})")
    for w in wheels:
        if not Path(w).is_file():
            raise UsageError(f"--wheel {w}: no such file")
    tools = Toolchain.find()
    out.mkdir(parents=True, exist_ok=True)
    net, inputs = call_factory(model, load_factory(model))
    (out / "model.mlir").write_text(import_model(net, inputs))
    work = out / "tasks"
    tasks = _tasks(out / "model.mlir", target, work, tools)
    if not tasks:
        raise UsageError(f"{model}: no tunable dispatch for {target}")
    rng = random.Random(seed)

    def draw(p: Prepared, n: int) -> list[Program]:
        progs, keys = [], set()
        for _ in range(n * 20):
            if len(progs) == n:
                break
            prog = annotate(p.task.ops, rng.choice(p.task.sketches), rng, target=tgt)
            if prog.key not in keys:
                keys.add(prog.key)
                progs.append(prog)
        return progs

    progs = {p.task.key: draw(p, n) for p, n in zip(tasks, _shares(trials, len(tasks)))}
    batch, bid = _write_round(out, "batch", tasks, progs, target, seed, tools, wheels)
    (out / STATE).write_text(json.dumps({"model": model, "target": target, "seed": seed,
                                         "batch": bid, "rounds": ["batch"]}, indent=1))
    return batch


def _shares(trials: int, n_tasks: int) -> list[int]:
    return [trials // n_tasks + (1 if i < trials % n_tasks else 0) for i in range(n_tasks)]


def _write_round(out: Path, name: str, tasks: list[Prepared], progs: dict[str, list[Program]],
                 target: str, seed: int, tools: Toolchain, wheels: tuple[Path, ...] = ()
                 ) -> tuple[Path, str]:
    """Compile `progs` (per task key) for `target`, and write the batch `out/name` with
    IREE's default of every task (each round times its own defaults: timings from
    different runs do not compare); returns its folder and id."""
    items, cfg, work = [], MeasureConfig(), out / "tasks"
    for p in tasks:
        t = p.task
        # Inputs and expected outputs: IREE's llvm-cpu build of the same dispatch, here.
        host = TaskMeasurer(t, out / "reference", tools, cfg, seed=seed)
        host.prepare()
        pt = host.points[0]
        items.append(BatchItem(f"{t.task_id}_default", p.default, pt.inputs, pt.reference,
                               pt.magnitude, t.key, None, "default"))
        mine = progs.get(t.key, [])
        for j, (prog, b) in enumerate(zip(mine, check_programs(t, mine, work, tools,
                                                                 target))):
            if b.status == Status.OK:
                items.append(BatchItem(f"{t.task_id}_c{j}", b.artifact, pt.inputs, pt.reference,
                                       pt.magnitude, t.key, prog.to_json(), prog.key))
            else:
                print(f"{t.task_id} candidate {j}: {b.status}: {b.error[:120]}",
                      file=sys.stderr)
    batch = out / name
    bid = write_batch(batch, items, target=target, device=_device(target),
                      iree_runtime=runtime_version(), timing=Timing(), rtol=cfg.rtol,
                      atol=cfg.atol, wheels=wheels)
    n_cand = sum(1 for it in items if it.program is not None)
    print(f"batch {bid}: {n_cand} candidates and {len(tasks)} defaults of {len(tasks)} tasks "
          f"for {target} in {batch}\non the device: python run_batch.py [--install | --tools "
          f"DIR]; then: python -m mlir_ansor.offline next|finish {out}")
    return batch, bid


def next_round(out: Path, trials: int, results: Path | None = None,
               wheels: tuple[Path, ...] = ()) -> Path:
    """Import the last round's results and write the next round's batch: per task, the
    programs evolutionary search ranks best on a cost model trained on every result so far
    (the search's later rounds, one batch each)."""
    st = _state(out)
    if trials < 1:
        raise UsageError(f"--trials must be >= 1 (got {trials})")
    rounds = st.get("rounds", ["batch"])
    last = out / rounds[-1]
    res = read_results(last, results)
    if results is not None and results.resolve() != (last / RESULTS).resolve():
        shutil.copyfile(results, last / RESULTS)  # `finish` reads every round's results
    tools = Toolchain.find()
    store = RecordStore(out / "records.jsonl")
    import_records(res, store, st["target"], environment()["iree"])
    records = [r for r in store.load() if r.device_kind == res.device_kind]
    tasks = _tasks(out / "model.mlir", st["target"], out / "tasks", tools)
    seed = st["seed"] + len(rounds)
    search = SharedEvolution()
    policies = [search(p.task, seed) for p in tasks]  # every task known before training
    measured = {r.program_key for r in records}
    progs = {p.task.key: pol.propose(n, measured, records)
             for p, pol, n in zip(tasks, policies, _shares(trials, len(tasks)))}
    name = f"batch_r{len(rounds) + 1}"
    batch, bid = _write_round(out, name, tasks, progs, st["target"], seed, tools, wheels)
    st.update(rounds=[*rounds, name], batch=bid)
    (out / STATE).write_text(json.dumps(st, indent=1))
    print(search.line())
    return batch


def _state(out: Path) -> dict:
    try:
        return json.loads((out / STATE).read_text())
    except (OSError, ValueError):
        raise UsageError(f"{out}: no {STATE} (run `prepare` first)") from None


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*headers), fmt.format(*["-" * w for w in widths]),
                      *[fmt.format(*map(str, r)) for r in rows]])


def finish(out: Path, results: Path | None = None) -> str:
    st = _state(out)
    rounds = st.get("rounds", ["batch"])
    tools = Toolchain.find()
    store = RecordStore(out / "records.jsonl")
    new: list = []
    kinds: set[str] = set()
    by_task: dict[str, dict] = {}
    for k, name in enumerate(rounds):
        # `results` is the last round's file; earlier rounds' were copied beside them.
        res: BatchResults = read_results(out / name, results if k == len(rounds) - 1 else None)
        kinds.add(res.device_kind)
        if len(kinds) > 1:
            raise UsageError(f"the rounds of {out} ran on different devices ({sorted(kinds)}): "
                             "their timings do not compare")
        new += import_records(res, store, st["target"], environment()["iree"])
        defaults = {e["task_key"]: r for e, r in res.items.values()
                    if e["program"] is None and r["status"] == "ok"}
        for entry, r in res.items.values():
            key = entry["task_key"]
            d = by_task.setdefault(key, {"default": None, "best": None})
            if entry["program"] is None or r["status"] != "ok" or key not in defaults:
                continue
            base = defaults[key]
            ratio = base["latency_s"] / r["latency_s"]
            if d["best"] is None or ratio > d["best"][0]:
                # Against the default timed in the same round: rounds can run on different
                # days and machines of one kind.
                d["best"] = (ratio, r["latency_s"], entry, r.get("samples_s") or
                             [r["latency_s"]], base.get("samples_s") or [base["latency_s"]])
                d["default"] = base["latency_s"]
        for key, base in defaults.items():
            d = by_task[key]
            if d["default"] is None:
                d["default"] = base["latency_s"]
    prepared = {p.task.key: p for p in _tasks(out / "model.mlir", st["target"], out / "tasks",
                                                tools)}
    rows, entries = [], []
    for key, d in by_task.items():
        p = prepared.get(key)
        if p is None:
            raise CompileError(f"task {key[:12]} of the batch is not formed again from "
                               "model.mlir (another IREE version?)")
        # A win must beat its round's default median by MIN_SPEEDUP and hold in every
        # repetition: on a GPU a small dispatch's time is mostly the call's fixed cost,
        # whose jitter is as large as the gain (seen on an H200: 1.09x per dispatch, 0.84x
        # end to end).
        best = d["best"]
        won = (best is not None and best[0] > MIN_SPEEDUP and max(best[3]) < min(best[4]))
        if won:
            entries.append(TunedEntry(p.task.task_id, p.task.task_mlir, p.task.ops,
                                      Program.from_json(best[2]["program"]),
                                      p.task.view_mlir))
        fmt = (lambda s: f"{s * 1e3:.3f}" if s is not None else "-")
        rows.append([p.task.task_id, fmt(d["default"]), fmt(best and best[1]),
                     f"{best[0]:.2f}x" if best else "-",
                     "tuned" if won else "default kept"])
    flags = target_flags(st["target"])
    lib = out / "tuned_library.mlir"
    cfg = MeasureConfig(target=st["target"])
    if entries:
        lib.write_text(library_text(entries))
        applied = compile_model(tools, out / "model.mlir", out / "model_tuned.vmfb", cfg, lib)
        missing = {strategy_name(e.task_id) for e in entries} - applied
        if missing:
            raise CompileError(f"tuned strategies not applied to the model: {sorted(missing)}")
        (out / "model_tuned.mlir").write_text((out / "model.mlir").read_text())
        write_build_script(out, flags)
    else:
        lib.unlink(missing_ok=True)
        write_build_script(out, flags, model_file="model.mlir")
    compile_model(tools, out / "model.mlir", out / "model_default.vmfb", cfg, None)
    net, inputs = call_factory(st["model"], load_factory(st["model"]))
    refs, mags = torch_reference(net, inputs)
    d = out / "e2e_data"
    ins = save_inputs(inputs, d)
    r_paths = []
    for k, (r, m) in enumerate(zip(refs, mags)):
        np.save(d / f"ref{k}.npy", r)
        np.save(d / f"mag{k}.npy", np.abs(m))
        r_paths.append((d / f"ref{k}.npy", d / f"mag{k}.npy"))
    e2e = [BatchItem("model_default", out / "model_default.vmfb", tuple(ins),
                     tuple(r for r, _ in r_paths), tuple(m for _, m in r_paths))]
    if entries:
        e2e.append(BatchItem("model_tuned", out / "model_tuned.vmfb", tuple(ins),
                             tuple(r for r, _ in r_paths), tuple(m for _, m in r_paths)))
    write_batch(out / "e2e_batch", e2e, target=st["target"], device=_device(st["target"]),
                iree_runtime=runtime_version(), timing=Timing(), rtol=cfg.model_rtol,
                atol=cfg.atol)
    text = (f"Batch {res.batch_id} (round {len(rounds)}) ran on {res.device_kind} "
            f"({res.device}); {len(new)} "
            f"records imported into {store.path}\nPer task (ms measured on the device):\n"
            + _table(rows, ["task", "default ms", "best ms", "speedup", "status"])
            + f"\n{len(entries)} strategies in {lib.name if entries else '(none)'}; build.sh "
              f"builds the {'tuned' if entries else 'default'} module for {st['target']}.\n"
              f"End to end: run {out / 'e2e_batch'}/run_batch.py on the device, then "
              f"python -m mlir_ansor.offline report {out}")
    (out / "report.txt").write_text(text + "\n")
    return text


def report(out: Path, results: Path | None = None) -> str:
    _state(out)
    res = read_results(out / "e2e_batch", results)
    got = {name: r for name, (_, r) in res.items.items()}
    bad = {n: r["error"] for n, r in got.items() if r["status"] != "ok"}
    if bad:
        raise CompileError(f"end-to-end batch failed on the device: {bad}")
    d = got["model_default"]["latency_s"]
    t = got.get("model_tuned", got["model_default"])["latency_s"]
    text = (f"End to end on {res.device_kind} ({res.device}): IREE default {d * 1e3:.3f} ms, "
            f"tuned {t * 1e3:.3f} ms, {d / t:.2f}x; both matched torch on the device")
    with open(out / "report.txt", "a") as f:
        f.write(text + "\n")
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mlir_ansor.offline", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("prepare")
    pp.add_argument("model")
    pp.add_argument("--target", required=True)
    pp.add_argument("--trials", type=int, default=32)
    pp.add_argument("--out", type=Path, required=True)
    pp.add_argument("--seed", type=int, default=0)
    pp.add_argument("--wheel", type=Path, action="append", default=[],
                    help="an iree-base-runtime wheel for the device's Python (repeatable)")
    nx = sub.add_parser("next")
    nx.add_argument("out", type=Path)
    nx.add_argument("--trials", type=int, default=32)
    nx.add_argument("--results", type=Path, default=None)
    nx.add_argument("--wheel", type=Path, action="append", default=[])
    for name in ("finish", "report"):
        sp = sub.add_parser(name)
        sp.add_argument("out", type=Path)
        sp.add_argument("--results", type=Path, default=None)
    args = p.parse_args(argv)
    try:
        if args.cmd == "prepare":
            prepare(args.model, args.target, args.trials, args.out, args.seed,
                    tuple(args.wheel))
        elif args.cmd == "next":
            next_round(args.out, args.trials, args.results, tuple(args.wheel))
        elif args.cmd == "finish":
            print(finish(args.out, args.results))
        else:
            print(report(args.out, args.results))
    except AnsorError as e:
        return print_error(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
