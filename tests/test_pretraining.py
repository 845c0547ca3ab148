"""Training a cost model from run folders, and judging it on workloads it never saw."""
import json
from dataclasses import replace

import pytest

from mlir_ansor import train_cost_model
from mlir_ansor.targets import host
from mlir_ansor.tuner.cost_model import load_booster
from mlir_ansor.tuner.pretraining import judge, leave_one_out, load_corpus, trials_to_near_best
from mlir_ansor.tuner.records import RecordStore
from tests.conftest import BATCH_MATMUL, MATMUL, ops_of
from tests.test_cost_model import records_for, sample

KIND = host().device_kind


def run_folder(tmp_path, name, tasks):
    """A folder as a tuning run leaves it: tasks.json and records.jsonl."""
    d = tmp_path / name
    d.mkdir()
    (d / "tasks.json").write_text(json.dumps(
        [{"key": key, "task_id": f"t{i}", "target": "llvm-cpu", "ops_mlir": text}
         for i, (key, text, _) in enumerate(tasks)]))
    store = RecordStore(d / "records.jsonl")
    for key, text, n in tasks:
        ops = ops_of(text)
        for r in records_for(ops, sample(ops, n, len(key) + n), key):
            store.append(replace(r, device_kind=KIND))
    return d


def test_corpus_training_and_leave_one_out(tmp_path, capsys):
    a = run_folder(tmp_path, "a", [("bmm", BATCH_MATMUL, 120)])
    b = run_folder(tmp_path, "b", [("mm", MATMUL, 120), ("bmm", BATCH_MATMUL, 30)])
    corpus = load_corpus([a, b], KIND)
    assert sorted(w.key for w in corpus) == ["bmm", "mm"]
    bmm = next(w for w in corpus if w.key == "bmm")
    assert len(bmm.records) == len({r.program_key for r in bmm.records}) >= 120
    assert load_corpus([a], "aarch64-neon") == []  # measured elsewhere: not this kind's data
    rows = leave_one_out(corpus)
    assert [r.name for r in rows] == ["a/t0 batch_matmul 4x64x48x32", "b/t0 matmul 64x48x32"]
    # Each workload ranked by a model that never saw it, on the same made-up machine.
    assert all(r.pairwise > 0.7 and r.model_trials < r.random_trials for r in rows), rows
    out = tmp_path / "m.json"
    assert train_cost_model.main([str(a), str(b), "--out", str(out), "--evaluate"]) == 0
    text = capsys.readouterr().out
    assert "2 tasks" in text and "held-out workload" in text and "fewer than random" in text
    assert load_booster(out, KIND) is not None


def test_exclude_task_leaves_a_workload_out(tmp_path, capsys):
    a = run_folder(tmp_path, "a", [("bmm", BATCH_MATMUL, 40), ("mm", MATMUL, 40)])
    out = tmp_path / "m.json"
    assert train_cost_model.main([str(a), "--out", str(out), "--exclude-task", "mm"]) == 0
    text = capsys.readouterr().out
    assert "left out: a/t1 matmul 64x48x32" in text and "1 tasks" in text
    assert train_cost_model.main([str(a), "--out", str(out), "--exclude-task", "mmx"]) == 2
    assert "no task with key mmx" in capsys.readouterr().err


def test_a_folder_without_tasks_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "records.jsonl").write_text("")
    assert train_cost_model.main([str(tmp_path), "--out", str(tmp_path / "m.json")]) == 2
    assert "not a tuning output folder" in capsys.readouterr().err


@pytest.mark.parametrize("truth, order, want", [
    ([0.2, 1.0, 0.5], [0, 2, 1], 3), ([0.2, 1.0, 0.97], [2, 1, 0], 1)])
def test_trials_to_near_best(truth, order, want):
    import numpy as np
    assert trials_to_near_best(np.array(order), np.array(truth), 0.05) == want


def test_judge_ranks_records_with_a_saved_model(tmp_path, capsys):
    # A model trained on one folder (another machine's records, say) judges another's
    # workloads without training on them.
    a = run_folder(tmp_path, "a", [("bmm", BATCH_MATMUL, 120), ("mm", MATMUL, 120)])
    b = run_folder(tmp_path, "b", [("bmm2", BATCH_MATMUL, 60), ("mm2", MATMUL, 60)])
    model = tmp_path / "m.json"
    assert train_cost_model.main([str(a), "--out", str(model)]) == 0
    base = load_booster(model, KIND)
    rows = judge(load_corpus([b], KIND), base)
    assert [r.name for r in rows] == ["b/t0 batch_matmul 4x64x48x32", "b/t1 matmul 64x48x32"]
    assert all(r.pairwise > 0.7 and r.model_trials < r.random_trials for r in rows), rows
    capsys.readouterr()
    assert train_cost_model.main([str(b), "--judge", str(model)]) == 0
    text = capsys.readouterr().out
    assert f"judged: {model}, trained for {KIND}" in text
    assert "records it never trained on" in text and "fewer than random" in text
    # Judged, then trained on the same records when --out is given too.
    out = tmp_path / "out.json"
    assert train_cost_model.main([str(b), "--judge", str(model), "--out", str(out)]) == 0
    assert load_booster(out, KIND) is not None


def test_judge_needs_a_model_it_can_read(tmp_path, capsys):
    a = run_folder(tmp_path, "a", [("mm", MATMUL, 20)])
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert train_cost_model.main([str(a), "--judge", str(bad)]) == 2
    assert "cannot be read" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train_cost_model.main([str(a)])  # neither --out nor --judge
    assert "one of --out and --judge is required" in capsys.readouterr().err
