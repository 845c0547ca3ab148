"""Fault injection: a candidate that crashes, hangs or runs out of memory is recorded as
such and the search goes on; a stopped tuner leaves no child behind."""
import random
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mlir_ansor.sketch_passes.annotation import annotate
from mlir_ansor.tuner.builder import LocalBuilder
from mlir_ansor.tuner.runner import LocalRunner
from mlir_ansor.tuner.status import Status
from tests.conftest import MATMUL, prepared_measurer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mm(tools, tmp_path_factory):
    return prepared_measurer(tools, tmp_path_factory.mktemp("faults"), MATMUL)


@pytest.fixture(scope="module")
def built(mm, tmp_path_factory):
    """A valid candidate's module."""
    prog = annotate(mm.task.ops, mm.task.sketches[0], random.Random(3))
    res = mm.build([prog], [tmp_path_factory.mktemp("cand")])[0]
    assert res.status == Status.OK, res.error
    return res.artifact


def alive(pid: int) -> bool:
    """Running (a killed child whose new parent never reaps it stays a zombie here)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def processes() -> list[tuple[int, str]]:
    """(pid, command line) of every process (those that end meanwhile are left out)."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                out.append((int(p.name), (p / "cmdline").read_bytes().decode(errors="replace")))
            except OSError:
                pass
    return out


def _script(tmp_path: Path, body: str) -> str:
    p = tmp_path / "tool.sh"
    p.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    p.chmod(0o755)
    return str(p)


def test_a_candidate_that_segfaults_is_a_run_error(mm, built, tmp_path):
    runner = LocalRunner(_script(tmp_path, "kill -SEGV $$\n"), mm.tools.benchmark)
    res = runner.run(mm.run_input(built, mm.points[0]))
    assert res.status == Status.RUN_ERROR and "SIGSEGV" in res.error


def test_a_candidate_that_hangs_is_killed_with_its_children(mm, built, tmp_path):
    pidfile = tmp_path / "child.pid"
    tool = _script(tmp_path, f"sleep 300 &\necho $! > {pidfile}\nwait\n")
    start = time.monotonic()
    res = LocalRunner(tool, mm.tools.benchmark, timeout_s=1.0).run(mm.run_input(built, mm.points[0]))
    assert res.status == Status.RUN_TIMEOUT and time.monotonic() - start < 30
    child = int(pidfile.read_text())
    time.sleep(0.2)
    assert not alive(child)  # the whole group was killed


def test_a_run_past_the_memory_cap_is_out_of_memory(mm, built):
    runner = replace(mm.runner, mem_bytes=60 << 20)  # IREE's runtime cannot even start
    res = runner.run(mm.run_input(built, mm.points[0]))
    assert res.status == Status.OUT_OF_MEMORY, res


def test_a_compile_past_the_memory_cap_is_out_of_memory(mm, tmp_path):
    prog = annotate(mm.task.ops, mm.task.sketches[0], random.Random(4))
    mm_small = replace(mm.builder, mem_bytes=150 << 20)
    item = mm.build_input(prog, tmp_path / "c")
    res = mm_small.build([item])[0]
    assert res.status == Status.OUT_OF_MEMORY and res.artifact is None, res


def test_a_compile_that_hangs_is_a_compile_timeout(mm, tmp_path):
    prog = annotate(mm.task.ops, mm.task.sketches[0], random.Random(5))
    slow = LocalBuilder(_script(tmp_path, "sleep 300\n"), timeout_s=1.0)
    res = slow.build([mm.build_input(prog, tmp_path / "c")])[0]
    assert res.status == Status.COMPILE_TIMEOUT


def test_a_run_that_writes_no_results_is_a_run_error(mm, built, tmp_path):
    # A run tool that "succeeds" without writing the results the reference expects.
    res = LocalRunner(_script(tmp_path, "exit 0\n"), mm.tools.benchmark).run(
        mm.run_input(built, mm.points[0]))
    assert res.status == Status.RUN_ERROR and "no results written" in res.error


def test_results_left_by_an_earlier_run_do_not_pass_for_this_ones(tmp_path):
    """The layout stage writes IREE's default's results, then a build's, under one folder:
    a run that "succeeds" without writing must not be read as the earlier run's."""
    out = tmp_path / "outs"
    out.mkdir()
    np.save(out / "out0.npy", np.ones(3, np.float32))  # an earlier run's result
    got, failed = LocalRunner(_script(tmp_path, "exit 0\n"), "bench").outputs(
        tmp_path / "m.vmfb", [], 1, out)
    assert got is None and failed.status == Status.RUN_ERROR
    assert "no results written" in failed.error


def test_sigterm_kills_the_children_of_a_stopped_tuner(tmp_path):
    """Children run in their own sessions, so the terminal's signal never reaches them:
    the tuner kills them itself."""
    pidfile = tmp_path / "child.pid"
    prog = textwrap.dedent(f"""
        import threading, time
        from mlir_ansor.tuner.procs import run_isolated, stop_children_on_signals
        stop_children_on_signals()
        cmd = ["/bin/sh", "-c", "echo $$ > {pidfile}; exec sleep 300"]
        threading.Thread(target=run_isolated, args=(cmd, 600), daemon=True).start()
        time.sleep(600)
        """)
    proc = subprocess.Popen([sys.executable, "-c", prog], cwd=ROOT, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 60
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.time() < deadline:
        time.sleep(0.1)
    child = int(pidfile.read_text())
    assert alive(child)  # while the tuner runs
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    time.sleep(0.2)
    assert not alive(child)


def test_a_tuner_stopped_with_sigterm_exits_130_keeps_records_and_leaves_no_child(tmp_path):
    """The CLI end to end: SIGTERM in the middle of the trials ends the run with its one
    line and exit 130, every record already written stays valid, and no compile or run of
    a candidate outlives it."""
    import json
    import signal

    out = tmp_path / "out"
    records = out / "records.jsonl"
    model = f"{ROOT / 'tests' / 'data' / 'small_mlp.py'}:make"
    proc = subprocess.Popen([sys.executable, "-m", "mlir_ansor.tune", model, "--trials", "40",
                             "--batch", "2", "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not (records.exists() and
                                          len(records.read_text().splitlines()) >= 2):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("error: interrupted")
    assert "Traceback" not in err
    lines = records.read_text().splitlines()
    assert 2 <= len(lines) < 40 and all(json.loads(l)["task_key"] for l in lines)
    time.sleep(0.3)
    left = [c for pid, c in processes() if str(out) in c and alive(pid)]
    assert not left, left


def test_a_signal_while_the_main_thread_waits_on_a_child_is_an_interrupt(tmp_path):
    """The handler's KeyboardInterrupt reaches the caller even when it lands inside
    run_isolated on the main thread (it was replaced by an exception the CLI did not
    catch: a traceback and exit 1), and the child is killed."""
    pidfile = tmp_path / "child.pid"
    prog = textwrap.dedent(f"""
        import os, signal, threading
        from mlir_ansor.tuner.procs import run_isolated, stop_children_on_signals
        stop_children_on_signals()
        threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
        try:
            run_isolated(["/bin/sh", "-c", "echo $$ > {pidfile}; exec sleep 300"], 600)
        except KeyboardInterrupt as e:
            print("interrupted", type(e).__name__)
        """)
    res = subprocess.run([sys.executable, "-c", prog], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert res.stdout.startswith("interrupted"), (res.stdout, res.stderr[-2000:])
    time.sleep(0.2)
    assert not alive(int(pidfile.read_text()))


def test_unreadable_benchmark_output_is_a_run_error(mm, built, tmp_path):
    bench = _script(tmp_path, "echo 'not json'\n")
    res = LocalRunner(mm.tools.run, bench).run(mm.run_input(built, mm.points[0]))
    assert res.status == Status.RUN_ERROR and "unreadable benchmark output" in res.error
    empty = _script(tmp_path, "echo '{\"benchmarks\": []}'\n")
    res = LocalRunner(mm.tools.run, empty).run(mm.run_input(built, mm.points[0]))
    assert res.status == Status.RUN_ERROR and "no repetition" in res.error
