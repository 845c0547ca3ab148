"""DietCode's f_adapt (`tuner/adapt.py`) and its use by the cost model: f_MK learned on
labels divided by it, predictions multiplied by it."""
from dataclasses import dataclass, replace

import numpy as np
import pytest

from mlir_ansor.dialect_helpers.linalg_info import analyze_task
from mlir_ansor.sketch_passes.program import (ParallelStep, PeelStep, Program, SplitStep,
                                              VectorizeStep)
from mlir_ansor.sketch_passes.rules import MultiLevelTile
from mlir_ansor.sketch_passes.sketch import Sketch
from mlir_ansor.tuner.adapt import (REMAINDER_ROW_COST, adaptation, efficiency,
                                    size_efficiency, size_scales)
from mlir_ansor.tuner.cost_model import CostModel
from mlir_ansor.tuner.records import Record
from mlir_ansor.tuner.tasks import SizeSample

MM = """func.func @main(%a: tensor<97x256xf32>, %b: tensor<256x384xf32>) -> tensor<97x384xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<97x384xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<97x384xf32>) -> tensor<97x384xf32>
  %r = linalg.matmul ins(%a, %b : tensor<97x256xf32>, tensor<256x384xf32>) outs(%f : tensor<97x384xf32>) -> tensor<97x384xf32>
  return %r : tensor<97x384xf32>
}"""
OPS = tuple(replace(o, dynamic_loops=(0,)) for o in analyze_task(MM))
R = "op1_matmul"
SKETCH = Sketch(anchor=R, structure=(MultiLevelTile(R),), rules=("MultiLevelTiling",))


def kernel(k: int, c: int, col_tile: int = 128) -> Program:
    """Workgroups of k*c rows x col_tile columns, kernels of c rows."""
    return Program(SKETCH, (SplitStep(R, 0, (k, 1, c)), SplitStep(R, 1, (1, col_tile // 16, 16)),
                            PeelStep(R, 0), SplitStep(R, 2, (64, 4)), ParallelStep(R, (0, 1)),
                            VectorizeStep(R)))


def test_efficiency_counts_the_peeled_rows_and_idle_cores():
    # One row on a 4x8-row kernel: the row is a peeled row of one, and one workgroup
    # leaves the second core idle.
    assert size_efficiency(1, 4, 8, 1, 2) == pytest.approx(1 / REMAINDER_ROW_COST / 2)
    # 64 rows: 8 whole kernels, 2 workgroups for 2 cores.
    assert size_efficiency(64, 4, 8, 1, 2) == 1.0
    # 3 workgroups on 2 cores: two rounds, one of them half idle.
    assert size_efficiency(96, 4, 8, 1, 2) == pytest.approx(3 / 4)
    # The other distributed loops' workgroups fill the cores too.
    assert size_efficiency(1, 4, 8, 3, 2) == pytest.approx(1 / REMAINDER_ROW_COST * 3 / 4)


def test_small_sizes_rank_small_kernels_first():
    # The samples 1..16 of a range whose nominal (middle) sample is 97 rows.
    scales = size_scales([SizeSample((((0, 0), n),)) for n in (1, 4, 16)],
                         SizeSample((((0, 0), 97),)))
    assert [round(s * 97) for s, _ in scales] == [1, 4, 16]
    small, big = kernel(1, 4, col_tile=64), kernel(8, 8, col_tile=384)
    assert adaptation(OPS, small, scales) > 2 * adaptation(OPS, big, scales)
    # At the nominal size both are whole: the sizes' part is the kernels' fit only.
    assert efficiency(OPS, small, 1.0) > 0.5 and efficiency(OPS, big, 1.0) < 1.0
    # A static task is not adapted.
    static = analyze_task(MM)
    assert adaptation(static, big, scales) == 1.0


@dataclass(frozen=True)
class _Task:
    key: str
    ops: tuple
    samples: tuple = ()

    @property
    def dynamic(self) -> bool:
        return bool(self.samples)


class _Ones:
    """A booster whose every row predicts 1 (a program's score is its row count)."""

    def predict(self, dmatrix):
        return np.ones(dmatrix.num_row())


def test_the_cost_model_predicts_f_mk_times_f_adapt_and_learns_f_mk():
    samples = tuple(SizeSample((((0, 0), n),)) for n in (1, 97, 500))
    dyn, static = _Task("d", OPS, samples), _Task("s", OPS)
    progs = [kernel(1, 4, 64), kernel(8, 8, 384)]
    model = CostModel()
    model.booster = _Ones()
    base = model.predict(static, progs)
    got = model.predict(dyn, progs)
    want = base * np.array([model.adaptation(dyn, p) for p in progs])
    np.testing.assert_allclose(got, want)
    assert not np.allclose(got / base, 1.0)
    # Training labels of a dynamic task are divided by f_adapt (renormalized per task).
    seen = {}
    model.fit = lambda samples_, labels, weights=None: seen.update(labels=labels)
    model.add_task(dyn)
    recs = [Record(task_key="d", program=p.to_json(), program_key=p.key, status="ok",
                   latency_s=t) for p, t in zip(progs, (1.0, 2.0))]
    model.fit_records(recs)
    y = np.array([1.0, 0.5]) / np.array([model.adaptation(dyn, p) for p in progs])
    np.testing.assert_allclose(seen["labels"], y / y.max())
