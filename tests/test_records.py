import random
import warnings

from mlir_ansor.sketch_passes.annotation import annotate
from mlir_ansor.sketch_passes.rules import default_cpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from mlir_ansor.tuner.records import Record, RecordStore, best_by_task
from tests.conftest import MATMUL, ops_of


def _record(seed: int, latency):
    ops = ops_of(MATMUL)
    p = annotate(ops, generate_sketches(ops, default_cpu_rules())[0], random.Random(seed))
    status = "ok" if latency else "compile_error"
    return Record("k", p.to_json(), p.key, status, latency, (latency,) if latency else ())


def test_round_trip_and_best(tmp_path):
    store = RecordStore(tmp_path / "r.jsonl")
    recs = [_record(1, 2e-3), _record(2, None), _record(3, 1e-3)]
    for r in recs:
        store.append(r)
    loaded = store.load()
    assert [(r.program_key, r.status, r.latency_s) for r in loaded] == \
        [(r.program_key, r.status, r.latency_s) for r in recs]
    assert best_by_task(loaded)["k"].program_key == recs[2].program_key
    assert loaded[0].to_program().key == recs[0].program_key


def test_corrupt_line_is_reported_not_fatal(tmp_path):
    store = RecordStore(tmp_path / "r.jsonl")
    store.append(_record(1, 2e-3))
    with open(store.path, "a") as f:
        f.write('{"task_key": "k", "program": {tru\n')
    store.append(_record(2, 3e-3))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        loaded = store.load()
    assert len(loaded) == 2
    assert any("r.jsonl:2" in str(x.message) for x in w)


def test_append_never_truncates(tmp_path):
    store = RecordStore(tmp_path / "r.jsonl")
    store.append(_record(1, 2e-3))
    before = store.path.read_text()
    RecordStore(tmp_path / "r.jsonl").append(_record(2, 1e-3))
    assert store.path.read_text().startswith(before)


def test_top_programs_are_distinct_and_fastest_first():
    from mlir_ansor.tuner.records import top_programs

    a, b, c = _record(1, 3e-3), _record(2, 1e-3), _record(3, 2e-3)
    again = _record(2, 0.5e-3)  # the same program as b, measured again faster
    failed = _record(4, None)
    top = top_programs([a, b, c, again, failed], "k", 2)
    assert [p.key for p in top] == [b.program_key, c.program_key]
    assert len(top_programs([a, b, c, again, failed], "k", 10)) == 3
