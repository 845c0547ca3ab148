"""Training a cost model from earlier runs' output folders, and judging it on workloads it
never saw (leave one workload out), or judging a saved model on another machine's records.

An output folder holds records.jsonl and tasks.json (per task key, the function its ops
were read from: the task-forming stage writes it), so features can be computed again
without compiling anything. A workload is one task: every record of one task key.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import xgboost as xgb

from mlir_ansor.dialect_helpers.linalg_info import OpInfo, analyze_task
from mlir_ansor.errors import UsageError
from mlir_ansor.tuner.cost_model import (CostModel, CostModelConfig, normalized_throughputs,
                                         pairwise_accuracy)
from mlir_ansor.tuner.records import Record, RecordStore


@dataclass(frozen=True)
class TrainingTask:
    key: str
    name: str  # folder/task id, for tables
    ops: tuple[OpInfo, ...]
    records: tuple[Record, ...]

    @property
    def valid(self) -> int:
        return sum(1 for r in self.records if r.ok)


def describe(ops: Sequence[OpInfo]) -> str:
    """The task's heaviest op and its loop extents, e.g. "conv_2d_nchw_fchw 1x64x56x56x64x3x3"."""
    op = max(ops, key=lambda o: o.flops)
    return f"{op.op_name.split('.')[-1]} {'x'.join(map(str, op.extents))}"


def load_corpus(folders: Sequence[Path], device_kind: str) -> list[TrainingTask]:
    """Every task of the folders with its records measured on `device_kind` (a task seen in
    several folders is one workload; a program measured twice keeps its first record)."""
    ops_of: dict[str, tuple[OpInfo, ...]] = {}
    names: dict[str, str] = {}
    records: dict[str, dict[str, Record]] = {}
    for folder in folders:
        index, recs = Path(folder) / "tasks.json", Path(folder) / "records.jsonl"
        if not index.is_file() or not recs.is_file():
            raise UsageError(f"{folder}: not a tuning output folder (needs tasks.json and "
                             "records.jsonl; tasks.json is written by runs since the shared "
                             "cost model)")
        for t in json.loads(index.read_text()):
            if t["key"] not in ops_of:
                ops = ops_of[t["key"]] = tuple(analyze_task(t["ops_mlir"]))
                names[t["key"]] = f"{Path(folder).name}/{t['task_id']} {describe(ops)}"
        for r in RecordStore(recs).load():
            if r.task_key in ops_of and r.device_kind == device_kind:
                records.setdefault(r.task_key, {}).setdefault(r.program_key, r)
    return [TrainingTask(k, names[k], ops_of[k], tuple(rs.values())) for k, rs in records.items()]


def train(corpus: Sequence[TrainingTask], cfg: CostModelConfig = CostModelConfig()) -> CostModel:
    model = CostModel(cfg)
    for w in corpus:
        model.add_task(w)
    model.fit_records([r for w in corpus for r in w.records])
    return model


def trials_to_near_best(order: np.ndarray, truth: np.ndarray, within: float) -> int:
    """Measurements, in `order`, until a program within `within` of the best is found."""
    good = truth[order] >= 1.0 - within
    return int(np.argmax(good)) + 1


@dataclass(frozen=True)
class HeldOut:
    name: str
    programs: int
    pairwise: float  # on the workload's programs, the model never trained on it
    model_trials: int  # measurements to a program within 5% of the best, in predicted order
    random_trials: float  # expected measurements in random order


def _ranked(w: TrainingTask, model: CostModel, within: float) -> HeldOut:
    """How `model` ranks the measured programs of `w`."""
    truth = normalized_throughputs(w.records)
    pred = model.predict(w, [r.to_program() for r in w.records])
    order = np.argsort(-pred, kind="stable")
    k = int((truth >= 1.0 - within).sum())
    return HeldOut(w.name, len(w.records), pairwise_accuracy(pred, truth),
                   trials_to_near_best(order, truth, within), (len(truth) + 1) / (k + 1))


def leave_one_out(corpus: Sequence[TrainingTask], cfg: CostModelConfig = CostModelConfig(),
                  min_valid: int = 16, within: float = 0.05) -> list[HeldOut]:
    """For each workload with `min_valid` valid records: a model trained on all the others
    ranks its measured programs."""
    out = []
    for w in corpus:
        if w.valid < min_valid:
            continue
        model = train([o for o in corpus if o.key != w.key], cfg)
        model.add_task(w)
        out.append(_ranked(w, model, within))
    return out


def judge(corpus: Sequence[TrainingTask], base: xgb.Booster, min_valid: int = 16,
          within: float = 0.05) -> list[HeldOut]:
    """For each workload with `min_valid` valid records: a saved model (e.g. the shipped
    one, trained on another machine), not trained on any of these records, ranks its
    measured programs."""
    out = []
    for w in corpus:
        if w.valid < min_valid:
            continue
        model = CostModel(base=base)
        model.add_task(w)
        out.append(_ranked(w, model, within))
    return out


def summary_table(rows: Sequence[HeldOut], first: str = "held-out workload") -> str:
    """`first`: the heading of the workload column."""
    lines = [f"{first:52s} {'programs':>8s} {'pairwise':>8s} "
             f"{'to 5% of best: model':>20s} {'random':>7s}"]
    for r in rows:
        lines.append(f"{r.name[:52]:52s} {r.programs:8d} {r.pairwise:8.3f} {r.model_trials:20d} "
                     f"{r.random_trials:7.1f}")
    if rows:
        acc = np.nanmean([r.pairwise for r in rows])
        saved = math.exp(np.mean([math.log(r.random_trials / r.model_trials) for r in rows]))
        lines.append(f"mean pairwise accuracy {acc:.3f}; measurements to within 5% of the "
                     f"best: {saved:.2f}x fewer than random order (geometric mean)")
    return "\n".join(lines)
