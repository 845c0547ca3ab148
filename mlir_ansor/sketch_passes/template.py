"""The limited "template" space: IREE's lowering-config tile sizes for the root op, one
level of workgroup tiles, one of vector tiles and the reduction tile (what IREE's tuner
searches). Template programs compile through a tuning spec, not our strategies.

A tuning spec configures the op as it is before IREE's codegen preprocessing. Where that
preprocessing re-creates the root op (IREE 3.13's InsertBatchDimForBatchlessConvPass turns a
batch-less convolution into a new 4-D one and drops the user's compilation_info), a spec
cannot configure the dispatch: such tasks have no template space (`template_sketch` is None).
"""
from __future__ import annotations

import math
import random
from typing import Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo, analyze_task
from mlir_ansor.sketch_passes.annotation import (annotation_limits, inner_limit,
                                                 sample_unmeasured)
from mlir_ansor.sketch_passes.loops import divisors, op_by_name, window_loops, window_rows
from mlir_ansor.sketch_passes.program import Program, SplitStep
from mlir_ansor.sketch_passes.rules.multi_level_tiling import MultiLevelTile
from mlir_ansor.sketch_passes.sketch import Sketch
from mlir_ansor.targets import Target, get_target
from mlir_ansor.transform_scripts.tuning_spec import TEMPLATE_RULE

MAX_REDUCTION_TILE = 64  # search space (as IREE's tuner), not a machine fact
# IREE rejects vectors over 32 KiB on every CPU; a contraction's vector tile spans all its
# loops.
MAX_VECTOR_VOLUME = 4096


def template_sketch(task) -> Sketch | None:
    """The template sketch of a task: its multi-level-tiled root; None without one, or when
    the op a tuning spec sees has another loop nest than the one codegen tiles."""
    for sk in task.sketches:
        if sk.root:
            pattern = analyze_task(task.task_mlir)
            root = op_by_name(task.ops, sk.root)
            same = len(pattern) == len(task.ops) and \
                pattern[root.index].extents == root.extents
            return Sketch(sk.anchor, (MultiLevelTile(sk.root),), (TEMPLATE_RULE,)) if same \
                else None
    return None


def sample_template(ops: Sequence[OpInfo], sketch: Sketch, rng: random.Random, *,
                    target: Target | None = None) -> Program:
    """One random template program; lane and register-tile caps as annotation's for
    `target` (see annotation)."""
    lim = annotation_limits(target)
    root = op_by_name(ops, sketch.root)
    rows, window = window_rows(root), window_loops(root)
    for _ in range(100):
        steps = []
        inner, red = {}, 1
        for l, ext in enumerate(root.extents):
            if root.iterators[l] == "parallel":
                wg = rng.choice(divisors(ext))
                limit = 1 if l in rows else inner_limit(root, l, target=target)
                c = rng.choice([d for d in divisors(wg) if d <= limit])
                inner[l] = c
                steps.append(SplitStep(root.name, l, (wg // c, c)))
            else:
                limit = 1 if (window is not None and l in window) else MAX_REDUCTION_TILE
                r = rng.choice([d for d in divisors(ext) if d <= limit])
                red *= r
                steps.append(SplitStep(root.name, l, (r,)))
        if lim.register_tile_fits(root, inner) and \
                math.prod(inner.values()) * red <= MAX_VECTOR_VOLUME:
            break
    return Program(sketch, tuple(steps))


class TemplatePolicy:
    """Random sampling of the template space (the limited-space baseline)."""

    def __init__(self, task, seed: int, *, target: Target | None = None):
        self.task = task
        self.target = target or get_target(task.target)
        self.rng = random.Random(f"{seed}:{task.key}:template")
        self.sketch = template_sketch(task)

    def propose(self, n: int, measured: set[str], records=()) -> list[Program]:
        if self.sketch is None:
            return []
        return sample_unmeasured(lambda: sample_template(self.task.ops, self.sketch, self.rng,
                                                         target=self.target),
                                 n, measured, 50)
