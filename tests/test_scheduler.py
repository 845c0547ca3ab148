"""Task scheduler decisions on simulated tasks (no compiling)."""
import math

import pytest

from mlir_ansor.tuner.scheduler import (FORM_SPREAD, SchedulerConfig, TaskScheduler, faster_form,
                                        geomean_speedup, latency_requirements, summed,
                                        weighted_latency)


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
    models = {"m1": weighted_latency({"a": 1}), "m2": weighted_latency({"a": 1, "b": 1})}
    assert summed(models)(g) == 1.0 + 3.0
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
                            forms={"A": SimpleNamespace(other=None),
                                   "B": SimpleNamespace(other=None)}, defaults={"k1": 1.0, "k2": 2.0})
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


def test_a_model_in_two_forms_costs_about_its_faster_form():
    """The hand-back keeps the faster form: the soft minimum is within spread * log 2 of
    the minimum, and its slope goes to the form ahead (about a quarter to a form 10%
    behind, next to nothing to one 50% behind)."""
    lat = faster_form({"d": 1}, {"w": 1}, spread=0.1)
    assert lat({"d": 1.0, "w": 5.0}) == pytest.approx(1.0, abs=1e-6)
    assert 1.0 - 0.1 * math.log(2) - 1e-9 <= lat({"d": 1.0, "w": 1.0}) < 1.0

    def slopes(d, w, h=1e-6):
        base = lat({"d": d, "w": w})
        return ((lat({"d": d + h, "w": w}) - base) / h, (lat({"d": d, "w": w + h}) - base) / h)

    ahead, behind = slopes(1.0, 1.1)
    assert 0.2 < behind / (ahead + behind) < 0.3
    assert slopes(1.0, 1.5)[1] < 0.01
    with pytest.raises(ValueError, match="spread"):
        faster_form({"d": 1}, {"w": 1}, spread=0.0)


def test_a_packed_site_counts_the_faster_of_its_plain_and_packed_dispatches():
    """A first form with a packed weight site (plain "d", packed "p") against an other form
    "w": the site costs the faster of the two, not both (the hand-back packs it only where
    faster), so the first form is not judged slower than it will run."""
    lat = faster_form({"s": 1}, {"w": 1}, spread=0.01, first_choices=[({"d": 1}, {"p": 2})])
    assert lat({"s": 1.0, "d": 5.0, "p": 1.0, "w": 10.0}) == pytest.approx(3.0, rel=1e-6)
    assert lat({"s": 1.0, "d": 2.0, "p": 4.0, "w": 10.0}) == pytest.approx(3.0, rel=1e-6)
    # Both counted, the first form (9 here) would look behind the other (4).
    assert lat({"s": 1.0, "d": 4.0, "p": 2.0, "w": 4.0}) < 4.0


def test_the_trials_go_to_the_form_that_will_be_handed_back():
    """Two forms of one model, a shared task "s"; the other form's tasks "w1", "w2"
    improve well past the first form's "d": after the warm-up the scheduler spends the
    trials on the faster form, not evenly over both (the sum of all tasks would)."""
    curves = {"s": lambda n: 0.1, "d": lambda n: 1.0 / (1 + 0.05 * n),
              "w1": lambda n: 0.3 / (1 + 0.3 * n), "w2": lambda n: 0.3 / (1 + 0.3 * n)}
    initial = {"s": 0.1, "d": 1.0, "w1": 0.6, "w2": 0.6}
    weights = dict.fromkeys(curves, 1)
    two = summed({"m": faster_form({"s": 1, "d": 1}, {"s": 1, "w1": 1, "w2": 1})})
    spent = simulate(make(SchedulerConfig(eps=0.0), weights, initial, objective=two),
                     curves, 40)
    assert spent["d"] <= 2 and spent["w1"] + spent["w2"] >= 20
    both = simulate(make(SchedulerConfig(eps=0.0), weights, initial), curves, 40)
    assert both["d"] >= 15


def _two_form_state(monkeypatch, calls_first, calls_other, defaults, default_s=None,
                    alternatives=()):
    """A model in two forms whose flows dispatch `calls_first` / `calls_other` (task key ->
    calls per inference; tasks of both forms tunable); `default_s`: the two forms' IREE
    default builds end to end (OtherForm.default_s); `alternatives`: the first form's packed
    weight sites (their added tasks tunable too, in neither flow)."""
    from collections import Counter
    from types import SimpleNamespace

    from mlir_ansor.tuner.layouts import Alternative
    from mlir_ansor.tuner.stages import searching

    flows = {"FIRST": Counter(calls_first), "OTHER": Counter(calls_other)}
    monkeypatch.setattr(searching, "dispatch_calls", lambda flow: Counter(flows[flow]))
    added = {k: n for a in alternatives for k, n in a.added}
    keys = sorted(set(calls_first) | set(calls_other) | set(added))
    usage = {k: {"A": calls_other.get(k) or calls_first.get(k) or added[k]}  # as merge_tasks
             for k in keys}
    other = SimpleNamespace(alternative=Alternative((), (), ()),
                            forms=SimpleNamespace(flow="OTHER"), default_s=default_s)
    return SimpleNamespace(
        tunable=tuple(SimpleNamespace(key=k, weight=1, tunable=True) for k in keys),
        usage=usage, defaults=defaults,
        forms={"A": SimpleNamespace(other=other, flow="FIRST", alternatives=alternatives)},
        opts=SimpleNamespace(objective="f1", latency_requirement_s=0.0))


def test_a_form_counts_the_time_of_what_it_leaves_to_iree(monkeypatch):
    """Data tiling's other form: the data-tiled form (first) leaves its contraction to
    IREE's mmt4d kernel (no task; "s" is its one task); the form without data tiling has
    the contraction "mm" as a task. From the forms' IREE default builds end to end (2.0 and
    4.0 s) the first form's untasked time (1.0 s) is counted: the objective sees the gain
    of tuning "mm" below it, which the first form's tasks alone (1.0 s) would hide."""
    from mlir_ansor.tuner.stages.searching import objective

    state = _two_form_state(monkeypatch, {"s": 1}, {"s": 1, "mm": 1}, {"s": 1.0, "mm": 3.0},
                            default_s=(2.0, 4.0))
    f = objective(state)
    at_default = f({"s": 1.0, "mm": 3.0})  # first 1 + 1 = 2, other 4: about 2
    assert 2.0 * (1 - FORM_SPREAD * math.log(2)) <= at_default <= 2.0
    t = FORM_SPREAD * 1.2  # other 1.2 against first 2: the soft minimum of the two
    softmin = 1.2 - t * math.log(1 + math.exp((1.2 - 2.0) / t))
    assert f({"s": 1.0, "mm": 0.2}) == pytest.approx(softmin, rel=1e-6)
    # IREE's kernels timed alone may sum past the model's time (0.5 and 2.5 s end to end
    # against 1 and 4 s of tasks): the form its tasks cover most sets the ratio (0.5 s of
    # model per second of tasks), and the other form's time beyond its tasks (0.5 s) is
    # counted at it: first 0.5 * 1, other 0.5 + 0.5 * 1.2
    shifted = _two_form_state(monkeypatch, {"s": 1}, {"s": 1, "mm": 1},
                              {"s": 1.0, "mm": 3.0}, default_s=(0.5, 2.5))
    t = FORM_SPREAD * 0.5
    softmin = 0.5 - t * math.log(1 + math.exp((0.5 - 1.1) / t))
    assert objective(shifted)({"s": 1.0, "mm": 0.2}) == pytest.approx(softmin, rel=1e-6)


def test_a_first_form_with_a_packed_site_counts_the_site_once(monkeypatch):
    """BERT tuned first with packed weights, data-tiled as its other form: a packed site's
    plain task "d" and packed task "p" are both tasks, but the form runs one of them: its
    latency counts the faster (1 + 1 = 2 against the other form's 4), not both (7)."""
    from mlir_ansor.tuner.layouts import Alternative
    from mlir_ansor.tuner.stages.searching import objective

    site = Alternative((), (("d", 1),), (("p", 1),))
    state = _two_form_state(monkeypatch, {"s": 1, "d": 1}, {"s": 1, "w": 1},
                            {"s": 1.0, "d": 5.0, "p": 1.0, "w": 3.0}, alternatives=(site,))
    t = FORM_SPREAD * 2.0
    softmin = 2.0 - t * math.log(1 + math.exp((2.0 - 4.0) / t))
    assert objective(state)({"s": 1.0, "d": 5.0, "p": 1.0, "w": 3.0}) == \
        pytest.approx(softmin, rel=1e-6)


def test_a_form_that_leaves_everything_to_iree_counts_its_whole_time(monkeypatch):
    """The data-tiled form of a single matmul has no task (its one dispatch is IREE's
    mmt4d kernel): it counts its end-to-end time (2.0 s), not zero, so tuning the other
    form's matmul below it lowers the objective."""
    from mlir_ansor.tuner.stages.searching import objective

    state = _two_form_state(monkeypatch, {}, {"mm": 1}, {"mm": 3.0}, default_s=(2.0, 3.0))
    f = objective(state)
    t = FORM_SPREAD * 2.0  # 2.0 against 3.0
    assert f({"mm": 3.0}) == pytest.approx(2.0 - t * math.log(1 + math.exp(-1.0 / t)))
    assert f({"mm": 0.5}) == pytest.approx(0.5, rel=1e-3)


def test_a_form_behind_after_its_first_round_is_weighed_at_the_models_scale(monkeypatch):
    """BERT's layer at --data-tiling auto (a run's numbers, 2026-11-29, Xeon VM): the
    data-tiled form leaves its six contractions to IREE (7.9 ms end to end; its tasks: a
    softmax and two layer norms); the form without data tiling (29.6 ms at IREE's
    defaults, 24.3 ms of tasks timed alone) has them as tasks. With that 5.3 ms taken as
    time common to both forms, the data-tiled form looked a third of its time, and after
    4 trials each every later trial went to the softmax (54 of 96); counted at the
    model's ratio, the next trial goes to one of the large contractions."""
    from mlir_ansor.tuner.stages.searching import objective

    mflop = {"sm": 1.4, "ln1": 0.3, "ln2": 0.8, "qkv": 453.6, "b1": 0.1, "b2": 0.1,
             "qk": 25.6, "av": 25.4, "out": 151.3, "ff1": 606.7, "ff2": 604.3}
    ms = lambda **d: {k: v * 1e-3 for k, v in d.items()}
    defaults = ms(sm=0.245, ln1=0.075, ln2=0.071, qkv=2.612, b1=0.058, b2=0.044, qk=0.143,
                  av=0.145, out=1.186, ff1=7.612, ff2=12.112)
    first = {"sm": 1, "ln1": 2, "ln2": 2}
    other = {**first, "qkv": 1, "b1": 2, "b2": 1, "qk": 1, "av": 1, "out": 1, "ff1": 1,
             "ff2": 1}
    flops = {k: v * 1e6 for k, v in mflop.items()}
    state = _two_form_state(monkeypatch, first, other, defaults,
                            default_s=(7.871e-3, 29.576e-3))
    round1 = ms(sm=0.108, ln1=0.033, ln2=0.023, qkv=2.403, b1=0.028, b2=0.032, qk=0.169,
                av=0.164, out=0.637, ff1=5.743, ff2=3.801)
    sched = TaskScheduler(list(mflop), flops, {k: (k,) for k in mflop}, defaults,
                          objective(state), SchedulerConfig(eps=0.0))
    for k, v in round1.items():
        sched.update(k, v)
    assert sched.next_task() in {"ff1", "ff2", "qkv"}


def test_a_model_tuned_in_two_forms_is_one_soft_minimum_in_the_objective(monkeypatch):
    """--winograd auto: the first form's tasks ("s" once, "d" called 4 times) and the other
    form's ("s" 3 times, "w" twice) make one model latency, the soft minimum of the two
    forms' latencies counted in calls of each form's own flow, not the sum of every task."""
    from mlir_ansor.tuner.stages.searching import objective

    state = _two_form_state(monkeypatch, {"s": 1, "d": 4}, {"s": 3, "w": 2},
                            {"s": 1.0, "d": 1.0, "w": 1.0})
    f = objective(state)
    # first 0.1 + 4 * 1.0 = 4.1, other 3 * 0.1 + 2 * 0.1 = 0.5: hardly softened
    assert f({"s": 0.1, "d": 1.0, "w": 0.1}) == pytest.approx(0.5, rel=1e-6)
    # first 0.1 + 4 * 0.05 = 0.3, other 0.3 + 2 * 1.0
    assert f({"s": 0.1, "d": 0.05, "w": 1.0}) == pytest.approx(0.3, rel=1e-6)
    even = f({"s": 0.1, "d": 0.05, "w": 0.0})  # both 0.3
    assert 0.3 * (1 - FORM_SPREAD * math.log(2)) - 1e-9 <= even < 0.3


def test_a_task_without_a_default_time_does_not_sink_its_form(monkeypatch):
    """A task IREE's default gave no time for starts at a 1 s guess: counted beside the
    soft minimum, so the other tasks of its form still compete."""
    from mlir_ansor.tuner.stages.searching import objective

    state = _two_form_state(monkeypatch, {"s": 1, "d": 1}, {"s": 1, "w": 1, "x": 1},
                            {"s": 1.0, "d": 1.0, "w": 1.0})  # "x": none
    f = objective(state)
    g = {"s": 0.1, "d": 0.5, "w": 0.2, "x": 1.0}
    # other form (0.3, and x apart) ahead of the first (0.6): its "w" keeps its slope
    h = 1e-6
    assert (f({**g, "w": 0.2 + h}) - f(g)) / h > 0.9
    assert f(g) == pytest.approx(0.3 + 1.0, abs=0.01)


def test_a_form_behind_after_its_first_round_still_gets_trials_to_catch_up():
    """`make tune`'s block, simulated: after one round the Winograd form's tasks sum to
    1.3x the direct conv, yet a few rounds later to 0.75x (IREE's kernels for them are
    3-5x slower than tuned ones). The scheduler must not write that form off after its
    first round (at a spread of 0.1 it got no further trial)."""
    def curve(first, tuned):
        return lambda n: tuned + (first - tuned) / n ** 1.5

    curves = {"d": curve(0.55, 0.50)}  # the direct conv, close to its best at once
    winograd = {"w1": (0.34, 0.07), "w2": (0.07, 0.065), "w3": (0.21, 0.16),
                "w4": (0.06, 0.055), "w5": (0.05, 0.045)}
    curves.update({k: curve(*v) for k, v in winograd.items()})
    initial = {"d": 0.58, "w1": 0.34, "w2": 0.4, "w3": 0.21, "w4": 0.09, "w5": 0.07}
    weights = dict.fromkeys(curves, 1)

    def run(spread):
        two = summed({"m": faster_form({"d": 1}, dict.fromkeys(winograd, 1), spread)})
        spent = simulate(make(SchedulerConfig(eps=0.0), weights, initial, objective=two),
                         curves, 24)
        return spent, sum(curves[k](max(spent[k], 1)) for k in winograd)

    spent, wino = run(FORM_SPREAD)
    assert wino < 0.5 and spent["w1"] >= 3, spent
    starved, _ = run(0.1)
    assert starved["w1"] == 1, starved
