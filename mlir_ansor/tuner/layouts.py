"""Layout alternatives of a model: which dispatches a packed weight
(dialect_helpers/layout_rewrite.py) brings, and which it replaces.

Packing one contraction's weight changes more than its own dispatch: IREE propagates the
new shapes through reshapes, so a fused bias may split off, or a neighbouring layer norm
changes form. Each site is therefore compiled to flow alone, and its alternative is the
difference of the two dispatch lists: the dispatches it removes from the plain model and
those it adds. The added dispatches are tuned as tasks like any other; the export packs a
site only where its added dispatches (tuned or default, whichever runs) are faster than the
ones it removes, and the end-to-end check has the last word.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

from mlir_ansor.dialect_helpers.layout_rewrite import (LayoutRewriteError, PackSite,
                                                       find_sites, rewrite)
from mlir_ansor.tuner.tasks import Task, dispatch_keys, extract_tasks, flow_source
from mlir_ansor.tuner.toolchain import Toolchain


@dataclass(frozen=True)
class Alternative:
    site: PackSite
    removed: tuple[tuple[str, int], ...]  # (task key, calls) of the plain model it replaces
    added: tuple[tuple[str, int], ...]  # (task key, calls) it brings


def model_flow(text: str, path: Path, target: str, tools: Toolchain, timeout_s: float) -> str:
    """Flow-level module of a model text (written to `path` for iree-compile)."""
    path.write_text(text)
    return flow_source(path, target, tools, timeout_s)


def alternatives(model_mlir: str, plain_flow: str, workdir: Path, target: str,
                 tools: Toolchain, timeout_s: float, tile: int
                 ) -> tuple[list[Alternative], list[Task]]:
    """The packable contractions of the model with what packing each changes, and the
    dispatches the plain model lacks as tasks (`layout_of` names their site)."""
    plain = Counter(dispatch_keys(plain_flow))
    alts: list[Alternative] = []
    tasks: dict[str, Task] = {}
    scratch = workdir / "model_packed.mlir"
    try:
        for s in find_sites(model_mlir, tile):
            flow = model_flow(rewrite(model_mlir, [s]), scratch, target, tools, timeout_s)
            packed = Counter(dispatch_keys(flow))
            added = packed - plain
            if not added:
                raise LayoutRewriteError(f"packing site {s.index} changed no dispatch")
            alts.append(Alternative(s, tuple(sorted((plain - packed).items())),
                                    tuple(sorted(added.items()))))
            for t in extract_tasks(flow, target):
                if t.key in added and t.key not in tasks:
                    tasks[t.key] = replace(t, name=f"{t.name} (packed)",
                                           layout_of=f"site {s.index} ({s.op_name})")
    finally:
        scratch.unlink(missing_ok=True)
    return alts, list(tasks.values())


def choose_sites(alts: Sequence[Alternative], latency: Callable[[str], float | None],
                 margin: float) -> list[PackSite]:
    """The sites whose added dispatches run at least `margin` times faster than the ones they
    remove (`latency`: what runs for a task key, None if unknown: then the site stays)."""
    chosen = []
    for a in alts:
        new = [latency(k) for k, _ in a.added]
        if any(x is None for x in new):
            continue
        old = sum((latency(k) or 0.0) * n for k, n in a.removed)
        if sum(x * n for x, (_, n) in zip(new, a.added)) * margin < old:
            chosen.append(a.site)
    return chosen


def initial_latency(alts: Sequence[Alternative], defaults: Mapping[str, float | None]
                    ) -> dict[str, float]:
    """A start value for the scheduler per added task: at most what the dispatches its site
    removes cost (IREE's default of a packed contraction can be far slower than the plain
    one it replaces, and nothing ever runs it unless tuning beats the plain one)."""
    cap: dict[str, float] = {}
    for a in alts:
        old = sum((defaults.get(k) or 0.0) * n for k, n in a.removed)
        for k, n in a.added:
            if old:
                cap[k] = max(cap.get(k, 0.0), old / n)  # per call, like the latencies
    return cap


def save_sites(path: Path, sites: Sequence[PackSite]) -> None:
    """The packed sites of the model handed back (`load_sites` re-applies them)."""
    path.write_text(json.dumps([asdict(s) for s in sites], indent=1))


def load_sites(path: Path) -> list[PackSite]:
    if not path.exists():
        return []
    try:
        return [PackSite(**{**d, "outer_perm": tuple(d["outer_perm"])})
                for d in json.loads(path.read_text())]
    except (ValueError, TypeError, KeyError) as e:
        raise LayoutRewriteError(f"corrupt layout file {path}: {e}") from e
