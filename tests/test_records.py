import json
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


def test_schema_1_records_still_load(tmp_path):
    """Lines written before the Status enum (no schema field; "timeout" for both compile
    and run timeouts, "runtime_error") load with today's statuses."""
    from mlir_ansor.tuner.status import Status

    ok = _record(1, 2e-3)
    lines = []
    for status, error in (("ok", ""), ("timeout", "compile exceeded 10.0s"),
                          ("timeout", "timeout"), ("runtime_error", "exit 1")):
        d = {"task_key": "k", "program": ok.program, "program_key": ok.program_key,
             "status": status, "latency_s": 2e-3 if status == "ok" else None,
             "samples_s": [], "error": error, "target": "llvm-cpu", "env": {}, "time": 0.0}
        lines.append(json.dumps(d))
    path = tmp_path / "old.jsonl"
    path.write_text("\n".join(lines) + "\n")
    loaded = RecordStore(path).load()
    assert [r.status for r in loaded] == [Status.OK, Status.COMPILE_TIMEOUT,
                                         Status.RUN_TIMEOUT, Status.RUN_ERROR]
    assert all(r.schema == 2 and r.device_kind == "" for r in loaded)
    assert loaded[0].ok


def test_a_torn_last_line_is_reported_and_later_appends_survive(tmp_path):
    """A run SIGKILLed mid-write leaves half a line; the next run reports it with its line
    number, keeps every other line, and its own appends stay separate lines."""
    store = RecordStore(tmp_path / "r.jsonl")
    store.append(_record(1, 2e-3))
    store.append(_record(2, 3e-3))
    whole = store.path.read_text()
    store.path.write_text(whole + whole.splitlines()[0][:40])  # torn: no newline
    store.append(_record(3, 1e-3))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        loaded = store.load()
    assert [r.latency_s for r in loaded] == [2e-3, 3e-3, 1e-3]
    assert [str(x.message).split(": ")[0] for x in w] == [f"{store.path}:3"]


def test_records_of_another_device_or_iree_do_not_count_as_measured_here():
    from dataclasses import replace

    from mlir_ansor.tuner.records import Context

    here = Context("x86_64-avx512", "3.13.0")
    mine = replace(_record(1, 2e-3), device_kind="x86_64-avx512", env={"iree": "3.13.0"})
    other_device = replace(_record(2, 1e-3), device_kind="aarch64-neon", env={"iree": "3.13.0"})
    other_iree = replace(_record(3, 0.5e-3), device_kind="x86_64-avx512", env={"iree": "3.12.0"})
    recs = [mine, other_device, other_iree]
    assert best_by_task(recs)["k"] is other_iree
    assert best_by_task(recs, here)["k"] is mine
