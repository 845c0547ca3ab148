"""AddRfactor (rule 6): when it applies, and rfactor programs compile, apply and validate."""
import random

import pytest

from mlir_ansor.sketch_passes.annotation import annotate, violations
from mlir_ansor.sketch_passes.rules import default_cpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from tests.conftest import MATMUL, ROW_SUM, linalg_func, ops_of, prepared_measurer

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
    assert sks[0].rfactor and sks[0].root == "op1_reduce"


def test_thin_matmul_gets_rfactor_besides_tiling():
    """4 outputs, 2048-long reduction: (1) rfactor, (2) cache write + SSRSRS, (3) SSRSRS."""
    _, sks = _sketches(THIN_MATMUL)
    assert [s.name for s in sks] == ["AddRfactor", "AddCacheWrite+MultiLevelTiling",
                                     "MultiLevelTiling"]


def test_no_rfactor_for_a_large_parallel_space():
    _, sks = _sketches(MATMUL)
    assert not any(s.rfactor for s in sks)


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
    rf = [s for s in m.task.sketches if s.rfactor]
    assert rf, [s.name for s in m.task.sketches]
    rng = random.Random(1)
    progs = [annotate(m.task.ops, rf[0], rng) for _ in range(6)]
    recs = m.measure(progs)
    assert [r.status for r in recs] == ["ok"] * 6, [r.error for r in recs]
