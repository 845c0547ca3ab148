"""The ssh runner (tuner/ssh_runner.py) against an sshd of the test's own on localhost: a
key login, the device's IREE tools in a folder of their own, modules and inputs copied,
outputs checked here, timings read from the device's iree-benchmark-module."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlir_ansor.errors import UsageError
from mlir_ansor.targets import host
from mlir_ansor.tuner.runner import RunInput
from mlir_ansor.tuner.ssh_runner import SshDevice, SshRunner
from mlir_ansor.tuner.status import Status
from mlir_ansor.tuner.toolchain import Toolchain
from tests.conftest import QUICK_CLI, compiled_matmul

ROOT = Path(__file__).resolve().parents[1]
MLP = f"{ROOT / 'tests' / 'data' / 'small_mlp.py'}:make"
SSHD = Path("/usr/sbin/sshd")
OPTIONS = ("StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "LogLevel=ERROR")

pytestmark = pytest.mark.skipif(
    not SSHD.exists() or os.geteuid() != 0,
    reason="needs openssh-server and root (tools/setup_devices.sh installs it as root)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    d = tmp_path_factory.mktemp("sshd")
    for name in ("host", "id"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)],
                       check=True)
    shutil.copy(d / "id.pub", d / "authorized_keys")
    port = _free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        f"StrictModes no\nUsePAM no\nPasswordAuthentication no\nPidFile {d / 'sshd.pid'}\n")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation folder
    proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(d / "sshd_config")],
                            stderr=subprocess.PIPE, text=True)
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    tools = str(Path(Toolchain.find().run).parent)  # "the device's" runtime tools
    yield SshDevice("root@127.0.0.1", port, str(d / "id"), tools, str(d / "remote"), OPTIONS)
    proc.terminate()
    proc.wait(10)


def test_the_device_says_what_it_is(device):
    runner = SshRunner(device)
    runner.prepare(host().device_kind)
    with pytest.raises(UsageError, match=f"is a {host().device_kind}, the target is aarch64"):
        runner.prepare("aarch64-neon")


def test_check_and_time_on_the_device(device, tmp_path):
    vmfb, (a, b, ref, wrong, mag) = compiled_matmul(tmp_path, "llvm-cpu")
    runner = SshRunner(device)
    runner.prepare(host().device_kind)
    ok = runner.run(RunInput(vmfb, (a, b), (ref,), (mag,)))
    assert ok.status == Status.OK and len(ok.samples_s) == runner.timing.repetitions, ok.error
    assert 0 < ok.latency_s < 0.1
    assert set(runner._sent) == {a, b}  # inputs stay on the device
    bad = runner.run(RunInput(vmfb, (a, b), (wrong,), (mag,), time=False))
    assert bad.status == Status.WRONG_ANSWER
    broken = tmp_path / "broken.vmfb"
    broken.write_bytes(b"not a module")
    res = runner.run(RunInput(broken, (a, b), (ref,), (mag,)))
    assert res.status == Status.RUN_ERROR


def test_unreachable_device_is_a_clear_error(tmp_path):
    runner = SshRunner(SshDevice("root@127.0.0.1", _free_port(), ssh_options=OPTIONS))
    with pytest.raises(Exception, match="ssh root@127.0.0.1"):
        runner.prepare(host().device_kind)


def test_tune_with_the_ssh_runner(device, tmp_path):
    out = tmp_path / "out"
    # (No layout rewrite: the runner is under test, not the layouts; it halves the time.)
    cmd = [sys.executable, "-m", "mlir_ansor.tune", MLP, "--trials", "4", "--out", str(out),
           "--no-layout-rewrite", *QUICK_CLI,
           "--ssh", f"{device.host}:{device.port}", "--ssh-key", device.key,
           "--ssh-tools", device.tools_dir, *[x for o in OPTIONS for x in ("--ssh-option", o)]]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 4 and sum(r["status"] == "ok" for r in recs) >= 2
    assert {r["device_kind"] for r in recs} == {host().device_kind}
    assert "ssh" in (out / "report.txt").read_text()


def test_a_run_keeps_its_timing_share_on_the_device(monkeypatch, tmp_path):
    """The runner rebuilds the run with the device's paths: a dynamic task's share of the
    timing budget must survive that (it was dropped: every sample timed at the full one)."""
    from mlir_ansor.tuner.runner import RunResult

    timed = []

    class Bench:
        def time(self, item):
            timed.append(item)
            return RunResult(Status.OK, (1e-3,))

    runner = SshRunner(SshDevice("nobody@127.0.0.1"))
    monkeypatch.setattr(runner, "_send", lambda path, cache: f"/remote/{path.name}")
    monkeypatch.setattr(runner, "_bench", lambda: Bench())
    res = runner.run(RunInput(tmp_path / "m.vmfb", (tmp_path / "in0.npy",), timing_share=0.25))
    assert res.status == Status.OK
    assert [(str(i.artifact), i.timing_share) for i in timed] == [("/remote/m.vmfb", 0.25)]
