"""Dynamic dispatches as tasks (DietCode-style micro-kernels): extraction with the sizes'
expressions, analysis at a sample with the dynamic loops marked, sketches and programs
that serve every size, and measurement at every size sample."""
import random

import pytest
import torch

from mlir_ansor.dynamic import tune_sizes
from mlir_ansor.sketch_passes.annotation import annotate, violations
from mlir_ansor.sketch_passes.program import ParallelStep, PeelStep, SplitStep
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.measure import MeasureConfig, TaskMeasurer
from mlir_ansor.tuner.tasks import SizeSample, extract_tasks, flow_source
from tests.data.small_mlp import GeluMlp


@pytest.fixture(scope="module")
def dyn_tasks(tools, tmp_path_factory):
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("dyn")
    rows = torch.export.Dim("rows", min=1, max=256)
    (d / "m.mlir").write_text(import_model(GeluMlp().eval(), (torch.randn(8, 64),),
                                           {"x": {0: rows}}))
    return extract_tasks(flow_source(d / "m.mlir", "llvm-cpu", tools, 300)), d


def test_sizes_follow_the_model_inputs(dyn_tasks):
    tasks, _ = dyn_tasks
    assert len(tasks) == 2 and all(t.dynamic and t.tunable for t in tasks)
    t = tasks[0]
    # The runnable module's one `?` (the rows of its first input) is the model's x dim 0.
    assert [(i, d, str(e)) for i, d, e in t.size_exprs] == [(0, 0, "in0[0]")]
    s = SizeSample((((0, 0), 37),))
    assert t.input_types_at(s)[0] == "tensor<37x64xf32>" and t.ordinal_sizes(s) == {0: 37}
    # Read at a nominal size: the row loop of every op is the dynamic one.
    assert {o.name: o.dynamic_loops for o in t.ops} == \
        {"op0_fill": (0,), "op1_matmul": (0,), "op2_generic": (0,)}


def test_no_sketch_keeps_a_dynamically_sized_local_tile(dyn_tasks):
    tasks, _ = dyn_tasks
    for t in tasks:
        assert t.sketches and not any(s.local_tile or s.consumer_fused for s in t.sketches)


def test_programs_are_micro_kernels_over_the_dynamic_loop(dyn_tasks):
    t = dyn_tasks[0][0]
    rng = random.Random(3)
    for _ in range(30):
        p = annotate(t.ops, t.sketches[0], rng)
        assert violations(t.ops, p) == []
        root = p.sketch.root
        k, one, c = p.split(root, 0).lengths
        assert one == 1 and c >= 1 and PeelStep(root, 0) in p.steps
        assert 0 in p.find(ParallelStep, root).loops
    # A dividing split of the dynamic loop is no program of it.
    bad = p.__class__(p.sketch, tuple(SplitStep(root, 0, (2, 2, 4)) if
                                      isinstance(s, SplitStep) and s.loop == 0 else s
                                      for s in p.steps))
    assert any("dynamic loop" in e for e in violations(t.ops, bad))


def test_mutations_move_the_kernel_rows_and_the_workgroup_kernels(dyn_tasks):
    from mlir_ansor.sketch_passes.mutations import mutate_tile_size

    t = dyn_tasks[0][0]
    rng = random.Random(11)
    p = annotate(t.ops, t.sketches[0], rng)
    ks, cs = set(), set()
    for _ in range(200):
        q = mutate_tile_size(t.ops, p, rng)
        if q is None:
            continue
        assert violations(t.ops, q) == []
        k, _, c = q.split(q.sketch.root, 0).lengths
        ks.add(k)
        cs.add(c)
    assert len(ks) > 1 and len(cs) > 1


def test_tune_sizes_cover_the_range_with_odd_sizes():
    assert tune_sizes(1, 1024) == (1, 7, 33, 181, 1024)
    assert tune_sizes(2, 5) == (2, 3, 4, 5)
    inner = tune_sizes(16, 128)[1:-1]
    assert all(n % 2 for n in inner) and tune_sizes(16, 128)[::4] == (16, 128)


def test_candidates_are_validated_and_timed_at_every_size(dyn_tasks, tools):
    tasks, d = dyn_tasks
    samples = tuple(SizeSample((((0, 0), n),)) for n in (1, 37, 256))
    t = tasks[0].__class__(**{**tasks[0].__dict__, "samples": samples})
    m = TaskMeasurer(t, d / "tasks", tools, MeasureConfig(repetitions=2, min_time_s=0.01))
    m.prepare()
    assert [p.label for p in m.points] == ["1", "37", "256"]
    rng = random.Random(5)
    progs = [annotate(m.task.ops, m.task.sketches[0], rng) for _ in range(3)]
    runs, runner = [], m.runner

    class Recording:  # the three sizes share one candidate's timing budget
        def run(self, item):
            runs.append(item)
            return runner.run(item)

    m.runner = Recording()
    recs = m.measure(progs)
    assert all(r.status == "ok" for r in recs), [r.error for r in recs]
    timed = [r.timing_share for r in runs if r.time]
    assert timed and timed == pytest.approx([1 / 3] * len(timed))
    for r in recs:
        assert set(r.by_size) == {"1", "37", "256"}
        assert r.latency_s == pytest.approx(sum(r.by_size.values()) / 3)
    # Once IREE's default was timed at each size, a size counts by its time relative to
    # the default there (the mean would be the largest size's alone).
    d = m.time_default()
    assert set(m.default_at) == {"1", "37", "256"}
    assert d == pytest.approx(sum(m.default_at.values()) / 3)
    r = m.measure(progs[:1])[0]
    assert r.latency_s == pytest.approx(d * sum(r.by_size[k] / m.default_at[k]
                                                for k in m.default_at) / 3)


def test_shape_weights_weight_the_nearest_sample(tmp_path):
    from mlir_ansor.dynamic import (parse_dynamic, read_shape_weights, resolve,
                                    sample_weights, tune_samples)

    r = resolve(GeluMlp(), (torch.randn(8, 64),), [parse_dynamic("x:0=1..1024")])
    f = tmp_path / "w.txt"
    f.write_text("# batch sizes seen in serving\n1 10\n2 5\n30 3\n1000 2\n")
    samples = tune_samples(r)  # sizes 1, 7, 33, 181, 1024
    assert sample_weights(r, samples, read_shape_weights(str(f))) == [15, 0, 3, 0, 2]
    f.write_text("1 10\n2048 1\n")
    with pytest.raises(Exception, match="2048 of x_0 is outside 1..1024"):
        sample_weights(r, samples, read_shape_weights(str(f)))
    f.write_text("1 ten\n")
    with pytest.raises(Exception, match="line 1: expected 'SIZE COUNT'"):
        read_shape_weights(str(f))


def test_a_dynamic_model_is_judged_over_all_its_sizes():
    from mlir_ansor.tuner.e2e import EndToEnd

    static = EndToEnd(1.0, 2.0, 1.0, (), 0.0)
    assert static.speedup == pytest.approx(2.0)
    # 2x faster at the example size, 2x slower at two others: slower on the whole.
    dyn = EndToEnd(1.0, 2.0, 1.0, (), 0.0, ("n=1", "n=512"),
                   by_size=(("n=1", 1.0, 1.0, 2.0), ("n=512", 1.0, 4.0, 8.0)))
    assert dyn.speedup == pytest.approx(0.5 ** (1 / 3))


class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 64)

    def forward(self, x, y):
        return y + self.fc(x)  # a second dynamic input + matmul + bias (as BERT's residual)


def test_a_dispatch_with_two_dynamic_inputs_compiles_with_our_strategies(tools, tmp_path):
    """The consumer's first input is the residual, a second dynamically sized binding: the
    workgroup forall's bounds were read off it, and IREE could not lower the workgroup
    count ("failed to legalize operation 'stream.cmd.dispatch'": every candidate of BERT's
    residual matmuls failed)."""
    torch.manual_seed(0)
    rows = torch.export.Dim("rows", min=1, max=256)
    (tmp_path / "m.mlir").write_text(import_model(
        Residual().eval(), (torch.randn(8, 64), torch.randn(8, 64)),
        {"x": {0: rows}, "y": {0: rows}}))
    tasks = [t for t in extract_tasks(flow_source(tmp_path / "m.mlir", "llvm-cpu", tools, 300))
             if t.tunable]
    assert len(tasks) == 1 and sum(t.dynamic for t in tasks) == 1
    samples = tuple(SizeSample((((0, 0), n), ((1, 0), n))) for n in (1, 37))
    t = tasks[0].__class__(**{**tasks[0].__dict__, "samples": samples})
    assert len([s for s in t.input_types if "?" in s]) == 2
    m = TaskMeasurer(t, tmp_path / "tasks", tools, MeasureConfig(repetitions=1, min_time_s=0.01))
    m.prepare()
    rng = random.Random(2)
    recs = m.measure([annotate(m.task.ops, m.task.sketches[0], rng) for _ in range(3)])
    assert [r.status for r in recs] == ["ok"] * 3, [r.error[:300] for r in recs]


class HalvesOfRows(torch.nn.Module):
    """Both halves of a 1 x s x 128 input, read as s x 64 (IREE loads each with a
    rank-reducing slice of the dynamic tensor) into one matmul + ReLU + add dispatch."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(64, 48) * 0.1)

    def forward(self, x):
        a, b = x.split(64, dim=-1)
        return torch.relu(a[0] @ self.w) + b[0, :, :48]


def test_a_rank_reducing_dynamic_load_is_a_tunable_input(tools, tmp_path):
    torch.manual_seed(0)
    (tmp_path / "m.mlir").write_text(import_model(
        HalvesOfRows().eval(), (torch.randn(1, 8, 128),),
        {"x": {1: torch.export.Dim("s", min=1, max=64)}}))
    flow = flow_source(tmp_path / "m.mlir", "llvm-cpu", tools, 300)
    assert "sizes = [1, %0, 64]" in flow and "-> tensor<?x64xf32>" in flow  # rank-reducing
    (task,) = extract_tasks(flow)
    assert task.tunable and task.dynamic, task.skip_reason
    # The loads' `?` are the model's x dim 1.
    assert {str(e) for _, _, e in task.size_exprs} == {"in0[1]"}
    samples = tuple(SizeSample((((0, 1), n),)) for n in (1, 37))
    t = task.__class__(**{**task.__dict__, "samples": samples})
    m = TaskMeasurer(t, tmp_path / "tasks", tools, MeasureConfig(repetitions=1, min_time_s=0.01))
    m.prepare()
    assert m.task.tunable, m.task.skip_reason  # also as IREE's codegen hands it over
    rng = random.Random(3)
    recs = m.measure([annotate(m.task.ops, m.task.sketches[0], rng) for _ in range(2)])
    assert [r.status for r in recs] == ["ok"] * 2, [r.error[:300] for r in recs]


class Softmax(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


class SumOverRows(torch.nn.Module):
    def forward(self, x):
        return x.sum(dim=0)


class KOfMatmul(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


def test_a_softmax_over_a_dynamic_row_is_tuned_in_chunks(tools, tmp_path):
    """Rows of dynamic length (attention's softmax over the sequence): the row stays whole
    in a workgroup and every op's innermost loop runs in chunks of full vectors, the
    partial last chunk peeled; candidates match the reference at sizes that divide no
    chunk."""
    from mlir_ansor.sketch_passes.annotation import (DYNAMIC_WORKGROUP_KERNELS,
                                                     dynamic_row_splits)
    from mlir_ansor.sketch_passes.mutations import mutate_tile_size

    torch.manual_seed(0)
    s = torch.export.Dim("s", min=1, max=128)
    (tmp_path / "m.mlir").write_text(import_model(Softmax().eval(), (torch.randn(4, 8, 8),),
                                                  {"x": {1: s, 2: s}}))
    (task,) = extract_tasks(flow_source(tmp_path / "m.mlir", "llvm-cpu", tools, 300))
    assert task.tunable and task.dynamic, task.skip_reason
    samples = tuple(SizeSample((((0, 1), n), ((0, 2), n))) for n in (1, 37, 128))
    t = task.__class__(**{**task.__dict__, "samples": samples})
    m = TaskMeasurer(t, tmp_path / "tasks", tools, MeasureConfig(repetitions=1, min_time_s=0.01))
    m.prepare()
    ops, (sketch,) = m.task.ops, m.task.sketches
    anchor = ops[-1]
    assert sketch.root == "" and anchor.dynamic_loops == (1, 2)
    rng = random.Random(4)
    progs = [annotate(ops, sketch, rng) for _ in range(12)]
    chunks, rows = set(), set()
    for p in progs:
        assert violations(ops, p) == []
        (k,) = p.split(anchor.name, 1).lengths  # k rows per workgroup
        assert k in DYNAMIC_WORKGROUP_KERNELS and 1 in p.find(ParallelStep, anchor.name).loops
        whole, v = p.split(anchor.name, 2).lengths
        assert whole == anchor.extents[2] and v % 8 == 0  # the row whole, full vectors
        assert 2 not in p.find(ParallelStep, anchor.name).loops
        chunks.add(v)
        rows.add(k)
    assert len(chunks) > 1 and len(rows) > 1
    # A chunk that is no whole number of vectors, or a row cut over workgroups, is no
    # program of it.
    for bad in ((anchor.extents[2], 12), (16, 16)):
        q = p.__class__(p.sketch, tuple(SplitStep(anchor.name, 2, bad) if isinstance(
            x, SplitStep) and x.loop == 2 else x for x in p.steps))
        assert bad not in dynamic_row_splits(anchor, 2, {2})
        assert any("dynamic loop" in e for e in violations(ops, q))
    moved = {mutate_tile_size(ops, progs[0], random.Random(i)) for i in range(20)} - {None}
    assert moved and all(violations(ops, q) == [] for q in moved)
    recs = m.measure(progs[:3])
    assert [r.status for r in recs] == ["ok"] * 3, [r.error[:300] for r in recs]
    assert all(set(r.by_size) == {"1", "37", "128"} for r in recs)


def test_a_dynamic_reduction_without_a_chunked_row_is_left_to_iree(tools, tmp_path):
    """A sum over dynamic rows (IREE makes them the innermost loop, the output has no
    dynamic dim to chunk) and a contraction over a dynamic k (the root's reduction): no
    micro-kernel serves them yet; left to IREE with the reason."""
    s = torch.export.Dim("s", min=1, max=128)
    (tmp_path / "m.mlir").write_text(import_model(SumOverRows().eval(), (torch.randn(8, 64),),
                                                  {"x": {0: s}}))
    (tmp_path / "k.mlir").write_text(import_model(
        KOfMatmul().eval(), (torch.randn(8, 16), torch.randn(16, 32)),
        {"a": {1: s}, "b": {0: s}}))
    for name in ("m.mlir", "k.mlir"):
        (task,) = extract_tasks(flow_source(tmp_path / name, "llvm-cpu", tools, 300))
        assert not task.tunable
        assert task.skip_reason.startswith(
            "no micro-kernel sketch serves a dynamic reduction loop"), task.skip_reason


class RowNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(64)

    def forward(self, x):
        return self.ln(x)


def test_a_layer_norm_over_dynamic_rows_takes_k_rows_per_workgroup(tools, tmp_path):
    """Its statistics' row loop is dynamic inside a workgroup of k > 1 rows (a fixed size
    bounds it): cut to single elements, not vectorized whole (a dynamic vector)."""
    torch.manual_seed(0)
    s = torch.export.Dim("s", min=1, max=128)
    (tmp_path / "m.mlir").write_text(import_model(RowNorm().eval(), (torch.randn(8, 64),),
                                                  {"x": {0: s}}))
    tasks = [t for t in extract_tasks(flow_source(tmp_path / "m.mlir", "llvm-cpu", tools, 300))
             if t.tunable and any(not sk.root for sk in t.sketches)]
    task = tasks[-1]  # the normalisation (after its statistics' reductions)
    samples = tuple(SizeSample((((0, 0), n),)) for n in (1, 37))
    t = task.__class__(**{**task.__dict__, "samples": samples})
    m = TaskMeasurer(t, tmp_path / "tasks", tools, MeasureConfig(repetitions=1, min_time_s=0.01))
    m.prepare()
    plain = [sk for sk in m.task.sketches if not sk.root]
    assert plain, m.task.sketches
    rng = random.Random(6)
    progs = []
    while len(progs) < 2:
        p = annotate(m.task.ops, plain[0], rng)
        if p.split(plain[0].anchor, 0).lengths[0] > 1:
            progs.append(p)
    recs = m.measure(progs)
    assert [r.status for r in recs] == ["ok"] * 2, [r.error[:300] for r in recs]


# A dispatch of a small-size branch as IREE forms it: the branch padded its rows to 1 and
# cast the buffer back to `?`; IREE folded the cast into a 1x1x1 binding read as 1x?x1.
_BRANCH_DISPATCH = """
func.func @d(%arg0: !iree_tensor_ext.dispatch.tensor<readonly:tensor<1x1x1xf32>>,
             %arg1: !iree_tensor_ext.dispatch.tensor<readonly:tensor<?x8xf32>>, %arg2: index,
             %arg3: !iree_tensor_ext.dispatch.tensor<writeonly:tensor<?x8xf32>>) {
  %0 = iree_tensor_ext.dispatch.workload.ordinal %arg2, 0 : index
  %1 = flow.dispatch.tie_shape %arg1 : !iree_tensor_ext.dispatch.tensor<readonly:tensor<?x8xf32>>{%0}
  %2 = flow.dispatch.tie_shape %arg3 : !iree_tensor_ext.dispatch.tensor<writeonly:tensor<?x8xf32>>{%0}
  %3 = iree_tensor_ext.dispatch.tensor.load %1, offsets = [0, 0], sizes = [%0, 8], strides = [1, 1] : !iree_tensor_ext.dispatch.tensor<readonly:tensor<?x8xf32>>{%0} -> tensor<?x8xf32>
  %4 = iree_tensor_ext.dispatch.tensor.load %arg0, offsets = [0, 0, 0], sizes = [1, %0, 1], strides = [1, 1, 1] : !iree_tensor_ext.dispatch.tensor<readonly:tensor<1x1x1xf32>> -> tensor<?xf32>
  %5 = tensor.empty(%0) : tensor<?x8xf32>
  %6 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%3, %4 : tensor<?x8xf32>, tensor<?xf32>) outs(%5 : tensor<?x8xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %7 = arith.subf %in, %in_0 : f32
    linalg.yield %7 : f32
  } -> tensor<?x8xf32>
  iree_tensor_ext.dispatch.tensor.store %6, %2, offsets = [0, 0], sizes = [%0, 8], strides = [1, 1] : tensor<?x8xf32> -> !iree_tensor_ext.dispatch.tensor<writeonly:tensor<?x8xf32>>{%0}
  return
}
"""


def test_a_dispatch_reading_a_small_buffer_is_measured_only_where_it_fits():
    from iree.compiler import ir

    from mlir_ansor.dialect_helpers.dispatch import to_task_function, walk_ops
    from mlir_ansor.dialect_helpers.dynamic_sizes import SizeExpr
    from mlir_ansor.tuner.stages.task_forming import with_samples
    from mlir_ansor.tuner.tasks import Task

    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(_BRANCH_DISPATCH)
        d = to_task_function(walk_ops(module.operation, "func.func")[0])
    # The 1x1x1 buffer bounds the rows' ordinal; the `?x8` buffers bound nothing.
    assert d.ordinal_bounds == ((0, 1),)
    rows = SizeExpr("input", (0, 0))
    task = Task("t0", "d", "k", 1, d.task_mlir, "", (), (), size_exprs=((1, 0, rows),),
                ordinal_exprs=(rows,), ordinal_bounds=d.ordinal_bounds)
    at = [SizeSample((((0, 0), n),)) for n in (1, 5, 109)]
    assert with_samples(task, tuple(at)).samples == (at[0],)
    left = with_samples(task, tuple(at[1:]))
    assert not left.tunable and "smaller than every size sample" in left.skip_reason


def test_a_run_times_for_its_share_of_the_budget(monkeypatch, tmp_path):
    import json

    from mlir_ansor.tuner import runner as rn
    from mlir_ansor.tuner.procs import ProcResult

    cmds = []

    def fake(cmd, timeout_s, mem_bytes, on_start=None):
        cmds.append(cmd)
        out = {"benchmarks": [{"run_type": "iteration", "real_time": 2.0, "time_unit": "us"}]}
        return ProcResult(0, json.dumps(out), "", False)

    monkeypatch.setattr(rn, "run_isolated", fake)
    r = rn.LocalRunner("run", "bench", timing=rn.Timing(5, 0.05, 0.1, spread_processes=1))
    for share in (1.0, 0.2):
        res = r.run(rn.RunInput(tmp_path / "m.vmfb", (), timing_share=share))
        assert res.latency_s == pytest.approx(2e-6)
    mins = [next(a for a in c if a.startswith("--benchmark_min_time=")) for c in cmds]
    warm = [next(a for a in c if a.startswith("--benchmark_min_warmup_time=")) for c in cmds]
    assert mins == ["--benchmark_min_time=0.05s", "--benchmark_min_time=0.01s"]
    assert warm == ["--benchmark_min_warmup_time=0.1"] * 2  # the warm-up is not split
