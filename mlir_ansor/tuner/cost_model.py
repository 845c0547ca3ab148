"""The learned cost model (paper §5.2; TVM's XGBModel): one XGBoost model for the programs
of every task of a target.

Features are per statement and mean the same in every task (`features.py`); a program's
score is the sum of its statements' predictions. Labels are throughputs normalized per task
to [0, 1] (each task's best measured = 1, failures 0), so one model learns from every
task's records and ranks the programs of a task it has never measured from the first round.
The loss is the squared error of the summed score, weighted by the label, so the model is
accurate where it matters: on the fast programs; and by (mean records per task / the
task's records) ** `task_balance`, so a few tasks with many records do not decide how every
other task is ranked (at 0.5 a task with 16x another's records weighs 4x as much, not 16x;
a task with few records weighs more per record, its labels noisier for it). It is refit
from scratch on all records after every `retrain_every` new results (the data is small). A
model saved by an earlier run (`--reuse`) or shipped with the package (`pretrained/`) is
the base: the run's trees are boosted on top of it, and until the run has enough valid
results the base alone ranks.
Without a base and enough data it predicts random scores.
"""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np
import xgboost as xgb

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.errors import UsageError
from mlir_ansor.sketch_passes.program import Program
from mlir_ansor.tuner.adapt import adaptation, size_scales
from mlir_ansor.tuner.features import FEATURE_NAMES, program_features
from mlir_ansor.tuner.records import Record
from mlir_ansor.tuner.tasks import middle_sample

# A saved model is only valid for the feature columns it was trained on.
FEATURE_SCHEMA = "1-" + hashlib.sha256(",".join(FEATURE_NAMES).encode()).hexdigest()[:12]
_SCHEMA_ATTR, _TARGET_ATTR = "mlir_ansor_feature_schema", "mlir_ansor_target"


class Workload(Protocol):
    """What the model needs of a task: a key (programs are unique within it) and its ops
    (a dynamic task's at its nominal size; `size_scales` then gives the size samples)."""

    key: str
    ops: Sequence[OpInfo]


def size_scales_of(task: Workload) -> tuple[tuple[float, float], ...]:
    """A dynamic task's size samples as (scale against the nominal size, weight); () for a
    static one (or a workload without samples)."""
    samples = getattr(task, "samples", ())
    if not samples or not getattr(task, "dynamic", False):
        return ()
    return size_scales(samples, middle_sample(samples))


@dataclass(frozen=True)
class CostModelConfig:
    min_valid: int = 16  # valid measurements (over all tasks) before the run's own fit
    rounds: int = 200
    rounds_on_base: int = 60  # trees the run adds on top of a saved or shipped model
    max_depth: int = 6
    eta: float = 0.2
    min_weight: float = 0.05  # weight of failed / very slow programs in the loss
    retrain_every: int = 8  # new results (of any task) between fits
    # Per-task weight (mean records per task / the task's records) ** task_balance: 0 weighs
    # every record alike (large corpora of one task decide the trees), 1 every task alike.
    task_balance: float = 0.5
    seed: int = 0


class CostModelError(UsageError):
    """A saved cost model that cannot be used (unreadable, other features or target)."""


def normalized_throughputs(records: Sequence[Record], flops: float = 1.0) -> np.ndarray:
    """Per-record throughput / best throughput (0 for failures)."""
    thr = np.array([flops / r.latency_s if r.ok else 0.0 for r in records], dtype=np.float64)
    best = thr.max() if len(thr) else 0.0
    return thr / best if best > 0 else thr


class _Packed:
    """Rows of many programs stacked, with the program each row belongs to."""

    def __init__(self, feats: Sequence[np.ndarray]):
        self.x = np.concatenate(feats) if feats else np.zeros((0, 1), np.float32)
        self.group = np.repeat(np.arange(len(feats)), [len(f) for f in feats])
        self.n = len(feats)

    def sums(self, row_values: np.ndarray) -> np.ndarray:
        return np.bincount(self.group, weights=row_values, minlength=self.n)


SHIPPED = Path(__file__).parent / "pretrained"


def _arch(device_kind: str) -> str:
    return device_kind.split("-")[0]  # x86_64-avx512 -> x86_64


def shipped_model(device_kind: str) -> Path | None:
    """The model shipped in the package for a device kind (`python -m
    mlir_ansor.train_cost_model`), else one shipped for another kind of the same
    architecture (x86_64-avx2 for x86_64-avx512: the run's own trees correct it)."""
    exact = SHIPPED / f"{device_kind}.json"
    if exact.is_file():
        return exact
    return next(iter(sorted(SHIPPED.glob(f"{_arch(device_kind)}-*.json"))), None)


def load_booster(path: Path, target: str, same_arch: bool = False) -> xgb.Booster:
    """A model saved by `CostModel.save` for `target` (with `same_arch`, for any kind of
    its architecture) with today's feature columns."""
    try:
        booster = xgb.Booster(model_file=str(path))
    except (OSError, xgb.core.XGBoostError) as e:
        raise CostModelError(f"cost model {path}: cannot be read ({str(e).splitlines()[0]})")
    schema, saved_for = booster.attr(_SCHEMA_ATTR), booster.attr(_TARGET_ATTR)
    if schema != FEATURE_SCHEMA:
        raise CostModelError(f"cost model {path}: feature schema {schema!r}, this version "
                             f"computes {FEATURE_SCHEMA!r}")
    if saved_for != target and not (same_arch and saved_for and
                                    _arch(saved_for) == _arch(target)):
        raise CostModelError(f"cost model {path}: trained for target {saved_for!r}, not "
                             f"{target!r}")
    return booster


def saved_for(booster: xgb.Booster) -> str | None:
    """The target a saved model was trained for (`CostModel.save`)."""
    return booster.attr(_TARGET_ATTR)


class CostModel:
    """XGBoost pack-sum model of the programs of every task it was told about."""

    def __init__(self, cfg: CostModelConfig = CostModelConfig(),
                 base: xgb.Booster | None = None):
        self.cfg = cfg
        self.base = base
        self.booster: xgb.Booster | None = None
        self.tasks: dict[str, Workload] = {}
        self.rng = np.random.default_rng(cfg.seed)
        self._cache: dict[tuple[str, str], np.ndarray] = {}
        self._rows: dict[str, dict] = {}  # per task: rows of ops other than the root
        self._adapt: dict[tuple[str, str], float] = {}
        self._fitted_on = -1  # results (of known tasks) at the last fit; -1 = never fit
        self.train_s = 0.0  # wall time spent fitting (the report's "train")

    def add_task(self, task: Workload) -> None:
        self.tasks[task.key] = task

    def features(self, task: Workload, program: Program) -> np.ndarray:
        key = (task.key, program.key)
        f = self._cache.get(key)
        if f is None:
            f = program_features(task.ops, program,
                                 rows_seen=self._rows.setdefault(task.key, {}))
            self._cache[key] = f
        return f

    def adaptation(self, task: Workload, program: Program) -> float:
        """DietCode's f_adapt of the program over the task's size samples (1.0 static)."""
        key = (task.key, program.key)
        a = self._adapt.get(key)
        if a is None:
            a = adaptation(task.ops, program, size_scales_of(task))
            self._adapt[key] = a
        return a

    @property
    def trained(self) -> bool:
        return self.booster is not None or self.base is not None

    @property
    def own_fit(self) -> bool:
        """Whether the run's own records trained it (not only a saved or shipped base)."""
        return self.booster is not None

    def fit(self, samples: Sequence[tuple[Workload, Program]], labels: np.ndarray,
            sample_weights: np.ndarray | None = None) -> None:
        """Train from scratch (on top of the base, if any) on programs and their labels
        (each program's loss times its `sample_weights`, 1 when None)."""
        labels = np.asarray(labels, dtype=np.float64)
        feats = [self.features(t, p) for t, p in samples]
        # Keep the features of the training programs only: the candidates scored since the
        # last fit would otherwise pile up for the whole run (features are pure, so this
        # changes no prediction).
        self._cache = {(t.key, p.key): f for (t, p), f in zip(samples, feats)}
        if int((labels > 0).sum()) < self.cfg.min_valid:
            self.booster = None
            return
        packed = _Packed(feats)
        weights = np.maximum(labels, self.cfg.min_weight)
        if sample_weights is not None:
            weights = weights * np.asarray(sample_weights, dtype=np.float64)
        row_label = labels[packed.group]
        row_weight = weights[packed.group]

        def pack_sum_square_error(preds: np.ndarray, _: xgb.DMatrix):
            # d/d(row) of w * (sum_rows(program) - y)^2: every row of a program gets the
            # program's residual.
            residual = packed.sums(preds)[packed.group] - row_label
            return row_weight * residual, row_weight

        dtrain = xgb.DMatrix(packed.x, label=row_label)
        params = {"max_depth": self.cfg.max_depth, "eta": self.cfg.eta, "min_child_weight": 0,
                  "verbosity": 0, "seed": self.cfg.seed, "nthread": 1,
                  "base_score": 0.0, "tree_method": "hist"}
        if self.base is None:
            self.booster = xgb.train(params, dtrain, num_boost_round=self.cfg.rounds,
                                     obj=pack_sum_square_error)
        else:  # the run's trees correct the base's predictions on this run's programs
            self.booster = xgb.train(params, dtrain, num_boost_round=self.cfg.rounds_on_base,
                                     obj=pack_sum_square_error, xgb_model=self.base.copy())

    def fit_records(self, records: Sequence[Record]) -> None:
        """Fit on the records of the known tasks, labels normalized per task."""
        start = time.monotonic()
        by_task: dict[str, list[Record]] = {}
        for r in records:
            if r.task_key in self.tasks:
                by_task.setdefault(r.task_key, []).append(r)
        samples: list[tuple[Workload, Program]] = []
        labels: list[np.ndarray] = []
        share: list[np.ndarray] = []
        mean_records = float(np.mean([len(v) for v in by_task.values()])) if by_task else 1.0
        for key, recs in by_task.items():
            share.append(np.full(len(recs), (mean_records / len(recs)) ** self.cfg.task_balance))
            task = self.tasks[key]
            progs = [r.to_program() for r in recs]
            samples += [(task, p) for p in progs]
            y = normalized_throughputs(recs)
            if size_scales_of(task):  # learn f_MK: the sizes' part is f_adapt's
                y = y / np.array([self.adaptation(task, p) for p in progs])
                y = y / (y.max() or 1.0)
            labels.append(y)
        self.fit(samples, np.concatenate(labels) if labels else np.zeros(0),
                 np.concatenate(share) if share else None)
        self._fitted_on = sum(len(v) for v in by_task.values())
        self.train_s += time.monotonic() - start

    def update(self, records: Sequence[Record]) -> None:
        """Refit when `retrain_every` results of known tasks arrived since the last fit."""
        n = sum(1 for r in records if r.task_key in self.tasks)
        if self._fitted_on < 0 or n - self._fitted_on >= self.cfg.retrain_every:
            self.fit_records(records)

    def predict(self, task: Workload, programs: Sequence[Program]) -> np.ndarray:
        """Scores of programs of `task` (higher = faster); random until trained."""
        if not programs:
            return np.zeros(0)
        booster = self.booster or self.base
        if booster is None:
            return self.rng.random(len(programs))
        packed = _Packed([self.features(task, p) for p in programs])
        rows = booster.predict(xgb.DMatrix(packed.x))
        scores = packed.sums(rows)
        if size_scales_of(task):  # f_MK x f_adapt
            scores = scores * np.array([self.adaptation(task, p) for p in programs])
        return scores

    def save(self, path: Path, target: str) -> None:
        """The model as XGBoost JSON, marked with the feature schema and the target."""
        booster = self.booster or self.base
        if booster is None:
            raise ValueError("nothing to save: the model was never trained")
        booster.set_attr(**{_SCHEMA_ATTR: FEATURE_SCHEMA, _TARGET_ATTR: target})
        tmp = path.with_name(path.stem + ".tmp.json")  # the suffix picks XGBoost's JSON
        booster.save_model(str(tmp))
        tmp.replace(path)


def pairwise_accuracy(pred: np.ndarray, truth: np.ndarray) -> float:
    """Fraction of pairs with different true values that the prediction orders the same way."""
    pred, truth = np.asarray(pred), np.asarray(truth)
    dp = np.sign(pred[:, None] - pred[None, :])
    dt = np.sign(truth[:, None] - truth[None, :])
    mask = np.triu(dt != 0, 1)
    return float((dp[mask] == dt[mask]).mean()) if mask.any() else math.nan


def recall_at_k(pred: np.ndarray, truth: np.ndarray, k: int) -> float:
    """|top-k by prediction ∩ top-k by truth| / k."""
    k = min(k, len(pred))
    top_p = set(np.argsort(-np.asarray(pred), kind="stable")[:k])
    top_t = set(np.argsort(-np.asarray(truth), kind="stable")[:k])
    return len(top_p & top_t) / k if k else math.nan
