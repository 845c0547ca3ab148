"""Where a tuning run's wall time goes: compiling candidates, running them (validation and
timing), training the cost model, and the search that proposes programs."""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

PARTS = ("compile", "measure", "train", "search")


@dataclass
class WallTime:
    """Seconds per part, accumulated as the run goes (an accumulator: not frozen)."""

    compile: float = 0.0  # the builder's batches (parallel compiles: their wall time)
    measure: float = 0.0  # the runner: validation and timing, one candidate at a time
    train: float = 0.0  # fitting the cost model
    search: float = 0.0  # proposing programs, training excluded

    @contextmanager
    def timing(self, part: str) -> Iterator[None]:
        if part not in PARTS:
            raise ValueError(f"unknown part {part!r} (one of {PARTS})")
        start = time.monotonic()
        try:
            yield
        finally:
            setattr(self, part, getattr(self, part) + time.monotonic() - start)

    def line(self) -> str:
        total = sum(getattr(self, p) for p in PARTS) or 1.0
        return ", ".join(f"{p} {getattr(self, p):.1f} s ({100 * getattr(self, p) / total:.0f}%)"
                         for p in PARTS)
