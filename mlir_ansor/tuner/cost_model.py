"""The learned cost model (paper §5.2): XGBoost on per-statement features.

A program's score is the sum of its statements' predictions. Labels are throughputs
normalized per task to [0, 1] (best measured = 1, failures 0); the loss is the squared error
of the summed score, weighted by the label, so the model is accurate where it matters: on
the fast programs. It is retrained from scratch on all records each round (the data is small).
Until enough valid measurements exist it predicts random scores.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import xgboost as xgb

from mlir_ansor.dialect_helpers.linalg_info import OpInfo
from mlir_ansor.sketch_passes.program import Program
from mlir_ansor.tuner.features import program_features
from mlir_ansor.tuner.records import Record


@dataclass(frozen=True)
class CostModelConfig:
    min_valid: int = 16  # valid measurements needed before the model is trusted
    rounds: int = 200
    max_depth: int = 6
    eta: float = 0.2
    min_weight: float = 0.05  # weight of failed / very slow programs in the loss
    seed: int = 0


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


class CostModel:
    """XGBoost pack-sum model of one task's programs."""

    def __init__(self, ops: Sequence[OpInfo], cfg: CostModelConfig = CostModelConfig()):
        self.ops = ops
        self.cfg = cfg
        self.booster: xgb.Booster | None = None
        self.rng = np.random.default_rng(cfg.seed)
        self._cache: dict[str, np.ndarray] = {}
        self.train_s = 0.0  # wall time spent fitting (the report's "train")

    def features(self, program: Program) -> np.ndarray:
        f = self._cache.get(program.key)
        if f is None:
            f = program_features(self.ops, program)
            self._cache[program.key] = f
        return f

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def fit(self, programs: Sequence[Program], labels: np.ndarray) -> None:
        """Train from scratch on programs and their normalized throughputs."""
        labels = np.asarray(labels, dtype=np.float64)
        # Keep the features of the training programs only: the candidates scored since the
        # last round would otherwise pile up for the whole run (features are pure, so this
        # changes no prediction).
        self._cache = {p.key: self.features(p) for p in programs}
        if int((labels > 0).sum()) < self.cfg.min_valid:
            self.booster = None
            return
        packed = _Packed([self.features(p) for p in programs])
        weights = np.maximum(labels, self.cfg.min_weight)
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
        self.booster = xgb.train(params, dtrain, num_boost_round=self.cfg.rounds,
                                 obj=pack_sum_square_error)

    def fit_records(self, records: Sequence[Record]) -> None:
        start = time.monotonic()
        self.fit([r.to_program() for r in records], normalized_throughputs(records))
        self.train_s += time.monotonic() - start

    def predict(self, programs: Sequence[Program]) -> np.ndarray:
        """Scores (higher = faster); random until trained."""
        if not programs:
            return np.zeros(0)
        if self.booster is None:
            return self.rng.random(len(programs))
        packed = _Packed([self.features(p) for p in programs])
        rows = self.booster.predict(xgb.DMatrix(packed.x))
        return packed.sums(rows)


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
