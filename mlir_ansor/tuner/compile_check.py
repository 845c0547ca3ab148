"""Compile-only checking of programs for a target this machine cannot run (cuda without a
GPU): each program is emitted, compiled in isolation to the target's binary (PTX for cuda)
and counts as `compiled` only if IREE's configuration dump shows our strategy was attached
and the compile succeeded. Numerics and speed need the device; a compiled program is not a
tuned one."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from mlir_ansor.errors import CompileError, UnsupportedDispatch
from mlir_ansor.sketch_passes.program import Program
from mlir_ansor.transform_scripts.library import TunedEntry, library_text, strategy_name
from mlir_ansor.tuner.measure import applied_strategies
from mlir_ansor.tuner.tasks import Task, with_codegen_view
from mlir_ansor.tuner.toolchain import Toolchain, run_isolated, target_flags

COMPILED = "compiled"


@dataclass(frozen=True)
class CompileCheck:
    status: str  # "compiled", "compile_error", "not_applied", "timeout"
    error: str = ""


def _compile(tools: Toolchain, src: Path, out: Path, target: str, timeout_s: float,
             mem_bytes: int, extra: Sequence[str] = ()):
    return run_isolated([tools.compile, str(src), *target_flags(target), "-o", str(out),
                         *extra], timeout_s, mem_bytes)


def codegen_task(task: Task, workdir: Path, tools: Toolchain, target: str,
                 timeout_s: float = 300, mem_bytes: int = 8 << 30) -> Task:
    """The task re-read on the payload `target`'s codegen sees (IREE's default build of the
    task module, configuration dump), with `target`'s sketches."""
    d = Path(workdir) / task.task_id
    d.mkdir(parents=True, exist_ok=True)
    (d / "task.mlir").write_text(task.module_mlir)
    cfg = d / "default_configs"
    res = _compile(tools, d / "task.mlir", d / "default.vmfb", target, timeout_s, mem_bytes,
                   [f"--iree-hal-dump-executable-configurations-to={cfg}"])
    if res.returncode != 0:
        raise CompileError(f"default {target} build of {task.name} failed: {res.stderr[-300:]}")
    dumps = sorted(cfg.glob("*.mlir"))
    if len(dumps) != 1:
        raise UnsupportedDispatch(f"{task.name}: the task module formed {len(dumps)} executables")
    return with_codegen_view(task, dumps[0].read_text(), target)


def check_programs(task: Task, programs: Sequence[Program], workdir: Path, tools: Toolchain,
                   target: str, timeout_s: float = 60, mem_bytes: int = 8 << 30
                   ) -> list[CompileCheck]:
    """Compile each program's strategy with the task module for `target` (task from
    `codegen_task`)."""
    d = Path(workdir) / task.task_id
    out = []
    for i, prog in enumerate(programs):
        c = d / f"check{i}"
        c.mkdir(parents=True, exist_ok=True)
        try:
            (c / "library.mlir").write_text(library_text([TunedEntry(
                task.task_id, task.task_mlir, task.ops, prog, task.view_mlir)]))
        except Exception as e:  # an emitter bug is a failed program, not a crash
            out.append(CompileCheck("compile_error", f"emit: {type(e).__name__}: {e}"))
            continue
        res = _compile(tools, d / "task.mlir", c / "out.vmfb", target, timeout_s, mem_bytes,
                       [f"--iree-codegen-transform-dialect-library={c / 'library.mlir'}",
                        f"--iree-hal-dump-executable-configurations-to={c / 'configs'}",
                        f"--iree-hal-dump-executable-binaries-to={c / 'binaries'}"])
        if res.timed_out:
            out.append(CompileCheck("timeout", f"compile exceeded {timeout_s}s"))
        elif strategy_name(task.task_id) not in applied_strategies(c / "configs"):
            out.append(CompileCheck("not_applied", "the dispatch was not configured with our "
                                    "strategy"))
        elif res.returncode != 0:
            lines = [line for line in res.stderr.splitlines() if "error" in line]
            out.append(CompileCheck("compile_error", (lines[0] if lines else
                                                      res.stderr[-300:])[:500]))
        else:
            out.append(CompileCheck(COMPILED))
    return out
