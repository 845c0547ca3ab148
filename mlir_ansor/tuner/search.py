"""Search over tasks: a policy proposes a batch for a task, the measurer measures it,
records are appended at once. Policies: random sampling (here) and evolutionary search
guided by the cost model (`evolution.py`)."""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, replace
from typing import Callable, Protocol, Sequence

from mlir_ansor.errors import AnsorError
from mlir_ansor.sketch_passes.annotation import annotate, sample_unmeasured, violations
from mlir_ansor.sketch_passes.hints import AnnotationHints
from mlir_ansor.sketch_passes.iree_seed import seed_programs
from mlir_ansor.sketch_passes.kernel_seed import kernel_seed_programs
from mlir_ansor.sketch_passes.program import Program
from mlir_ansor.targets import get_target
from mlir_ansor.tuner.records import Context, Record, RecordStore, best_by_task
from mlir_ansor.tuner.scheduler import SchedulerConfig, TaskScheduler
from mlir_ansor.tuner.status import Status
from mlir_ansor.tuner.tasks import Task
from mlir_ansor.tuner.wall_time import WallTime


@dataclass(frozen=True)
class SearchConfig:
    trials: int = 40  # measurements in total, over all tasks
    batch: int = 4  # programs measured per task per round
    seed: int = 0
    # Wall seconds the search may take (0: no limit): no batch starts after that (the one
    # in flight finishes), whatever is left of `trials`.
    time_limit_s: float = 0.0


class Policy(Protocol):
    def propose(self, n: int, measured: set[str], records: Sequence[Record]) -> list[Program]:
        """`n` programs of the policy's task not in `measured`, given all records so far."""
        ...


def train_seconds(policy: Policy) -> float:
    """The share of a policy's proposing spent training a cost model (a policy that trains
    one says so with a `train_s` attribute; wrappers forward their inner policy's)."""
    return getattr(policy, "train_s", 0.0)


PolicyFactory = Callable[[Task, int], Policy]  # (task, seed) -> policy


class RandomPolicy:
    """Propose unmeasured random programs of a task, deterministic for a seed."""

    def __init__(self, task: Task, seed: int, max_resample: int = 50):
        self.task = task
        self.target = get_target(task.target)
        self.rng = random.Random(f"{seed}:{task.key}")
        self.max_resample = max_resample

    def propose(self, n: int, measured: set[str], records: Sequence[Record] = ()) -> list[Program]:
        sketches = self.task.sketches
        return sample_unmeasured(
            lambda: annotate(self.task.ops, sketches[self.rng.randrange(len(sketches))],
                             self.rng, target=self.target), n, measured, self.max_resample)


class HintedPolicy:
    """A policy whose proposals obey a workload's AnnotationHints: the task's sketches are
    filtered, and proposals the hints reject are drawn again (bounded)."""

    @property
    def train_s(self) -> float:
        return train_seconds(self.inner)

    def __init__(self, inner: Policy, task: Task, hints: AnnotationHints, seed: int,
                 rounds: int = 20, oversample: int = 4):
        self.inner, self.task, self.hints = inner, task, hints
        self.rounds, self.oversample = rounds, oversample
        self.rng = random.Random(f"{seed}:{task.key}:hints")

    def propose(self, n: int, measured: set[str], records: Sequence[Record] = ()) -> list[Program]:
        out: list[Program] = []
        seen = set(measured)
        for _ in range(self.rounds):
            if len(out) >= n:
                break
            for p in self.inner.propose(self.oversample * (n - len(out)), seen, records):
                if len(out) >= n:
                    break
                seen.add(p.key)
                if self.hints.accept(self.task.ops, p, self.rng):
                    out.append(p)
        return out[:n]


SeedFn = Callable[[Task], list[Program]]


def iree_seeds(task: Task) -> list[Program]:
    """The programs closest to IREE's own tile sizes (`iree_seed`)."""
    return seed_programs(task.ops, task.sketches, task.iree_levels,
                         target=get_target(task.target))


def kernel_seeds(task: Task) -> list[Program]:
    """The outer-product micro-kernel seeds of the target's register file (`kernel_seed`)."""
    return kernel_seed_programs(task.ops, task.sketches, get_target(task.target))


class SeededPolicy:
    """A policy whose proposals for a task start with seed programs (`seeds`), then the
    inner policy's. A batch smaller than the seeds takes the rest in the next proposals
    (each seed is offered once); a seed already measured (a resumed run) is skipped."""

    def __init__(self, inner: Policy, task: Task, seeds: SeedFn):
        self.inner, self.task, self.seeds = inner, task, seeds
        self._pending: list[Program] | None = None  # seeds not yet offered

    @property
    def train_s(self) -> float:
        return train_seconds(self.inner)

    def propose(self, n: int, measured: set[str], records: Sequence[Record] = ()) -> list[Program]:
        if self._pending is None:
            self._pending = list(self.seeds(self.task))
        self._pending = [p for p in self._pending if p.key not in measured]
        seeds, self._pending = self._pending[:n], self._pending[n:]
        return seeds + self.inner.propose(n - len(seeds), measured | {p.key for p in seeds},
                                          records)


def with_seeds(factory: PolicyFactory, *seeds: SeedFn) -> PolicyFactory:
    """`factory` whose policies measure the programs of `seeds` first on each task."""
    if not seeds:
        return factory

    def all_seeds(task: Task) -> list[Program]:
        out: list[Program] = []
        for f in seeds:
            out += [p for p in f(task) if p not in out]
        return out

    return lambda task, seed: SeededPolicy(factory(task, seed), task, all_seeds)


def with_hints(factory: PolicyFactory, hints: Sequence[tuple[str, AnnotationHints]]
               ) -> PolicyFactory:
    """`factory` with the hints of every task whose dispatch name contains a pattern (the
    first matching pattern wins); tasks without hints are left alone."""
    if not hints:
        return factory

    def make(task: Task, seed: int) -> Policy:
        h = next((h for pattern, h in hints if pattern in task.name), None)
        if h is None:
            return factory(task, seed)
        kept = tuple(s for s in task.sketches if h.keeps_sketch(s.name))
        if not kept:
            raise AnsorError(f"hints keep none of {task.name}'s sketches "
                             f"{[s.name for s in task.sketches]}")
        task = replace(task, sketches=kept)
        return HintedPolicy(factory(task, seed), task, h, seed)
    return make


def loop_signature(task: Task) -> tuple:
    """Tasks with equal signatures share programs (same op roles, loops and extents)."""
    return tuple((o.name, o.iterators, o.extents) for o in task.ops)


def transferable(task: Task, tasks: Sequence[Task], records: list[Record], measured: set[str],
                 top: int = 2) -> list[Program]:
    """The best programs of tasks with the same loop nest, not yet measured on `task`, that
    are valid for it (the same loops can still differ in constraints, e.g. an output
    written through a map_store)."""
    sig = loop_signature(task)
    keys = {t.key for t in tasks if t.key != task.key and loop_signature(t) == sig}
    ok = sorted((r for r in records if r.ok and r.task_key in keys), key=lambda r: r.latency_s)
    out: list[Program] = []
    for r in ok:
        p = r.to_program()
        if p.key not in measured and p.sketch in task.sketches and p not in out and \
                not violations(task.ops, p, target=get_target(task.target)):
            out.append(p)
        if len(out) == top:
            break
    return out


def _never_applies(task: Task, records: list[Record], batch: int,
                   context: Context | None) -> bool:
    mine = [r for r in records if r.task_key == task.key and
            (context is None or context.holds(r))]
    return len(mine) >= batch and all(r.status == Status.NOT_APPLIED for r in mine)


def round_robin_scheduler(tasks: Sequence[Task], seed: int = 0) -> TaskScheduler:
    keys = [t.key for t in tasks]
    return TaskScheduler(keys, {k: 1.0 for k in keys}, {k: () for k in keys},
                         {k: 1.0 for k in keys}, lambda g: sum(g.values()),
                         SchedulerConfig(strategy="round_robin", seed=seed))


def tune_tasks(tasks: Sequence[Task], measurers: dict, store: RecordStore, cfg: SearchConfig,
               records: list[Record], on_record: Callable[[Task, Record], None],
               policy: PolicyFactory = RandomPolicy,
               scheduler: TaskScheduler | None = None,
               context: Context | None = None, clock: WallTime | None = None) -> int:
    """Spend `cfg.trials` new measurements in batches of `cfg.batch` (within
    `cfg.time_limit_s`); the scheduler picks the task of each batch (round robin when none
    is given). With a `context`, records measured elsewhere only train the policies: they
    set no best and do not count as measured (the stages' search docstring). Returns the
    measurements made."""
    started = time.monotonic()
    tunable = [t for t in tasks if t.tunable]
    if not tunable:
        return 0
    by_key = {t.key: t for t in tunable}
    scheduler = scheduler or round_robin_scheduler(tunable, cfg.seed)
    policies = {t.key: policy(t, cfg.seed) for t in tunable}
    bests = best_by_task(records, context)
    for t in tunable:  # resume: the measurer and the scheduler know the best so far
        best = bests[t.key].latency_s if t.key in bests else None
        if best is not None and getattr(measurers[t.key], "best_s", None) is None:
            measurers[t.key].best_s = best
        if any(r.task_key == t.key for r in records):
            scheduler.update(t.key, best if best is not None else math.inf)
    # Resume: programs already in the records are never proposed again.
    measured = {t.key: {r.program_key for r in records if r.task_key == t.key and
                        (context is None or context.holds(r))} for t in tunable}
    spent = 0
    while spent < cfg.trials:
        if cfg.time_limit_s and time.monotonic() - started >= cfg.time_limit_s:
            break
        key = scheduler.next_task()
        if key is None:
            break
        task = by_key[key]
        if _never_applies(task, records, cfg.batch, context):
            scheduler.stop(key)  # the library's matcher does not recognise this dispatch
            continue
        n = min(cfg.batch, cfg.trials - spent)
        progs = transferable(task, tunable, records, measured[key])[:n]
        seen = measured[key] | {p.key for p in progs}
        trained = train_seconds(policies[key])
        start = time.monotonic()
        progs += policies[key].propose(n - len(progs), seen, records)
        if clock is not None:  # proposing = training the cost model + the search itself
            train = train_seconds(policies[key]) - trained
            clock.train += train
            clock.search += time.monotonic() - start - train
        if not progs:
            scheduler.stop(key)  # the space of this task is exhausted
            continue
        for r in measurers[key].measure_iter(progs):
            store.append(r)
            measured[key].add(r.program_key)
            records.append(r)
            on_record(task, r)
        spent += len(progs)
        b = best_by_task(records, context).get(key)
        scheduler.update(key, b.latency_s if b else math.inf)
    return spent


def round_robin(tasks: Sequence[Task], measurers: dict, store: RecordStore, cfg: SearchConfig,
                records: list[Record], on_record: Callable[[Task, Record], None],
                policy: PolicyFactory = RandomPolicy) -> None:
    """`tune_tasks` with tasks taken in turn."""
    tune_tasks(tasks, measurers, store, cfg, records, on_record, policy)
