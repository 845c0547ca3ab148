from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from mlir_ansor.dialect_helpers.linalg_info import analyze_task
from mlir_ansor.tuner.measure import MeasureConfig, TaskMeasurer
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.tasks import flow_source, extract_tasks
from mlir_ansor.tuner.toolchain import Toolchain

DATA = Path(__file__).parent / "data"
# Quick timing for tuning runs whose subject is not speed (fewer, shorter repetitions and
# rounds: TuneOptions' repeat, min_repeat_ms, retime_rounds, e2e_rounds), and no timed
# choice of IREE's data tiling (its own tests turn it on).
QUICK = dict(repeat=2, min_repeat_ms=10.0, retime_rounds=2, e2e_rounds=2, data_tiling="off",
             pad_fusion="off")
# (Choices timed on IREE's default builds off: a tiny model's 0.1 ms timings flip them
# under a loaded test run, and their forms change what the tests check.)
QUICK_CLI = ["--repeat", "2", "--min-repeat-ms", "10", "--retime-rounds", "2",
             "--e2e-rounds", "2", "--data-tiling", "off", "--pad-fusion", "off",
             "--small-sizes", "off", "--propagate-transposes", "off"]


def tune_cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """`python -m mlir_ansor.tune ARGS` in a child process from the repository root,
    output captured (the caller checks the exit code)."""
    return subprocess.run([sys.executable, "-m", "mlir_ansor.tune", *args],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True,
                          text=True, timeout=timeout)


def linalg_func(body_args: str, results: str, body: str) -> str:
    return f"func.func @main({body_args}) -> {results} {{\n{body}\n}}"


def mul_add_generic(x: str, w: str, out: str, dims: str, maps: tuple[str, str, str],
                    iterators: str) -> str:
    """A function computing one zero-filled sum of products `out += x * w` as a
    linalg.generic: tensor shapes like "4x8x30x30", loop names `dims` like "n, c, h",
    the three indexing map results, iterator types like "parallel, reduction"."""
    tx, tw, to = (f"tensor<{s}xf32>" for s in (x, w, out))
    amaps = ",\n      ".join(f"affine_map<({dims}) -> ({m})>" for m in maps)
    its = ", ".join(f'"{i.strip()}"' for i in iterators.split(","))
    return linalg_func(f"%x: {tx}, %w: {tw}", to, f"""
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : {to}
  %f = linalg.fill ins(%c0 : f32) outs(%e : {to}) -> {to}
  %r = linalg.generic {{indexing_maps = [
      {amaps}],
      iterator_types = [{its}]}}
      ins(%x, %w : {tx}, {tw}) outs(%f : {to}) {{
    ^bb0(%a: f32, %b: f32, %c: f32):
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %c, %m : f32
      linalg.yield %s : f32
  }} -> {to}
  return %r : {to}""")


MATMUL = linalg_func(
    "%a: tensor<64x32xf32>, %b: tensor<32x48xf32>", "tensor<64x48xf32>", """
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x48xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<64x48xf32>) -> tensor<64x48xf32>
  %r = linalg.matmul ins(%a, %b : tensor<64x32xf32>, tensor<32x48xf32>) outs(%f : tensor<64x48xf32>) -> tensor<64x48xf32>
  return %r : tensor<64x48xf32>""")

BATCH_MATMUL = linalg_func(
    "%a: tensor<4x64x32xf32>, %b: tensor<4x32x48xf32>", "tensor<4x64x48xf32>", """
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x64x48xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x64x48xf32>) -> tensor<4x64x48xf32>
  %r = linalg.batch_matmul ins(%a, %b : tensor<4x64x32xf32>, tensor<4x32x48xf32>) outs(%f : tensor<4x64x48xf32>) -> tensor<4x64x48xf32>
  return %r : tensor<4x64x48xf32>""")

ELEMENTWISE = linalg_func(
    "%a: tensor<32x64xf32>, %b: tensor<32x64xf32>", "tensor<32x64xf32>", """
  %e = tensor.empty() : tensor<32x64xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>,
      affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<32x64xf32>, tensor<32x64xf32>) outs(%e : tensor<32x64xf32>) {
    ^bb0(%x: f32, %y: f32, %o: f32):
      %v = arith.addf %x, %y : f32
      linalg.yield %v : f32 } -> tensor<32x64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
      iterator_types = ["parallel", "parallel"]}
      ins(%s : tensor<32x64xf32>) outs(%e : tensor<32x64xf32>) {
    ^bb0(%x: f32, %o: f32):
      %v = math.exp %x : f32
      linalg.yield %v : f32 } -> tensor<32x64xf32>
  return %r : tensor<32x64xf32>""")

ROW_SUM = (DATA / "row_sum.mlir").read_text()


class ConvBnRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


@pytest.fixture(scope="session")
def tools() -> Toolchain:
    return Toolchain.find()


@pytest.fixture(scope="session")
def conv_tasks(tools, tmp_path_factory):
    """Tasks IREE forms for a conv+bn+relu imported by torch-mlir."""
    torch.manual_seed(0)
    model = ConvBnRelu().eval()
    text = import_model(model, (torch.randn(1, 8, 16, 16),))
    path = tmp_path_factory.mktemp("conv") / "model.mlir"
    path.write_text(text)
    return extract_tasks(flow_source(path, "llvm-cpu", tools, 300))


def ops_of(text: str):
    return analyze_task(text)


def assert_computes_torchs_numbers(text: str, model, inputs: tuple, tools: Toolchain,
                                   work: Path, atol: float = 1e-4) -> None:
    """The model `text` compiles with IREE's defaults and its output matches torch's."""
    import numpy as np

    from mlir_ansor.tuner import measure as M
    from mlir_ansor.tuner.e2e import compile_model, save_inputs

    (work / "m.mlir").write_text(text)
    compile_model(tools, work / "m.mlir", work / "m.vmfb", M.MeasureConfig(), None)
    outs, err = M.run_outputs(tools, work / "m.vmfb", save_inputs(inputs, work), 1, work,
                              M.MeasureConfig())
    assert not err
    np.testing.assert_allclose(outs[0], model(*inputs).detach().numpy(), rtol=1e-4, atol=atol)


def prepared_measurer(tools: Toolchain, workdir: Path, payload: str) -> TaskMeasurer:
    """A prepared measurer (quick timing) of the tunable task a payload function forms."""
    (workdir / "m.mlir").write_text(payload)
    task = [t for t in extract_tasks(flow_source(workdir / "m.mlir", "llvm-cpu", tools, 120))
            if t.tunable][0]
    # One timing process per candidate: tests/test_measure.py tests the spread on its own.
    cfg = MeasureConfig(repetitions=2, min_time_s=0.01, spread_processes=1)
    m = TaskMeasurer(task, workdir / "tasks", tools, cfg)
    m.prepare()
    return m


def pytest_configure(config):
    config.addinivalue_line("markers", "injects_internal_error: the test provokes an internal "
                            "error on purpose")


@pytest.fixture(autouse=True)
def no_unexpected_internal_errors(request):
    """Any internal error (a bug of ours caught so the search goes on) fails the test that
    caused it, unless the test injects it on purpose."""
    from mlir_ansor.tuner.status import INTERNAL_ERRORS

    before = len(INTERNAL_ERRORS)
    yield
    new = INTERNAL_ERRORS[before:]
    if new and request.node.get_closest_marker("injects_internal_error") is None:
        pytest.fail(f"internal errors during the test: {new}")


@pytest.fixture(scope="session", autouse=True)
def no_internal_errors_in_records(tmp_path_factory):
    """The same for tuning runs in child processes (the CLI tests): no record they wrote
    may be an internal error."""
    yield
    import json

    base = tmp_path_factory.getbasetemp()
    bad = []
    for f in base.rglob("records.jsonl"):
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if '"internal_error"' in line:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("status") == "internal_error":
                    bad.append(f"{f}:{n}: {rec.get('error', '')[:200]}")
    if bad:
        pytest.fail("internal errors recorded by tuning runs: " + "; ".join(bad[:5]))


def compiled_matmul(tmp_path: Path, target: str, extra_flags: tuple[str, ...] = ()
                    ) -> tuple[Path, list[Path]]:
    """A 64^3 matmul module built for `target` into tmp_path/c/cand.vmfb (one module per
    folder, as a builder leaves it), and the .npy files a runner checks it with: a, b, the
    right product, a wrong one, and the magnitude bound."""
    import subprocess

    import numpy as np

    from mlir_ansor.tuner.toolchain import target_flags

    t = "tensor<64x64xf32>"
    src = tmp_path / "mm.mlir"
    src.write_text(linalg_func(f"%a: {t}, %b: {t}", t, f"""
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : {t}
  %f = linalg.fill ins(%c0 : f32) outs(%e : {t}) -> {t}
  %r = linalg.matmul ins(%a, %b : {t}, {t}) outs(%f : {t}) -> {t}
  return %r : {t}"""))
    vmfb = tmp_path / "c" / "cand.vmfb"
    vmfb.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([Toolchain.find().compile, str(src), *target_flags(target), "-o", str(vmfb),
                    *extra_flags], check=True)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    paths = []
    for name, arr in (("a", a), ("b", b), ("ref", a @ b), ("wrong", a @ b + 1),
                      ("mag", np.abs(a) @ np.abs(b))):
        paths.append(tmp_path / f"{name}.npy")
        np.save(paths[-1], arr)
    return vmfb, paths
