"""A Program is a sketch plus the replayable list of decisions (steps) that complete it.

Steps are frozen and address ops by role name (e.g. "op1_matmul"), never by bare position,
so a mutation edits one step and the emitter replays the list.
"""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Collection, Mapping, Union

from mlir_ansor.sketch_passes.sketch import Sketch


@dataclass(frozen=True)
class SplitStep:
    """Split loop `loop` of `op` into levels: `lengths` are the inner level extents
    (outermost level extent = loop extent / product(lengths))."""

    op: str
    loop: int
    lengths: tuple[int, ...]
    kind: str = "split"


@dataclass(frozen=True)
class ParallelStep:
    """Which loops of `op` the outermost level distributes over workgroups (at most 3)."""

    op: str
    loops: tuple[int, ...]
    kind: str = "parallel"


@dataclass(frozen=True)
class UnrollStep:
    """Unroll the innermost reduction loop of `op` by `factor`."""

    op: str
    factor: int
    kind: str = "unroll"


@dataclass(frozen=True)
class PeelStep:
    """Loop `loop` of `op` is a shape-generic micro-kernel loop: its register tile (the
    split's innermost length) need not divide the extent; the loop stays whole above the
    register-tile level (not distributed, not tiled at S1) and the partial last tile is
    peeled into its own copy of the kernel (DietCode's micro-kernels on a static extent,
    e.g. 197 tokens, a prime). With two peeled loops the outer one (the lower index) is
    peeled one level up, at S1, whose tile is then its register tile: both whole at S1 would
    make the local tile the whole plane (197 x 197 attention scores)."""

    op: str
    loop: int
    kind: str = "peel"


def s1_peel_of(peeled: Collection[int], blocks: Mapping[int, int]) -> int | None:
    """Of a root's peeled loops (and its blocked ones), the loop peeled at S1: the outer of
    two plain peeled loops; None otherwise."""
    return min(peeled) if len(peeled) == 2 and not blocks else None


@dataclass(frozen=True)
class BlockPeelStep:
    """Loop `loop` of `op` is tiled in blocks of `block` elements above the register tile
    (workgroups of `lengths[0]` blocks when distributed, S1 tile one block), and its register
    tile (the split's innermost length, split (a, 1, c)) need not divide the block: each
    block's partial last tile is peeled into its own copy of the kernel. It brings register
    tiles no divisor offers, e.g. AVX2's 6x16 BLAS kernel (12 of its 16 registers) on a
    256-row block: 42 tiles of 6 rows and one of 4."""

    op: str
    loop: int
    block: int
    kind: str = "peel_block"


@dataclass(frozen=True)
class PackStep:
    """Copy input `operand` (its position among `op`'s operands) of each reduction tile (R0)
    into a contiguous local buffer before the register-tile loops read it: the panel the
    register tiles sweep is then read with unit stride and without TLB or cache-set
    conflicts (the packed B panel of GotoBLAS; `transform.iree.copy_tensor_operand`)."""

    op: str
    operand: int
    kind: str = "pack"


@dataclass(frozen=True)
class VectorizeStep:
    """Vectorize the innermost tile of `op`."""

    op: str
    kind: str = "vectorize"


Step = Union[SplitStep, ParallelStep, UnrollStep, VectorizeStep, PeelStep, BlockPeelStep,
             PackStep]
_STEP_TYPES = {"split": SplitStep, "parallel": ParallelStep, "unroll": UnrollStep,
               "vectorize": VectorizeStep, "peel": PeelStep, "peel_block": BlockPeelStep,
               "pack": PackStep}


def step_from_dict(d: dict) -> Step:
    cls = _STEP_TYPES.get(d.get("kind", ""))
    if cls is None:
        raise ValueError(f"unknown step kind {d.get('kind')!r}")
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
    return cls(**fields)


@functools.lru_cache(maxsize=None)
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


@dataclass(frozen=True)
class Program:
    sketch: Sketch
    steps: tuple[Step, ...] = field(default_factory=tuple)

    def with_step(self, step: Step) -> "Program":
        return Program(self.sketch, self.steps + (step,))

    # The features, checks and mutations ask these hundreds of thousands of times per
    # proposal: each is computed once per program (the steps never change).
    def split(self, op: str, loop: int) -> SplitStep | None:
        return self._splits.get((op, loop))

    @cached_property
    def _splits(self) -> dict[tuple[str, int], SplitStep]:
        out: dict[tuple[str, int], SplitStep] = {}
        for s in self.steps:
            if isinstance(s, SplitStep):
                out.setdefault((s.op, s.loop), s)  # the first split of a loop counts
        return out

    def peeled(self, op: str) -> set[int]:
        """Loops of `op` whose partial register tile is peeled (PeelStep, BlockPeelStep)."""
        return set(self._peeled.get(op, ()))

    @cached_property
    def _peeled(self) -> dict[str, frozenset[int]]:
        out: dict[str, set[int]] = {}
        for s in self.steps:
            if isinstance(s, (PeelStep, BlockPeelStep)):
                out.setdefault(s.op, set()).add(s.loop)
        return {k: frozenset(v) for k, v in out.items()}

    def s1_peeled(self, op: str) -> int | None:
        """The loop of `op` peeled at S1 (the outer of two PeelSteps), or None."""
        return s1_peel_of(self.peeled(op), self.blocks(op))

    def blocks(self, op: str) -> dict[int, int]:
        """Loops of `op` with a BlockPeelStep: their block (the others peeled stay whole
        above the register tile)."""
        return dict(self._blocks.get(op, {}))

    @cached_property
    def _blocks(self) -> dict[str, dict[int, int]]:
        out: dict[str, dict[int, int]] = {}
        for s in self.steps:
            if isinstance(s, BlockPeelStep):
                out.setdefault(s.op, {})[s.loop] = s.block
        return out

    def packed(self, op: str) -> tuple[int, ...]:
        """Operands of `op` with a PackStep, in step order."""
        return tuple(s.operand for s in self.steps if isinstance(s, PackStep) and s.op == op)

    def find(self, kind: type, op: str):
        for s in self.steps:
            if isinstance(s, kind) and s.op == op:
                return s
        return None

    def to_json(self) -> dict:
        # Shallow: step fields are str, int and tuples of int (dataclasses.asdict deep-copies
        # them, and was most of the search's time).
        return {"sketch": self.sketch.to_json(),
                "steps": [{n: getattr(s, n) for n in _field_names(type(s))}
                          for s in self.steps]}

    @staticmethod
    def from_json(d: dict) -> "Program":
        return Program(Sketch.from_json(d["sketch"]),
                       tuple(step_from_dict(s) for s in d["steps"]))

    @cached_property
    def memo(self) -> dict:
        """What other modules derive from this program once (features.py: the root's nest);
        not part of the program: equality, keys and JSON ignore it."""
        return {}

    @cached_property
    def key(self) -> str:
        """Dedup key: identical programs give identical keys (computed once: frozen)."""
        text = json.dumps(self.to_json(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]
