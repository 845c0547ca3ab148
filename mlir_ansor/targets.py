"""Targets as data: the device a search tunes for, and the machine facts that size its space.

A `Target` says how IREE compiles for the device (`compile_flags`) and what the search reads
instead of facts written into code: the vector width and vector register count of a CPU
(annotation's lane and register-tile caps, the layout rewrite's packed tile), its caches and
cores (for pruning), and a GPU's thread, shared-memory and warp limits.

Built-in targets, by name (`get_target`):
  llvm-cpu       this machine, detected (/proc/cpuinfo, /sys cache sizes, usable cores)
  x86_64-avx2    an x86-64 AVX2 machine (x86-64-v3)
  x86_64-avx512  an x86-64 AVX-512 machine (Zen 4): the machine the annotation caps were
                 tuned on; annotation uses it when no target is given (`DEFAULT_CPU`)
  aarch64        Arm Neoverse N1 (NEON: 4 f32 lanes, 32 vector registers)
  cuda           NVIDIA sm_80; `cuda:sm_90` (any `cuda:sm_NN`) for another architecture
A path to a JSON file is read as a target file.

A target file describes your own machine. `backend` and `name` are required; every other
field may be left out and takes the default shown:

    {
      "backend": "llvm-cpu",              # "llvm-cpu" or "cuda"
      "name": "my-graviton2",             # free text, shown in reports and records
      "triple": "aarch64-unknown-linux-gnu",  # LLVM triple; "" only with cpu "host"
      "cpu": "neoverse-n1",               # LLVM CPU name; "host": this machine   ("host")
      "features": [],                     # LLVM features on top of the cpu's own,
                                          #   e.g. ["+sve"]                        ([])
      "vector_bits": 128,                 # widest vector register                 (128)
      "vector_registers": 32,             # architectural vector registers          (16)
      "l1d_bytes": 65536,                 # per core                             (32768)
      "l2_bytes": 1048576,                # per core                           (1048576)
      "l3_bytes": 33554432,               # shared; 0 if none                  (8388608)
      "cores": 64,                        # cores a tuned module may use             (1)
      "sm": "",                           # cuda only: e.g. "sm_80"
      "max_threads_per_block": 1024,      # cuda only                             (1024)
      "shared_memory_per_block": 49152,   # cuda only: static limit, bytes       (49152)
      "warp_size": 32                     # cuda only                               (32)
    }

(JSON has no comments: the `#` notes above are documentation only.) A field of the wrong type,
an unknown field or a bad value is an error naming the field.

`device_kind` (e.g. `x86_64-avx512`, `aarch64-neon`, `cuda-sm80`) names the class of machine
code a target gets: timings are only compared between results of one device kind.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

from mlir_ansor.errors import AnsorError

BACKENDS = ("llvm-cpu", "cuda")
IREE_NEWEST_SM = 89  # the newest cuda architecture IREE 3.13 can configure kernels for
_SM = re.compile(r"sm_\d+")


class TargetError(AnsorError, ValueError):
    """A target name that is not known, or a target description that is not valid."""


@dataclass(frozen=True)
class Target:
    backend: str
    name: str
    triple: str = ""
    cpu: str = "host"
    features: tuple[str, ...] = ()
    vector_bits: int = 128
    vector_registers: int = 16
    l1d_bytes: int = 32 << 10
    l2_bytes: int = 1 << 20
    l3_bytes: int = 8 << 20
    cores: int = 1
    sm: str = ""
    max_threads_per_block: int = 1024
    shared_memory_per_block: int = 48 << 10
    warp_size: int = 32

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise TargetError(f"target field 'backend': '{self.backend}' is not one of "
                              f"{', '.join(BACKENDS)}")
        if not self.name:
            raise TargetError("target field 'name': must not be empty")
        for f in ("vector_bits", "vector_registers", "l1d_bytes", "l2_bytes", "cores",
                  "max_threads_per_block", "shared_memory_per_block", "warp_size"):
            if getattr(self, f) <= 0:
                raise TargetError(f"target field '{f}': must be positive, got {getattr(self, f)}")
        if self.l3_bytes < 0:
            raise TargetError(f"target field 'l3_bytes': must be >= 0, got {self.l3_bytes}")
        if self.vector_bits % 32:
            raise TargetError(f"target field 'vector_bits': {self.vector_bits} is not a "
                              "multiple of 32 (f32 lanes)")
        if self.backend == "cuda" and not _SM.fullmatch(self.sm):
            raise TargetError(f"target field 'sm': '{self.sm}' is not an sm_NN architecture")
        if self.backend == "llvm-cpu" and self.cpu != "host" and not self.triple:
            raise TargetError("target field 'triple': a cross target (cpu other than 'host') "
                              "needs an LLVM triple")

    @property
    def f32_lanes(self) -> int:
        """f32 elements in one vector register."""
        return self.vector_bits // 32

    @property
    def arch(self) -> str:
        """The architecture part of the triple (x86_64, aarch64); the backend for cuda."""
        if self.backend != "llvm-cpu":
            return self.backend
        # A file describing this machine may give cpu "host" and no triple.
        return self.triple.split("-")[0] if self.triple else platform.machine()

    @property
    def device_kind(self) -> str:
        """Short stable key of the machine code this target gets (records compare timings
        within one device kind only)."""
        if self.backend == "cuda":
            return "cuda-" + self.sm.replace("_", "")
        if self.arch == "x86_64":
            isa = {512: "avx512", 256: "avx2"}.get(self.vector_bits, "sse")
        elif self.arch == "aarch64":
            isa = "sve" if "+sve" in self.features else "neon"
        else:
            isa = f"v{self.vector_bits}"
        return f"{self.arch}-{isa}"

    @property
    def ptx_sm(self) -> str:
        """The architecture the PTX is generated for: `sm` up to the newest IREE 3.13
        describes. It has no target details for sm_90 and newer ("missing GPU target in
        #hal.executable.target", iree-org/iree#22147): those get sm_89 PTX, which the
        driver compiles for the newer GPU (PTX is forward compatible)."""
        return self.sm if int(self.sm[3:]) <= IREE_NEWEST_SM else f"sm_{IREE_NEWEST_SM}"

    def compile_flags(self) -> tuple[str, ...]:
        """The iree-compile flags that build for this target."""
        if self.backend == "cuda":
            # PTX without a GPU or the CUDA toolkit (running needs a GPU machine).
            return ("--iree-hal-target-device=cuda", f"--iree-cuda-target={self.ptx_sm}")
        flags = ("--iree-hal-target-device=local",
                 "--iree-hal-local-target-device-backends=llvm-cpu")
        if self.cpu == "host":  # LLVM detects the CPU and its features itself
            return flags + ("--iree-llvmcpu-target-cpu=host",)
        flags += (f"--iree-llvmcpu-target-triple={self.triple}",
                  f"--iree-llvmcpu-target-cpu={self.cpu}")
        if self.features:
            flags += (f"--iree-llvmcpu-target-cpu-features={','.join(self.features)}",)
        return flags

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        d["features"] = list(self.features)
        return json.dumps(d, indent=2)

    @staticmethod
    def from_json(text: str) -> "Target":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise TargetError(f"not valid JSON (line {e.lineno}): {e.msg}") from None
        return target_from_dict(data)


_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(Target)}


def target_from_dict(data: object) -> Target:
    """A Target from parsed JSON, every field checked (errors name the field)."""
    if not isinstance(data, dict):
        raise TargetError("a target description is a JSON object")
    for k in ("backend", "name"):
        if k not in data:
            raise TargetError(f"target field '{k}': missing")
    kwargs = {}
    for k, v in data.items():
        kind = _FIELD_TYPES.get(k)
        if kind is None:
            raise TargetError(f"target field '{k}': unknown (fields: {', '.join(_FIELD_TYPES)})")
        if kind == "int":
            ok = isinstance(v, int) and not isinstance(v, bool)
        elif kind == "str":
            ok = isinstance(v, str)
        else:  # tuple[str, ...]
            ok = isinstance(v, list) and all(isinstance(x, str) for x in v)
            v = tuple(v) if ok else v
        if not ok:
            want = {"int": "an integer", "str": "a string"}.get(kind, "a list of strings")
            raise TargetError(f"target field '{k}': expected {want}, got {json.dumps(v)}")
        kwargs[k] = v
    return Target(**kwargs)


def load_target(path: str | os.PathLike) -> Target:
    """A user's target file (format in the module docstring)."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise TargetError(f"cannot read target file {path}: {e.strerror}") from None
    try:
        return Target.from_json(text)
    except TargetError as e:
        raise TargetError(f"target file {path}: {e}") from None


# --- detection of this machine -----------------------------------------------------------

_X86_VECTOR_FEATURES = ("avx512f", "avx2", "fma", "avx")


def _size_bytes(text: str) -> int:
    """A sysfs cache size ("32K", "1M", "512") in bytes."""
    text = text.strip()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(text.rstrip("KkMmGg")) * scale


def cache_sizes(cache_dir: Path) -> dict[str, int]:
    """{'l1d_bytes', 'l2_bytes', 'l3_bytes'} found under a sysfs cpuN/cache folder (the ones
    not found are left out)."""
    out: dict[str, int] = {}
    for index in sorted(cache_dir.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _size_bytes((index / "size").read_text())
        except (OSError, ValueError):
            continue  # an entry without a readable size tells nothing
        if level == 1 and kind == "Data":
            out["l1d_bytes"] = size
        elif level in (2, 3) and kind in ("Unified", "Data"):
            out[f"l{level}_bytes"] = size
    return out


def detect_cpu(machine: str, cpuinfo: str, caches: dict[str, int], cores: int) -> Target:
    """The host target of a machine: `machine` as platform.machine() names it, the text of
    its /proc/cpuinfo, its cache sizes (see cache_sizes) and its usable cores."""
    words = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            words.update(value.split())
    if machine in ("x86_64", "AMD64"):
        machine = "x86_64"
        if "avx512f" in words:
            bits, regs = 512, 32
        elif "avx2" in words:
            bits, regs = 256, 16
        else:
            bits, regs = 128, 16
        features = tuple(f"+{f}" for f in _X86_VECTOR_FEATURES if f in words)
    elif machine in ("aarch64", "arm64"):
        machine = "aarch64"
        # Fixed 128-bit NEON: SVE's length is the hardware's, and masked (scalable)
        # vectorization is not used.
        bits, regs = 128, 32
        features = tuple(f for f, w in (("+neon", "asimd"), ("+sve", "sve")) if w in words)
    else:
        bits, regs, features = 128, 16, ()
    return Target(backend="llvm-cpu", name="host", triple=f"{machine}-unknown-linux-gnu",
                  cpu="host", features=features, vector_bits=bits, vector_registers=regs,
                  cores=max(cores, 1), **caches)


@functools.cache
def host() -> Target:
    """This machine (read once per process: it does not change under a running tuner)."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""  # not Linux: the plain 128-bit fallback
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else (os.cpu_count() or 1)
    return detect_cpu(platform.machine(), cpuinfo,
                      cache_sizes(Path("/sys/devices/system/cpu/cpu0/cache")), cores)


# --- built-in targets --------------------------------------------------------------------

X86_AVX512 = Target(backend="llvm-cpu", name="x86_64-avx512", triple="x86_64-unknown-linux-gnu",
                    cpu="znver4", vector_bits=512, vector_registers=32, l1d_bytes=32 << 10,
                    l2_bytes=1 << 20, l3_bytes=32 << 20, cores=2)
# Cores of a built-in cross target are unknown (a Neoverse N1 server has 64-128): 1 claims
# nothing; a target file gives the real count.
AARCH64 = Target(backend="llvm-cpu", name="aarch64", triple="aarch64-unknown-linux-gnu",
                 cpu="neoverse-n1", vector_bits=128, vector_registers=32, l1d_bytes=64 << 10,
                 l2_bytes=1 << 20, l3_bytes=32 << 20)
# Machines change between sessions: the 2-core EPYC VM of this project's 2026-11-24
# afternoon exposed AVX2 and FMA but not AVX-512 (/proc/cpuinfo).
X86_AVX2 = Target(backend="llvm-cpu", name="x86_64-avx2", triple="x86_64-unknown-linux-gnu",
                  cpu="x86-64-v3", vector_bits=256, vector_registers=16, l1d_bytes=32 << 10,
                  l2_bytes=1 << 20, l3_bytes=32 << 20, cores=2)
# Where no target is given, annotation sizes its space for this one, not for the detected
# host: the same seed then gives the same programs on every machine (the caps in code were
# tuned on it). The tuner passes its target (the detected host) explicitly.
DEFAULT_CPU = X86_AVX512


def cuda(sm: str = "sm_80") -> Target:
    """An NVIDIA GPU of architecture `sm` (the limits below hold from sm_70 to sm_90)."""
    return Target(backend="cuda", name="cuda" if sm == "sm_80" else f"cuda:{sm}", sm=sm,
                  vector_bits=128)  # a thread's widest load: 4 f32 (ld.global.v4.f32)


DEFAULT_GPU = cuda()
_NAMED = {"llvm-cpu": host, "x86_64-avx2": lambda: X86_AVX2, "x86_64-avx512": lambda: X86_AVX512, "aarch64": lambda: AARCH64,
          "cuda": lambda: DEFAULT_GPU}


def get_target(name_or_path: str) -> Target:
    """A built-in target by name, `cuda:sm_NN`, or a target file (a path ending in .json or
    naming an existing file)."""
    if name_or_path in _NAMED:
        return _NAMED[name_or_path]()
    if name_or_path.startswith("cuda:"):
        sm = name_or_path[len("cuda:"):]
        if not _SM.fullmatch(sm):
            raise TargetError(f"unknown target '{name_or_path}' (cuda targets are cuda:sm_NN, "
                              "e.g. cuda:sm_90)")
        return cuda(sm)
    if name_or_path.endswith(".json") or Path(name_or_path).is_file():
        return load_target(name_or_path)
    raise TargetError(f"unknown target '{name_or_path}' (supported: {', '.join(_NAMED)}, "
                      "cuda:sm_NN, or a target file .json)")
