"""Rows outside the root that no good chunk divides (a ViT's 197 tokens): full chunks and a
peeled partial last one, not a whole-row reduction whose horizontal add is a chain of
scalar adds, nor single elements."""
import random

import pytest

from mlir_ansor.dialect_helpers.linalg_info import analyze_task
from mlir_ansor.sketch_passes.annotation import annotate
from mlir_ansor.transform_scripts import emitter as E
from tests.conftest import DATA, prepared_measurer


def _reduce(width: int) -> str:
    """tests/data/row_sum.mlir (8 rows summed) with rows of `width`."""
    return (DATA / "row_sum.mlir").read_text().replace("4096", str(width))


@pytest.mark.parametrize("width, sizes, odd", [
    (16, [1, 0], False),     # short: one vector
    (49, [1, 16], True),     # 3 chunks of 16 and a peeled 1 (7 x 7: no chunk of 16)
    (128, [1, 16], False),   # 16-wide partial sums
    (197, [1, 16], True),    # prime: 12 chunks of 16 and a peeled 5
    (4096, [1, 64], False),  # long: 64 accumulators
    (1000, [1, 50], False),  # a divisor of at least 16
])
def test_reduction_rows_are_cut_into_partial_sum_chunks(width, sizes, odd):
    op = next(o for o in analyze_task(_reduce(width)) if o.reduction_dims)
    assert E._row_sizes(op, 1) == (sizes, odd)


def test_elementwise_rows_peel_their_last_chunk_only_without_a_good_divisor():
    op = next(o for o in analyze_task((DATA / "softmax_197.mlir").read_text())
              if not o.reduction_dims and o.output.shape == (24, 197))
    assert E._row_sizes(op, 197) == ([1, 64], True)
    assert E._row_sizes(op, 100) == ([1, 50], False)
    assert E._row_sizes(op, 60) == ([1, 0], False)


def test_softmax_over_197_computes_the_right_numbers(tools, tmp_path):
    """Random programs of the softmax over rows of 197: each is applied and its output
    matches the reference (the peeled partial sums are merged into the right lanes)."""
    m = prepared_measurer(tools, tmp_path, (DATA / "softmax_197.mlir").read_text())
    rng = random.Random(0)
    progs = [annotate(m.task.ops, m.task.sketches[i % len(m.task.sketches)], rng)
             for i in range(4)]
    recs = m.measure(progs)
    assert all(r.status == "ok" for r in recs), [r.error for r in recs]
