"""The benchmarks' checks refuse what must not be timed (tools/module_check.py).

A 64x64 matmul compiled with IREE's default: it passes against the right reference and
fails against a wrong one; a library that does not parse (IREE then builds its default
and exits 0) fails as not applied; a compile that exits non-zero fails with its status."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import module_check as mc  # noqa: E402
from mlir_ansor.tuner.measure import MeasureConfig  # noqa: E402
from mlir_ansor.tuner.toolchain import Toolchain  # noqa: E402

MATMUL = """
func.func @main(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x64xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
  %r = linalg.matmul ins(%a, %b : tensor<64x64xf32>, tensor<64x64xf32>)
                     outs(%acc : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %r : tensor<64x64xf32>
}
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("check")
    src = d / "mm.mlir"
    src.write_text(MATMUL)
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-1, 1, (64, 64)).astype(np.float32) for _ in range(2))
    inputs = []
    for i, x in enumerate((a, b)):
        np.save(d / f"in{i}.npy", x)
        inputs.append(d / f"in{i}.npy")
    ref = [a.astype(np.float64) @ b.astype(np.float64)]
    mag = [np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)]
    return Toolchain.find(), MeasureConfig(), d, src, inputs, ref, mag


def test_right_reference_passes_wrong_one_fails(setup, capsys):
    tools, cfg, d, src, inputs, ref, mag = setup
    assert mc.checked(tools, cfg, "default", src, d, inputs, ref, mag) is not None
    wrong = [ref[0].copy()]
    wrong[0][3, 5] += 0.5  # one element off
    assert mc.checked(tools, cfg, "default", src, d, inputs, wrong, mag) is None
    assert "FAILED default: output does not match the reference" in capsys.readouterr().err


def test_unparsable_library_is_not_applied(setup):
    tools, cfg, d, src, *_ = setup
    lib = d / "broken_library.mlir"
    lib.write_text('#t = #iree_codegen.translation_info<pipeline = '
                   '#iree_codegen.transform_dialect_codegen codegen_spec = @strategy_t0>\n'
                   "module attributes {transform.with_named_sequence} { this does not parse }\n")
    assert mc.library_strategies(lib) == {"strategy_t0"}
    with pytest.raises(mc.CheckFailed, match=r"strategies not applied.*strategy_t0"):
        mc.build(tools, cfg, "tuned", src, d, library=lib)


def test_failed_compile_is_reported_with_its_status(setup):
    tools, cfg, d, src, *_ = setup
    with pytest.raises(mc.CheckFailed, match="iree-compile exited with 1"):
        mc.build(tools, cfg, "bad flags", src, d, extra=["--no-such-iree-flag"])


def test_the_suite_counts_the_flops_of_the_form_that_runs_only():
    """bench_ops' GFLOP/s: a task of the form not handed back (Winograd's other form, a
    packed layout's other form) is not the model's work."""
    import bench_ops

    report = {"tasks": [
        {"MFLOP": "925.2", "weight": 1, "status": "tuned"},
        {"MFLOP": "10.0", "weight": 2, "status": "default kept"},
        {"MFLOP": "303.2", "weight": 1, "status": "only in the Winograd form: not handed back"},
        {"MFLOP": "50.0", "weight": 1,
         "status": "packed t3, in the direct form only: not handed back"},
        {"MFLOP": "40.0", "weight": 1, "status": "packed t1: not used"},
        {"MFLOP": "30.0", "weight": 1, "status": "replaced by a packed layout"},
    ]}
    assert bench_ops.model_flops(report, "m") == pytest.approx(945.2e6)
