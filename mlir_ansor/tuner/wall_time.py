"""Where a tuning run's wall time goes: compiling candidates, running them (validation and
timing), training the cost model, and the search that proposes programs."""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

PARTS = ("compile", "measure", "train", "search")


@dataclass
class WallTime:
    """Seconds per part, accumulated as the run goes (an accumulator: not frozen)."""

    # The builder's batches (parallel compiles: their wall time). With a local builder and
    # runner it includes the output checks, which run in the compile slots as builds end.
    compile: float = 0.0
    measure: float = 0.0  # the runner: timing (and checks elsewhere), one candidate at a time
    train: float = 0.0  # fitting the cost model
    search: float = 0.0  # proposing programs, training excluded
    # The whole run by stage (import, layout, tasks, search, hand back) and the hand-back's
    # steps ("hand back/re-time", ...): where a run's time goes beyond the search.
    stages: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def timing(self, part: str) -> Iterator[None]:
        if part not in PARTS:
            raise ValueError(f"unknown part {part!r} (one of {PARTS})")
        start = time.monotonic()
        try:
            yield
        finally:
            setattr(self, part, getattr(self, part) + time.monotonic() - start)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self.stages[name] = self.stages.get(name, 0.0) + time.monotonic() - start

    def stage_line(self) -> str:
        """'import 20.1 s, ..., hand back 300.2 s (re-time 250.0 s, ...), total 400.3 s'."""
        top = {k: v for k, v in self.stages.items() if "/" not in k}
        parts = []
        for name, s in top.items():
            subs = [(k.split("/", 1)[1], v) for k, v in self.stages.items()
                    if k.startswith(name + "/")]
            inner = f" ({', '.join(f'{k} {v:.1f} s' for k, v in subs)})" if subs else ""
            parts.append(f"{name} {s:.1f} s{inner}")
        return ", ".join(parts + [f"total {sum(top.values()):.1f} s"])

    def line(self) -> str:
        total = sum(getattr(self, p) for p in PARTS) or 1.0
        return ", ".join(f"{p} {getattr(self, p):.1f} s ({100 * getattr(self, p) / total:.0f}%)"
                         for p in PARTS)
