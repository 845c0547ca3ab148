"""Cost model: ranking metrics, learning a known ranking, and evolutionary proposals."""
import math
import random

import numpy as np

from mlir_ansor.sketch_passes.annotation import annotate, violations
from mlir_ansor.sketch_passes.program import SplitStep, UnrollStep
from mlir_ansor.sketch_passes.rules import default_cpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from mlir_ansor.tuner.cost_model import (CostModel, CostModelConfig, normalized_throughputs,
                                         pairwise_accuracy, recall_at_k)
from mlir_ansor.tuner.evolution import EvolutionConfig, EvolutionPolicy
from mlir_ansor.tuner.records import Record
from mlir_ansor.tuner.tasks import Task
from tests.conftest import BATCH_MATMUL, ops_of


def test_metrics():
    truth = np.array([1.0, 0.5, 0.2, 0.1])
    assert pairwise_accuracy(truth * 3, truth) == 1.0
    assert pairwise_accuracy(-truth, truth) == 0.0
    assert pairwise_accuracy(np.array([1.0, 0.2, 0.5, 0.1]), truth) == 5 / 6
    assert recall_at_k(np.array([0.1, 0.9, 0.8, 0.0]), truth, 2) == 0.5
    assert recall_at_k(truth, truth, 3) == 1.0


def synthetic_latency(p, ops):
    """A made-up machine: fast with big register tiles along j, k tiles of 16, unroll 4."""
    root = ops[-1]
    reg = math.prod(s.lengths[-1] for s in p.steps if isinstance(s, SplitStep)
                    and s.op == root.name and root.iterators[s.loop] == "parallel")
    lanes = p.split(root.name, 2).lengths[-1]
    r1 = p.split(root.name, 3).lengths[0]
    u = p.find(UnrollStep, root.name).factor
    return 1.0 / (reg * (1 + lanes) * (2.0 if r1 == 16 else 1.0) * (1.5 if u == 4 else 1.0))


def records_for(ops, progs, key="task"):
    return [Record(key, p.to_json(), p.key, "ok", synthetic_latency(p, ops)) for p in progs]


def sample(ops, n, seed):
    sks = generate_sketches(ops, default_cpu_rules())
    rng = random.Random(seed)
    return [annotate(ops, sks[i % len(sks)], rng) for i in range(n)]


def test_model_learns_a_ranking_from_data():
    ops = ops_of(BATCH_MATMUL)
    train, test = sample(ops, 300, 0), sample(ops, 150, 1)
    model = CostModel(ops)
    model.fit_records(records_for(ops, train))
    assert model.trained
    truth = normalized_throughputs(records_for(ops, test))
    pred = model.predict(test)
    assert pairwise_accuracy(pred, truth) > 0.8  # chance is 0.5
    assert recall_at_k(pred, truth, 15) >= 0.5


def test_untrained_model_is_random_until_enough_data():
    ops = ops_of(BATCH_MATMUL)
    progs = sample(ops, 10, 0)
    model = CostModel(ops, CostModelConfig(min_valid=16))
    model.fit_records(records_for(ops, progs))
    assert not model.trained
    assert model.predict(progs).shape == (10,)


def make_task(ops):
    sks = tuple(generate_sketches(ops, default_cpu_rules()))
    return Task("t0", "d", "task", 1, "", "", (), (), tuple(ops), sks)


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
