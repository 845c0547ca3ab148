"""The Builder: compiles candidates, each in its own process (timeout, memory cap), several
at once, and confirms from IREE's configuration dump that the candidate's strategy was
applied (a library that fails to parse makes IREE build its default with exit 0).

The search sees only the `Builder` protocol: a remote builder (Ray tasks) takes the same
`BuildInput`s: the library text travels, not our Python objects."""
from __future__ import annotations

import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Callable, Protocol, Sequence

from mlir_ansor.dialect_helpers.size_dispatch import TAG_ATTR
from mlir_ansor.errors import UnsupportedDispatch
from mlir_ansor.tuner.procs import run_isolated
from mlir_ansor.tuner.runner import RunResult, asm_dir
from mlir_ansor.tuner.status import Status, internal_error, is_out_of_memory

CONFIG_DUMP_FLAG = "--iree-hal-dump-executable-configurations-to"
CANDIDATE_ARTIFACT = "cand.vmfb"  # the module a build writes into its out_dir


class LibraryKind(str, Enum):
    STRATEGY = "strategy"  # a transform library: codegen_spec = @<marker> when applied
    TUNING_SPEC = "tuning_spec"  # a lowering-config spec: <marker> appears in the dump


@dataclass(frozen=True)
class BuildInput:
    source: Path  # the module to compile
    library: str  # the candidate's transform library or tuning spec
    kind: LibraryKind
    marker: str  # what the configuration dump must show once the library was applied
    out_dir: Path  # where the artifact and the dump go (created)
    flags: tuple[str, ...] = ()  # target flags and any others


@dataclass(frozen=True)
class BuildResult:
    status: Status
    artifact: Path | None = None
    error: str = ""
    seconds: float = 0.0
    # The output check run right after a good build, in its compile slot
    # (`LocalBuilder.build`'s `then`); None where none ran.
    checked: RunResult | None = None


class Builder(Protocol):
    def build(self, items: Sequence[BuildInput]) -> list[BuildResult]:
        """One result per item, in order. (`LocalBuilder.build` also takes `then`, a check
        it runs on each good build in its compile slot; only a caller that knows its
        builder is one passes it.)"""
        ...


# A check of a built artifact (a validation run) that a builder may run in a compile slot.
Check = Callable[[Path], RunResult]


def first_error_line(stderr: str, limit: int = 500) -> str:
    """The first line of a tool's stderr that says "error" (else its tail)."""
    lines = [line.strip() for line in stderr.splitlines() if "error" in line.lower()]
    return (lines[0] if lines else stderr.strip()[-300:])[:limit]


def failing_strategies(stderr: str, config_dir: Path) -> set[str]:
    """The strategies of the dispatches an iree-compile error names: IREE reports a
    dispatch's codegen failure at its configuration dump (`<config_dir>/<file>.mlir:L:C:
    error`), whose translation info names the strategy it took. Empty when an error lies
    elsewhere or in a dispatch without one of ours."""
    found: set[str] = set()
    root = Path(config_dir).resolve()
    # (On llvm-cpu each dump holds one dispatch: executables are linked after translation.)
    for m in re.finditer(r"^(.+?\.mlir):\d+:\d+: error", stderr, re.MULTILINE):
        f = Path(m.group(1))
        if f.resolve().parent == root and f.is_file():
            found |= _codegen_specs(f.read_text(errors="replace"))
    return found


def _codegen_specs(text: str) -> set[str]:
    return {part.split(">")[0].split(",")[0].strip()
            for part in text.split("codegen_spec = @")[1:]}


def applied_strategies(config_dir: Path) -> set[str]:
    """codegen_spec symbols IREE attached to dispatches (from the configuration dump)."""
    found: set[str] = set()
    for f in Path(config_dir).glob("*.mlir"):
        found |= _codegen_specs(f.read_text(errors="replace"))
    return found


def misplaced_branch_strategies(config_dir: Path) -> list[str]:
    """Strategies of a size branch (`strategy_<task>_b<i>`) that IREE attached to a
    dispatch of another branch (its ops do not carry `ansor_kernel = "b<i>"`): a matcher
    too loose for the dispatcher, whatever the outputs say."""
    wrong = []
    for f in sorted(Path(config_dir).glob("*.mlir")):
        text = f.read_text(errors="replace")
        for part in text.split("codegen_spec = @")[1:]:
            name = part.split(">")[0].split(",")[0].strip()
            m = re.search(r"_(b\d+)$", name)
            if m and f'{TAG_ATTR} = "{m.group(1)}"' not in text:
                wrong.append(f"{name} on {f.stem}")
    return wrong


def single_configuration(config_dir: Path, task_name: str) -> str:
    """The configuration dump of a task module's one executable (UnsupportedDispatch if
    IREE formed several: the task is not one dispatch)."""
    dumps = sorted(Path(config_dir).glob("*.mlir"))
    if len(dumps) != 1:
        raise UnsupportedDispatch(f"{task_name}: the task module formed {len(dumps)} "
                                  "executables")
    return dumps[0].read_text()


def was_applied(kind: LibraryKind, marker: str, config_dir: Path) -> bool:
    if kind == LibraryKind.STRATEGY:
        return marker in applied_strategies(config_dir)
    return any(marker in f.read_text(errors="replace") for f in Path(config_dir).glob("*.mlir"))


@dataclass(frozen=True)
class LocalBuilder:
    """Compiles on this machine: `workers` iree-compile processes at a time."""

    compile_tool: str
    workers: int = 2
    timeout_s: float = 10.0
    mem_bytes: int = 6 << 30

    def build(self, items: Sequence[BuildInput], then: Check | None = None
              ) -> list[BuildResult]:
        """`then`, where given, checks each good build in the worker that built it, right
        after: the checks of early builds overlap the compiles of later ones, and no more
        than `workers` processes run at once (a check is no timing run)."""
        def one(item: BuildInput) -> BuildResult:
            res = self.build_one(item)
            if then is None or res.status != Status.OK:
                return res
            return replace(res, checked=then(res.artifact))

        with ThreadPoolExecutor(max(1, self.workers)) as pool:
            return list(pool.map(one, items))

    def build_one(self, item: BuildInput) -> BuildResult:
        item.out_dir.mkdir(parents=True, exist_ok=True)
        lib = item.out_dir / ("library.mlir" if item.kind == LibraryKind.STRATEGY
                              else "spec.mlir")
        lib.write_text(item.library)
        artifact = item.out_dir / CANDIDATE_ARTIFACT
        configs = item.out_dir / "configs"
        shutil.rmtree(configs, ignore_errors=True)  # an earlier build's dump must not vouch
        shutil.rmtree(asm_dir(artifact), ignore_errors=True)  # nor its assembly
        artifact.unlink(missing_ok=True)
        use = ("--iree-codegen-transform-dialect-library" if item.kind == LibraryKind.STRATEGY
               else "--iree-codegen-tuning-spec-path")
        cmd = [self.compile_tool, str(item.source), *item.flags, "-o", str(artifact),
               f"{CONFIG_DUMP_FLAG}={configs}", f"{use}={lib}"]
        start = time.monotonic()
        res = run_isolated(cmd, self.timeout_s, self.mem_bytes)
        took = time.monotonic() - start
        if res.timed_out:
            return BuildResult(Status.COMPILE_TIMEOUT, None,
                               f"compile exceeded {self.timeout_s}s", took)
        if res.returncode != 0:
            status = (Status.OUT_OF_MEMORY if is_out_of_memory(res.stderr)
                      else Status.COMPILE_ERROR)
            return BuildResult(status, None, first_error_line(res.stderr), took)
        if not was_applied(item.kind, item.marker, configs):
            return BuildResult(Status.NOT_APPLIED, None,
                               f"the dispatch was not configured with {item.marker}", took)
        return BuildResult(Status.OK, artifact, "", took)


def emit_and_build(builder: Builder, emits: Sequence[Callable[[], BuildInput]],
                   then: Check | None = None) -> list[BuildResult]:
    """Emit each candidate (our code) and build those that emitted. An exception while
    emitting is an internal error of that candidate (counted, reported), never a compile
    error: the other candidates go on. `then`: a check run on each good build in its
    compile slot, for a builder that takes one (`LocalBuilder`; the caller decides:
    `TaskMeasurer.checks_while_building`)."""
    items: list[BuildInput | BuildResult] = []
    for emit in emits:
        try:
            items.append(emit())
        except Exception as e:  # our bug: recorded as internal_error and counted
            items.append(BuildResult(Status.INTERNAL_ERROR, None, internal_error("emit", e)))
    inputs = [i for i in items if isinstance(i, BuildInput)]
    built = iter(builder.build(inputs) if then is None else builder.build(inputs, then))
    return [next(built) if isinstance(i, BuildInput) else i for i in items]
