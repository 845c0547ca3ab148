"""Compile-only checking of programs for a target this machine cannot run (cuda without a
GPU): each program is emitted, compiled in isolation to the target's binary (PTX for cuda)
by the same Builder as measured candidates, and counts as `COMPILED` only if IREE's
configuration dump shows our strategy was attached and the compile succeeded. For cuda the
kernel IR after our strategy is also checked for stores to workgroup memory that every
thread makes at the same address (a race: `dialect_helpers.shared_stores`); such a program
is a `compile_error` starting "race:". Numerics and speed need the device; a compiled
program is not a tuned one."""
from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path
from typing import Sequence

from mlir_ansor.dialect_helpers.shared_stores import thread_invariant_shared_stores
from mlir_ansor.errors import CompileError
from mlir_ansor.targets import get_target
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
STRATEGY_PASS = "iree-codegen-lower-executable-using-transform-dialect"


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
    gpu = get_target(target).backend == "cuda"

    def emit(i: int, prog: Program) -> BuildInput:
        c = d / f"check{i}"
        text = library_text([TunedEntry(task.task_id, task.task_mlir, task.ops, prog,
                                        task.view_mlir)])
        kernel_ir = (f"--mlir-print-ir-after={STRATEGY_PASS}",
                     f"--mlir-print-ir-tree-dir={c / 'kernel_ir'}",
                     "--mlir-elide-resource-strings-if-larger=16") if gpu else ()
        return BuildInput(d / "task.mlir", text, LibraryKind.STRATEGY,
                          strategy_name(task.task_id), c,
                          (*target_flags(target),
                           f"--iree-hal-dump-executable-binaries-to={c / 'binaries'}",
                           *kernel_ir))

    results = emit_and_build(LocalBuilder(tools.compile, 1, timeout_s, mem_bytes),
                             [partial(emit, i, p) for i, p in enumerate(programs)])
    if gpu:
        results = [_race_checked(r, d / f"check{i}" / "kernel_ir")
                   for i, r in enumerate(results)]
    return results


def _race_checked(result: BuildResult, kernel_ir: Path) -> BuildResult:
    """A compiled cuda program with a thread-invariant store to workgroup memory becomes a
    compile error (it would race on the device)."""
    if result.status != COMPILED:
        return result
    dumps = sorted(kernel_ir.rglob(f"*{STRATEGY_PASS}.mlir"))
    if not dumps:
        raise CompileError(f"no kernel IR dumped under {kernel_ir}: cannot check the "
                           "program for shared-memory races")
    for dump in dumps:
        races = thread_invariant_shared_stores(dump.read_text())
        if races:
            return dataclasses.replace(result, status=Status.COMPILE_ERROR,
                                       error=f"race: {races[0]} (and {len(races) - 1} more)")
    return result
