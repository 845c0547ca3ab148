"""Cost model: ranking metrics, learning a known ranking, and evolutionary proposals."""
import json
import math
import random
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from mlir_ansor.sketch_passes.annotation import annotate, violations
from mlir_ansor.sketch_passes.program import SplitStep, UnrollStep
from mlir_ansor.sketch_passes.rules import default_cpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from mlir_ansor.tuner.cost_model import (CostModel, CostModelConfig, CostModelError,
                                         load_booster, normalized_throughputs,
                                         pairwise_accuracy, recall_at_k)
from mlir_ansor.tuner import cost_model
from mlir_ansor.tuner.stages import searching
from mlir_ansor.tuner.evolution import EvolutionConfig, EvolutionPolicy, SharedEvolution
from mlir_ansor.tuner.records import Record
from mlir_ansor.tuner.tasks import Task
from tests.conftest import BATCH_MATMUL, MATMUL, ops_of


def test_metrics():
    truth = np.array([1.0, 0.5, 0.2, 0.1])
    assert pairwise_accuracy(truth * 3, truth) == 1.0
    assert pairwise_accuracy(-truth, truth) == 0.0
    assert pairwise_accuracy(np.array([1.0, 0.2, 0.5, 0.1]), truth) == 5 / 6
    assert recall_at_k(np.array([0.1, 0.9, 0.8, 0.0]), truth, 2) == 0.5
    assert recall_at_k(truth, truth, 3) == 1.0


def synthetic_latency(p, ops):
    """A made-up machine: fast with big register tiles along the lanes, k tiles of 16,
    unroll 4 (the same rules for every contraction)."""
    root = ops[-1]
    reg = math.prod(s.lengths[-1] for s in p.steps if isinstance(s, SplitStep)
                    and s.op == root.name and root.iterators[s.loop] == "parallel")
    lanes = p.split(root.name, root.parallel_dims[-1]).lengths[-1]
    r1 = p.split(root.name, root.reduction_dims[-1]).lengths[0]
    u = p.find(UnrollStep, root.name).factor
    return 1.0 / (reg * (1 + lanes) * (2.0 if r1 == 16 else 1.0) * (1.5 if u == 4 else 1.0))


def records_for(ops, progs, key="task"):
    return [Record(key, p.to_json(), p.key, "ok", synthetic_latency(p, ops)) for p in progs]


def sample(ops, n, seed):
    sks = generate_sketches(ops, default_cpu_rules())
    rng = random.Random(seed)
    return [annotate(ops, sks[i % len(sks)], rng) for i in range(n)]


def make_task(ops, key="task"):
    sks = tuple(generate_sketches(ops, default_cpu_rules()))
    return Task("t0", "d", key, 1, "", "", (), (), tuple(ops), sks)


def test_model_learns_a_ranking_from_data():
    ops = ops_of(BATCH_MATMUL)
    task = make_task(ops)
    # The made-up machine ignores packed operands and blocked loops, which half the
    # programs have: noise the model must learn to ignore (0.74-0.86 over seeds 0-6).
    train, test = sample(ops, 600, 0), sample(ops, 150, 1)
    model = CostModel()
    model.add_task(task)
    model.fit_records(records_for(ops, train))
    assert model.trained
    truth = normalized_throughputs(records_for(ops, test))
    pred = model.predict(task, test)
    assert pairwise_accuracy(pred, truth) > 0.7  # chance is 0.5
    assert recall_at_k(pred, truth, 15) >= 0.5


def test_untrained_model_is_random_until_enough_data():
    ops = ops_of(BATCH_MATMUL)
    task = make_task(ops)
    progs = sample(ops, 10, 0)
    model = CostModel(CostModelConfig(min_valid=16))
    model.add_task(task)
    model.fit_records(records_for(ops, progs))
    assert not model.trained
    assert model.predict(task, progs).shape == (10,)


def test_one_model_ranks_a_task_it_never_measured():
    """Trained on the batch matmul's records only, the shared model ranks the programs of
    a plain matmul (no record of it) far better than chance: features mean the same in
    every task, labels are normalized per task."""
    seen, unseen = make_task(ops_of(BATCH_MATMUL), "bmm"), make_task(ops_of(MATMUL), "mm")
    model = CostModel()
    model.add_task(seen)
    model.add_task(unseen)
    model.fit_records(records_for(seen.ops, sample(seen.ops, 300, 0), "bmm"))
    test = sample(unseen.ops, 150, 1)
    truth = normalized_throughputs(records_for(unseen.ops, test, "mm"))
    # Chance is 0.5; packs and blocked loops are noise here (see above): 0.68-0.80 over
    # seeds 0-4 and 300-600 records.
    assert pairwise_accuracy(model.predict(unseen, test), truth) > 0.65


def test_records_of_several_tasks_are_labelled_per_task():
    """Each task's best is 1: a slow task's records are not all near 0."""
    a, b = make_task(ops_of(BATCH_MATMUL), "a"), make_task(ops_of(MATMUL), "b")
    model = CostModel()
    model.add_task(a)
    model.add_task(b)
    got = {}
    model.fit = lambda samples, labels, weights=None: got.update(
        {t.key: max(l for (t2, _), l in zip(samples, labels) if t2.key == t.key)
         for t, _ in samples})
    slow = [replace(r, latency_s=r.latency_s * 1000)
            for r in records_for(b.ops, sample(b.ops, 20, 0), "b")]
    model.fit_records(records_for(a.ops, sample(a.ops, 20, 0), "a") + slow)
    assert got == {"a": 1.0, "b": 1.0}


@pytest.mark.parametrize("balance, ratio", [(0.0, 1.0), (0.5, 2.0), (1.0, 4.0)])
def test_a_task_with_few_records_is_not_drowned(balance, ratio):
    """A record of a task with a quarter of another's records weighs (4 ** balance)x as
    much: at 1 both tasks weigh the same in the loss, at 0 every record does."""
    a, b = make_task(ops_of(BATCH_MATMUL), "a"), make_task(ops_of(MATMUL), "b")
    model = CostModel(CostModelConfig(task_balance=balance))
    model.add_task(a)
    model.add_task(b)
    got = {}
    model.fit = lambda samples, labels, weights: got.update(
        {t.key: w for (t, _), w in zip(samples, weights)})
    model.fit_records(records_for(a.ops, sample(a.ops, 40, 0), "a") +
                      records_for(b.ops, sample(b.ops, 10, 1), "b"))
    assert got["b"] / got["a"] == pytest.approx(ratio)


def test_balanced_tasks_change_the_trees():
    """The weights reach the loss: with a big task and a small one whose rankings
    disagree, balancing moves the predictions on the small task's programs."""
    a, b = make_task(ops_of(BATCH_MATMUL), "a"), make_task(ops_of(MATMUL), "b")
    progs_b = sample(b.ops, 30, 1)
    # Task b's machine prefers the opposite of task a's.
    flipped = [Record("b", p.to_json(), p.key, "ok", 1.0 / synthetic_latency(p, b.ops))
               for p in progs_b]
    preds = {}
    for balance in (0.0, 1.0):
        model = CostModel(CostModelConfig(task_balance=balance, rounds=40))
        model.add_task(a)
        model.add_task(b)
        model.fit_records(records_for(a.ops, sample(a.ops, 300, 0), "a") + flipped)
        preds[balance] = model.predict(b, progs_b)
    truth = normalized_throughputs(flipped)
    # 0.92 against 0.86 (seeded)
    assert pairwise_accuracy(preds[1.0], truth) > pairwise_accuracy(preds[0.0], truth) + 0.03


def test_refit_after_every_n_results():
    task = make_task(ops_of(BATCH_MATMUL))
    model = CostModel(CostModelConfig(retrain_every=8))
    model.add_task(task)
    fits = []
    model.fit = lambda samples, labels, weights=None: fits.append(len(samples))
    recs = records_for(task.ops, sample(task.ops, 30, 0))
    for n in (4, 8, 11, 12, 19, 20, 30):
        model.update(recs[:n])
    assert fits == [4, 12, 20, 30]
    other = [replace(r, task_key="unknown") for r in recs]  # no ops: not the model's data
    model.update(recs + other)
    assert fits == [4, 12, 20, 30]


def test_saved_model_loads_only_for_its_features_and_target(tmp_path):
    ops = ops_of(BATCH_MATMUL)
    task = make_task(ops)
    model = CostModel()
    model.add_task(task)
    model.fit_records(records_for(ops, sample(ops, 100, 0)))
    path = tmp_path / "cost_model.json"
    model.save(path, "x86_64-avx2")
    base = load_booster(path, "x86_64-avx2")
    again = CostModel(base=base)
    assert again.trained and not again.own_fit  # ranks with the base before any fit
    progs = sample(ops, 20, 5)
    assert np.allclose(again.predict(task, progs), model.predict(task, progs))
    with pytest.raises(CostModelError, match="trained for target 'x86_64-avx2', not 'aarch64'"):
        load_booster(path, "aarch64")
    text = json.loads(path.read_text())
    text["learner"]["attributes"]["mlir_ansor_feature_schema"] = "0-old"
    path.write_text(json.dumps(text))
    with pytest.raises(CostModelError, match="feature schema '0-old'"):
        load_booster(path, "x86_64-avx2")
    path.write_text("{broken")
    with pytest.raises(CostModelError, match="cannot be read"):
        load_booster(path, "x86_64-avx2")


def test_the_run_boosts_on_top_of_a_base():
    """With a base, the run's fit adds trees to it (the base is not modified)."""
    ops = ops_of(BATCH_MATMUL)
    task = make_task(ops)
    first = CostModel()
    first.add_task(task)
    first.fit_records(records_for(ops, sample(ops, 100, 0)))
    base = first.booster
    n_base = len(base.get_dump())
    model = CostModel(CostModelConfig(rounds_on_base=7), base=base)
    model.add_task(task)
    model.fit_records(records_for(ops, sample(ops, 60, 1)))
    assert len(model.booster.get_dump()) == n_base + 7 and len(base.get_dump()) == n_base


def test_evolution_proposes_unmeasured_valid_programs_the_model_likes():
    ops = ops_of(BATCH_MATMUL)
    task = make_task(ops)
    measured = sample(ops, 120, 0)
    records = records_for(ops, measured)
    cfg = EvolutionConfig(population=256, generations=3)
    pol = EvolutionPolicy(task, seed=0, cfg=cfg)
    keys = {p.key for p in measured}
    out = pol.propose(16, keys, records)
    assert len(out) == 16 and len({p.key for p in out}) == 16
    assert not keys & {p.key for p in out}
    assert all(violations(ops, p) == [] for p in out)
    # The evolved programs are far better (on the made-up machine) than random ones.
    evo = np.median([1 / synthetic_latency(p, ops) for p in out])
    rnd = np.median([1 / synthetic_latency(p, ops) for p in sample(ops, 200, 7)])
    assert evo > 3 * rnd
    # Deterministic for a seed.
    again = EvolutionPolicy(task, seed=0, cfg=cfg).propose(16, keys, records)
    assert [p.key for p in again] == [p.key for p in out]


def test_evolution_samples_randomly_without_data():
    ops = ops_of(BATCH_MATMUL)
    pol = EvolutionPolicy(make_task(ops), seed=0, cfg=EvolutionConfig(population=64))
    out = pol.propose(8, set(), [])
    assert len(out) == 8 and all(violations(ops, p) == [] for p in out)


def _state(tmp_path, cost_model="auto", reuse=(), kind="x86_64-avx2"):
    opts = SimpleNamespace(cost_model=cost_model, reuse=tuple(reuse))
    return SimpleNamespace(opts=opts, context=SimpleNamespace(device_kind=kind))


def test_the_search_starts_from_the_model_beside_a_reused_file(tmp_path, monkeypatch):
    ops = ops_of(BATCH_MATMUL)
    task = make_task(ops)
    model = CostModel()
    model.add_task(task)
    model.fit_records(records_for(ops, sample(ops, 60, 0)))
    earlier, shipped = tmp_path / "earlier", tmp_path / "shipped"
    earlier.mkdir()
    shipped.mkdir()
    (earlier / "records.jsonl").write_text("")
    model.save(earlier / "cost_model.json", "x86_64-avx2")
    monkeypatch.setattr(cost_model, "SHIPPED", shipped)
    reuse = [earlier / "records.jsonl"]
    base, note = searching.starting_model(_state(tmp_path, reuse=reuse))
    assert base is not None and "beside --reuse" in note
    # Saved on another machine: skipped, and the note says why.
    base, note = searching.starting_model(_state(tmp_path, reuse=reuse, kind="aarch64-neon"))
    assert base is None and "not 'aarch64-neon'" in note
    # The shipped model when nothing is reused (one of the same architecture will do);
    # none when asked.
    model.save(shipped / "x86_64-avx2.json", "x86_64-avx2")
    base, note = searching.starting_model(_state(tmp_path))
    assert base is not None and "shipped for x86_64-avx2" in note
    base, note = searching.starting_model(_state(tmp_path, kind="x86_64-avx512"))
    assert base is not None and "shipped for x86_64-avx2" in note
    base, note = searching.starting_model(_state(tmp_path, kind="aarch64-neon"))
    assert base is None and "trained from this run's records only" in note
    base, note = searching.starting_model(_state(tmp_path, cost_model="none"))
    assert base is None and "--cost-model none" in note


def test_the_search_says_which_batches_were_random():
    ops = ops_of(BATCH_MATMUL)
    factory = SharedEvolution(EvolutionConfig(population=32, generations=1))
    a, b = factory(make_task(ops, "a"), 0), factory(make_task(ops, "b"), 0)
    a.propose(4, set(), [])  # no model, no records: random
    recs = records_for(ops, sample(ops, 40, 0), "a")
    b.propose(4, set(), recs)  # 40 valid results of task a: the shared model ranks b
    assert factory.model.own_fit
    assert factory.line() == ("cost model ranked 1 of 2 batches; random for lack of a "
                              "trained model: t0 1")
