"""Task scheduler (paper §6): which task gets the next round of measurements.

The objective f(g_1..g_n) maps each task's best latency g_i to one number to minimize.
After a warm-up round (every task once, the tasks that weigh most in f first: under a time
limit a model of 40 tasks may not finish it, and what is left out should be its smallest
tasks), the gradient scheduler picks the task with the largest expected decrease of f per
unit of time:

  df/dt_i ~ df/dg_i * ( alpha * (g_i(t_i) - g_i(t_i - window)) / window
                       + (1 - alpha) * min(-g_i(t_i) / t_i,
                                           beta * C_i / max_{k in N(i)} V_k - g_i(t_i)) )

t_i counts the rounds given to task i, C_i is its flop count, N(i) the tasks with the same
loop structure, V_k = C_k / g_k the throughput task k reached. With probability eps a random
task is picked instead. Round robin is the alternative strategy.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

Objective = Callable[[Mapping[str, float]], float]  # best latency per task key -> cost
Latency = Callable[[Mapping[str, float]], float]  # best latency per task key -> a model's


def weighted_latency(weights: Mapping[str, float]) -> Objective:
    """f1: the model's latency, sum of w_i * g_i (w_i: calls of task i per inference)."""
    return lambda g: sum(weights[k] * g[k] for k in weights)


# A model tuned in two forms (Winograd on and off) hands back the faster one end to end.
# Its latency is a soft minimum of the two: the form behind by FORM_SPREAD of the faster
# one's latency still gets about a quarter of the weight, one twice as far behind about a
# tenth, so most trials go to the form that will run instead of being split evenly. Wide,
# because a form's latency after one round per task is a rough guess: on `make tune`'s
# block the Winograd form's tasks, one round in, summed to 1.3x the direct form's, and
# 0.75x after a few (IREE's kernels for its transforms are 3-5x slower than tuned ones);
# at 0.1 that form got no trial after its first round.
FORM_SPREAD = 0.3


def faster_form(first: Mapping[str, float], other: Mapping[str, float],
                spread: float = FORM_SPREAD, fixed: tuple[float, float] = (0.0, 0.0),
                scale: float = 1.0,
                first_choices: Sequence[tuple[Mapping[str, float], Mapping[str, float]]] = ()
                ) -> Latency:
    """The latency of a model with two forms (calls per inference of each task in each),
    the faster of which is handed back: softmin with temperature `spread` * the faster.
    `fixed`: each form's time outside its tasks (dispatches left to IREE), in seconds;
    `scale`: the model's time per second of its tasks' dispatches timed alone;
    `first_choices`: (plain calls, packed calls) of the first form's packed weight sites,
    the faster of each counted on top of `first` (the hand-back packs a site where its
    dispatches run faster)."""
    if spread <= 0:
        raise ValueError(f"the spread of a soft minimum must be positive, not {spread}")
    if scale <= 0:
        raise ValueError(f"the scale of a form's tasks must be positive, not {scale}")

    def latency(g: Mapping[str, float]) -> float:
        chosen = sum(min(sum(n * g[k] for k, n in plain.items()),
                         sum(n * g[k] for k, n in packed.items()))
                     for plain, packed in first_choices)
        a = fixed[0] + scale * (sum(n * g[k] for k, n in first.items()) + chosen)
        b = fixed[1] + scale * sum(n * g[k] for k, n in other.items())
        low = min(a, b)
        if not math.isfinite(low) or low <= 0:
            return low
        t = spread * low
        return low - t * math.log(math.exp((low - a) / t) + math.exp((low - b) / t))
    return latency


ModelLatencies = Mapping[str, Latency]  # model -> its latency from the tasks' best


def summed(models: ModelLatencies) -> Objective:
    """f1 over several models (or one model with two forms): the sum of their latencies."""
    return lambda g: sum(f(g) for f in models.values())


def latency_requirements(models: ModelLatencies, requirement_s: Mapping[str, float]
                         ) -> Objective:
    """f2: several models, each only until it meets its latency requirement:
    sum over models of max(latency(model), requirement)."""
    return lambda g: sum(max(f(g), requirement_s[m]) for m, f in models.items())


def geomean_speedup(models: ModelLatencies, reference_s: Mapping[str, float]) -> Objective:
    """f3: maximize the geometric mean over models of reference / latency (minimize -it)."""
    def f(g):
        logs = [math.log(reference_s[m] / lat(g)) for m, lat in models.items()]
        return -math.exp(sum(logs) / len(logs))
    return f


@dataclass(frozen=True)
class SchedulerConfig:
    strategy: str = "gradient"  # or "round_robin"
    alpha: float = 0.2
    beta: float = 2.0
    window: int = 3  # rounds of history for the backward difference
    eps: float = 0.05
    early_stop: int = 0  # f4: stop a task after this many rounds without improvement (0: never)
    seed: int = 0


@dataclass
class _TaskState:
    flops: float
    group: tuple  # tasks with equal groups are "similar" (N(i))
    history: list[float] = field(default_factory=list)  # best latency after each of its rounds
    rounds: int = 0
    stale: int = 0  # rounds since the best improved


class TaskScheduler:
    """Decides the next task from the best latencies seen so far."""

    def __init__(self, keys: Sequence[str], flops: Mapping[str, float],
                 groups: Mapping[str, tuple], initial_s: Mapping[str, float],
                 objective: Objective, cfg: SchedulerConfig = SchedulerConfig()):
        if cfg.strategy not in ("gradient", "round_robin"):
            raise ValueError(f"unknown scheduler strategy {cfg.strategy!r}")
        self.keys = list(keys)
        self.cfg = cfg
        self.objective = objective
        self.rng = random.Random(cfg.seed)
        self.state = {k: _TaskState(float(flops[k]), groups[k], [initial_s[k]]) for k in keys}
        self._next_rr = 0
        self.stopped: set[str] = set()

    def best(self) -> dict[str, float]:
        return {k: s.history[-1] for k, s in self.state.items()}

    def update(self, key: str, best_s: float) -> None:
        """Task `key` had a round; its best latency is now `best_s`."""
        s = self.state[key]
        s.stale = s.stale + 1 if best_s >= s.history[-1] else 0
        s.history.append(min(best_s, s.history[-1]))  # inf (nothing valid yet) keeps the old
        s.rounds += 1

    def stop(self, key: str) -> None:
        """Never pick `key` again (its space is exhausted, or it cannot be tuned)."""
        self.stopped.add(key)

    def active(self) -> list[str]:
        return [k for k in self.keys if k not in self.stopped and
                not (self.cfg.early_stop and self.state[k].stale >= self.cfg.early_stop)]

    def _df_dg(self, key: str, g: dict[str, float]) -> float:
        """df/dg_i at the best latencies `g`, by a forward difference."""
        gi = g[key]
        d = gi * 1e-3
        return (self.objective({**g, key: gi + d}) - self.objective(g)) / d

    def share(self, key: str) -> float:
        """How much of the objective task `key` holds now: df/dg_i * g_i (for f1, its
        calls times its best latency)."""
        g = self.best()
        return self._df_dg(key, g) * g[key]

    def gradient(self, key: str) -> float:
        """Estimated df/dt for task `key` (negative: more time lowers the objective)."""
        s, cfg = self.state[key], self.cfg
        g = self.best()
        gi = g[key]
        df_dg = self._df_dg(key, g)
        w = min(cfg.window, len(s.history) - 1)
        backward = (s.history[-1] - s.history[-1 - w]) / w if w > 0 else 0.0
        similar = [k for k in self.keys if self.state[k].group == s.group]
        v_max = max(self.state[k].flops / g[k] for k in similar)
        optimistic = min(-gi / max(s.rounds, 1), cfg.beta * s.flops / v_max - gi)
        return df_dg * (cfg.alpha * backward + (1 - cfg.alpha) * optimistic)

    def next_task(self) -> str | None:
        keys = self.active()
        if not keys:
            return None
        if self.cfg.strategy == "round_robin":
            for _ in range(len(self.keys)):
                k = self.keys[self._next_rr % len(self.keys)]
                self._next_rr += 1
                if k in keys:
                    return k
            return None
        warm = [k for k in keys if self.state[k].rounds == 0]
        if warm:  # warm-up: every task once, the largest share first (ties: in order)
            return max(warm, key=self.share)
        if self.rng.random() < self.cfg.eps:
            return self.rng.choice(keys)
        return min(keys, key=self.gradient)  # steepest descent of the objective
