"""Measuring on a device reached by ssh: a board or any machine that has only sshd and
IREE's runtime tools (as TVM's RPC users measure on phones and boards).

Each candidate's module is copied to the device (through ssh's stdin into `cat`: no sftp or
scp needed there; inputs once: they are cached there by content), run there with `iree-run-module` (its outputs copied back and checked here
against the reference) and timed there with `iree-benchmark-module`. Plain OpenSSH, no
agent on the device; `BatchMode` (a key, never a password prompt). The device says what it
is (`uname -m`, /proc/cpuinfo): its device kind must be the run's target's.
"""
from __future__ import annotations

import hashlib
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mlir_ansor.errors import ToolchainError, UsageError
from mlir_ansor.targets import Target, detect_cpu
from mlir_ansor.tuner.procs import run_isolated
from mlir_ansor.tuner.runner import LocalRunner, RunInput, RunResult, Timing, failure
from mlir_ansor.tuner.status import Status
from mlir_ansor.tuner.validation import outputs_match

if TYPE_CHECKING:  # measure imports the runners
    from mlir_ansor.tuner.measure import MeasureConfig


@dataclass(frozen=True)
class SshDevice:
    """Where and how to reach the device."""

    host: str  # [user@]host
    port: int = 22
    key: str = ""  # identity file ("": ssh's default)
    tools_dir: str = ""  # folder of iree-run-module / iree-benchmark-module there ("": PATH)
    remote_dir: str = "/tmp/mlir_ansor_runner"
    ssh_options: tuple[str, ...] = ()  # more -o options (e.g. for a test's host keys)

    @staticmethod
    def parse(spec: str, key: str = "", tools_dir: str = "") -> "SshDevice":
        """`[user@]host[:port]`."""
        host, _, port = spec.rpartition(":") if ":" in spec else (spec, "", "22")
        if not host or not port.isdigit():
            raise UsageError(f"--ssh {spec}: expected [USER@]HOST[:PORT]")
        return SshDevice(host, int(port), key, tools_dir)

    def base(self, program: str) -> list[str]:
        # One connection serves every command of the run (a new login costs ~0.3 s; a
        # candidate takes 4-5 commands): OpenSSH's connection sharing, socket per host.
        control = Path(tempfile.gettempdir()) / "mlir_ansor_ssh_%C"
        args = [program, "-o", "BatchMode=yes", "-o", "ConnectTimeout=20",
                "-o", "ControlMaster=auto", "-o", f"ControlPath={control}",
                "-o", "ControlPersist=120"]
        for opt in self.ssh_options:
            args += ["-o", opt]
        if self.key:
            args += ["-i", self.key]
        return args

    def ssh(self) -> tuple[str, ...]:
        return (*self.base("ssh"), "-p", str(self.port), self.host)

    def tool(self, name: str) -> str:
        return f"{self.tools_dir.rstrip('/')}/{name}" if self.tools_dir else name


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


@dataclass
class SshRunner:
    """The Runner protocol on an ssh device."""

    device: SshDevice
    timeout_s: float = 60.0
    timing: Timing = field(default_factory=Timing)
    rtol: float = 1e-4
    atol: float = 1e-5
    copy_timeout_s: float = 120.0
    _sent: dict = field(default_factory=dict)  # local path -> (mtime, remote path)

    @classmethod
    def from_config(cls, device: SshDevice, cfg: MeasureConfig) -> "SshRunner":
        return cls(device, cfg.run_timeout_s, cfg.timing, cfg.rtol, cfg.atol)

    def _do(self, cmd: list[str] | tuple[str, ...], timeout_s: float, **files):
        res = run_isolated(list(cmd), timeout_s, **files)
        if res.timed_out or res.returncode != 0:
            return res, failure(res, timeout_s)
        return res, None

    def remote(self, command: str, timeout_s: float | None = None):
        return self._do([*self.device.ssh(), command], timeout_s or self.timeout_s)

    def describe(self) -> Target:
        """The device's CPU as the tuner's targets describe one (from uname and cpuinfo)."""
        res, failed = self.remote("uname -m && cat /proc/cpuinfo && nproc", 60)
        if failed:
            raise ToolchainError(f"ssh {self.device.host}:{self.device.port}: "
                                 f"{failed.error[:300]}")
        lines = res.stdout.splitlines()
        cores = int(lines[-1]) if lines and lines[-1].strip().isdigit() else 1
        return detect_cpu(lines[0].strip(), "\n".join(lines[1:-1]), {}, cores)

    def prepare(self, device_kind: str) -> None:
        """Check the device is the run's kind and has the tools; make the work folder."""
        kind = self.describe().device_kind
        if kind != device_kind:
            raise UsageError(f"the ssh device {self.device.host} is a {kind}, the target is "
                             f"{device_kind}")
        d = shlex.quote(self.device.remote_dir)
        tools = " ".join(shlex.quote(self.device.tool(t)) for t in
                         ("iree-run-module", "iree-benchmark-module"))
        _, failed = self.remote(f"mkdir -p {d} && for t in {tools}; do command -v $t "
                                f">/dev/null || {{ echo missing $t >&2; exit 3; }}; done", 60)
        if failed:
            raise ToolchainError(f"the ssh device {self.device.host} lacks IREE's runtime "
                                 f"tools: {failed.error[:300]}")

    def _send(self, path: Path, cache: bool) -> str | RunResult:
        """The file's path on the device (copied if needed), or the failure."""
        path = Path(path)
        stamp = path.stat().st_mtime_ns
        if cache and path in self._sent and self._sent[path][0] == stamp:
            return self._sent[path][1]
        name = f"{_digest(path)}_{path.name}" if cache else f"cand_{path.name}"
        dest = f"{self.device.remote_dir}/{name}"
        _, failed = self._do([*self.device.ssh(), f"cat > {shlex.quote(dest)}"],
                             self.copy_timeout_s, stdin_file=path)
        if failed:
            return RunResult(Status.RUN_ERROR, (), f"copying {path.name} to the device: "
                                                   f"{failed.error[:200]}")
        if cache:
            self._sent[path] = (stamp, dest)
        return dest

    def _bench(self) -> LocalRunner:
        """IREE's tools started through ssh (LocalRunner's commands and parsing)."""
        return LocalRunner(self.device.tool("iree-run-module"),
                           self.device.tool("iree-benchmark-module"), self.timeout_s, None,
                           self.timing, self.rtol, self.atol, launcher=self.device.ssh())

    def run(self, item: RunInput) -> RunResult:
        module = self._send(item.artifact, cache=False)
        if isinstance(module, RunResult):
            return module
        inputs = []
        for p in item.inputs:
            r = self._send(p, cache=True)
            if isinstance(r, RunResult):
                return r
            inputs.append(r)
        if item.reference:
            res = self._validate(module, inputs, item)
            if res.status != Status.OK:
                return res
        if not item.time:
            return RunResult(Status.OK)
        return self._bench().time(RunInput(Path(module), tuple(map(Path, inputs)),
                                           time=True, slow_cutoff_s=item.slow_cutoff_s,
                                           timing_share=item.timing_share))

    def _validate(self, module: str, inputs: list[str], item: RunInput) -> RunResult:
        outs = [f"{self.device.remote_dir}/out{i}.npy" for i in range(len(item.reference))]
        cmd = " ".join(shlex.quote(a) for a in (
            self.device.tool("iree-run-module"), f"--module={module}", "--function=main",
            *[f"--input=@{p}" for p in inputs], *[f"--output=@{p}" for p in outs]))
        res, failed = self.remote(f"rm -f {' '.join(map(shlex.quote, outs))} && {cmd}")
        if failed:
            return failed
        local = Path(item.artifact).parent / "ssh_outputs"
        local.mkdir(parents=True, exist_ok=True)
        got = []
        for i, o in enumerate(outs):
            dest = local / f"out{i}.npy"
            _, failed = self._do([*self.device.ssh(), f"cat {shlex.quote(o)}"],
                                 self.copy_timeout_s, stdout_file=dest)
            if failed:
                return RunResult(Status.RUN_ERROR, (), f"no result {i} came back: "
                                                       f"{failed.error[:200]}")
            got.append(np.load(dest))
        ref = [np.load(p) for p in item.reference]
        mag = [np.load(p) for p in item.magnitude] if item.magnitude else None
        err = outputs_match(got, ref, mag, self.rtol, self.atol)
        return RunResult(Status.WRONG_ANSWER, (), err) if err else RunResult(Status.OK)
