"""Where the IREE tools are, and the compile flags of a target."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import iree.compiler
import iree.runtime

from mlir_ansor.errors import ToolchainError
from mlir_ansor.targets import Target, get_target, host
from mlir_ansor.tuner.emulation import Emulator


def _tool(pkg_dir: Path, name: str) -> str:
    for p in (pkg_dir / "_mlir_libs" / name, pkg_dir / "_runtime_libs" / name):
        if p.exists():
            return str(p)
    raise ToolchainError(f"IREE tool {name} not found under {pkg_dir}: reinstall "
                         "iree-base-compiler and iree-base-runtime (make test sets them up)")


@dataclass(frozen=True)
class Toolchain:
    """Paths of the real binaries (the console scripts are Python wrappers whose
    children survive a timeout kill)."""

    compile: str
    run: str
    benchmark: str
    # Prepended to `run` / `benchmark` commands: qemu for another architecture's runtime
    # tools (tuner/emulation.py). Empty: they run natively.
    launcher: tuple[str, ...] = ()

    @property
    def emulated(self) -> bool:
        return bool(self.launcher)

    @staticmethod
    def find() -> "Toolchain":
        c = Path(iree.compiler.__file__).parent
        r = Path(iree.runtime.__file__).parent.parent  # iree/_runtime_libs
        return Toolchain(_tool(c, "iree-compile"), _tool(r, "iree-run-module"),
                         _tool(r, "iree-benchmark-module"))


def emulated(target: Target) -> bool:
    """A CPU target of another architecture than this machine's: its modules run here only
    under qemu (checked, not timed)."""
    return target.backend == "llvm-cpu" and target.arch != host().arch


def toolchain_for(target: Target) -> Toolchain:
    """The tools that compile for `target` here and run its modules: natively, or for a
    CPU of another architecture its own runtime tools under qemu (which check outputs but
    cannot time)."""
    native = Toolchain.find()
    if not emulated(target):
        return native
    emu = Emulator.find(target.arch, target.cpu)
    return Toolchain(native.compile, emu.tool("iree-run-module"),
                     emu.tool("iree-benchmark-module"), emu.launcher())


def target_flags(target: str) -> tuple[str, ...]:
    """iree-compile flags of a target name or target file (see mlir_ansor.targets); an
    unknown one raises TargetError (a ValueError) naming it and the supported ones."""
    return get_target(target).compile_flags()
