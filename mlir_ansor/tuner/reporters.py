"""What the stages tell the user while they run: events, and reporters that listen.

The console reporter prints the stage lines, the trial progress bar and the result tables;
a test (or a GUI) passes its own. The report files (report.txt, report.json, the plot) are
artifacts of the output folder, written by the report stage whatever the reporter."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from mlir_ansor.tuner.records import Record


@dataclass(frozen=True)
class StageStarted:
    index: int  # 1-based
    total: int
    name: str
    detail: str


@dataclass(frozen=True)
class TrialsPlanned:
    total: int
    done: int  # already in the records (a resumed run)


@dataclass(frozen=True)
class Measured:
    task_id: str
    record: Record
    best_s: float | None  # the task's best so far (measured here)


@dataclass(frozen=True)
class Note:
    text: str  # something the user should know now (e.g. a strategy dropped)


@dataclass(frozen=True)
class Reported:
    summary: str  # the result tables (report.txt)
    out: Path  # the output folder holding report.json and the plot


Event = StageStarted | TrialsPlanned | Measured | Note | Reported


class Reporter(Protocol):
    def __call__(self, event: Event) -> None:
        ...

    def close(self) -> None:
        """The run ended (also on an error: a progress bar must not print after it)."""
        ...


class ConsoleReporter:
    """Stage lines on stdout and a tqdm bar over the trials."""

    def __init__(self) -> None:
        self.bar = None

    def __call__(self, event: Event) -> None:
        from tqdm import tqdm

        if isinstance(event, StageStarted):
            self.close()
            print(f"[{event.index}/{event.total}] {event.detail}", flush=True)
        elif isinstance(event, TrialsPlanned):
            self.bar = tqdm(total=event.total, initial=min(event.done, event.total),
                            desc="trials", unit="trial")
        elif isinstance(event, Measured) and self.bar is not None:
            self.bar.update(1)
            best = f"{event.best_s * 1e3:.3f}" if event.best_s else "-"
            self.bar.set_postfix_str(f"{event.task_id} {event.record.status} best={best}ms")
        elif isinstance(event, Note):
            self.close()
            print(event.text, flush=True)
        elif isinstance(event, Reported):
            self.close()
            print(event.summary, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class Silent:
    def __call__(self, event: Event) -> None:
        pass

    def close(self) -> None:
        pass
