"""Annotation hints: restrictions hold for every proposal, the preference biases them."""
import random

import pytest

from mlir_ansor.errors import AnsorError
from mlir_ansor.sketch_passes.annotation import sample_programs
from mlir_ansor.sketch_passes.hints import AnnotationHints
from mlir_ansor.sketch_passes.rules import default_cpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from mlir_ansor.tuner.evolution import EvolutionPolicy
from mlir_ansor.tuner.search import RandomPolicy, with_hints
from mlir_ansor.tuner.tasks import Task
from tests.conftest import MATMUL, ops_of


def _task():
    ops = tuple(ops_of(MATMUL))
    return Task("t0", "main_dispatch_0_matmul_256x256x256_f32", "k", 1, MATMUL, "", (), (),
                ops, tuple(generate_sketches(ops, default_cpu_rules())))


def _inner(p, loop):
    return next(s.lengths[-1] for s in p.steps if getattr(s, "loop", None) == loop
                and getattr(s, "lengths", None))


def test_restrictions_hold_for_random_and_evolution_proposals():
    hints = AnnotationHints(sketches=("MultiLevelTiling",), unroll=(1, 2), inner=((1, 16),))
    task = _task()
    for factory in (RandomPolicy, EvolutionPolicy):
        policy = with_hints(factory, (("matmul", hints),))(task, 0)
        props = policy.propose(12, set(), [])
        assert len(props) == 12
        assert all(p.sketch.name == "MultiLevelTiling" for p in props)
        assert all(hints.allows(task.ops, p) and _inner(p, 1) == 16 for p in props)


def test_preference_biases_proposals():
    task = _task()
    plain = RandomPolicy(task, 0).propose(200, set(), [])
    hinted = with_hints(RandomPolicy, (("matmul", AnnotationHints(prefer_inner=((1, 16),))),))(
        task, 0).propose(200, set(), [])
    share = lambda ps: sum(_inner(p, 1) == 16 for p in ps) / len(ps)  # noqa: E731
    # Off-preference proposals pass with 1 - 0.8: a share p becomes p / (p + 0.2 (1 - p)),
    # at least twice p when p < 0.6.
    assert share(hinted) > 2 * share(plain) > 0


def test_hints_apply_only_to_matching_tasks():
    task = _task()
    policy = with_hints(RandomPolicy, (("conv", AnnotationHints(unroll=(8,))),))(task, 0)
    assert isinstance(policy, RandomPolicy)


def test_bad_hints_are_rejected():
    with pytest.raises(ValueError):
        AnnotationHints(unroll=(0,))
    with pytest.raises(AnsorError, match="keep none"):
        with_hints(RandomPolicy, (("matmul", AnnotationHints(sketches=("Nope",))),))(_task(), 0)


def test_hints_allow_checks_max_inner():
    task = _task()
    progs = sample_programs(task.ops, task.sketches, 40, random.Random(0))
    h = AnnotationHints(max_inner=4)
    assert any(not h.allows(task.ops, p) for p in progs)
    assert all(max(_inner(p, 0), _inner(p, 1)) <= 4 for p in progs if h.allows(task.ops, p))


class _SlowMeasurer:
    """Records every program as measured, `seconds` later on a fake clock."""

    def __init__(self, clock: list, seconds: float):
        self.clock, self.seconds, self.best_s = clock, seconds, None

    def measure_iter(self, progs):
        from mlir_ansor.tuner.records import Record
        from mlir_ansor.tuner.status import Status
        for p in progs:
            self.clock[0] += self.seconds
            yield Record("k", p.to_json(), p.key, Status.OK, latency_s=1e-3)


def test_search_stops_at_its_time_limit(tmp_path, monkeypatch):
    """--search-minutes: no batch starts once the limit is reached (the one in flight
    ends); without a limit every trial is spent."""
    import mlir_ansor.tuner.search as S
    from mlir_ansor.tuner.records import RecordStore

    task = _task()
    for limit, want in ((6.0, 8), (0.0, 24)):
        clock = [0.0]
        monkeypatch.setattr(S.time, "monotonic", lambda: clock[0])
        store, records = RecordStore(tmp_path / f"r{limit}.jsonl"), []
        spent = S.tune_tasks([task], {task.key: _SlowMeasurer(clock, 1.0)}, store,
                             S.SearchConfig(trials=24, batch=4, time_limit_s=limit), records,
                             lambda t, r: None, RandomPolicy)
        # 4 s per batch of 4: the limit is passed during the second batch.
        assert spent == len(records) == len(store.load()) == want
