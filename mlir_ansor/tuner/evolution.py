"""Evolutionary search guided by the cost model (paper §5.1).

Each round: refresh the cost model (one for every task of the search: `SharedEvolution`)
with the records so far; start a population from the best
measured programs plus fresh random samples; for a few generations pick parents with
probability proportional to predicted fitness and make children by mutation or crossover
(each child checked valid); keep the best-predicted unmeasured programs seen. The batch to
measure is the top of that list plus an ε share of fresh random programs; nothing already
measured is proposed again.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import xgboost as xgb

from mlir_ansor.sketch_passes.annotation import annotate, sample_unmeasured, violations
from mlir_ansor.sketch_passes.mutations import crossover, mutate
from mlir_ansor.sketch_passes.program import Program
from mlir_ansor.sketch_passes.pruning import Pruner, demote
from mlir_ansor.tuner.cost_model import CostModel, CostModelConfig
from mlir_ansor.tuner.records import Record
from mlir_ansor.targets import get_target
from mlir_ansor.tuner.tasks import Task


@dataclass(frozen=True)
class EvolutionConfig:
    population: int = 1024
    generations: int = 4
    mutation_prob: float = 0.85  # a child is a mutant of one parent with this probability,
    crossover_prob: float = 0.10  # a crossover of two with this one, else a copy
    eps_greedy: float = 0.05  # share of each measured batch that is fresh random programs
    init_measured_ratio: float = 0.2  # share of the first population taken from the best measured
    model: CostModelConfig = CostModelConfig()

    def random_count(self, n: int) -> int:
        """How many of a batch of `n` are fresh random programs (the ε share; none in a
        batch of one)."""
        return min(n, math.ceil(n * self.eps_greedy)) if n > 1 else 0


class EvolutionPolicy:
    """Propose programs of one task by evolutionary search on the cost model (`model`,
    shared with the other tasks of a search; a model of its own when None)."""

    def __init__(self, task: Task, seed: int, cfg: EvolutionConfig = EvolutionConfig(),
                 model: CostModel | None = None, pruner: Pruner | None = None):
        self.task = task
        self.cfg = cfg
        self.rng = random.Random(f"{seed}:{task.key}:evo")
        self.model = model or CostModel(replace(cfg.model, seed=seed))
        self.model.add_task(task)
        self.target = get_target(task.target)
        self.pruner = pruner or Pruner(self.target)
        self.batches = self.random_batches = 0  # proposals, and those made without a model

    @property
    def train_s(self) -> float:
        return self.model.train_s

    def _random(self, n: int, exclude: set[str]) -> list[Program]:
        """Valid random programs, unflagged by the pruning rules where enough exist."""
        sketches, ops = self.task.sketches, self.task.ops

        def draw() -> Program:
            return annotate(ops, sketches[self.rng.randrange(len(sketches))], self.rng,
                            target=self.target, full_vectors=True)

        def valid(p: Program) -> bool:
            return not violations(ops, p, target=self.target)

        out = sample_unmeasured(draw, n, exclude, 16, keep=lambda p: valid(p) and
                                not self.pruner.judge(self.task, p))
        return out + sample_unmeasured(draw, n - len(out), exclude | {p.key for p in out}, 4,
                                       keep=valid)

    def _select(self, pop: Sequence[Program], scores: np.ndarray, k: int) -> list[int]:
        w = np.maximum(scores, 0) + 1e-6
        return self.rng.choices(range(len(pop)), weights=w.tolist(), k=k)

    def evolve(self, mine: Sequence[Record], measured: set[str], n: int) -> list[Program]:
        """The `n` unmeasured programs with the best predicted score after evolution."""
        cfg, ops = self.cfg, self.task.ops
        ok = sorted((r for r in mine if r.ok), key=lambda r: r.latency_s)
        n_best = min(len(ok), int(cfg.population * cfg.init_measured_ratio))
        pop = [r.to_program() for r in ok[:n_best]]
        pop = [p for p in pop if p.sketch in self.task.sketches]
        pop += self._random(cfg.population - len(pop), {p.key for p in pop})
        best: dict[str, tuple[float, Program]] = {}
        for gen in range(cfg.generations + 1):
            scores = demote(self.model.predict(self.task, pop),
                            self.pruner.demotions(self.task, pop))
            for p, s in zip(pop, scores):
                if p.key not in measured:
                    best[p.key] = (float(s), p)
            if gen == cfg.generations:
                break
            children: list[Program] = []
            parents = self._select(pop, scores, 2 * cfg.population)
            for i in range(cfg.population):
                a = pop[parents[2 * i]]
                r = self.rng.random()
                child = None
                if r < cfg.crossover_prob:
                    b = pop[parents[2 * i + 1]]
                    child = crossover(ops, a, b, self.rng, target=self.target)
                elif r < cfg.crossover_prob + cfg.mutation_prob:
                    child = mutate(ops, a, self.rng, target=self.target)
                children.append(child or a)
            pop = children
        ranked = sorted(best.values(), key=lambda t: -t[0])
        return [p for _, p in ranked[:n]]

    def propose(self, n: int, measured: set[str], records: Sequence[Record]) -> list[Program]:
        mine = [r for r in records if r.task_key == self.task.key]
        self.model.update(records)
        self.batches += 1
        if not self.model.trained:
            self.random_batches += 1
            return self._random(n, measured)  # too little data: Ansor samples randomly
        n_rand = self.cfg.random_count(n)
        out = self.evolve(mine, measured, n - n_rand)
        out += self._random(n - len(out), measured | {p.key for p in out})
        return out


class SharedEvolution:
    """The policy factory of one search: every task's `EvolutionPolicy` ranks its programs
    with one cost model, trained on the records of all tasks (on top of `base`, a saved or
    shipped model, when given)."""

    def __init__(self, cfg: EvolutionConfig = EvolutionConfig(),
                 base: xgb.Booster | None = None):
        self.cfg = cfg
        self.base = base
        self.model: CostModel | None = None
        self.pruner: Pruner | None = None
        self.policies: list[EvolutionPolicy] = []

    def __call__(self, task: Task, seed: int) -> EvolutionPolicy:
        if self.model is None:
            self.model = CostModel(replace(self.cfg.model, seed=seed), self.base)
            self.pruner = Pruner(get_target(task.target))
        policy = EvolutionPolicy(task, seed, self.cfg, model=self.model, pruner=self.pruner)
        self.policies.append(policy)
        return policy

    def line(self) -> str:
        """The report's line: how many batches the model ranked, and how many were random
        because no model was trained yet (per task)."""
        rand = {p.task.task_id: p.random_batches for p in self.policies if p.random_batches}
        total = sum(p.batches for p in self.policies)
        return (f"cost model ranked {total - sum(rand.values())} of {total} batches; random "
                f"for lack of a trained model: " +
                (", ".join(f"{t} {n}" for t, n in sorted(rand.items())) or "none"))
