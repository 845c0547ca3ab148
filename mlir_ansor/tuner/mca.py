"""An analytic speed proxy for a device this machine cannot time: llvm-mca on the hot loop.

Emulated time says nothing about an Arm core's speed. Without a runner on the device, a
candidate is rated by its hot loop: the innermost loop of the dispatch's assembly (IREE's
`.s` dump) that does the most floating-point work per iteration. llvm-mca, with LLVM's
scheduling model of the target CPU, gives the loop's steady-state cycles per iteration;
the estimate is

    seconds = task FLOPs / (FLOPs per iteration / cycles per iteration) / clock

i.e. the whole task at the hot loop's rate. It ranks register tiles, vector widths,
unrolling and instruction scheduling; it does not see memory traffic, cache misses,
outer loops or threads. Results rated this way are marked unmeasured everywhere.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from mlir_ansor.errors import ToolchainError

# The assumed clock of the proxy (Neoverse N1 as in AWS Graviton2: 2.5 GHz). It scales
# every estimate alike: it sets the absolute figures shown, never a ranking.
CLOCK_HZ = 2.5e9
ITERATIONS = 200  # llvm-mca's simulated iterations of the loop (steady state)

_LABEL = re.compile(r"^(\.?L\w+|\w+):")
_BRANCH = re.compile(r"^\s*(?:b\.\w+|b|cbn?z|tbn?z)\s+(?:[^,]+,\s*)*(\.?L\w+)\s*(?://.*)?$")
# The destination of a vector instruction: v<n>.<lanes><type>
_VEC_DEST = re.compile(r"^\s*([a-z][a-z0-9.]*)\s+v\d+\.(\d+)([bhsd])\b")
_SCALAR_FP_DEST = re.compile(r"^\s*([a-z][a-z0-9.]*)\s+([hsd])\d+\s*,")
_FMA = ("fmla", "fmls", "fmadd", "fmsub", "fnmadd", "fnmsub")
_FP_ARITH = _FMA + ("fadd", "fsub", "fmul", "fdiv", "fmax", "fmin", "fmaxnm", "fminnm",
                    "fabs", "fneg", "fsqrt", "frecpe", "frecps", "frsqrte", "faddp", "fmulx")


class ProxyError(Exception):
    """The assembly has nothing the proxy can rate (not a bug of the candidate: recorded)."""


@dataclass(frozen=True)
class Loop:
    body: tuple[str, ...]  # instruction lines, comments and directives removed
    flops: float  # floating-point operations per iteration


def instructions(lines: list[str]) -> list[str]:
    """Instruction lines only: no labels, directives, comments or blank lines."""
    out = []
    for line in lines:
        text = line.split("//")[0].rstrip()
        s = text.strip()
        if not s or s.startswith(".") or _LABEL.match(s):
            continue
        out.append("\t" + s)
    return out


def flops_of(instruction: str) -> float:
    """Floating-point operations of one AArch64 instruction (an FMA counts 2 per lane)."""
    m = _VEC_DEST.match(instruction)
    if m:
        op, lanes = m.group(1), int(m.group(2))
        base = op.split(".")[0]
        if base in _FP_ARITH:
            return lanes * (2 if base in _FMA else 1)
        return 0.0
    m = _SCALAR_FP_DEST.match(instruction)
    if m and m.group(1) in _FP_ARITH:
        return 2.0 if m.group(1) in _FMA else 1.0
    return 0.0


def innermost_loops(asm: str) -> list[Loop]:
    """Every loop (a backward branch to a label) with no loop inside it."""
    lines = asm.splitlines()
    labels: dict[str, int] = {}
    for i, line in enumerate(lines):
        m = _LABEL.match(line)
        if m:
            labels[m.group(1)] = i
    spans = []
    for j, line in enumerate(lines):
        m = _BRANCH.match(line)
        if m and m.group(1) in labels and labels[m.group(1)] < j:
            spans.append((labels[m.group(1)], j))
    loops = []
    for i, j in spans:
        if any(i <= a and b <= j and (a, b) != (i, j) for a, b in spans):
            continue  # has an inner loop
        body = instructions(lines[i + 1:j + 1])
        loops.append(Loop(tuple(body), sum(flops_of(x) for x in body)))
    return loops


def hot_loop(asm: str) -> Loop:
    """The innermost loop with the most floating-point work per iteration; a dispatch with
    no such loop (fully unrolled) is rated as one straight block."""
    loops = [lp for lp in innermost_loops(asm) if lp.flops > 0]
    if loops:
        return max(loops, key=lambda lp: (lp.flops, -len(lp.body)))
    body = instructions(asm.splitlines())
    flops = sum(flops_of(x) for x in body)
    if flops <= 0:
        raise ProxyError("no floating-point work in the dispatch's assembly")
    return Loop(tuple(body), flops)


def find_mca() -> str:
    """llvm-mca with a Neoverse N1 model (LLVM >= 17; older ones fall back to Cortex-A57)."""
    for name in ("llvm-mca-19", "llvm-mca-18", "llvm-mca-17"):
        found = shutil.which(name)
        if found:
            return found
    for v in (19, 18, 17):
        p = Path(f"/usr/lib/llvm-{v}/bin/llvm-mca")
        if p.is_file():
            return str(p)
    raise ToolchainError("the analytic proxy needs llvm-mca from LLVM 17 or newer: "
                         "apt-get install llvm-19 (make test does this as root)")


def cycles_per_iteration(body: tuple[str, ...], triple: str, cpu: str, mca: str,
                         timeout_s: float = 60.0) -> float:
    """llvm-mca's steady-state cycles per iteration of `body` on `cpu`."""
    try:
        res = subprocess.run([mca, f"-mtriple={triple}", f"-mcpu={cpu}",
                              f"-iterations={ITERATIONS}", "-"], input="\n".join(body) + "\n",
                             capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ProxyError(f"llvm-mca took over {timeout_s}s on the hot loop") from None
    m = re.search(r"Total Cycles:\s+(\d+)", res.stdout)
    if res.returncode != 0 or not m:
        raise ProxyError(f"llvm-mca could not rate the hot loop: "
                         f"{(res.stderr or res.stdout).strip()[-300:]}")
    return int(m.group(1)) / ITERATIONS


@dataclass(frozen=True)
class Estimate:
    seconds: float
    flops_per_cycle: float  # of the hot loop
    loop_instructions: int


def estimate(asm_files: list[Path], task_flops: float, triple: str, cpu: str,
             mca: str | None = None) -> Estimate:
    """The proxy time of a task from the assembly of its dispatch (see the module doc)."""
    if not asm_files:
        raise ProxyError("no assembly was dumped for the module")
    asm = "\n".join(p.read_text(errors="replace") for p in asm_files)
    loop = hot_loop(asm)
    cycles = cycles_per_iteration(loop.body, triple, cpu, mca or find_mca())
    rate = loop.flops / max(cycles, 1e-9)
    return Estimate(max(task_flops, loop.flops) / rate / CLOCK_HZ, rate, len(loop.body))
