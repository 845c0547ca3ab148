"""Static branches for a dynamic model's smallest sizes (issue 17): which contractions are
padded (`small_sizes.mark_paddable`), that the padded model computes the same function at
every size, the choice of branches, and the form through a whole run."""
import json

import numpy as np
import pytest
import torch

from mlir_ansor import tune
from mlir_ansor.dialect_helpers.size_dispatch import DispatcherError
from mlir_ansor.dialect_helpers.small_sizes import (PAD_ATTR, SmallSizes, mark_paddable,
                                                    with_small_sizes)
from mlir_ansor.tuner.e2e import compile_model, save_inputs
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.layouts import (ModelLayout, keep_small_branches, load_layout,
                                      save_layout, small_size_tops)
from mlir_ansor.tuner.measure import MeasureConfig, run_outputs
from mlir_ansor.tuner.stages import layout_choice
from tests.conftest import DATA, QUICK_CLI

ROWS = SmallSizes(0, 0, (1, 4), ((0, 0),))


def _marked(text: str) -> int:
    return mark_paddable(text, ROWS)[1]


def test_a_contraction_over_the_size_is_marked_and_others_are_not():
    model = """func.func @main(%x: tensor<?x64xf32>, %y: tensor<?x?xf32>,
                               %z: tensor<?x8xf32>) -> (tensor<?x32xf32>, tensor<?x8xf32>) {
      %c0 = arith.constant 0 : index
      %zero = arith.constant 0.0 : f32
      %w = arith.constant dense<1.0> : tensor<64x32xf32>
      %m = tensor.dim %x, %c0 : tensor<?x64xf32>
      %e = tensor.empty(%m) : tensor<?x32xf32>
      %f = linalg.fill ins(%zero : f32) outs(%e : tensor<?x32xf32>) -> tensor<?x32xf32>
      %r = linalg.matmul ins(%x, %w : tensor<?x64xf32>, tensor<64x32xf32>) outs(%f : tensor<?x32xf32>) -> tensor<?x32xf32>
      %e2 = tensor.empty(%m) : tensor<?x8xf32>
      %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<?x8xf32>) -> tensor<?x8xf32>
      %k = linalg.matmul ins(%y, %z : tensor<?x?xf32>, tensor<?x8xf32>) outs(%f2 : tensor<?x8xf32>) -> tensor<?x8xf32>
      return %r, %k : tensor<?x32xf32>, tensor<?x8xf32>
    }"""
    text, count = mark_paddable(model, ROWS)
    # Both have the size as rows; the second one's reduction is dynamic too (padding the
    # rows would not make it static).
    assert count == 1
    assert text.count(PAD_ATTR) == 1
    assert "linalg.matmul {ansor_pad_dims = [array<i64: 0>, array<i64>, array<i64: 0>]}" in text


def test_a_size_computed_from_the_input_dims_is_followed():
    """A reshape's size arithmetic (as torch-mlir emits it) that equals the size is
    followed; one that is twice the size is not."""
    def model(factor: int) -> str:
        return f"""func.func @main(%x: tensor<?x64xf32>) -> tensor<?x32xf32> {{
          %c0 = arith.constant 0 : index
          %z64 = arith.constant 0 : i64
          %k = arith.constant {factor} : i64
          %zero = arith.constant 0.0 : f32
          %w = arith.constant dense<1.0> : tensor<64x32xf32>
          %d = tensor.dim %x, %c0 : tensor<?x64xf32>
          %n = arith.index_cast %d : index to i64
          %neg = arith.cmpi slt, %n, %z64 : i64
          %p = arith.muli %n, %k : i64
          %q = arith.divsi %p, %k : i64
          %r = arith.muli %q, %k : i64
          %s = arith.select %neg, %z64, %r : i64
          %m = arith.index_cast %s : i64 to index
          %e = tensor.empty(%m) : tensor<?x32xf32>
          %f = linalg.fill ins(%zero : f32) outs(%e : tensor<?x32xf32>) -> tensor<?x32xf32>
          %y = linalg.matmul ins(%x, %w : tensor<?x64xf32>, tensor<64x32xf32>) outs(%f : tensor<?x32xf32>) -> tensor<?x32xf32>
          return %y : tensor<?x32xf32>
        }}"""
    assert _marked(model(1)) == 1
    assert _marked(model(2)) == 0


def test_ops_that_padding_would_not_serve_are_left_alone():
    model = """#id = affine_map<(d0, d1) -> (d0, d1)>
    #row = affine_map<(d0, d1) -> (d0)>
    func.func @main(%x: tensor<?x64xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) {
      %c0 = arith.constant 0 : index
      %zero = arith.constant 0 : i32
      %m = tensor.dim %x, %c0 : tensor<?x64xi32>
      %e = tensor.empty(%m) : tensor<?xi32>
      %f = linalg.fill ins(%zero : i32) outs(%e : tensor<?xi32>) -> tensor<?xi32>
      %two:2 = linalg.generic {indexing_maps = [#id, #row, #row],
          iterator_types = ["parallel", "reduction"]}
          ins(%x : tensor<?x64xi32>) outs(%f, %f : tensor<?xi32>, tensor<?xi32>) {
        ^bb0(%a: i32, %s: i32, %t: i32):
          %p = arith.addi %a, %s : i32
          %q = arith.maxsi %a, %t : i32
          linalg.yield %p, %q : i32, i32
      } -> (tensor<?xi32>, tensor<?xi32>)
      %d = linalg.generic {indexing_maps = [#id, #row],
          iterator_types = ["parallel", "reduction"]}
          ins(%x : tensor<?x64xi32>) outs(%f : tensor<?xi32>) {
        ^bb0(%a: i32, %s: i32):
          %p = arith.divsi %s, %a : i32
          linalg.yield %p : i32
      } -> tensor<?xi32>
      %sum = linalg.generic {indexing_maps = [#id, #row],
          iterator_types = ["parallel", "reduction"]}
          ins(%x : tensor<?x64xi32>) outs(%f : tensor<?xi32>) {
        ^bb0(%a: i32, %s: i32):
          %p = arith.addi %s, %a : i32
          linalg.yield %p : i32
      } -> tensor<?xi32>
      return %two#0, %d, %sum : tensor<?xi32>, tensor<?xi32>, tensor<?xi32>
    }"""
    text, count = mark_paddable(model, ROWS)
    # Two results (only one would be cut back) and an integer division by a padded zero
    # are left dynamic; the plain integer row sum is padded.
    assert count == 1
    body = text.split(PAD_ATTR)[1].split("linalg.yield")[0]  # the marked op's body
    assert "arith.addi" in body and "maxsi" not in body and "divsi" not in body


def test_a_size_the_dispatcher_does_not_read_is_not_padded():
    model = """func.func @main(%x: tensor<?x64xf32>, %a: tensor<?x64xf32>) -> tensor<?x32xf32> {
      %c0 = arith.constant 0 : index
      %zero = arith.constant 0.0 : f32
      %w = arith.constant dense<1.0> : tensor<64x32xf32>
      %m = tensor.dim %a, %c0 : tensor<?x64xf32>
      %e = tensor.empty(%m) : tensor<?x32xf32>
      %f = linalg.fill ins(%zero : f32) outs(%e : tensor<?x32xf32>) -> tensor<?x32xf32>
      %r = linalg.matmul ins(%a, %w : tensor<?x64xf32>, tensor<64x32xf32>) outs(%f : tensor<?x32xf32>) -> tensor<?x32xf32>
      return %r : tensor<?x32xf32>
    }"""
    assert _marked(model) == 0  # its rows are %a's, another symbol
    with pytest.raises(DispatcherError, match="no contraction"):
        with_small_sizes(model, ROWS)


class _RowsMixed(torch.nn.Module):
    """A matmul whose rows are the size, then a softmax over the rows: padding the model's
    rows (bucketing) would change every result; padding the matmul must not."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(24, 40)

    def forward(self, x):
        return torch.softmax(self.fc(x), dim=0)


@pytest.fixture(scope="module")
def rows_mixed(tools, tmp_path_factory):
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("small")
    model = _RowsMixed().eval()
    rows = torch.export.Dim("rows", min=1, max=64)
    text = import_model(model, (torch.randn(8, 24),), {"x": {0: rows}})
    return model, text, d


def test_the_branched_model_computes_the_same_function_at_every_size(rows_mixed, tools):
    model, text, d = rows_mixed
    small = SmallSizes(0, 0, (1, 2, 4, 8), ((0, 0),))
    branched = with_small_sizes(text, small)
    assert PAD_ATTR not in branched and "ansor_kernel" not in branched
    assert branched.count("cf.cond_br") == 4
    (d / "b.mlir").write_text(branched)
    cfg = MeasureConfig()
    compile_model(tools, d / "b.mlir", d / "b.vmfb", cfg, None)
    for n in (1, 2, 3, 4, 5, 7, 8, 9, 37, 64):  # every branch, its ends, and the rest
        x = torch.randn(n, 24)
        paths = save_inputs((x,), d / f"in{n}")
        outs, why = run_outputs(tools, d / "b.vmfb", paths, 1, d / f"o{n}", cfg)
        assert outs is not None, why
        with torch.no_grad():
            np.testing.assert_allclose(outs[0], model(x).numpy(), rtol=1e-5, atol=1e-6)


class _ConvBatch(torch.nn.Module):
    """A convolution over a dynamic batch, then an op that mixes the batch."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return y - y.mean(dim=0, keepdim=True)


def test_a_convolution_pads_its_batch_and_stays_exact(tools, tmp_path):
    torch.manual_seed(0)
    model = _ConvBatch().eval()
    batch = torch.export.Dim("batch", min=1, max=16)
    text = import_model(model, (torch.randn(2, 3, 10, 10),), {"x": {0: batch}})
    small = SmallSizes(0, 0, (1, 4), ((0, 0),))
    marked, count = mark_paddable(text, small)
    assert count == 1 and "linalg.conv_2d_nchw_fchw {ansor_pad_dims" in marked
    (tmp_path / "b.mlir").write_text(with_small_sizes(text, small))
    cfg = MeasureConfig()
    compile_model(tools, tmp_path / "b.mlir", tmp_path / "b.vmfb", cfg, None)
    for n in (1, 2, 3, 4, 5, 16):
        x = torch.randn(n, 3, 10, 10)
        paths = save_inputs((x,), tmp_path / f"in{n}")
        outs, why = run_outputs(tools, tmp_path / "b.vmfb", paths, 1, tmp_path / f"o{n}", cfg)
        assert outs is not None, why
        with torch.no_grad():
            np.testing.assert_allclose(outs[0], model(x).numpy(), rtol=1e-4, atol=1e-5)


def test_the_padded_contraction_is_static_in_its_branch(rows_mixed, tools):
    from mlir_ansor.tuner.tasks import extract_tasks, flow_source

    _, text, d = rows_mixed
    (d / "t.mlir").write_text(with_small_sizes(text, SmallSizes(0, 0, (1, 4), ((0, 0),))))
    contractions = [op for t in extract_tasks(flow_source(d / "t.mlir", "llvm-cpu", tools,
                                                          300))
                    for op in t.ops if op.reduction_dims]
    # The branches' matmuls of 1 and 4 rows, static; the dynamic one is left as it was.
    static = {op.extents for op in contractions if not op.dynamic_loops}
    assert {(1, 40, 24), (4, 40, 24)} <= static
    assert any(op.dynamic_loops for op in contractions)


def test_branches_are_kept_from_the_smallest_while_each_is_clearly_faster():
    timed = [(1, 1, 3.0, 1.0), (2, 2, 2.0, 1.0), (3, 4, 1.0, 1.0), (4, 4, 1.3, 1.0),
             (5, 8, 9.0, 1.0), (8, 8, 9.0, 1.0)]
    # Branch 4: the geometric mean of 1.0x and 1.3x (1.14x) is over the margin.
    assert keep_small_branches(timed) == 4
    # A branch that is not faster ends the kept ones, whatever comes after it.
    assert keep_small_branches([(1, 1, 1.0, 1.0), (2, 2, 5.0, 1.0)]) == 0
    assert keep_small_branches([(1, 1, 1.02, 1.0)]) == 0  # within the margin
    assert small_size_tops(1, 1024) == (1, 2, 4, 8, 16, 32, 64)
    assert small_size_tops(3, 16) == (4, 8)  # the range's top itself stays dynamic
    assert small_size_tops(100, 512) == ()


def test_the_layout_keeps_its_small_sizes(tmp_path):
    layout = ModelLayout(data_tiling=True, tiled_sites=(2,),
                         small_sizes=SmallSizes(1, 0, (1, 2), ((1, 0), (2, 0))))
    save_layout(tmp_path / "layout.json", layout)
    assert load_layout(tmp_path / "layout.json") == layout
    assert layout.changed


def test_a_run_hands_back_the_branched_form_checked_at_every_size(tmp_path, monkeypatch):
    """The branches are forced (this machine's timing decides them otherwise); the run
    tunes the form, checks it against torch at the sizes and hands it back with build.sh."""
    monkeypatch.setattr(layout_choice, "keep_small_branches", lambda timed: 4)
    out = tmp_path / "o"
    cli = [a for a in QUICK_CLI]
    cli[cli.index("--small-sizes") + 1] = "auto"
    rc = tune.main([f"{DATA / 'small_mlp.py'}:make", "--dynamic", "x:0=1..64", "--trials",
                    "4", "--batch", "2", "--size-samples", "2", "--out", str(out), *cli])
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    (e2e,) = report["e2e"].values()
    assert e2e["small_size_branches"] == [1, 2, 4, 8]
    # Checked against torch at both ends of every branch and above them (5, 8 and 9 are
    # none of the range's usual check sizes).
    assert {"x_0=1", "x_0=2", "x_0=3", "x_0=4", "x_0=5", "x_0=8", "x_0=9", "x_0=64"} <= set(
        e2e["also_checked_at"])
    assert load_layout(out / "layout.json").small_sizes == SmallSizes(0, 0, (1, 2, 4, 8),
                                                                      ((0, 0),))
    text = (out / "report.txt").read_text()
    assert "Static branches for the small sizes" in text and "sizes up to 1, 2, 4, 8" in text
    assert (out / "model_tuned.mlir").read_text().count("cf.cond_br") == 4
