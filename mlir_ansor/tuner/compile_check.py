"""Compile-only checking of programs for a target this machine cannot run (cuda without a
GPU): each program is emitted, compiled in isolation to the target's binary (PTX for cuda)
by the same Builder as measured candidates, and counts as `COMPILED` only if IREE's
configuration dump shows our strategy was attached and the compile succeeded. Numerics and
speed need the device; a compiled program is not a tuned one."""
from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Sequence

from mlir_ansor.errors import CompileError
from mlir_ansor.sketch_passes.program import Program
from mlir_ansor.transform_scripts.library import TunedEntry, library_text, strategy_name
from mlir_ansor.tuner.builder import (CONFIG_DUMP_FLAG, BuildInput, BuildResult, LibraryKind,
                                      LocalBuilder, emit_and_build, first_error_line,
                                      single_configuration)
from mlir_ansor.tuner.procs import run_isolated
from mlir_ansor.tuner.status import Status
from mlir_ansor.tuner.tasks import Task, with_codegen_view
from mlir_ansor.tuner.toolchain import Toolchain, target_flags

COMPILED = Status.OK  # for a compile-only check, OK means compiled and applied


def codegen_task(task: Task, workdir: Path, tools: Toolchain, target: str,
                 timeout_s: float = 300, mem_bytes: int = 8 << 30) -> Task:
    """The task re-read on the payload `target`'s codegen sees (IREE's default build of the
    task module, configuration dump), with `target`'s sketches."""
    d = Path(workdir) / task.task_id
    d.mkdir(parents=True, exist_ok=True)
    (d / "task.mlir").write_text(task.module_mlir)
    cfg = d / "default_configs"
    res = run_isolated([tools.compile, str(d / "task.mlir"), *target_flags(target), "-o",
                        str(d / "default.vmfb"), f"{CONFIG_DUMP_FLAG}={cfg}"],
                       timeout_s, mem_bytes)
    if res.returncode != 0:
        raise CompileError(f"default {target} build of {task.name} failed: "
                           f"{first_error_line(res.stderr)}")
    return with_codegen_view(task, single_configuration(cfg, task.name), target)


def check_programs(task: Task, programs: Sequence[Program], workdir: Path, tools: Toolchain,
                   target: str, timeout_s: float = 60, mem_bytes: int = 8 << 30
                   ) -> list[BuildResult]:
    """Compile each program's strategy with the task module for `target` (task from
    `codegen_task`)."""
    d = Path(workdir) / task.task_id

    def emit(i: int, prog: Program) -> BuildInput:
        c = d / f"check{i}"
        text = library_text([TunedEntry(task.task_id, task.task_mlir, task.ops, prog,
                                        task.view_mlir)])
        return BuildInput(d / "task.mlir", text, LibraryKind.STRATEGY,
                          strategy_name(task.task_id), c,
                          (*target_flags(target),
                           f"--iree-hal-dump-executable-binaries-to={c / 'binaries'}"))

    return emit_and_build(LocalBuilder(tools.compile, 1, timeout_s, mem_bytes),
                          [partial(emit, i, p) for i, p in enumerate(programs)])
