"""Task scheduler decisions on simulated tasks (no compiling)."""
import math

import pytest

from mlir_ansor.tuner.scheduler import (SchedulerConfig, TaskScheduler, geomean_speedup,
                                        latency_requirements, weighted_latency)


def make(cfg, weights, initial, flops=None, groups=None, objective=None):
    keys = list(weights)
    return TaskScheduler(keys, flops or {k: 1e9 for k in keys},
                         groups or {k: (k,) for k in keys}, initial,
                         objective or weighted_latency(weights), cfg)


def simulate(sched, curves, rounds):
    """curves[k](n) = best latency of task k after n rounds; returns rounds per task."""
    spent = {k: 0 for k in curves}
    for _ in range(rounds):
        k = sched.next_task()
        if k is None:
            break
        spent[k] += 1
        sched.update(k, curves[k](spent[k]))
    return spent


def test_objectives():
    g = {"a": 1.0, "b": 2.0}
    assert weighted_latency({"a": 3, "b": 1})(g) == 5.0
    models = {"m1": {"a": 1}, "m2": {"a": 1, "b": 1}}
    assert latency_requirements(models, {"m1": 2.0, "m2": 1.0})(g) == 2.0 + 3.0
    assert geomean_speedup(models, {"m1": 2.0, "m2": 6.0})(g) == pytest.approx(-2.0)


def test_round_robin_takes_tasks_in_turn_and_skips_stopped():
    s = make(SchedulerConfig(strategy="round_robin"), {"a": 1, "b": 1, "c": 1},
             {"a": 1.0, "b": 1.0, "c": 1.0})
    assert [s.next_task() for _ in range(4)] == ["a", "b", "c", "a"]
    s.stop("b")
    assert [s.next_task() for _ in range(3)] == ["c", "a", "c"]


def test_gradient_warms_up_then_follows_the_weighted_gain():
    # Same tuning curve, but task "big" runs 10 times per inference, "small" once.
    curve = lambda n: 1.0 / (1 + 0.2 * n)
    curves = {"big": curve, "small": curve}
    s = make(SchedulerConfig(eps=0.0), {"big": 10, "small": 1}, {"big": 1.0, "small": 1.0})
    assert [s.next_task(), None][0] == "big"  # warm-up: the larger share first
    s.update("big", curves["big"](1))
    assert s.next_task() == "small"
    s.update("small", curves["small"](1))
    spent = simulate(s, curves, 30)
    assert spent["big"] > 3 * spent["small"]


def test_the_warm_up_takes_the_tasks_that_weigh_most_first():
    """Under --search-minutes a model of 40 tasks may not finish the warm-up round (ResNet-50
    in 10 minutes: 281 trials for 42 tasks of 8): the tasks left without a trial must be
    its smallest, not its last (its other form's 3x3 convs, 31% of the direct form's time,
    got none while tasks of 0.1 ms got 8 each)."""
    weights = {"first": 1, "tiny": 3, "last": 2, "mid": 1}
    initial = {"first": 0.5e-3, "tiny": 0.1e-3, "last": 10e-3, "mid": 4e-3}
    s = make(SchedulerConfig(eps=0.0), weights, initial)
    order = []
    for _ in range(4):
        k = s.next_task()
        order.append(k)
        s.update(k, initial[k])
    assert order == ["last", "mid", "first", "tiny"]
    # Equal shares keep the tasks' order.
    s = make(SchedulerConfig(eps=0.0), {"a": 1, "b": 1}, {"a": 1.0, "b": 1.0})
    assert s.next_task() == "a"


def test_gradient_prefers_a_task_far_below_its_similar_tasks_throughput():
    # Same loop structure, same weight: "slow" reaches a far lower throughput than "fast"
    # did, so the optimistic term says it has more to gain.
    flops = {"fast": 1e9, "slow": 1e9}
    groups = {"fast": ("conv",), "slow": ("conv",)}
    s = make(SchedulerConfig(eps=0.0, alpha=0.0), {"fast": 1, "slow": 1},
             {"fast": 1.0, "slow": 1.0}, flops, groups)
    s.update("fast", 0.01)
    s.update("slow", 0.5)
    assert s.gradient("slow") < s.gradient("fast") < 0
    assert s.next_task() == "slow"


def test_early_stopping_drops_tasks_without_progress():
    s = make(SchedulerConfig(eps=0.0, early_stop=2), {"a": 1, "b": 1}, {"a": 1.0, "b": 1.0})
    spent = simulate(s, {"a": lambda n: 1.0, "b": lambda n: 1.0 / (1 + n)}, 20)
    assert spent["a"] <= 3 and spent["b"] >= 15


def test_eps_greedy_is_seeded():
    def picks(seed):
        s = make(SchedulerConfig(eps=0.5, seed=seed), {"a": 1, "b": 1, "c": 1},
                 {"a": 1.0, "b": 1.0, "c": 1.0})
        return [k for k in (s.next_task() for _ in range(20)) if k and not s.update(k, 0.5)]
    assert picks(1) == picks(1)


def test_unknown_strategy_is_an_error():
    with pytest.raises(ValueError, match="strategy"):
        make(SchedulerConfig(strategy="fifo"), {"a": 1}, {"a": 1.0})


def test_no_valid_program_keeps_the_initial_latency():
    s = make(SchedulerConfig(), {"a": 1}, {"a": 0.2})
    s.update("a", math.inf)
    assert s.best() == {"a": 0.2}


def test_cli_objectives_see_each_model_with_its_own_weights():
    """--objective f1..f4 over several models: a task shared by two models counts with
    each model's own number of calls."""
    from types import SimpleNamespace

    from mlir_ansor.tuner.stages.searching import objective

    tasks = (SimpleNamespace(key="k1", weight=2, tunable=True),
             SimpleNamespace(key="k2", weight=3, tunable=True))
    state = SimpleNamespace(tunable=tasks, usage={"k1": {"A": 2}, "k2": {"A": 1, "B": 2}},
                            forms={"A": None, "B": None}, defaults={"k1": 1.0, "k2": 2.0})
    g = {"k1": 0.5, "k2": 1.0}  # A: 2*0.5 + 1*1.0 = 2.0 s; B: 2*1.0 = 2.0 s

    def f(name, **kw):
        state.opts = SimpleNamespace(objective=name, latency_requirement_s=0.0, **kw)
        return objective(state)(g)

    assert f("f1") == pytest.approx(2 * 0.5 + 3 * 1.0)
    assert f("f4") == f("f1")
    state.opts = SimpleNamespace(objective="f2", latency_requirement_s=3.0)
    assert objective(state)(g) == pytest.approx(3.0 + 3.0)  # both under the requirement
    # f3: defaults A = 2*1 + 1*2 = 4 s, B = 2*2 = 4 s: both 2x faster -> -2
    assert f("f3") == pytest.approx(-2.0)
