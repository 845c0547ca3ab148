"""Offline batches (tuner/offline.py, mlir_ansor/offline.py): prepare a batch here, run it
"on the device" (this machine, as a separate process that only has the batch folder and
IREE's runtime tools), import its results, hand back a library, and check the end-to-end
batch; a cuda batch is written and refuses to run without a GPU."""
from __future__ import annotations

import json
import shutil
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlir_ansor import offline
from mlir_ansor.targets import host
from mlir_ansor.tuner.offline import BatchError, read_results
from mlir_ansor.tuner.toolchain import Toolchain

ROOT = Path(__file__).resolve().parents[1]
MLP = f"{ROOT / 'tests' / 'data' / 'small_mlp.py'}:make"
TOOLS = str(Path(Toolchain.find().run).parent)


def _run_batch(batch: Path, *args: str) -> subprocess.CompletedProcess:
    # From another folder, as on a device that has nothing but the batch.
    return subprocess.run([sys.executable, str(batch / "run_batch.py"), *args], cwd="/",
                          capture_output=True, text=True, timeout=900)


def _fresh_run(prepared: Path, tmp_path: Path) -> Path:
    """A copy of the prepared run whose first batch has run, without the records, library
    and end-to-end batch an earlier test may have made from the real results: only what a
    test fakes must decide (else the real timings do, and on a machine where no candidate
    beats IREE's default nothing is handed back)."""
    batch = prepared / "batch"
    if not (batch / "results.jsonl").exists():
        assert _run_batch(batch, "--tools", TOOLS).returncode == 0
    run = tmp_path / "run"
    shutil.copytree(prepared, run)
    for name in ("records.jsonl", "tuned_library.mlir", "build.sh"):
        (run / name).unlink(missing_ok=True)
    shutil.rmtree(run / "e2e_batch", ignore_errors=True)
    return run


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    out = tmp_path_factory.mktemp("offline") / "run"
    offline.prepare(MLP, "llvm-cpu", 6, out)
    return out


def test_batch_round_trip(prepared):
    out, batch = prepared, prepared / "batch"
    manifest = json.loads((batch / "manifest.json").read_text())
    names = [i["name"] for i in manifest["items"]]
    assert sum(n.endswith("_default") for n in names) == 2 and sum("_c" in n for n in names) >= 4
    assert manifest["device"] == "local-task"
    res = _run_batch(batch, "--tools", TOOLS)
    assert res.returncode == 0, res.stderr[-1000:]
    lines = (batch / "results.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["device_kind"] == host().device_kind
    assert len(lines) == 1 + len(names)
    # A rerun skips what is done: no line twice.
    assert _run_batch(batch, "--tools", TOOLS).returncode == 0
    assert len((batch / "results.jsonl").read_text().splitlines()) == 1 + len(names)

    text = offline.finish(out)
    assert f"ran on {host().device_kind}" in text
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert len(recs) == len(names) - sum(n.endswith("_default") for n in names)
    assert {r["device_kind"] for r in recs} == {host().device_kind}
    assert sum(r["status"] == "ok" for r in recs) >= 3
    offline.finish(out)  # importing the same results again adds nothing
    assert len((out / "records.jsonl").read_text().splitlines()) == len(recs)
    assert (out / "build.sh").exists() and (out / "e2e_batch" / "run_batch.py").exists()

    res = _run_batch(out / "e2e_batch", "--tools", TOOLS)
    assert res.returncode == 0, res.stderr[-1000:]
    line = offline.report(out)
    assert line.startswith(f"End to end on {host().device_kind}") and "matched torch" in line


def test_wrong_outputs_are_caught_on_the_device(prepared, tmp_path):
    """The device side checks with the tuner's own rule (batch_check.py, a copy)."""
    check = runpy.run_path(str(prepared / "batch" / "batch_check.py"))["outputs_match"]
    a = np.ones((4, 4), np.float32)
    assert check([a], [a]) == "" and "elements off" in check([a + 1], [a])


def test_bad_results_files(prepared, tmp_path):
    batch = prepared / "batch"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"batch": "x", "device_kind": "k"}\n')
    with pytest.raises(BatchError, match="a result of batch 'x'"):
        read_results(batch, bad)
    good = (batch / "results.jsonl").read_text() if (batch / "results.jsonl").exists() \
        else ""
    bad.write_text(good + "{torn\n")
    with pytest.raises(BatchError, match=r"bad.jsonl:\d+: corrupt results line"):
        read_results(batch, bad)
    with pytest.raises(BatchError, match="cannot read"):
        read_results(batch, tmp_path / "none.jsonl")


def test_cuda_batch_is_ptx_and_needs_a_gpu(tmp_path):
    out = tmp_path / "cuda"
    offline.prepare(MLP, "cuda", 2, out)
    manifest = json.loads((out / "batch" / "manifest.json").read_text())
    assert manifest["device"] == "cuda" and manifest["target"] == "cuda"
    cands = [i for i in manifest["items"] if i["program"] is not None]
    assert cands and all(i["program"]["sketch"].get("gpu") for i in cands)
    for i in manifest["items"]:  # modules hold a cuda executable (PTX), not an ELF
        data = (out / "batch" / i["module"]).read_bytes()
        assert b"cuda" in data and b"embedded-elf" not in data
    res = _run_batch(out / "batch", "--tools", TOOLS)
    assert res.returncode != 0 and "nvidia-smi finds none" in res.stderr
    # What a GPU's results would do (fabricated here: no GPU): every task's first
    # candidate twice as fast as IREE's default; finish builds the model's PTX with all of
    # them applied (compile_model checks) and writes the cuda end-to-end batch.
    lines = [{"batch": manifest["batch"], "device_kind": "cuda-sm80", "device": {}}]
    for i in manifest["items"]:
        first = i["name"].endswith(("_default", "_c0"))
        lat = 1e-3 if i["program"] is None else 5e-4 if first else 2e-3
        lines.append({"batch": manifest["batch"], "name": i["name"], "status": "ok",
                      "latency_s": lat, "samples_s": [lat], "time": 1.0})
    (out / "batch" / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    text = offline.finish(out)
    n_tasks = sum(i["program"] is None for i in manifest["items"])
    assert f"{n_tasks} strategies in tuned_library.mlir" in text
    e2e = json.loads((out / "e2e_batch" / "manifest.json").read_text())
    assert e2e["device"] == "cuda" and [i["name"] for i in e2e["items"]] == \
        ["model_default", "model_tuned"]


def test_tune_for_cuda_without_a_gpu_writes_the_first_round_as_a_batch(tmp_path):
    """`python -m mlir_ansor.tune --target cuda` here: nothing can be timed, so the run is the
    search's first round as an offline batch of PTX modules, and the user is told so."""
    from tests.conftest import tune_cli

    out = tmp_path / "out"
    res = tune_cli(MLP, "--target", "cuda", "--trials", "2", "--out", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "no GPU runner on this machine, nothing is timed here" in res.stdout
    manifest = json.loads((out / "batch" / "manifest.json").read_text())
    assert manifest["device"] == "cuda" and manifest["target"] == "cuda"
    assert sum(i["program"] is not None for i in manifest["items"]) == 2
    assert not (out / "records.jsonl").exists()  # no timing claimed


def test_a_winning_candidate_is_handed_back(prepared, tmp_path):
    """Results in which one candidate beat IREE's default (its time halved in a copy of the
    device's results): finish keeps it, and the model built with the library has it applied
    and matches torch in the end-to-end batch."""
    batch = prepared / "batch"
    prepared = _fresh_run(prepared, tmp_path)
    lines = [json.loads(x) for x in (batch / "results.jsonl").read_text().splitlines()]
    default = next(r for r in lines if r.get("name", "").endswith("_default"))
    task = default["name"][:-len("_default")]
    cand = next(r for r in lines if r.get("name", "").startswith(f"{task}_c") and
                r["status"] == "ok")
    # Every other candidate slower than its task's default: the machine's real timings
    # (where some candidate of the other task may beat IREE) must not decide the count.
    defaults = {r["name"][:-len("_default")]: r["latency_s"] for r in lines
                if r.get("name", "").endswith("_default")}
    for r in lines:
        name = r.get("name", "")
        if r is not cand and "_c" in name and r["status"] == "ok":
            r["latency_s"] = 2 * defaults[name.rsplit("_c", 1)[0]]
            r["samples_s"] = [r["latency_s"]]
    cand["latency_s"] = default["latency_s"] / 2
    cand["samples_s"] = [cand["latency_s"]]  # faster in every repetition
    # ...of a default whose repetitions are its median: a real one's spread (on a noisy VM
    # one repetition of a 48 us default ran in 19 us) must not decide the test.
    default["samples_s"] = [default["latency_s"]] * len(default["samples_s"])
    faked = tmp_path / "results.jsonl"
    faked.write_text("".join(json.dumps(r) + "\n" for r in lines))
    text = offline.finish(prepared, faked)
    assert "1 strategies in tuned_library.mlir" in text and "2.00x" in text
    build = (prepared / "build.sh").read_text()
    assert 'model="$here/"model_tuned.mlir' in build
    names = [i["name"] for i in json.loads(
        (prepared / "e2e_batch" / "manifest.json").read_text())["items"]]
    assert names == ["model_default", "model_tuned"]
    assert _run_batch(prepared / "e2e_batch", "--tools", TOOLS).returncode == 0
    assert "both matched torch" in offline.report(prepared)


def test_a_win_within_the_timing_jitter_is_not_kept(prepared, tmp_path):
    """A candidate whose median beats IREE's default but one of whose repetitions is no
    faster than the default's fastest: jitter, not a win (finish keeps the default)."""
    batch = prepared / "batch"
    run = _fresh_run(prepared, tmp_path)
    lines = [json.loads(x) for x in (batch / "results.jsonl").read_text().splitlines()]
    defaults = {r["name"][:-len("_default")]: r for r in lines
                if r.get("name", "").endswith("_default")}
    for r in lines:
        name = r.get("name", "")
        if "_c" in name and r["status"] == "ok":
            d = defaults[name.rsplit("_c", 1)[0]]
            r["latency_s"] = d["latency_s"] / 2
            r["samples_s"] = [d["latency_s"] / 2] * 4 + [min(d["samples_s"])]
    faked = tmp_path / "results.jsonl"
    faked.write_text("".join(json.dumps(r) + "\n" for r in lines))
    text = offline.finish(run, faked)
    assert "0 strategies" in text and "tuned " not in text, text


def test_a_second_round_from_the_cost_model(prepared, tmp_path):
    """`next`: the first round's results train the cost model, which picks the second
    round's programs (none measured before); the device runs that batch too, and `finish`
    weighs both rounds, each against its own default."""
    batch = prepared / "batch"
    run = _fresh_run(prepared, tmp_path)
    r2 = offline.next_round(run, 4)
    assert r2 == run / "batch_r2"
    assert json.loads((run / "offline.json").read_text())["rounds"] == ["batch", "batch_r2"]
    first = {i["program_key"] for i in json.loads((batch / "manifest.json").read_text())["items"]
             if i["program"] is not None}
    items = json.loads((r2 / "manifest.json").read_text())["items"]
    second = {i["program_key"] for i in items if i["program"] is not None}
    assert sum(i["program"] is None for i in items) == 2 and len(second) >= 3
    assert not first & second
    assert _run_batch(r2, "--tools", TOOLS).returncode == 0
    text = offline.finish(run)
    assert "(round 2)" in text
    recs = (run / "records.jsonl").read_text().splitlines()
    assert len(recs) == len(first) + len(second)
    with pytest.raises(offline.UsageError, match="--trials"):
        offline.next_round(run, 0)
