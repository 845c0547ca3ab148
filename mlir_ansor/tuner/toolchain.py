"""Where the IREE tools are, and the compile flags of a target."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import iree.compiler
import iree.runtime

from mlir_ansor.errors import ToolchainError
from mlir_ansor.targets import get_target


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
