"""Tuning records: one JSON line per measurement, appended and flushed at once.

Schema 2 (current) adds `schema`, `device_kind` and the `Status` names; schema-1 lines
(no `schema` field) still load: their statuses are mapped by `Status.parse`.
A record counts as measured *here* only if its device kind and IREE version are this
run's (`Context`): other records warm-start the cost model, and their programs are
re-validated and re-timed before they can be exported."""
from __future__ import annotations

import json
import os
import platform
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import importlib.metadata

import iree.compiler.version as iree_version

from mlir_ansor.errors import OutputError
from mlir_ansor.sketch_passes.program import Program
from mlir_ansor.tuner.status import Status

SCHEMA = 2
OK = Status.OK


def environment() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        version = importlib.metadata.version("iree-base-compiler")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    revision = getattr(iree_version, "REVISIONS", {}).get("IREE", "")
    return {"iree": f"{version} ({revision[:12]})" if revision else version, "cpu": cpu,
            "arch": platform.machine(), "cores": os.cpu_count()}


@dataclass(frozen=True)
class Context:
    """Where measurements are comparable: one device kind, one IREE version."""

    device_kind: str
    iree: str

    def holds(self, r: "Record") -> bool:
        return r.device_kind == self.device_kind and r.env.get("iree") == self.iree


@dataclass(frozen=True)
class Record:
    task_key: str
    program: dict  # Program.to_json()
    program_key: str
    status: Status
    latency_s: float | None = None  # robust statistic (median) of the timed runs
    samples_s: tuple[float, ...] = ()
    error: str = ""
    target: str = "llvm-cpu"
    env: dict = field(default_factory=dict)
    time: float = 0.0  # unix time the measurement finished
    device_kind: str = ""  # e.g. x86_64-avx512: timings compare only within one kind
    schema: int = SCHEMA
    # A dynamic task's latency per size sample (label -> seconds); latency_s is their
    # weighted mean.
    by_size: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.status, Status):
            object.__setattr__(self, "status", Status.parse(self.status, self.error))

    @property
    def ok(self) -> bool:
        return self.status == OK and self.latency_s is not None

    def to_program(self) -> Program:
        return Program.from_json(self.program)


def to_line(rec: Record) -> str:
    d = asdict(rec)
    d["status"] = rec.status.value
    return json.dumps(d, sort_keys=True)


def from_line(line: str) -> Record:
    """A record from one JSON line of any schema; ValueError/TypeError/KeyError if corrupt."""
    d = json.loads(line)
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    schema = d.pop("schema", 1)
    if schema > SCHEMA:
        raise ValueError(f"record schema {schema} is newer than this tool's {SCHEMA}")
    d["samples_s"] = tuple(d.get("samples_s", ()))
    d["status"] = Status.parse(d["status"], d.get("error", ""))
    rec = Record(**d)
    Program.from_json(rec.program)
    return rec


class RecordStore:
    """An append-only JSONL file; the user's records are never truncated."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, rec: Record) -> None:
        try:
            self._append(to_line(rec))
        except OSError as e:
            raise OutputError(f"cannot append to {self.path}: {e.strerror or e}") from e

    def _append(self, line: str) -> None:
        with open(self.path, "a+b") as f:
            # A run killed mid-write leaves a torn last line: never glue a record onto it.
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.write(b"\n")
            f.write(line.encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())

    def load(self) -> list[Record]:
        return list(self._iter())

    def _iter(self) -> Iterator[Record]:
        if not self.path.exists():
            return
        with open(self.path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = from_line(line)
                except (ValueError, TypeError, KeyError) as e:
                    warnings.warn(f"{self.path}:{n}: corrupt record line skipped ({e})")
                    continue
                yield rec


def top_programs(records: list[Record], task_key: str, k: int) -> list[Program]:
    """The `k` fastest distinct valid programs of a task, by their recorded latency."""
    out: dict[str, Program] = {}
    for r in sorted((r for r in records if r.task_key == task_key and r.ok),
                    key=lambda r: r.latency_s):
        if len(out) == k:
            break
        out.setdefault(r.program_key, r.to_program())
    return list(out.values())


def best_by_task(records: list[Record], context: Context | None = None) -> dict[str, Record]:
    """The fastest valid record per task (of `context` only, when given)."""
    best: dict[str, Record] = {}
    for r in records:
        if context is not None and not context.holds(r):
            continue
        if r.ok and (r.task_key not in best or r.latency_s < best[r.task_key].latency_s):
            best[r.task_key] = r
    return best
