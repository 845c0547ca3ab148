"""Running another architecture's modules here: IREE's runtime tools of that architecture,
started under qemu-user.

A cross target's candidates are compiled here by the x86 compiler; their outputs are checked
by running the target's own `iree-run-module` (from the `iree-base-runtime` wheel of the
same version, built for that architecture) under `qemu-<arch>` with the Debian cross libc
as its root. Emulated time says nothing about the device's speed: an emulated runner
validates only (timing is `mca.py`'s analytic proxy, or a runner on the real device).

Set-up (done by `make test`, or `python -m mlir_ansor.tuner.emulation install aarch64`):
  apt-get install qemu-user libc6-arm64-cross libstdc++6-arm64-cross libgcc-s1-arm64-cross llvm-19
  the aarch64 runtime wheel, downloaded once by pip and unpacked under
  `<sys.prefix>/share/mlir_ansor/iree-runtime-<arch>-<version>/` (nothing downloads at run
  time).
"""
from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from mlir_ansor.errors import ToolchainError, print_error

# Per architecture: qemu's binary, the Debian cross sysroot, the wheel's platform tag, the
# apt packages that provide them.
_ARCHES = {
    "aarch64": ("qemu-aarch64", Path("/usr/aarch64-linux-gnu"), "manylinux_2_28_aarch64",
                ("qemu-user", "libc6-arm64-cross", "libstdc++6-arm64-cross",
                 "libgcc-s1-arm64-cross")),
}


def runtime_version() -> str:
    return importlib.metadata.version("iree-base-runtime")


def runtime_dir(arch: str, prefix: Path | None = None) -> Path:
    """Where the `arch` runtime tools of this IREE version are unpacked."""
    base = Path(prefix or sys.prefix) / "share" / "mlir_ansor"
    return base / f"iree-runtime-{arch}-{runtime_version()}" / "iree" / "_runtime_libs"


def _arch(arch: str) -> tuple:
    if arch not in _ARCHES:
        raise ToolchainError(f"no emulation for architecture {arch!r} (supported: "
                             f"{', '.join(_ARCHES)})")
    return _ARCHES[arch]


@dataclass(frozen=True)
class Emulator:
    """How to start one architecture's IREE tools here."""

    arch: str
    qemu: str
    sysroot: Path
    tools: Path  # the unpacked iree/_runtime_libs of that architecture
    cpu: str = ""  # qemu's -cpu (empty: qemu's default for the architecture)

    def launcher(self) -> tuple[str, ...]:
        """The command prefix that runs one of `tools` under qemu."""
        cpu = ("-cpu", self.cpu) if self.cpu else ()
        return (self.qemu, "-L", str(self.sysroot), *cpu)

    def tool(self, name: str) -> str:
        return str(self.tools / name)

    @staticmethod
    def find(arch: str, cpu: str = "") -> "Emulator":
        """The emulator of `arch`, or a ToolchainError saying what to install."""
        qemu_name, sysroot, _, pkgs = _arch(arch)
        qemu = shutil.which(qemu_name)
        missing = []
        if qemu is None:
            missing.append(qemu_name)
        loader = next(iter(sysroot.glob("lib/ld-linux-*.so.*")), None)
        if loader is None:
            missing.append(f"the {arch} C library under {sysroot}")
        if missing:
            raise ToolchainError(f"running {arch} modules here needs {' and '.join(missing)}: "
                                 f"apt-get install {' '.join(pkgs)} (make test does this "
                                 "as root)")
        tools = runtime_dir(arch)
        if not (tools / "iree-run-module").is_file():
            raise ToolchainError(f"the {arch} IREE runtime {runtime_version()} is not "
                                 f"installed ({tools}): python -m mlir_ansor.tuner.emulation "
                                 f"install {arch}")
        return Emulator(arch, qemu, sysroot, tools, _qemu_cpu(cpu))


def _qemu_cpu(llvm_cpu: str) -> str:
    """qemu's name for an LLVM CPU where qemu models it (else qemu's default, which has
    every feature: a module built for a smaller CPU runs on it)."""
    return llvm_cpu if llvm_cpu in ("neoverse-n1", "cortex-a76", "a64fx") else ""


def install_runtime(arch: str, prefix: Path | None = None) -> Path:
    """Download (pip, once) the `arch` wheel of this iree-base-runtime version and unpack
    its tools; returns their folder. Keeps the executable bits (unzip-like)."""
    _, _, platform, _ = _arch(arch)
    dest = runtime_dir(arch, prefix)
    if (dest / "iree-run-module").is_file():
        return dest
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
               "--only-binary=:all:", "--platform", platform, "--python-version", py,
               f"iree-base-runtime=={runtime_version()}", "-d", tmp]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise ToolchainError(f"pip could not download the {arch} iree-base-runtime "
                                 f"{runtime_version()} wheel: {res.stderr.strip()[-300:]}")
        wheel = next(Path(tmp).glob("*.whl"))
        root = dest.parent.parent
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                if not info.filename.startswith("iree/_runtime_libs/") or info.is_dir():
                    continue
                out = root / info.filename
                out.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(out, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    out.chmod(mode)  # zipfile drops them; qemu then fails silently
    return dest


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "install":
        print("usage: python -m mlir_ansor.tuner.emulation install ARCH "
              f"(ARCH: {', '.join(_ARCHES)})", file=sys.stderr)
        return 2
    try:
        print(install_runtime(args[1]))
    except ToolchainError as e:
        return print_error(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
