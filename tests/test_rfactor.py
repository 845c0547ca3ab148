"""AddRfactor (rule 6): when it applies, and rfactor programs compile, apply and validate."""
import random

import pytest

from mlir_ansor.sketch_passes.annotation import annotate, violations
from mlir_ansor.sketch_passes.rules import Rfactor, default_cpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from tests.conftest import DATA, MATMUL, ROW_SUM, linalg_func, ops_of, prepared_measurer

# 2x2048 . 2048x2: 4 outputs, each a 2048-long dot product.
THIN_MATMUL = linalg_func("%a: tensor<2x2048xf32>, %b: tensor<2048x2xf32>", "tensor<2x2xf32>", """
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x2xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<2x2xf32>) -> tensor<2x2xf32>
  %r = linalg.matmul ins(%a, %b : tensor<2x2048xf32>, tensor<2048x2xf32>)
                     outs(%f : tensor<2x2xf32>) -> tensor<2x2xf32>
  return %r : tensor<2x2xf32>""")


def _sketches(text):
    ops = ops_of(text)
    return ops, generate_sketches(ops, default_cpu_rules())


def test_row_sum_gets_rfactor_and_plain():
    """8 rows of 4096: (1) rfactor of the row reduction, (2) plain row tiles."""
    _, sks = _sketches(ROW_SUM)
    assert [s.name for s in sks] == ["AddRfactor", "Plain"]
    assert sks[0].has(Rfactor) and sks[0].root == "op1_reduce"


def test_thin_matmul_gets_rfactor_besides_tiling():
    """4 outputs, 2048-long reduction: (1) rfactor, (2) cache write + SSRSRS, (3) SSRSRS."""
    _, sks = _sketches(THIN_MATMUL)
    assert [s.name for s in sks] == ["AddRfactor", "AddCacheWrite+MultiLevelTiling",
                                     "MultiLevelTiling"]


def test_no_rfactor_for_a_large_parallel_space():
    _, sks = _sketches(MATMUL)
    assert not any(s.has(Rfactor) for s in sks)


def test_rfactor_lanes_may_fill_a_wide_vector():
    ops, sks = _sketches(ROW_SUM)
    rng = random.Random(0)
    lanes = set()
    for _ in range(200):
        p = annotate(ops, sks[0], rng)
        assert violations(ops, p) == []
        lanes.add(p.split("op1_reduce", 1).lengths[1])
    assert max(lanes) > 16  # wider than a contraction's vector reduction


@pytest.fixture(scope="module")
def row_sum_measurer(tools, tmp_path_factory):
    return prepared_measurer(tools, tmp_path_factory.mktemp("rowsum"), ROW_SUM)


def test_rfactor_programs_apply_and_validate(row_sum_measurer):
    m = row_sum_measurer
    rf = [s for s in m.task.sketches if s.has(Rfactor)]
    assert rf, [s.name for s in m.task.sketches]
    rng = random.Random(1)
    progs = [annotate(m.task.ops, rf[0], rng) for _ in range(6)]
    recs = m.measure(progs)
    assert [r.status for r in recs] == ["ok"] * 6, [r.error for r in recs]


SUM_SQUARES = (DATA / "sum_squares_65536.mlir").read_text()


def test_a_reduction_to_a_scalar_gets_rfactor_only():
    """No parallel loop: (1) rfactor (without partial sums the whole reduction would be
    one vector)."""
    _, sks = _sketches(SUM_SQUARES)
    assert [s.name for s in sks] == ["AddRfactor"]


def test_scalar_reductions_are_tuned_on_cpu_only():
    from mlir_ansor.tuner.tasks import Task, _analyzed

    task = Task("t0", "main_dispatch_0", "k", 1, SUM_SQUARES, "", (), ())
    assert _analyzed(task, SUM_SQUARES).tunable
    cuda = _analyzed(task, SUM_SQUARES, "cuda")
    assert not cuda.tunable and "full reduction to a scalar" in cuda.skip_reason


def test_scalar_reduction_programs_apply_and_validate(tools, tmp_path):
    """One partial result in a one-workgroup forall, merged after it."""
    m = prepared_measurer(tools, tmp_path, SUM_SQUARES)
    assert m.task.tunable, m.task.skip_reason
    rng = random.Random(2)
    progs = [annotate(m.task.ops, m.task.sketches[0], rng) for _ in range(4)]
    recs = m.measure(progs)
    assert [r.status for r in recs] == ["ok"] * 4, [r.error for r in recs]
