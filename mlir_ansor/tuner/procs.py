"""Child processes of the tuner: each in its own session (a compile that hangs is killed
with all its threads and children), with a memory cap, and registered while it runs so
that a tuner stopped by SIGTERM/SIGINT kills them: in their own sessions they never see
the terminal's Ctrl-C.

The cap is set by `sh -c 'ulimit -v'` before exec rather than a `preexec_fn`, which is
documented as unsafe with threads (compiles run on a thread pool)."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from typing import Callable, Sequence


class Interrupted(KeyboardInterrupt):
    """The tuner is shutting down: no new child process is started (a KeyboardInterrupt,
    so that the CLI ends as for Ctrl-C, from any thread)."""


@dataclass(frozen=True)
class ProcResult:
    returncode: int  # negative: killed by that signal
    stdout: str
    stderr: str
    timed_out: bool


class _Registry:
    """Process groups of live children."""

    def __init__(self) -> None:
        # Reentrant: the signal handler runs kill_all on the main thread, which may hold the
        # lock in add or discard at that moment.
        self.lock = threading.RLock()
        self.groups: set[int] = set()
        self.closed = False

    def add(self, pgid: int) -> None:
        with self.lock:
            self.groups.add(pgid)

    def discard(self, pgid: int) -> None:
        with self.lock:
            self.groups.discard(pgid)

    def kill_all(self) -> int:
        """Kill every live group and refuse new children; returns how many were killed."""
        with self.lock:
            self.closed = True
            groups = list(self.groups)
        for g in groups:
            try:
                os.killpg(g, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(groups)


LIVE = _Registry()


def capped(cmd: Sequence[str], mem_bytes: int | None) -> list[str]:
    """`cmd` run under an address-space cap of `mem_bytes`."""
    if not mem_bytes:
        return list(cmd)
    return ["/bin/sh", "-c", f'ulimit -v {mem_bytes // 1024} && exec "$@"', "sh", *cmd]


def run_isolated(cmd: Sequence[str], timeout_s: float, mem_bytes: int | None = None,
                 env: dict | None = None, stdin_file: str | os.PathLike | None = None,
                 stdout_file: str | os.PathLike | None = None,
                 on_start: Callable[[int], None] | None = None) -> ProcResult:
    """Run `cmd` in a new session, capped at `mem_bytes` of address space; kill the whole
    group on timeout. `stdin_file` / `stdout_file`: bytes from / to files (stdout is then
    not captured). `on_start` is called with the child's pid once it runs (the cap's
    shell execs the command: the pid is the command's)."""
    if LIVE.closed:
        raise Interrupted("the tuner is stopping")
    with contextlib.ExitStack() as files:
        fin = files.enter_context(open(stdin_file, "rb")) if stdin_file else subprocess.DEVNULL
        fout = (files.enter_context(open(stdout_file, "wb")) if stdout_file
                else subprocess.PIPE)
        proc = subprocess.Popen(capped(cmd, mem_bytes), stdin=fin, stdout=fout,
                                stderr=subprocess.PIPE, text=True, errors="replace",
                                start_new_session=True, env=env)
        if on_start is not None:
            on_start(proc.pid)
        return _wait(proc, timeout_s)


def _wait(proc: subprocess.Popen, timeout_s: float) -> ProcResult:
    try:
        LIVE.add(proc.pid)
        if LIVE.closed:  # kill_all ran between the check above and the registration
            raise Interrupted("the tuner is stopping")
        try:
            out, err = proc.communicate(timeout=timeout_s)
            return ProcResult(proc.returncode, out or "", err or "", False)
        except subprocess.TimeoutExpired:
            _kill(proc)
            out, err = proc.communicate()
            return ProcResult(-signal.SIGKILL, out or "", err or "", True)
    except BaseException:  # Ctrl-C, SIGTERM, shutdown: the child must not outlive us
        _kill(proc)
        raise
    finally:
        LIVE.discard(proc.pid)
        if LIVE.closed:  # killed by kill_all while we waited: not the candidate's fault
            raise Interrupted("the tuner is stopping")


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop_children_on_signals() -> None:
    """SIGTERM and SIGINT kill all live children, then stop the tuner with
    KeyboardInterrupt (main thread only)."""

    def handler(signum, frame):
        LIVE.kill_all()
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def signal_name(returncode: int) -> str:
    """'SIGSEGV' for a child killed by a signal (negative return code), else 'exit N'."""
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit {returncode}"
