"""Where the IREE tools are, and how to run one isolated (timeout, memory cap, own group)."""
from __future__ import annotations

import os
import resource
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import iree.compiler
import iree.runtime

from mlir_ansor.targets import get_target


def _tool(pkg_dir: Path, name: str) -> str:
    for p in (pkg_dir / "_mlir_libs" / name, pkg_dir / "_runtime_libs" / name):
        if p.exists():
            return str(p)
    raise FileNotFoundError(f"IREE tool {name} not found under {pkg_dir}")


@dataclass(frozen=True)
class Toolchain:
    """Paths of the real binaries (the console scripts are Python wrappers whose
    children survive a timeout kill)."""

    compile: str
    run: str
    benchmark: str

    @staticmethod
    def find() -> "Toolchain":
        c = Path(iree.compiler.__file__).parent
        r = Path(iree.runtime.__file__).parent.parent  # iree/_runtime_libs
        return Toolchain(_tool(c, "iree-compile"), _tool(r, "iree-run-module"),
                         _tool(r, "iree-benchmark-module"))


def target_flags(target: str) -> tuple[str, ...]:
    """iree-compile flags of a target name or target file (see mlir_ansor.targets); an
    unknown one raises TargetError (a ValueError) naming it and the supported ones."""
    return get_target(target).compile_flags()


@dataclass(frozen=True)
class RunResult:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool


def run_isolated(cmd: list[str], timeout_s: float, mem_bytes: int | None = None,
                 env: dict | None = None) -> RunResult:
    """Run `cmd` in its own process group with an address-space cap; kill the group on timeout."""

    def limit() -> None:
        os.setsid()
        if mem_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=limit, env=env)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return RunResult(proc.returncode, out, err, False)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return RunResult(-9, out, err, True)
