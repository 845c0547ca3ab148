"""Tuning records: one JSON line per measurement, appended and flushed at once."""
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

from mlir_ansor.sketch_passes.program import Program

# Status values of a record.
OK = "ok"
ERROR_CLASSES = ("compile_error", "not_applied", "runtime_error", "wrong_answer", "timeout")


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
class Record:
    task_key: str
    program: dict  # Program.to_json()
    program_key: str
    status: str  # OK or one of ERROR_CLASSES
    latency_s: float | None = None  # robust statistic (median) of the timed runs
    samples_s: tuple[float, ...] = ()
    error: str = ""
    target: str = "llvm-cpu"
    env: dict = field(default_factory=dict)
    time: float = 0.0  # unix time the measurement finished

    @property
    def ok(self) -> bool:
        return self.status == OK and self.latency_s is not None

    def to_program(self) -> Program:
        return Program.from_json(self.program)


class RecordStore:
    """An append-only JSONL file; the user's records are never truncated."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, rec: Record) -> None:
        line = json.dumps(asdict(rec), sort_keys=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
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
                    d = json.loads(line)
                    d["samples_s"] = tuple(d.get("samples_s", ()))
                    rec = Record(**d)
                    Program.from_json(rec.program)
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


def best_by_task(records: list[Record]) -> dict[str, Record]:
    best: dict[str, Record] = {}
    for r in records:
        if r.ok and (r.task_key not in best or r.latency_s < best[r.task_key].latency_s):
            best[r.task_key] = r
    return best
