"""Channels-last activations: the rewrite keeps the model's numbers, the tuner's choice
follows the side-by-side timing, api.load re-applies it, and the dispatches it brings
(outputs written through a map_store into the next conv's padded input) tune and validate."""
import random

import numpy as np
import pytest
import torch
from torch import nn

from mlir_ansor.dialect_helpers.activation_layout import channels_first_convs, to_channels_last
from mlir_ansor.dialect_helpers.layout_rewrite import LayoutRewriteError
from mlir_ansor.sketch_passes.annotation import annotate, violations
from mlir_ansor.sketch_passes.program import ParallelStep, Program, SplitStep
from mlir_ansor.tuner import measure as M
from mlir_ansor.tuner.e2e import save_inputs
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.layouts import (ModelLayout, choose_activation_layout, load_layout,
                                      save_layout)
from mlir_ansor.tuner.tasks import extract_tasks, flow_source
from tests.conftest import assert_computes_torchs_numbers


class TwoConvs(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(8, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 16, 3, padding=1)

    def forward(self, x):
        return self.c2(torch.relu(self.c1(x)))


@pytest.fixture(scope="module")
def two_convs():
    torch.manual_seed(0)
    model, inputs = TwoConvs().eval(), (torch.randn(1, 8, 24, 24),)
    return model, inputs, import_model(model, inputs)


def test_channels_last_converts_every_nchw_conv_and_keeps_the_numbers(two_convs, tools,
                                                                       tmp_path):
    model, inputs, text = two_convs
    assert channels_first_convs(text) == 2
    cl = to_channels_last(text)
    assert channels_first_convs(cl) == 0 and cl.count("linalg.conv_2d_nhwc_hwcf") == 2
    assert_computes_torchs_numbers(cl, model, inputs, tools, tmp_path)


@pytest.mark.parametrize("conv, shape, after", [
    (nn.Conv1d(8, 16, 3, 2, 1), (1, 8, 20), "linalg.generic"),
    (nn.Conv3d(4, 8, 3, 1, 1), (1, 4, 6, 6, 6), "linalg.generic"),
    (nn.Conv2d(8, 8, 3, 2, 1, groups=8), (2, 8, 9, 9), "linalg.depthwise_conv_2d_nhwc_hwc "),
    # (torch-mlir imports a 1-D depthwise conv as a 2-D one of height 1)
    (nn.Conv1d(8, 8, 3, 1, 2, dilation=2, groups=8), (1, 8, 20),
     "linalg.depthwise_conv_2d_nhwc_hwc "),
    # A grouped conv: a generic whose filter is [G, KH, KW, C, F] (loops n h w g f kh kw c).
    (nn.Conv2d(8, 16, 3, 1, 1, groups=4), (1, 8, 10, 10), "-> (d3, d5, d6, d7, d4)>"),
    (nn.Conv2d(8, 16, 3, 2, 2, dilation=2, groups=2), (2, 8, 11, 11),
     "-> (d0, d1 * 2 + d5 * 2, d2 * 2 + d6 * 2, d3, d7)>"),
], ids=["conv1d", "conv3d", "depthwise2d", "depthwise1d", "grouped2d", "grouped2d_strided"])
def test_other_convs_turn_channels_last_too(conv, shape, after, tools, tmp_path):
    """Not only 2-D convs: 1-D (NCW) and 3-D (NCDHW), depthwise and grouped convs get their
    channels innermost and still compute torch's numbers."""
    torch.manual_seed(0)
    model, inputs = conv.eval(), (torch.randn(*shape),)
    text = import_model(model, inputs)
    assert channels_first_convs(text) == 1
    cl = to_channels_last(text)
    assert channels_first_convs(cl) == 0 and after in cl
    assert_computes_torchs_numbers(cl, model, inputs, tools, tmp_path)


class MBConvLike(nn.Module):
    """EfficientNet's block: expand 1x1 conv, BN, SiLU, depthwise conv, BN, SiLU, a
    squeeze-excitation (global average pool, two 1x1 convs, sigmoid, scale), project."""

    def __init__(self, c: int = 8, e: int = 32):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e),
                                    nn.SiLU())
        self.dw = nn.Sequential(nn.Conv2d(e, e, 3, 1, 1, groups=e, bias=False),
                                nn.BatchNorm2d(e), nn.SiLU())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(e, 4, 1), nn.SiLU(),
                                nn.Conv2d(4, e, 1), nn.Sigmoid())
        self.project = nn.Conv2d(e, c, 1, bias=False)

    def forward(self, x):
        y = self.dw(self.expand(x))
        return self.project(y * self.se(y))


def _activation_transposes(text: str) -> int:
    return sum(text.count(f"permutation = {p}") for p in ("[0, 3, 1, 2]", "[0, 2, 3, 1]"))


def test_batch_norms_silus_and_pools_leave_no_transposes_between_convs(tools, tmp_path):
    """IREE's pass leaves a batch norm, a SiLU's `x * sigmoid(x)` and the SE's pool
    channels-first between transposes; with IREE's transpose propagation off (folded
    weight transposes) those stayed and the depthwise conv read its input NCHW. Sunk
    through them, only the model's input and output transposes remain (and the pooled
    vector's), and the numbers are torch's."""
    torch.manual_seed(0)
    model = MBConvLike().eval()
    with torch.no_grad():  # batch norms with statistics of their own, not the identity
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    inputs = (torch.randn(1, 8, 12, 12),)
    text = import_model(model, inputs)
    cl = to_channels_last(text)
    assert channels_first_convs(cl) == 0
    # Input, output, the pooled [1, C, 1, 1] vector: three (IREE's pass alone left eight).
    assert _activation_transposes(cl) == 3, _activation_transposes(cl)
    assert "linalg.depthwise_conv_2d_nhwc_hwc" in cl
    assert_computes_torchs_numbers(cl, model, inputs, tools, tmp_path)


def test_a_model_without_nchw_convs_is_named(tmp_path):
    text = import_model(nn.Linear(8, 4).eval(), (torch.randn(2, 8),))
    assert channels_first_convs(text) == 0
    with pytest.raises(LayoutRewriteError, match="no NCHW \(NCW, NCDHW\) convolution"):
        to_channels_last(text)


def test_the_choice_follows_the_side_by_side_times(two_convs, tools, tmp_path):
    model, inputs, text = two_convs
    src = tmp_path / "model.mlir"
    src.write_text(text)
    cfg = M.MeasureConfig(repetitions=3, min_time_s=0.01)
    choice = choose_activation_layout(src, save_inputs(inputs, tmp_path), tmp_path / "w",
                                      tools, cfg, tolerance=1.10, rounds=2)
    assert choice.plain_s > 0 and choice.channels_last_s > 0
    assert choice.channels_last == (choice.channels_last_s < choice.plain_s * 1.10)
    assert (tmp_path / "model_channels_last.mlir").exists()
    never = choose_activation_layout(src, save_inputs(inputs, tmp_path), tmp_path / "w",
                                     tools, cfg, tolerance=1e-9, rounds=1)
    assert not never.channels_last and never.why


def test_load_re_applies_channels_last(two_convs, tmp_path):
    from mlir_ansor import api

    model, inputs, _ = two_convs
    save_layout(tmp_path / "layout.json", ModelLayout(channels_last=True))
    (tmp_path / "report.json").write_text('{"e2e": {"m": {"handed_back": "tuned"}}}')
    assert load_layout(tmp_path / "layout.json").changed
    tuned = api.load(model, inputs, tmp_path)
    np.testing.assert_allclose(tuned(*inputs), model(*inputs).detach().numpy(),
                               rtol=1e-4, atol=1e-4)
    assert "linalg.conv_2d_nhwc_hwcf" in (tmp_path / "api" / "model.mlir").read_text()


def test_map_store_outputs_tune_and_validate(two_convs, tools, tmp_path):
    """The first conv's output goes into the second conv's padded input through a map_store:
    its random programs compile, apply and validate (all failed before: the strategy
    expected one tileable op less), and their workgroup tiles fit IREE's stack limit."""
    _, _, text = two_convs
    (tmp_path / "cl.mlir").write_text(to_channels_last(text))
    tasks = [t for t in extract_tasks(flow_source(tmp_path / "cl.mlir", "llvm-cpu", tools, 300))
             if t.tunable]
    cfg = M.MeasureConfig(repetitions=1, min_time_s=0.001, compile_timeout_s=60)
    stored = []
    for t in tasks:
        m = M.TaskMeasurer(t, tmp_path / t.task_id, tools, cfg)
        m.prepare()
        if m.task.ops and m.task.ops[-1].map_stored:
            stored.append(m)
    assert len(stored) == 1
    m = stored[0]
    rng = random.Random(0)
    progs = [annotate(m.task.ops, m.task.sketches[i % len(m.task.sketches)], rng)
             for i in range(4)]
    assert all(violations(m.task.ops, p) == [] for p in progs)
    recs = m.measure(progs)
    assert [r.status for r in recs] == ["ok"] * 4, [r.error[:200] for r in recs]
    # A whole-output workgroup tile would need two 36 KiB stack buffers here: rejected.
    root = next(o for o in m.task.ops if o.reduction_dims)
    whole = {(root.name, l): SplitStep(root.name, l, (1, root.extents[l], 1))
             for l in root.parallel_dims}
    big = Program(progs[0].sketch, tuple(
        ParallelStep(root.name, ()) if isinstance(s, ParallelStep)
        else whole.get((s.op, getattr(s, "loop", None)), s) for s in progs[0].steps))
    assert "workgroup tile too large for a map_store output" in violations(m.task.ops, big)


def test_a_consumer_writing_back_to_nchw_validates(two_convs, tools, tmp_path):
    """The last conv's bias writes the model's NCHW output (a transposed map): the fused
    consumer's tiles are mapped through the map it reads the conv with (mapped by output
    dims, two of these six programs failed to compile)."""
    _, _, text = two_convs
    (tmp_path / "cl.mlir").write_text(to_channels_last(text))
    tasks = [t for t in extract_tasks(flow_source(tmp_path / "cl.mlir", "llvm-cpu", tools, 300))
             if t.tunable]
    cfg = M.MeasureConfig(repetitions=1, min_time_s=0.001, compile_timeout_s=60)
    m = M.TaskMeasurer(tasks[-1], tmp_path / "last", tools, cfg)
    m.prepare()
    anchor = m.task.ops[-1]
    assert anchor.output.map_results[0] == ((3, 1),)  # channels first again
    rng = random.Random(0)
    progs = [annotate(m.task.ops, m.task.sketches[0], rng) for _ in range(6)]
    recs = m.measure(progs)
    assert [r.status for r in recs] == ["ok"] * 6, [r.error[:200] for r in recs]


def test_programs_transfer_only_where_they_are_valid():
    """Two tasks with the same loops share their best programs, but a workgroup tile that
    fits a plain output can overflow the stack when the output goes through a map_store
    (10 of 96 `make tune` trials failed that way before the check)."""
    from dataclasses import replace as dc_replace

    from mlir_ansor.dialect_helpers.linalg_info import analyze_task
    from mlir_ansor.sketch_passes.rules import default_cpu_rules
    from mlir_ansor.sketch_passes.sketch import generate_sketches
    from mlir_ansor.targets import DEFAULT_CPU
    from mlir_ansor.tuner.records import Record
    from mlir_ansor.tuner.search import transferable
    from mlir_ansor.tuner.tasks import Task
    from tests.conftest import DATA

    stored = tuple(analyze_task((DATA / "conv_nhwc_map_store.mlir").read_text()))
    plain = tuple(dc_replace(o, map_stored=False) for o in stored)
    sketches = tuple(generate_sketches(stored, default_cpu_rules()))
    # The target annotate uses without one: the check below is for the same machine.
    task = lambda key, ops: Task(key, key, key, 1, "", "", (), (), ops, sketches,
                                 target=DEFAULT_CPU.name)
    a, b = task("a", plain), task("b", stored)
    rng = random.Random(0)
    progs = [annotate(plain, sketches[0], rng) for _ in range(40)]
    big = [p for p in progs if violations(stored, p)]
    small = [p for p in progs if not violations(stored, p)]
    assert big and small
    recs = [Record("a", p.to_json(), p.key, "ok", latency_s=0.001 * i)
            for i, p in enumerate(big[:1] + small[:1])]
    got = transferable(b, [a, b], recs, set())
    assert got == small[:1]
