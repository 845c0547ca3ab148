"""Layout alternatives of a model's tasks: the dispatch a contraction forms with its constant
weight packed (dialect_helpers/layout_rewrite.py) is tuned as a task of its own, next to the
dispatch in the model's own layout; the export keeps, per contraction, the faster of the two
and rewrites only those weights in the model it hands back.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from mlir_ansor.dialect_helpers.layout_rewrite import (LayoutRewriteError, PackSite,
                                                       find_sites, rewrite)
from mlir_ansor.tuner.tasks import Task, dispatch_keys, extract_tasks, flow_source
from mlir_ansor.tuner.toolchain import Toolchain


@dataclass(frozen=True)
class Alternative:
    site: PackSite
    plain_key: str  # the task of the contraction in the model's layout
    packed_key: str  # the task of the same contraction with its weight packed


def _flow(text: str, path: Path, target: str, tools: Toolchain, timeout_s: float) -> str:
    path.write_text(text)
    return flow_source(path, target, tools, timeout_s)


def _differing(a: list[str], b: list[str]) -> list[tuple[str, str]]:
    if len(a) != len(b):
        raise LayoutRewriteError(f"packing changed the number of dispatches ({len(a)} -> "
                                 f"{len(b)})")
    return [(x, y) for x, y in zip(a, b) if x != y]


def alternatives(model_mlir: str, plain_flow: str, workdir: Path, target: str,
                 tools: Toolchain, timeout_s: float, tile: int
                 ) -> tuple[list[Alternative], list[Task]]:
    """The packable contractions of the model, each paired with its plain and packed
    dispatch, and the packed dispatches as tasks (`layout_of` = the plain task's key)."""
    sites = find_sites(model_mlir, tile)
    if not sites:
        return [], []
    plain = dispatch_keys(plain_flow)
    packed_flow = _flow(rewrite(model_mlir, sites), workdir / "model_packed.mlir", target,
                        tools, timeout_s)
    diff = _differing(plain, dispatch_keys(packed_flow))
    if len(diff) == len(sites):  # one dispatch per site, in program order
        pairs = list(zip(sites, diff))
    else:  # identical contractions share a dispatch: pack one site at a time to pair them
        pairs = []
        for s in sites:
            one = _differing(plain, dispatch_keys(_flow(
                rewrite(model_mlir, [s]), workdir / "model_packed_one.mlir", target, tools,
                timeout_s)))
            if len(one) != 1:
                raise LayoutRewriteError(f"packing site {s.index} changed {len(one)} dispatches")
            pairs.append((s, one[0]))
    alts = [Alternative(s, p, q) for s, (p, q) in pairs]
    owner = {a.packed_key: a.plain_key for a in alts}
    tasks = [replace(t, layout_of=owner[t.key], name=f"{t.name} (packed)")
             for t in extract_tasks(packed_flow, target) if t.key in owner]
    return alts, tasks


def chosen_sites(alts: Sequence[Alternative], packed_keys: set[str]) -> list[PackSite]:
    """The sites whose packed dispatch was chosen."""
    return [a.site for a in alts if a.packed_key in packed_keys]
