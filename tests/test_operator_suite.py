"""The paper's operator suite through the normal frontend: the sketches of every task, and
random programs of each workload's main task that compile, apply and validate.

Sketches per tunable task (the copy dispatch IREE adds for padding is left to IREE):
- C1D, C2D, C3D, GMM, GRP, DIL, DEP: one task; (1) cache write + SSRSRS,
  (2) SSRSRS accumulating in place.
- T2D: split into its output phases at import (dialect_helpers/transposed_conv.py): the
  phase conv (one task, the four phases alike: cache write + SSRSRS, SSRSRS) and the
  interleave of the phases' outputs (plain).
- CAP: the window gather (plain), the capsule contraction (cache write + SSRSRS, SSRSRS),
  the output relayout (plain).
- NRM: the sum of squares (rfactor, plain); at batch 1 the whole matrix reduces to one
  scalar: rfactor only (partial sums in a one-workgroup forall); its square root, a scalar
  op, is left to IREE.
- ConvLayer: one task, SSRSRS with the batch norm + ReLU consumer fused.
- TBS: the two transposes (plain each), the batch matmul (cache write + SSRSRS, SSRSRS),
  the softmax (plain, on its decomposition).
"""
import random

import pytest

from mlir_ansor.examples.operators import SUITE
from mlir_ansor.sketch_passes.annotation import annotate
from mlir_ansor.tuner import measure as M
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.tasks import extract_tasks, flow_source

MLT = ["AddCacheWrite+MultiLevelTiling", "MultiLevelTiling"]
CONV_LIKE = {"C1D", "C2D", "C3D", "GMM", "GRP", "DIL", "DEP"}
EXPECTED = {
    "CAP": [["Plain"], MLT, ["Plain"]],
    "T2D": [MLT, ["Plain"]],
    "NRM-b1": [["AddRfactor"]],
    "NRM-b16": [["AddRfactor", "Plain"]],
    "ConvLayer": [["MultiLevelTilingWithFusion"]],
    "TBS": [["Plain"], ["Plain"], MLT, ["Plain"]],
}


def _expected(name: str) -> list[list[str]]:
    op = SUITE[name].operator
    if op in CONV_LIKE:
        return [MLT]
    return EXPECTED.get(name, EXPECTED.get(op))


@pytest.fixture(scope="module")
def suite_tasks(tools, tmp_path_factory):
    d = tmp_path_factory.mktemp("suite")
    cache = {}

    def get(name):
        if name not in cache:
            model, inputs = SUITE[name]()
            (d / f"{name}.mlir").write_text(import_model(model, inputs))
            cache[name] = extract_tasks(flow_source(d / f"{name}.mlir", "llvm-cpu", tools, 300))
        return cache[name]
    return get, d


@pytest.mark.parametrize("name", list(SUITE))
def test_sketches(suite_tasks, name):
    get, _ = suite_tasks
    got = [[s.name for s in t.sketches] for t in get(name) if t.tunable]
    assert got == _expected(name)


@pytest.mark.parametrize("name", list(SUITE))
def test_random_programs_validate(suite_tasks, tools, name):
    """Three random programs of the task with the most FLOPs (sketches in turn)."""
    get, d = suite_tasks
    tunable = [t for t in get(name) if t.tunable]
    task = max(tunable, key=lambda t: t.flops)
    cfg = M.MeasureConfig(repetitions=1, min_time_s=0.001, compile_timeout_s=60)
    m = M.TaskMeasurer(task, d / name, tools, cfg)
    m.prepare()
    rng = random.Random(0)
    progs = [annotate(m.task.ops, m.task.sketches[i % len(m.task.sketches)], rng)
             for i in range(3)]
    recs = m.measure(progs)
    assert [r.status for r in recs] == ["ok"] * 3, [(p.sketch.name, r.error[:200])
                                                    for p, r in zip(progs, recs)]


class _Upsample(__import__("torch").nn.Module):
    def forward(self, x):
        import torch

        return torch.nn.functional.interpolate(x, scale_factor=2, mode="nearest") * 2.0


def test_gather_programs_validate(tools, tmp_path):
    """Nearest upsampling reads with tensor.extract at computed indices: that op is left
    to scalar loops (OpInfo.scalar) and every sampled program must validate; one in three
    failed before."""
    import torch

    model, inputs = _Upsample().eval(), (torch.randn(1, 8, 32, 32),)
    (tmp_path / "m.mlir").write_text(import_model(model, inputs))
    tasks = [t for t in extract_tasks(flow_source(tmp_path / "m.mlir", "llvm-cpu", tools, 300))
             if t.tunable]
    m = M.TaskMeasurer(tasks[0], tmp_path / "w", tools,
                       M.MeasureConfig(repetitions=1, min_time_s=0.001, compile_timeout_s=60))
    m.prepare()
    assert any(o.scalar for o in m.task.ops)
    rng = random.Random(0)
    progs = [annotate(m.task.ops, m.task.sketches[0], rng) for _ in range(6)]
    recs = m.measure(progs)
    assert [r.status for r in recs] == ["ok"] * 6, [r.error[:200] for r in recs]


class _AllMasked(__import__("torch").nn.Module):
    """Which rows are wholly masked (what torch's causal scaled_dot_product_attention
    checks): a reduction into a bool, which IREE stores as i8."""

    def forward(self, x):
        return (x == float("-inf")).all(dim=-1)


class _BiasArgmax(__import__("torch").nn.Module):
    """An argmax over 37 classes after a bias: IREE fuses the bias into the (max, index)
    reduction, whose index is a select."""

    def __init__(self):
        import torch

        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(37))

    def forward(self, x):
        return (x + self.bias).argmax(-1)


@pytest.mark.parametrize("model", [_AllMasked, _BiasArgmax])
def test_a_reduction_without_a_plain_combiner_is_left_scalar_and_validates(model, tools,
                                                                           tmp_path):
    """Vectorized, every program of a bool reduction failed to compile ("Attempted to
    vectorize, but failed": the combiner sits between i8/i1 casts); an argmax got
    multi-level tiling sketches and 16 of 24 programs failed ("tracking listener failed").
    Such an op is scalar, gets no multi-level tiling nor rfactor, and every sampled
    program of every sketch validates."""
    import torch

    torch.manual_seed(0)
    x = torch.randn(197, 37)
    x[::3] = float("-inf")
    (tmp_path / "m.mlir").write_text(import_model(model().eval(), (x,)))
    tasks = [t for t in extract_tasks(flow_source(tmp_path / "m.mlir", "llvm-cpu", tools, 300))
             if t.tunable]
    (task,) = [t for t in tasks if any(o.reduction_dims for o in t.ops)]
    assert any(o.scalar for o in task.ops)
    assert not any(s.root for s in task.sketches)
    m = M.TaskMeasurer(task, tmp_path / "w", tools,
                       M.MeasureConfig(repetitions=1, min_time_s=0.001, compile_timeout_s=60))
    m.prepare()
    rng = random.Random(0)
    progs = [annotate(m.task.ops, s, rng) for s in m.task.sketches for _ in range(3)]
    recs = m.measure(progs)
    assert [r.status for r in recs] == ["ok"] * len(progs), [r.error[:200] for r in recs]


class _FlatArgmax(__import__("torch").nn.Module):
    def forward(self, x):
        return x.argmax()


def test_a_full_argmax_is_left_to_iree_with_the_reason(tools, tmp_path):
    """A reduction to a scalar runs as one workgroup's partial result merged after it,
    which needs a combiner the tiling recognizes: an argmax has none."""
    import torch

    (tmp_path / "m.mlir").write_text(import_model(_FlatArgmax().eval(), (torch.randn(4096),)))
    (task,) = extract_tasks(flow_source(tmp_path / "m.mlir", "llvm-cpu", tools, 300))
    assert not task.tunable and "without a plain combiner" in task.skip_reason


def _assert_sampled_programs_validate(task, tools, tmp_path, n: int) -> None:
    """`n` programs sampled from the task's first sketch all compile, run and match."""
    m = M.TaskMeasurer(task, tmp_path / "w", tools,
                       M.MeasureConfig(repetitions=1, min_time_s=0.001, compile_timeout_s=60))
    m.prepare()
    rng = random.Random(0)
    recs = m.measure([annotate(m.task.ops, m.task.sketches[0], rng) for _ in range(n)])
    assert [r.status for r in recs] == ["ok"] * n, [r.error[:200] for r in recs]


class _Bilinear(__import__("torch").nn.Module):
    def forward(self, x):
        import torch

        return torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear",
                                               align_corners=False)


def test_bilinear_sampling_is_validated_on_in_range_positions(tools, tmp_path):
    """IREE hands bilinear upsampling's sample positions to the dispatch as inputs (floats
    converted with fptosi, integers wrapped by torch's negative-index select): drawn as
    ordinary values they read outside the image, and every candidate, IREE's default too,
    read garbage (4 of 4 'wrong answers' on an unseen model, twice: once for the paths,
    once for the conversion in an op of its own). They are drawn over the indexed extent,
    and sampled programs validate."""
    import torch

    from mlir_ansor.tuner.validation import index_bounds

    (tmp_path / "m.mlir").write_text(import_model(_Bilinear().eval(),
                                                  (torch.randn(1, 8, 32, 32),)))
    tasks = [t for t in extract_tasks(flow_source(tmp_path / "m.mlir", "llvm-cpu", tools, 300))
             if t.tunable and any(o.scalar for o in t.ops)]
    task = max(tasks, key=lambda t: len(M.module_index_bounds(t)))
    # The float positions (converted by an elementwise op, then gathered with) and a
    # wrapped integer index, mapped to the runnable module's inputs (which add the padded
    # buffer the dispatch writes into).
    assert len(M.module_index_bounds(task)) >= 2
    assert len(index_bounds(task.task_mlir)) >= 2
    _assert_sampled_programs_validate(task, tools, tmp_path, 4)


class _Bicubic(__import__("torch").nn.Module):
    def forward(self, x):
        import torch

        return torch.nn.functional.interpolate(x, size=(45, 45), mode="bicubic",
                                               align_corners=False)


def test_index_inputs_are_found_when_the_dispatch_loads_its_arguments_in_another_order(
        tools, tmp_path):
    """Bicubic upsampling's gathers: the dispatch's integer positions are its 4th-6th
    arguments, but the analyzed function takes the loads in body order (the image first,
    slices of the weight rows after): the bounds must land on the runnable module's own
    positions. Bounds matched by position alone were dropped, every candidate of the
    unseen model read outside the image (24 of 24 'wrong answers', NaN)."""
    import torch

    from mlir_ansor.tuner.validation import index_bounds

    (tmp_path / "m.mlir").write_text(import_model(_Bicubic().eval(),
                                                  (torch.randn(1, 3, 30, 30),)))
    tasks = [t for t in extract_tasks(flow_source(tmp_path / "m.mlir", "llvm-cpu", tools, 300))
             if t.tunable and index_bounds(t.task_mlir)]
    assert tasks
    for task in tasks:
        bounds = M.module_index_bounds(task)
        assert bounds and all("i64" in task.input_types[p] and b == 30
                              for p, b in bounds.items()), (task.input_types, bounds)
    task = tasks[0]
    _assert_sampled_programs_validate(task, tools, tmp_path, 3)
