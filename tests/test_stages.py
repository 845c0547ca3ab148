"""The pipeline's stages, each called alone on a run state, with a custom reporter; the
hand-back's bisect blames only the strategy that breaks a model."""
import pytest

from mlir_ansor.errors import FrontendError
from mlir_ansor.tuner import driver
from mlir_ansor.tuner.reporters import Measured, Reported, StageStarted, TrialsPlanned
from mlir_ansor.tuner.stages.hand_back import find_culprit, hand_back
from mlir_ansor.tuner.stages.importing import import_models, load_models
from mlir_ansor.tuner.stages.layout_choice import choose_layouts
from mlir_ansor.tuner.stages.reporting import write_report
from mlir_ansor.tuner.stages.searching import search
from mlir_ansor.tuner.stages.task_forming import form_tasks
from mlir_ansor.tuner.status import Status
from tests.conftest import QUICK
from tests.data.small_mlp import make


class Recorder:
    def __init__(self):
        self.events, self.closed = [], False

    def __call__(self, event):
        self.events.append(event)

    def close(self):
        self.closed = True


def test_bisect_blames_the_breaking_strategy_and_keeps_the_others():
    """Each probe is the whole check (build, applied, outputs against torch): with
    compile success alone as the probe, a strategy that compiles but computes wrong
    results was never found, and the last one was dropped instead (defect 2)."""
    entries = ["t0", "t1", "t2", "t3", "t4"]
    probes = []

    def fails(subset):
        probes.append(list(subset))
        return "t2" in subset  # t2 builds, but its module's results are wrong

    assert find_culprit(entries, fails) == "t2"
    assert len(probes) <= 6
    # Only a combination fails: nobody is blamed alone (the caller drops them all).
    assert find_culprit(entries, lambda s: {"t0", "t4"} <= set(s)) is None
    assert find_culprit(["t9"], lambda s: True) == "t9"


def test_stages_alone_with_a_custom_reporter(tmp_path):
    rec = Recorder()
    opts = driver.TuneOptions(model="SmallMLP", trials=3, batch=2, out=tmp_path / "run",
                              layout_rewrite=False, **QUICK)
    state = driver.start(opts, rec)
    state = load_models(state, make)
    assert [m.name for m in state.models] == ["SmallMLP"] and not state.tasks
    state = import_models(state)
    assert (tmp_path / "run" / "model.mlir").exists()
    state = choose_layouts(state)
    assert not state.forms["SmallMLP"].channels_last and state.forms["SmallMLP"].plain_keys
    state = form_tasks(state)
    assert len(state.tunable) == 2 and all(state.defaults[t.key] for t in state.tunable)
    state = search(state)
    planned = [e for e in rec.events if isinstance(e, TrialsPlanned)]
    measured = [e for e in rec.events if isinstance(e, Measured)]
    assert planned == [TrialsPlanned(3, 0)] and len(measured) == 3
    assert all(e.record.status == Status.OK for e in measured), [e.record.error for e in measured]
    assert len(state.records) == 3 and state.records[0].device_kind == state.context.device_kind
    clock = state.clock  # the measurers and the search filled it
    assert clock.compile > 0 and clock.measure > 0 and clock.search > 0 and clock.train >= 0
    state = write_report(hand_back(state))
    assert "Per task" in state.summary and "End to end" in state.summary
    assert "GFLOP/s" in state.summary and "f32 FMA peak measured now" in state.summary
    assert "Search wall time: compile" in state.summary
    assert [e for e in rec.events if isinstance(e, Reported)] == [
        Reported(state.summary, tmp_path / "run")]
    assert (tmp_path / "run" / "build.sh").exists() and (tmp_path / "run" / "report.json").exists()
    assert not any(isinstance(e, StageStarted) for e in rec.events)  # stages alone: no driver


def test_the_reporter_is_closed_when_a_run_fails(tmp_path):
    rec = Recorder()

    def broken():
        raise RuntimeError("no weights")

    with pytest.raises(FrontendError, match="no weights"):
        driver.run(driver.TuneOptions(model="x", out=tmp_path / "o"), factory=broken,
                   reporter=rec)
    assert rec.closed


class _FakeExport:
    """The part of hand_back._Export that model_e2e uses: strategies, dropped one by one."""

    def __init__(self, ids):
        self.entries = [type("Entry", (), {"task_id": i})() for i in ids]
        self.dropped = {}

    def mine(self, name):
        return [e for e in self.entries if e.task_id not in self.dropped]

    def rewritten(self, name):
        return False

    def drop(self, m, ids, why):
        self.dropped.update(dict.fromkeys(ids, why))


def _one_static_model(tmp_path):
    """The parts of a run state and of a static model that model_e2e reads."""
    from types import SimpleNamespace

    state = SimpleNamespace(opts=SimpleNamespace(target="llvm-cpu", e2e_rounds=2,
                                                 min_speedup=1.03),
                            runner=None, tools=SimpleNamespace(emulated=False), cfg=None,
                            forms={"m": SimpleNamespace(flags=())}, report=lambda note: None,
                            out=tmp_path)
    m = SimpleNamespace(name="m", dir=tmp_path, dynamic=None, model=None, inputs=(),
                        baseline_dir=tmp_path / "baseline")
    return state, m


def test_a_form_that_keeps_failing_is_given_up_after_its_repairs(tmp_path, monkeypatch):
    """The alternative form with pad fusion must not be repaired strategy by strategy: on
    ResNet-50 one IREE dispatch failed with every strategy in turn, one bisection each."""
    from mlir_ansor.errors import CompileError, StrategiesNotApplied
    from mlir_ansor.tuner.stages import hand_back as hb

    builds = []

    def never_applied(*args, strategies, **kw):  # (every build fails, naming them all)
        builds.append(list(strategies))
        raise StrategiesNotApplied(strategies[:1])

    monkeypatch.setattr(hb, "write_library", lambda path, entries: path)
    monkeypatch.setattr(hb, "end_to_end", lambda tools, model, inputs, src, lib, out, cfg,
                        strategies, **kw: never_applied(strategies=strategies))
    state, m = _one_static_model(tmp_path)
    ex = _FakeExport([f"t{i}" for i in range(6)])
    with pytest.raises(CompileError, match="still failing after dropping"):
        hb.model_e2e(state, ex, m, repairs=2)
    assert len(builds) == 3 and len(ex.dropped) == 2  # the first build and 2 repairs
    builds.clear()
    ex = _FakeExport([f"t{i}" for i in range(6)])
    with pytest.raises(StrategiesNotApplied):  # no limit: repaired until none is left
        hb.model_e2e(state, ex, m)
    assert len(builds) == 7 and len(ex.dropped) == 6  # the last build has none left


def test_a_strategy_iree_names_in_its_error_is_dropped_without_bisection(tmp_path, monkeypatch):
    """A build failing in a dispatch that took our strategy says so (StrategiesFailed):
    that strategy alone is dropped and the model built again, with no model builds spent
    on finding it (on ResNet-50 each bisection cost about ten)."""
    from mlir_ansor.errors import StrategiesFailed
    from mlir_ansor.tuner.stages import hand_back as hb

    builds = []

    def build(strategies):
        builds.append(list(strategies))
        if "strategy_t3" in strategies:
            raise StrategiesFailed("iree-compile failed", ["strategy_t3"])
        return "built"

    monkeypatch.setattr(hb, "write_library", lambda path, entries: path)
    monkeypatch.setattr(hb, "strategy_name", lambda task_id: f"strategy_{task_id}")
    monkeypatch.setattr(hb, "end_to_end", lambda tools, model, inputs, src, lib, out, cfg,
                        strategies, **kw: build(strategies))
    monkeypatch.setattr(hb, "find_culprit", lambda *a: pytest.fail("bisected"))
    state, m = _one_static_model(tmp_path)
    ex = _FakeExport([f"t{i}" for i in range(6)])
    assert hb.model_e2e(state, ex, m, repairs=1) == "built"
    assert len(builds) == 2 and ex.dropped == {"t3": "failed to compile inside the model: "
                                                     "default kept"}
    # The whole error is kept in the run folder (the report's note has its start).
    log = (tmp_path / hb.LIBRARY_FAILURES).read_text()
    assert "dropping ['t3']" in log and "iree-compile failed" in log, log


def test_a_form_iree_cannot_build_alone_blames_no_strategy(tmp_path, monkeypatch):
    """An unnamed failure is bisected only if the form builds without our strategies: on
    ResNet-50 the form with pad fusion failed in IREE's own codegen (a strided conv that
    took its pad in), every half of the library 'failed', and each repair blamed and
    dropped an innocent strategy. Where one strategy does break the form, it is found."""
    from mlir_ansor.errors import CompileError
    from mlir_ansor.tuner.stages import hand_back as hb

    probes = []

    def check(strategies, broken_by):
        probes.append(list(strategies))
        if broken_by is None or set(broken_by) & set(strategies):
            raise CompileError("iree-compile failed: 'memref.alloca' op ...")
        return set(strategies), 0.0

    monkeypatch.setattr(hb, "write_library", lambda path, entries: path)
    monkeypatch.setattr(hb, "strategy_name", lambda task_id: f"strategy_{task_id}")
    monkeypatch.setattr(hb, "save_inputs", lambda xs, d: [])
    monkeypatch.setattr(hb, "model_reference", lambda *a: ([], [], None, None))
    state, m = _one_static_model(tmp_path)
    for broken_by, dropped in ((None, {}), (["strategy_t4"], {"t4"}),
                               (["strategy_t1", "strategy_t4"], {"t1", "t4"})):
        probes.clear()
        monkeypatch.setattr(hb, "end_to_end", lambda tools, model, inputs, src, lib, out,
                            cfg, strategies, **kw: check(strategies, broken_by) and "built")
        monkeypatch.setattr(hb, "check_tuned", lambda tools, src, lib, vmfb, cfg, strategies,
                            *a: check(strategies, broken_by))
        ex = _FakeExport([f"t{i}" for i in range(6)])
        if broken_by is None:
            with pytest.raises(CompileError, match="with no tuned strategy"):
                hb.model_e2e(state, ex, m, repairs=2)
            assert probes[1] == []  # the build without strategies, before any bisection
        else:
            assert hb.model_e2e(state, ex, m, repairs=2) == "built"
            # The form's build without strategies is probed once, not per failure.
            assert probes.count([]) == 1
        assert set(ex.dropped) == set(dropped)


def test_a_model_build_names_the_strategy_that_failed_in_it(tools, tmp_path):
    """iree-compile's error lies in the failing dispatch's configuration dump, which names
    the strategy it took: compile_model raises StrategiesFailed with that strategy."""
    import random

    import torch

    from mlir_ansor.errors import StrategiesFailed
    from mlir_ansor.sketch_passes.annotation import annotate
    from mlir_ansor.transform_scripts.library import TunedEntry, library_text, strategy_name
    from mlir_ansor.tuner.e2e import compile_model
    from mlir_ansor.tuner.frontend import import_model
    from mlir_ansor.tuner.measure import MeasureConfig
    from mlir_ansor.tuner.tasks import extract_tasks, flow_source

    model, inputs = make()
    src = tmp_path / "m.mlir"
    src.write_text(import_model(model, inputs))
    tasks = [t for t in extract_tasks(flow_source(src, "llvm-cpu", tools, 300)) if t.tunable]
    entries = [TunedEntry(t.task_id, t.task_mlir, t.ops,
                          annotate(t.ops, t.sketches[0], random.Random(0))) for t in tasks]
    text = library_text(entries)
    bad = strategy_name(tasks[1].task_id)
    # A strategy that fails when IREE runs it: vectorizing the function itself.
    head = f"transform.named_sequence @{bad}("
    start = text.index(head)
    line_end = text.index("\n", text.index("\n", start) + 1)  # after its first op
    handle = text[text.index("\n", start) + 1:line_end].split("=")[0].strip()
    text = (text[:line_end + 1] + f"    transform.structured.vectorize {handle} : "
            "!transform.any_op\n" + text[line_end + 1:])
    lib = tmp_path / "lib.mlir"
    lib.write_text(text)
    with pytest.raises(StrategiesFailed) as err:
        compile_model(tools, src, tmp_path / "m.vmfb", MeasureConfig(), lib)
    assert err.value.strategies == [bad] and "cannot vectorize" in str(err.value)


def test_a_task_with_little_at_stake_re_times_only_its_best(monkeypatch):
    """Re-timing costs the same per task whatever its share: a task under 1% of the model's
    default time races its best program alone over two rounds; the others race the top k
    over all rounds."""
    from types import SimpleNamespace

    from mlir_ansor.tuner.measure import Remeasured
    from mlir_ansor.tuner.stages import hand_back as hb

    calls = {}

    class FakeMeasurer:
        def __init__(self, key):
            self.key = key

        def remeasure(self, programs, rounds, margin):
            calls[self.key] = (list(programs), rounds)
            return Remeasured(1.0, [0.5] * len(programs), {}, [{} for _ in programs])

    monkeypatch.setattr(hb, "top_programs", lambda records, key, k: [f"{key}-p{i}"
                                                                      for i in range(k)])
    tasks = [SimpleNamespace(key=k, weight=w, dynamic=False)
             for k, w in (("big", 4), ("small", 1), ("mid", 1))]
    notes = []
    state = SimpleNamespace(
        records=[], context=SimpleNamespace(holds=lambda r: True), tunable=tasks,
        measurers={t.key: FakeMeasurer(t.key) for t in tasks},
        defaults={"big": 1.0, "small": 0.03, "mid": 0.2},  # shares 95.8%, 0.7%, 4.8%
        opts=SimpleNamespace(top_k=3, retime_rounds=4, min_speedup=1.05),
        report=notes.append)
    best, _ = hb.retime_best(state)
    assert calls == {"big": (["big-p0", "big-p1", "big-p2"], 4), "small": (["small-p0"], 2),
                     "mid": (["mid-p0", "mid-p1", "mid-p2"], 4)}
    assert set(best) == {"big", "small", "mid"} and "1 tasks under 1%" in notes[0].text
