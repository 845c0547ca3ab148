"""Measurement honesty: only applied, validated strategies count as tuned."""
import os
import random
from dataclasses import replace

import numpy as np
import pytest

from mlir_ansor.sketch_passes.annotation import annotate
from mlir_ansor.tuner import idle_caller, measure as M, runner as R
from mlir_ansor.tuner.status import INTERNAL_ERRORS, Status
from mlir_ansor.tuner.tasks import extract_tasks
from mlir_ansor.tuner.validation import outputs_match
from tests.conftest import DATA, MATMUL, prepared_measurer


@pytest.fixture(scope="module")
def mm_measurer(tools, tmp_path_factory):
    return prepared_measurer(tools, tmp_path_factory.mktemp("mm"), MATMUL)


def _programs(m, n, seed=0):
    rng = random.Random(seed)
    return [annotate(m.task.ops, m.task.sketches[i % len(m.task.sketches)], rng) for i in range(n)]


def test_valid_candidates_are_applied_and_timed(mm_measurer):
    recs = []
    for p in _programs(mm_measurer, 2):
        mm_measurer.best_s = None  # no best yet: every candidate gets the full repetitions
        recs += mm_measurer.measure([p])
    assert all(r.status == "ok" for r in recs), [r.error for r in recs]
    assert all(r.latency_s and r.latency_s > 0 and len(r.samples_s) == 2 for r in recs)
    # Records say where they were measured: IREE version, target, CPU.
    assert all(r.target == "llvm-cpu" and r.env["iree"] != "unknown" and r.env["cpu"]
               for r in recs)


def test_unparsable_strategy_is_a_failure(mm_measurer, monkeypatch):
    # IREE warns and compiles with its default codegen when a library does not parse:
    # that must be caught as "not applied", never timed as tuned.
    monkeypatch.setattr(M, "library_text", lambda entries: "module { this is not mlir")
    recs = mm_measurer.measure(_programs(mm_measurer, 1, seed=5))
    assert recs[0].status in ("not_applied", "compile_error")
    assert recs[0].latency_s is None and not recs[0].ok


def test_strategy_that_fails_to_apply_is_a_failure(mm_measurer, monkeypatch):
    # A program naming a loop structure the payload does not have fails inside the
    # strategy (split_handle count mismatch) and must be recorded as a compile error, with
    # IREE's message: the emitter itself ran fine.
    task = mm_measurer.task
    bad_ops = task.ops + task.ops[-1:]
    real = M.TunedEntry

    def bad_entry(task_id, task_mlir, ops, program, view_mlir=""):
        return real(task_id, task_mlir, bad_ops, program, view_mlir)

    monkeypatch.setattr(M, "TunedEntry", bad_entry)
    before = len(INTERNAL_ERRORS)
    recs = mm_measurer.measure(_programs(mm_measurer, 1, seed=6))
    assert recs[0].status == Status.COMPILE_ERROR and recs[0].latency_s is None
    assert "split_handle" in recs[0].error or "expected" in recs[0].error, recs[0].error
    assert len(INTERNAL_ERRORS) == before


@pytest.mark.injects_internal_error
def test_an_emitter_that_raises_is_an_internal_error(mm_measurer, monkeypatch):
    # A bug of ours is never a compile error of the candidate: it is recorded as an
    # internal error, counted, and the search goes on with the other programs.
    def broken(entries):
        raise KeyError("no such loop")

    progs = _programs(mm_measurer, 2, seed=11)
    real = M.library_text
    monkeypatch.setattr(M, "library_text", lambda entries: broken(entries)
                        if entries[0].program == progs[0] else real(entries))
    before = len(INTERNAL_ERRORS)
    mm_measurer.best_s = None
    recs = mm_measurer.measure(progs)
    assert recs[0].status == Status.INTERNAL_ERROR and "KeyError" in recs[0].error
    assert recs[1].status == Status.OK, recs[1].error
    assert len(INTERNAL_ERRORS) == before + 1


def test_wrong_answer_is_rejected(mm_measurer, tmp_path):
    saved = mm_measurer.points[0]
    wrong = tmp_path / "wrong.npy"  # the reference disagrees with every candidate
    np.save(wrong, np.load(saved.reference[0]) + np.float32(0.5))
    mm_measurer.points[0] = replace(saved, reference=(wrong,))
    try:
        recs = mm_measurer.measure(_programs(mm_measurer, 1, seed=7))
    finally:
        mm_measurer.points[0] = saved
    assert recs[0].status == "wrong_answer" and recs[0].latency_s is None


def test_outputs_match_tolerance():
    a = np.ones((4, 4), np.float32)
    assert outputs_match([a], [a + 1e-6]) == ""
    assert "elements off" in outputs_match([a], [a + 1.0])
    assert "2 results, expected 1" in outputs_match([a, a], [a])  # every result compared


def test_equal_infinities_match_and_unequal_ones_do_not():
    """A key-padding mask leaves -inf scores in both results (their difference is NaN):
    8 of 8 candidates of an unseen attention task were 'wrong answers' on them."""
    inf = np.float32(np.inf)
    a = np.array([1.0, -inf, inf, np.nan], dtype=np.float32)
    assert outputs_match([a], [a.copy()], [np.abs(a)]) == ""
    b = a.copy()
    b[1] = inf
    assert "1 of 4 elements off" in outputs_match([b], [a], [np.abs(a)])
    b = a.copy()
    b[2] = 3.0
    assert "1 of 4 elements off" in outputs_match([b], [a], [np.abs(a)])


def test_reordered_reductions_pass_and_wrong_terms_do_not():
    """The bound follows the magnitude of the computation (sum of |terms|), per element:
    a reduction summed in another order (rfactor) passes even where it cancels to nearly
    zero, and one wrong term fails even in an element much smaller than the largest."""
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (64, 4096)).astype(np.float32)
    b = rng.uniform(-1, 1, (4096, 8)).astype(np.float32)
    ref = a @ b
    mag = np.abs(a) @ np.abs(b)
    partial = sum(a[:, k::16] @ b[k::16] for k in range(16)).astype(np.float32)  # 16 lanes
    assert not np.array_equal(partial, ref)
    assert outputs_match([partial], [ref], [mag]) == ""
    wrong = ref.copy()
    wrong[3, 5] -= a[3, 7] * b[7, 5] + np.float32(0.3)  # a term lost, and more
    assert "1 of 512 elements off" in outputs_match([wrong], [ref], [mag])
    scaled = ref.copy()
    scaled[0, 0] = ref[0, 0] * 1.01 + 0.05  # small element, 1% off: the old global
    assert "elements off" in outputs_match([scaled], [ref], [mag])  # bound let it pass


def test_integer_index_inputs_cover_the_whole_table():
    from mlir_ansor.tuner.validation import index_bounds, random_inputs

    text = (DATA / "embedding_gather.mlir").read_text()
    bounds = index_bounds(text)
    assert bounds == {1: 1000}
    ids, = [x for x in random_inputs([((64,), np.dtype(np.int64))] * 2, 0, {1: 1000})][1:]
    assert ids.min() >= 0 and ids.max() < 1000 and ids.max() > 900  # not just 0/1
    other = random_inputs([((256,), np.dtype(np.int32))], 0, {})[0]
    assert other.min() < 0 < other.max()  # signed values


_SAMPLED = """
#m = affine_map<(d0) -> (d0)>
func.func @main(%pos: tensor<16xf32>, %ids: tensor<16xi64>, %t: tensor<32x48xf32>)
    -> tensor<16xf32> {
  %c0 = arith.constant 0 : i64
  %c48 = arith.constant 48 : i64
  %e = tensor.empty() : tensor<16xf32>
  %r = linalg.generic {indexing_maps = [#m, #m, #m], iterator_types = ["parallel"]}
      ins(%pos, %ids : tensor<16xf32>, tensor<16xi64>) outs(%e : tensor<16xf32>) {
  ^bb0(%p: f32, %i: i64, %o: f32):
    %row = arith.fptosi %p : f32 to i64
    %ri = arith.index_cast %row : i64 to index
    %neg = arith.cmpi slt, %i, %c0 : i64
    %up = arith.addi %i, %c48 : i64
    %w = arith.select %neg, %up, %i : i64
    %ci = arith.index_cast %w : i64 to index
    %v = tensor.extract %t[%ri, %ci] : tensor<32x48xf32>
    linalg.yield %v : f32
  } -> tensor<16xf32>
  return %r : tensor<16xf32>
}
"""


def test_float_positions_and_wrapped_indices_are_drawn_in_range():
    """A sample position (a float converted with fptosi) and an index wrapped by torch's
    negative-index select each cover the extent they index, never beyond it."""
    from mlir_ansor.tuner.validation import index_bounds, random_inputs

    bounds = index_bounds(_SAMPLED)
    assert bounds == {0: 32, 1: 48}
    # Checked against the runnable module's inputs: they may add a destination buffer.
    types = ["tensor<16xf32>", "tensor<16xi64>", "tensor<32x48xf32>"]
    assert index_bounds(_SAMPLED, types + ["tensor<20xf32>"]) == bounds
    assert index_bounds(_SAMPLED, ["tensor<16xf32>"] * 3) == {}
    pos, ids = random_inputs([((4096,), np.dtype(np.float32)), ((4096,), np.dtype(np.int64))],
                             0, bounds)
    assert pos.min() >= 0 and pos.max() < 32 and pos.max() > 30
    assert ids.min() >= 0 and ids.max() < 48


def test_template_programs_apply_through_a_tuning_spec(mm_measurer):
    """The limited-space baseline: IREE lowering-config specs, confirmed in the config dump."""
    from mlir_ansor.sketch_passes.template import TemplatePolicy
    from mlir_ansor.transform_scripts.tuning_spec import is_template, lowering_config

    progs = TemplatePolicy(mm_measurer.task, 0).propose(3, set())
    assert len(progs) == 3 and all(is_template(p) for p in progs)
    cfg = lowering_config(mm_measurer.task.ops, progs[0])
    assert "distribution = [" in cfg and "vector_reduction = [0, 0, " in cfg
    recs = mm_measurer.measure(progs)
    assert all(r.status == "ok" for r in recs), [r.error for r in recs]


def test_template_spec_that_does_not_apply_is_not_counted(mm_measurer, monkeypatch):
    from mlir_ansor.sketch_passes.template import TemplatePolicy

    prog = TemplatePolicy(mm_measurer.task, 1).propose(1, set())[0]
    # A spec whose config differs from the program's must not pass the applied check.
    monkeypatch.setattr(M, "lowering_config", lambda ops, p: "#iree_cpu.lowering_config<"
                        "distribution = [7, 7, 0]>")
    monkeypatch.setattr(M, "tuning_spec_text", lambda entries: "module {}")
    rec = mm_measurer.measure([prog])[0]
    assert rec.status in ("not_applied", "compile_error") and rec.latency_s is None


def test_slow_candidates_are_timed_once(mm_measurer):
    progs = _programs(mm_measurer, 2, seed=9)
    # Everything is "clearly slower than the best so far", at every point (the per-point
    # bests other tests of this measurer left behind would set the cutoff otherwise).
    saved = dict(mm_measurer.best_at)
    mm_measurer.best_s = 1e-9
    mm_measurer.best_at = {pt.label: 1e-9 for pt in mm_measurer.points}
    try:
        recs = mm_measurer.measure(progs)
    finally:
        mm_measurer.best_s, mm_measurer.best_at = None, saved
    assert all(r.status == "ok" and len(r.samples_s) == 1 for r in recs)


def test_a_candidate_as_fast_as_the_best_is_not_cut_off_by_a_cold_first_call(mm_measurer):
    """The quick look that cuts slow candidates off is warm: a fresh process's first call
    of a small dispatch ran over 3x its warm time, so every candidate of a small task was
    recorded at its cold time once the task had a best (a 0.09 ms dispatch at 0.40 ms)."""
    prog = _programs(mm_measurer, 1, seed=3)
    saved = (mm_measurer.best_s, dict(mm_measurer.best_at))
    try:
        first = mm_measurer.measure(prog)[0]
        assert first.status == "ok"
        mm_measurer.best_s = first.latency_s  # the cutoff: 3x what this program takes
        mm_measurer.best_at = {pt.label: first.latency_s for pt in mm_measurer.points}
        again = [mm_measurer.measure(prog)[0] for _ in range(3)]
    finally:
        mm_measurer.best_s, mm_measurer.best_at = saved
    # Timed in full (not cut off) at least once of three: a cold quick look is cut off
    # every time; noise from the other test worker pushed two of three over once in CI.
    assert sum(len(r.samples_s) == mm_measurer.cfg.repetitions for r in again) >= 1, \
        [(r.latency_s, r.samples_s) for r in again]


def test_quick_looks_warm_up_and_full_timings_repeat():
    t = R.Timing(repetitions=4, min_time_s=0.05, warmup_s=0.1, quick_warmup_s=0.02,
                 quick_min_time_s=0.005)
    assert R.benchmark_flags(t, "quick") == [
        "--benchmark_repetitions=1", "--benchmark_min_time=0.005s",
        "--benchmark_min_warmup_time=0.02"]
    assert R.benchmark_flags(t, share=0.5) == [
        "--benchmark_repetitions=4", "--benchmark_min_time=0.025s",
        "--benchmark_min_warmup_time=0.1"]
    assert R.benchmark_flags(t, "spread", share=0.5) == [
        "--benchmark_repetitions=2", "--benchmark_min_time=0.015s",
        "--benchmark_min_warmup_time=0.02"]
    with pytest.raises(ValueError, match="benchmark kind 'slow'"):
        R.benchmark_flags(t, "slow")


def _fake_benchmarks(monkeypatch, times_us):
    """run_isolated answering each benchmark process with the next of `times_us` (a list
    of repetition times, or a return code for a failed process); returns the commands."""
    import json

    from mlir_ansor.tuner.procs import ProcResult

    cmds, answers = [], iter(times_us)

    def fake(cmd, timeout_s, mem_bytes, on_start=None):
        cmds.append(cmd)
        reps = next(answers)
        if isinstance(reps, int):
            return ProcResult(reps, "", "crashed", False)
        out = {"benchmarks": [{"run_type": "iteration", "real_time": t, "time_unit": "us"}
                              for t in reps]}
        return ProcResult(0, json.dumps(out), "", False)

    monkeypatch.setattr(R, "run_isolated", fake)
    return cmds


def _flag(cmd, name):
    return next(a.split("=", 1)[1] for a in cmd if a.startswith(f"--benchmark_{name}="))


def test_a_small_dispatch_is_timed_over_several_processes(monkeypatch, tmp_path):
    """A dispatch under Timing.spread_below_s runs at one speed per process (up to 1.5x
    apart between processes): its timing pools several short processes, so one lucky or
    unlucky process no longer decides its record."""
    cmds = _fake_benchmarks(monkeypatch, [[90.0], [80.0, 81.0], [120.0, 121.0],
                                          [82.0, 83.0], [79.0, 80.0]])
    runner = R.LocalRunner("run", "bench", timing=R.Timing(spread_processes=4))
    res = runner.run(R.RunInput(tmp_path / "m.vmfb", ()))
    assert res.status == Status.OK
    assert [_flag(c, "repetitions") for c in cmds] == ["1", "2", "2", "2", "2"]
    assert len(res.samples_s) == 8  # the quick look decides, it is not a sample
    assert res.latency_s == pytest.approx(81.5e-6)  # the slow process does not move it


def test_a_large_dispatch_is_timed_in_one_process(monkeypatch, tmp_path):
    cmds = _fake_benchmarks(monkeypatch, [[2000.0], [1900.0] * 5])
    runner = R.LocalRunner("run", "bench", timing=R.Timing(spread_processes=4))
    res = runner.run(R.RunInput(tmp_path / "m.vmfb", ()))
    assert [_flag(c, "repetitions") for c in cmds] == ["1", "5"]
    assert res.samples_s == (1.9e-3,) * 5


def test_a_failing_spread_process_fails_the_candidate(monkeypatch, tmp_path):
    _fake_benchmarks(monkeypatch, [[90.0], [80.0, 81.0], -11])
    runner = R.LocalRunner("run", "bench", timing=R.Timing(spread_processes=4))
    res = runner.run(R.RunInput(tmp_path / "m.vmfb", ()))
    assert res.status == Status.RUN_ERROR and "SIGSEGV" in res.error


def test_no_spread_when_off_or_emulated(monkeypatch, tmp_path):
    """One process, no quick look without a cutoff: with spreading off, and under an
    emulator (whose timings mean nothing)."""
    for runner in (R.LocalRunner("run", "bench", timing=R.Timing(spread_processes=1)),
                   R.LocalRunner("run", "bench", launcher=("qemu-aarch64",))):
        cmds = _fake_benchmarks(monkeypatch, [[90.0] * 5])
        res = runner.run(R.RunInput(tmp_path / "m.vmfb", ()))
        assert [_flag(c, "repetitions") for c in cmds] == ["5"] and len(res.samples_s) == 5


def test_the_spread_follows_the_timing_asked_for_and_skips_size_samples(monkeypatch,
                                                                          tmp_path):
    """Each spread process takes 2/5 of the repetitions asked for, of 3/5 of their time; a
    dynamic task's size sample (a share of the budget) keeps one process."""
    cmds = _fake_benchmarks(monkeypatch, [[90.0]] + [[80.0] * 4] * 4)
    runner = R.LocalRunner("run", "bench", timing=R.Timing(repetitions=10, min_time_s=0.1))
    res = runner.run(R.RunInput(tmp_path / "m.vmfb", ()))
    assert [_flag(c, "repetitions") for c in cmds] == ["1"] + ["4"] * 4
    assert {_flag(c, "min_time") for c in cmds[1:]} == {"0.06s"} and len(res.samples_s) == 16
    cmds = _fake_benchmarks(monkeypatch, [[90.0] * 10])
    res = runner.run(R.RunInput(tmp_path / "m.vmfb", (), timing_share=0.25))
    assert [_flag(c, "repetitions") for c in cmds] == ["10"] and len(res.samples_s) == 10


def test_a_real_small_task_is_timed_over_processes(mm_measurer, tools):
    runner = M.MeasureConfig(repetitions=1, min_time_s=0.005, spread_processes=3).runner(tools)
    item = mm_measurer.run_input(mm_measurer.default_vmfb, mm_measurer.points[0],
                                 validate=False)
    res = runner.run(item)
    assert res.status == Status.OK, res.error
    assert res.latency_s < runner.timing.spread_below_s  # the test's premise: a small task
    assert len(res.samples_s) == 3 * runner.timing.spread_repetitions


def test_batch_matmul_with_transposing_consumer_compiles_and_validates(tools, tmp_path):
    """Folding unit dims around a fused, transposing consumer broke handle tracking (8 of 8
    programs failed to compile on BERT's attention) until the consumer was vectorized
    before the fold; such programs must stay valid."""
    text = (DATA / "bmm_transposing_consumer_flow.mlir").read_text()
    task = [t for t in extract_tasks(text) if t.tunable][0]
    m = M.TaskMeasurer(task, tmp_path, tools, M.MeasureConfig(repetitions=1, min_time_s=0.01))
    m.prepare()
    assert [s.name for s in m.task.sketches] == ["MultiLevelTilingWithFusion"]
    recs = m.measure(_programs(m, 3))
    assert [r.status for r in recs] == ["ok"] * 3, [r.error for r in recs]


def test_model_latency_is_the_lower_quartile_of_pooled_repetitions():
    # Bimodal repetitions, as a sub-ms model's are on a 2-vCPU VM: the median (0.8 ms)
    # would fall between the modes; the lower quartile stays in the fast one.
    times = [0.4e-3] * 6 + [1.2e-3] * 6
    assert M.lower_quartile(times) == pytest.approx(0.4e-3)
    assert M.lower_quartile([3.0, 1.0, 2.0, 4.0, 5.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="no timed repetitions"):
        M.lower_quartile([])


def test_torch_is_timed_in_repetitions_like_a_module():
    import torch

    from mlir_ansor.tuner.e2e import torch_times

    cfg = M.MeasureConfig(repetitions=3, min_time_s=0.01, warmup_s=0.0)
    times = torch_times(torch.nn.Linear(8, 8), (torch.ones(2, 8),), cfg)
    assert len(times) == 3 and all(0 < t < 0.01 for t in times)


def test_preparing_a_task_is_not_bound_by_the_candidate_timeout(tools, tmp_path):
    """IREE's default build of a task (reference and baseline) may be slow; under the
    candidate timeout the task was silently dropped (defect 3)."""
    (tmp_path / "m.mlir").write_text(MATMUL)
    from mlir_ansor.tuner.tasks import flow_source

    task = [t for t in extract_tasks(flow_source(tmp_path / "m.mlir", "llvm-cpu", tools, 120))
            if t.tunable][0]
    m = M.TaskMeasurer(task, tmp_path / "t", tools, M.MeasureConfig(compile_timeout_s=0.01))
    m.prepare()
    assert m.points[0].reference and m.points[0].magnitude


def test_programs_handed_back_are_validated_here(mm_measurer, tmp_path):
    """Export re-builds and re-validates the best programs before re-timing them: a record
    from another machine or IREE version (never run here) cannot be exported unchecked
    (defect 4)."""
    progs = _programs(mm_measurer, 2, seed=21)
    res = mm_measurer.remeasure(progs, rounds=1)
    default_s, times = res.default_s, res.tuned
    assert default_s > 0 and all(t is not None for t in times)
    saved = mm_measurer.points[0]
    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.load(saved.reference[0]) * np.float32(-1))
    mm_measurer.points[0] = replace(saved, reference=(wrong,))
    try:
        times = mm_measurer.remeasure(progs, rounds=1).tuned
    finally:
        mm_measurer.points[0] = saved
    assert times == [None, None]


def _fake_timing(measurer, monkeypatch, speed: dict) -> list:
    """Re-timing without running: each candidate (c0, c1, ...) takes `speed[name]` s, the
    default 1.0 s; the names timed, in order, land in the returned list."""
    calls = []

    def timed(artifact):
        name = "default" if artifact == measurer.default_vmfb else artifact.parent.name
        calls.append(name)
        s = speed.get(name, 1.0)
        return s, {"": s}

    monkeypatch.setattr(measurer, "timed", timed)
    return calls


def test_a_candidate_the_default_outclasses_leaves_the_race(mm_measurer, monkeypatch):
    """Re-timing before hand-back races the best programs against IREE's default: one that
    is slower in every run after two rounds, at every size, stops being timed, and the
    rounds end when none is left (most of a large model's tasks keep IREE's kernel)."""
    progs = _programs(mm_measurer, 2, seed=21)
    speed = {"c0": 1.3, "c1": 0.9}  # c0 cannot win; c1 might (c0 not FAR_BEHIND it)
    calls = _fake_timing(mm_measurer, monkeypatch, speed)
    res = mm_measurer.remeasure(progs, rounds=4)
    assert calls.count("c0") == 2 and calls.count("c1") == 4 and calls.count("default") == 4
    assert res.tuned == [1.3, 0.9] and res.default_s == 1.0
    calls.clear()
    speed["c1"] = 1.5
    mm_measurer.remeasure(progs, rounds=4)
    assert calls.count("default") == 2 and calls.count("c1") == 2
    # At one size of a dynamic task it is fast: it stays (the dispatcher may want it there).
    assert not M.outclassed([2.0, 2.0], [1.0, 1.0], [{"a": 3.0, "b": 0.5}] * 2,
                            [{"a": 1.0, "b": 1.5}] * 2)
    assert M.outclassed([2.0, 2.0], [1.0, 1.0], [{"a": 3.0, "b": 2.0}] * 2,
                        [{"a": 1.0, "b": 1.5}] * 2)
    assert not M.outclassed([2.0], [1.0], [{"a": 3.0}], [{"a": 1.0}])  # one round: too early


def test_without_a_race_every_program_runs_every_round(mm_measurer, monkeypatch):
    """A comparison of programs (tools/tuning_curve.py --retime) times each in every
    round: one far behind or outclassed after a round still runs them all."""
    progs = _programs(mm_measurer, 2, seed=21)
    calls = _fake_timing(mm_measurer, monkeypatch, {"c0": 2.0, "c1": 0.5})
    res = mm_measurer.remeasure(progs, rounds=4, race=False)
    assert calls.count("c0") == 4 and calls.count("c1") == 4 and calls.count("default") == 4
    assert res.tuned == [2.0, 0.5]


def test_the_race_ends_once_one_program_has_clearly_won(mm_measurer, monkeypatch):
    """A program that another program beats in every run leaves the race too (only the
    fastest can be kept), and once one is left that beats the default by the margin in
    every run the rounds end: the hand-back's decision is made (ResNet-50's re-time was 5
    of its 30 minutes)."""
    progs = _programs(mm_measurer, 3, seed=23)
    speed = {"c0": 0.5, "c1": 0.6, "c2": 0.7}
    calls = _fake_timing(mm_measurer, monkeypatch, speed)
    res = mm_measurer.remeasure(progs, rounds=4, margin=1.5)
    # c1 and c2 lose to c0 after two rounds; c0 won by over 1.5x: no third round.
    assert calls.count("c1") == 2 and calls.count("c2") == 2 and calls.count("c0") == 2
    assert calls.count("default") == 2
    assert res.tuned == [0.5, 0.6, 0.7]
    calls.clear()
    # Within the margin: the rounds go on for the leader (the decision is still open).
    mm_measurer.remeasure(progs, rounds=4, margin=2.5)
    assert calls.count("c0") == 4 and calls.count("default") == 4 and calls.count("c1") == 2
    # A dynamic task's program must win at every size sample to end the rounds.
    assert not M.clear_win([0.5, 0.5], [1.0, 1.0], [{"a": 0.2, "b": 0.99}] * 2,
                           [{"a": 1.0, "b": 1.0}] * 2, 1.03)
    assert M.clear_win([0.5, 0.5], [1.0, 1.0], [{"a": 0.2, "b": 0.9}] * 2,
                       [{"a": 1.0, "b": 1.0}] * 2, 1.03)
    assert not M.clear_win([0.5], [1.0], [{"a": 0.5}], [{"a": 1.0}], 1.03)  # one round


def test_the_runtime_device_is_passed_to_every_run(mm_measurer, tools):
    """`MeasureConfig.device` picks IREE's runtime device for validation and timing alike
    (local-sync: the call on the caller's thread); an unknown one fails with IREE's error."""
    pt = mm_measurer.points[0]
    for device in ("local-sync", "no-such-device"):
        runner = M.MeasureConfig(device=device, repetitions=1, min_time_s=0.001,
                                 warmup_s=0.0).runner(tools)
        res = runner.run(mm_measurer.run_input(mm_measurer.default_vmfb, pt))
        if device == "local-sync":
            assert res.status == Status.OK and res.latency_s > 0, res.error
        else:
            assert res.status == Status.RUN_ERROR and "no-such-device" in res.error


def test_interleaved_rounds_alternate_the_order():
    from mlir_ansor.tuner.e2e import interleaved

    calls = []
    t = interleaved({"a": lambda: calls.append("a") or [1.0],
                     "b": lambda: calls.append("b") or [2.0, 3.0]}, 3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert t == {"a": [1.0] * 3, "b": [2.0, 3.0] * 3}


def test_a_timer_far_behind_leaves_the_race_after_the_settling_rounds():
    from mlir_ansor.tuner.e2e import interleaved
    from mlir_ansor.tuner.measure import FAR_BEHIND

    timers = {"tuned": lambda: [1.0, 1.1], "close": lambda: [1.3, 1.4],
              "default": lambda: [FAR_BEHIND * 1.1 + 0.1]}
    t = interleaved(timers, 6, settle=3)
    assert len(t["default"]) == 3  # over 1.5x the tuned module's slowest: out after 3
    assert len(t["tuned"]) == len(t["close"]) == 12
    assert {k: len(v) for k, v in interleaved(timers, 6).items()} == \
        {"tuned": 12, "close": 12, "default": 6}  # (no settling: every round)


def _interpolation_flow(tools, tmp_path) -> str:
    import torch

    from mlir_ansor.tuner.frontend import import_model
    from mlir_ansor.tuner.tasks import flow_source

    class Upsample(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.interpolate(x, scale_factor=2, mode="linear") * 2

    (tmp_path / "m.mlir").write_text(import_model(Upsample().eval(), (torch.randn(2, 8, 40),)))
    return flow_source(tmp_path / "m.mlir", "llvm-cpu", tools, 300)


def test_initializer_dispatches_are_not_tasks_to_tune(tools, tmp_path):
    """IREE computes the interpolation's index tables in initializers: once, at load, so
    they cost a call nothing and trials spent on them are wasted."""
    tasks = extract_tasks(_interpolation_flow(tools, tmp_path))
    init = [t for t in tasks if t.name.startswith("_initializer")]
    assert init and all(t.skip_reason.startswith("runs once, at module load") for t in init)
    assert [t.tunable for t in tasks if t not in init] == [True]


def test_a_dispatch_without_inputs_is_prepared_and_timed(tools, tmp_path, monkeypatch):
    """An initializer's dispatch taken as a task (as before they were skipped) reads no
    input: its reference outputs go to the task's own folder."""
    from mlir_ansor.dialect_helpers import dispatch

    monkeypatch.setattr(dispatch, "_in_initializer", lambda op: False)
    tasks = extract_tasks(_interpolation_flow(tools, tmp_path))
    task = next(t for t in tasks if t.name.startswith("_initializer") and not t.input_types)
    m = M.TaskMeasurer(task, tmp_path / "t", tools, M.MeasureConfig())
    m.prepare()
    assert m.points[0].inputs == () and m.points[0].reference[0].exists()
    assert m.time_default() > 0


def test_a_program_far_behind_another_leaves_after_the_first_round(mm_measurer, monkeypatch):
    """Re-timing is most of a large model's hand-back (ResNet-50: 5.5 of 38 minutes): a
    program whose first run is over FAR_BEHIND times another's cannot be the one kept and
    is not timed again; within that it races on."""
    progs = _programs(mm_measurer, 3, seed=23)
    speed = {"c0": 0.5, "c1": 0.9, "c2": 0.6}  # c1 is 1.8x c0
    calls = _fake_timing(mm_measurer, monkeypatch, speed)
    res = mm_measurer.remeasure(progs, rounds=4)
    assert calls.count("c1") == 1 and calls.count("c2") == 2 and calls.count("c0") == 4
    assert res.tuned == [0.5, 0.9, 0.6]
    # At one size of a dynamic task it is not far behind: it stays.
    assert not M.far_behind([2.0], [1.0], [{"a": 3.0, "b": 0.5}], [{"a": 1.0, "b": 0.4}])
    assert M.far_behind([2.0], [1.0], [{"a": 3.0, "b": 0.7}], [{"a": 1.0, "b": 0.4}])


def test_the_best_modules_of_the_search_are_re_timed_without_a_second_build(tools, tmp_path,
                                                                             monkeypatch):
    """A measurer keeps the modules of its `keep_best` fastest valid candidates; re-timing
    them before export builds only programs it did not keep (one from a resumed run or
    another machine)."""
    m = prepared_measurer(tools, tmp_path, MATMUL)
    m.keep_best = 2
    progs = _programs(m, 6, seed=5)
    recs = m.measure(progs)
    ok = sorted((r for r in recs if r.status == "ok"), key=lambda r: r.latency_s)
    assert len(ok) >= 3, [r.error for r in recs]
    assert set(m.kept) == {r.program_key for r in ok[:2]}
    assert sorted(p.name for p in (m.dir / "kept").iterdir()) == sorted(
        f"{k}.vmfb" for k in m.kept)
    best = [p for p in progs if p.key in m.kept]
    other = next(p for p in progs if p.key == ok[2].program_key)
    built = []
    real_build = m.build
    monkeypatch.setattr(m, "build", lambda ps, dirs: built.extend(ps) or real_build(ps, dirs))
    res = m.remeasure([*best, other], rounds=1)
    assert built == [other] and all(t is not None for t in res.tuned)


def test_a_program_kept_again_keeps_its_module(mm_measurer, tmp_path, monkeypatch):
    """The kept modules rank by latency; the same program kept again is one entry (its
    newer latency), not two, one of which would evict the other's file."""
    monkeypatch.setattr(mm_measurer, "keep_best", 2)
    monkeypatch.setattr(mm_measurer, "kept", {})
    files = {}
    for name in "ab":
        files[name] = tmp_path / f"{name}.vmfb"
        files[name].write_bytes(name.encode())
    mm_measurer._keep("A", 1.0, files["a"])
    mm_measurer._keep("B", 2.0, files["b"])
    mm_measurer._keep("A", 3.0, files["a"])
    assert {k: v[0] for k, v in mm_measurer.kept.items()} == {"A": 3.0, "B": 2.0}
    assert all(path.exists() for _, path in mm_measurer.kept.values())


def test_outputs_are_checked_in_the_compile_slots_before_any_timing(mm_measurer,
                                                                     monkeypatch):
    """With a local builder and runner, each candidate's output check runs in the compile
    worker that built it, as its build ends (overlapping the compiles still going on); the
    timing runs come after every build, on the caller's thread, and do not check again."""
    import threading
    from dataclasses import dataclass, fields

    log = []

    @dataclass(frozen=True)
    class Logged(M.LocalRunner):
        def run(self, item):
            log.append(("check" if item.reference else "time",
                        threading.current_thread() is threading.main_thread(), item.time))
            return M.LocalRunner.run(self, item)

    base = mm_measurer.runner
    monkeypatch.setattr(mm_measurer, "runner",
                        Logged(**{f.name: getattr(base, f.name) for f in fields(base)}))
    mm_measurer.best_s = None
    recs = mm_measurer.measure(_programs(mm_measurer, 3, seed=11))
    assert [r.status for r in recs] == ["ok"] * 3, [r.error for r in recs]
    checks = [e for e in log if e[0] == "check"]
    times = [e for e in log if e[0] == "time"]
    assert len(checks) == 3 and len(times) == 3
    assert all(not main and not timed for _, main, timed in checks)  # in the workers
    assert all(main and timed for _, main, timed in times)
    assert log[:3] == checks  # every check before the first timing run


def _policy(pid: int, tid: int) -> int:
    """A thread's scheduling policy (field 41 of /proc/PID/task/TID/stat)."""
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[38])


@pytest.mark.skipif(not idle_caller.supported(), reason="SCHED_IDLE is Linux's")
def test_the_benchmark_tools_waiting_thread_is_lowered_and_its_workers_are_not(mm_measurer,
                                                                              tools):
    """Only the main thread of a timed local-task run goes to SCHED_IDLE (it waits while
    the workers compute); the workers, created before the change, keep the normal policy."""
    import subprocess
    import time

    pt = mm_measurer.points[0]
    cmd = [tools.benchmark, f"--module={mm_measurer.default_vmfb}", "--function=main",
           *[f"--input=@{p}" for p in mm_measurer.run_input(mm_measurer.default_vmfb,
                                                            pt).inputs],
           "--benchmark_min_time=3s"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert idle_caller.lower_when_workers_exist(proc.pid)
        time.sleep(0.05)
        names = idle_caller._threads(proc.pid)
        workers = [int(t) for t, n in names.items() if n.startswith(idle_caller.WORKER_PREFIX)]
        assert workers
        assert _policy(proc.pid, proc.pid) == os.SCHED_IDLE
        assert all(_policy(proc.pid, w) == os.SCHED_OTHER for w in workers)
    finally:
        proc.kill()
        proc.wait()


def test_timed_runs_lower_the_caller_except_on_local_sync(mm_measurer, tools, monkeypatch):
    """The runner hands the lowering to every timed local-task run; a local-sync run
    computes on its main thread and an emulated one has qemu in between: neither is."""
    from mlir_ansor.tuner import runner as R

    started = []
    real = R.run_isolated

    def spy(cmd, *a, on_start=None, **kw):
        started.append(on_start is not None)
        return real(cmd, *a, on_start=on_start, **kw)

    monkeypatch.setattr(R, "run_isolated", spy)
    item = mm_measurer.run_input(mm_measurer.default_vmfb, mm_measurer.points[0])
    for device, expect in (("", True), ("local-sync", False)):
        started.clear()
        runner = M.MeasureConfig(device=device, repetitions=1, min_time_s=0.001,
                                 warmup_s=0.0).runner(tools)
        res = runner.benchmark(item.artifact, item.inputs)
        assert res.status == Status.OK, res.error
        assert started == [expect]


def _sum_then(name: str, term: str, arg: str) -> str:
    """MLIR lines: %<name> = the row sums of `term` (a body computing %t from %a) over `arg`."""
    return f"""
  %{name} = linalg.generic {{indexing_maps = [#m, #r], iterator_types = ["parallel", "reduction"]}}
      ins(%{arg} : tensor<4x8xf32>) outs(%f : tensor<4xf32>) {{
  ^bb0(%a: f32, %acc: f32):
    {term}
    %s = arith.addf %t, %acc : f32
    linalg.yield %s : f32
  }} -> tensor<4xf32>"""


def _rows(name: str, body: str, ins: str, types: str, maps: str, out: str = "4x8") -> str:
    """MLIR lines: %<name> = an elementwise generic over `ins` yielding %r of `body`."""
    iters = '"parallel", "parallel"' if out == "4x8" else '"parallel"'
    return f"""
  %{name} = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{iters}]}}
      ins({ins} : {types}) outs(%o{out} : tensor<{out}xf32>) {{
  ^bb0({", ".join(f"%b{i}: f32" for i in range(ins.count("%") + 1))}):
    {body}
    linalg.yield %r : f32
  }} -> tensor<{out}xf32>"""


# x: x / (sum(x + x) + 1), through an elementwise op before the sum: drawn positive. The
# rest keep signed inputs: y / z divides elementwise; w's sum goes through exp before it
# divides; u is summed as exp(u); v's divisor is a product.
_SUM_DIVIDES = ("""
#m = affine_map<(d0, d1) -> (d0, d1)>
#r = affine_map<(d0, d1) -> (d0)>
#v = affine_map<(d0) -> (d0)>
func.func @main(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>, %z: tensor<4x8xf32>,
                %w: tensor<4x8xf32>, %u: tensor<4x8xf32>, %v: tensor<4x8xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %o4 = tensor.empty() : tensor<4xf32>
  %o4x8 = tensor.empty() : tensor<4x8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%o4 : tensor<4xf32>) -> tensor<4xf32>"""
    + _rows("x2", "%r = arith.addf %b0, %b0 : f32", "%x", "tensor<4x8xf32>", "#m, #m")
    + _sum_then("xs", "%t = arith.addf %a, %a : f32", "x2")
    + _rows("q", "%e = arith.addf %b1, %one : f32\n    %r = arith.divf %b0, %e : f32",
            "%x, %xs", "tensor<4x8xf32>, tensor<4xf32>", "#m, #r, #m")
    + _rows("p", "%r = arith.divf %b0, %b1 : f32", "%y, %z",
            "tensor<4x8xf32>, tensor<4x8xf32>", "#m, #m, #m")
    + _sum_then("ws", "%t = arith.addf %a, %a : f32", "w")
    + _rows("we", "%r = math.exp %b0 : f32", "%ws", "tensor<4xf32>", "#v, #v", "4")
    + _rows("sig", "%r = arith.divf %one, %b0 : f32", "%we", "tensor<4xf32>", "#v, #v", "4")
    + _sum_then("us", "%t = math.exp %a : f32", "u")
    + _rows("uq", "%r = arith.divf %b0, %b1 : f32", "%u, %us",
            "tensor<4x8xf32>, tensor<4xf32>", "#m, #r, #m")
    + """
  %vm = linalg.generic {indexing_maps = [#m, #r], iterator_types = ["parallel", "reduction"]}
      ins(%v : tensor<4x8xf32>) outs(%f : tensor<4xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %t = arith.addf %a, %a : f32
    %s = arith.mulf %t, %acc : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>"""
    + _rows("vq", "%r = arith.divf %b0, %b1 : f32", "%v, %vm",
            "tensor<4x8xf32>, tensor<4xf32>", "#m, #r, #m")
    + """
  return %q, %p, %sig, %uq, %vq
      : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
""")


def test_inputs_summed_into_a_divisor_are_drawn_positive():
    """Only x, which a sum adds into a divisor through error-carrying ops, is drawn from
    [0, 1) (see _SUM_DIVIDES), in the analyzed function and mapped to the runnable
    module's inputs."""
    from types import SimpleNamespace

    from mlir_ansor.tuner.validation import random_inputs, summed_divisor_inputs

    assert summed_divisor_inputs(_SUM_DIVIDES) == {0}
    assert summed_divisor_inputs(_SUM_DIVIDES, ["tensor<4x8xf32>"] * 2) == frozenset()
    task = SimpleNamespace(task_mlir=_SUM_DIVIDES, arg_sources=(3, None, 0, 1, 2, 4),
                           input_types=())
    assert M.module_positive_inputs(task) == {3}
    f32 = np.dtype(np.float32)
    x, y = random_inputs([((4096,), f32)] * 2, 0, {}, frozenset({0}))
    assert x.min() >= 0 and x.max() < 1 and y.min() < 0 < y.max()


def test_a_reordered_sum_under_a_division_passes_on_positive_inputs():
    """Why: dividing by a sum of signed values, the bound (scaled by the same computation on
    |x|) rejects a correct program whose sum runs in another order, as every candidate of
    a transposed softmax's normalisation was; on positive inputs it accepts it and still
    rejects a wrong one."""
    from mlir_ansor.tuner.validation import absolute, outputs_match, random_inputs

    def normalise(x: np.ndarray, order: str) -> np.ndarray:
        if order == "sequential":
            s = np.zeros(x.shape[0], np.float32)
            for j in range(x.shape[1]):
                s += x[:, j]
        else:  # 16-wide partial sums, then their sum
            s = x.reshape(x.shape[0], -1, 16).sum(axis=1, dtype=np.float32).sum(
                axis=1, dtype=np.float32)
        return (x / s[:, None]).astype(np.float32)

    f32 = np.dtype(np.float32)
    for positive, passes in ((frozenset(), False), (frozenset({0}), True)):
        x, = random_inputs([((1536, 128), f32)], 0, {}, positive)
        ref, mag = normalise(x, "sequential"), normalise(absolute([x])[0], "sequential")
        assert (outputs_match([normalise(x, "chunks")], [ref], [mag]) == "") is passes
    positive_x, = random_inputs([((1536, 128), f32)], 0, {}, frozenset({0}))
    wrong = normalise(positive_x, "chunks")
    wrong[7, 3] *= 1.001
    ref = normalise(positive_x, "sequential")
    assert "elements off" in outputs_match([wrong], [ref], [ref])
