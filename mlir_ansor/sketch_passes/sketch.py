"""Sketch generation: derivation rules applied from the output op backwards.

A state is (partial sketch, index of the next op to visit). Each rule says whether it
applies to the op at that index and returns successor states, exactly as in Ansor (§4.1).
A rule adds structure as `StructureStep`s (defined next to the rule that adds them, in
`rules/`): each step carries what it means to annotation, the emitter and the cost model,
so a new rule can bring a new kind of structure without editing those modules.
"""
from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, ClassVar, Protocol, Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo

if TYPE_CHECKING:
    from mlir_ansor.transform_scripts.emitter import TilePlan


@dataclass(frozen=True)
class StructureStep:
    """One structural decision on op `op`. Subclasses set the class attributes and
    override the hooks they change; the defaults mean "no effect"."""

    op: str

    kind: ClassVar[str] = ""  # name in JSON (subclasses set it; registered on definition)
    # Legacy sketch field this step is stored as (programs keep the keys they always had):
    # "root", "inlined" or a boolean flag; "" = stored under "structure" by kind.
    legacy_field: ClassVar[str] = ""
    rank: ClassVar[int] = 100  # canonical position in a sketch (legacy steps first)
    makes_root: ClassVar[bool] = False  # the op is tiled at every level (SSRSRS / SSSRRSRS)
    local_tile: ClassVar[bool] = False  # the root's S1 output tile is a local buffer
    consumer_fused: ClassVar[bool] = False  # the anchor is computed in the root's tiles
    feature: ClassVar[str] = ""  # cost-model column that counts this step

    _registry: ClassVar[dict[str, type["StructureStep"]]] = {}

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.kind:
            StructureStep._registry[cls.kind] = cls

    def s1_fusion(self, plan: "TilePlan") -> tuple[OpInfo, list[int]] | None:
        """Emitter, S1: the op whose S1 tile the root (with its init) is fused into, and
        that tile's sizes; None = this step does not decide S1."""
        return None

    def partial_sum_loop(self, root: OpInfo, inner: dict[int, int]) -> int | None:
        """Emitter, R1: the reduction loop whose innermost tile (`inner[loop]`) becomes
        independent partial sums merged after the loop; None = none."""
        return None

    def inner_reduction_lanes(self, vector_lanes: int) -> tuple[int, int] | None:
        """Annotation: (fewest, most) elements of the root's innermost reduction tile;
        None = the default (no minimum, a short row)."""
        return None

    def to_json(self) -> dict:
        return {"kind": self.kind, "op": self.op}


def structure_step_from_dict(d: dict) -> StructureStep:
    cls = StructureStep._registry.get(d.get("kind", ""))
    if cls is None:
        raise ValueError(f"unknown structure step kind {d.get('kind')!r} (is the module "
                         "that defines it imported?)")
    return cls(d["op"])


def _canonical(steps: Sequence[StructureStep]) -> tuple[StructureStep, ...]:
    # Stable: steps of one kind keep their derivation order (inlined ops, in visit order).
    return tuple(sorted(steps, key=lambda s: s.rank))


@dataclass(frozen=True)
class Sketch:
    """The loop structure of a program, before any numbers are chosen."""

    anchor: str  # the output op, tiled by the outermost (parallel, workgroup) level
    structure: tuple[StructureStep, ...] = ()  # what the rules added, canonical order
    rules: tuple[str, ...] = ()  # names of the rules that built it, in order
    gpu: bool = False  # a GPU sketch ("SSSRRSRS": blocks, virtual threads, threads)

    def __post_init__(self):
        object.__setattr__(self, "structure", _canonical(self.structure))

    @property
    def name(self) -> str:
        parts = [r for r in self.rules if r != "Skip"]
        return "+".join(parts) if parts else "Plain"

    @cached_property
    def root(self) -> str:
        """The op given multi-level tiling ("" = none; at most one per sketch; computed once:
        the search asks it hundreds of thousands of times per proposal)."""
        return next((s.op for s in self.structure if s.makes_root), "")

    @property
    def inlined(self) -> tuple[str, ...]:
        """Ops computed inside their consumer's tile."""
        from mlir_ansor.sketch_passes.rules.always_inline import Inline
        return tuple(s.op for s in self.structure if isinstance(s, Inline))

    @property
    def local_tile(self) -> bool:
        return any(s.local_tile for s in self.structure)

    @property
    def consumer_fused(self) -> bool:
        return any(s.consumer_fused for s in self.structure)

    def has(self, kind: type[StructureStep]) -> bool:
        return any(isinstance(s, kind) for s in self.structure)

    def to_json(self) -> dict:
        """The fields programs were always keyed by (anchor, root, flags, inlined, rules;
        gpu only when set), plus "structure" for steps of other kinds."""
        d: dict = {"anchor": self.anchor, "root": "", "fuse_consumer": False,
                   "cache_write": False, "rfactor": False, "inlined": [],
                   "rules": list(self.rules), "gpu": self.gpu, "cache_read": False}
        extra = []
        for s in self.structure:
            f = s.legacy_field
            if f == "root":
                d["root"] = s.op
            elif f == "inlined":
                d["inlined"].append(s.op)
            elif f:
                d["root"], d[f] = s.op, True
            else:
                extra.append(s.to_json())
        for flag in ("gpu", "cache_read"):  # CPU programs keep the keys they had before
            if not d[flag]:
                del d[flag]
        if extra:
            d["structure"] = extra
        return d

    @staticmethod
    def from_json(d: dict) -> "Sketch":
        # Importing the rules registers the built-in step kinds.
        from mlir_ansor.sketch_passes.rules import legacy_steps

        steps = list(legacy_steps(d))
        steps += [structure_step_from_dict(s) for s in d.get("structure", ())]
        return Sketch(anchor=d["anchor"], structure=tuple(steps),
                      rules=tuple(d.get("rules", ())), gpu=bool(d.get("gpu", False)))


class Decision(enum.Enum):
    SKIP = 0  # rule does not apply
    APPLY = 1  # apply, and let later rules apply too
    APPLY_AND_SKIP_REST = 2  # apply and stop trying rules for this op


@dataclass(frozen=True)
class State:
    sketch: Sketch
    index: int  # next op to visit (counting down)


class Rule(Protocol):
    name: str

    def condition(self, ops: Sequence[OpInfo], state: State) -> Decision: ...

    def apply(self, ops: Sequence[OpInfo], state: State) -> list[State]: ...


def add_rule(sketch: Sketch, rule: str, *steps: StructureStep) -> Sketch:
    """`sketch` with rule `rule` recorded and its structure steps added."""
    return Sketch(sketch.anchor, sketch.structure + steps, sketch.rules + (rule,), sketch.gpu)


def generate_sketches(ops: Sequence[OpInfo], rules: Sequence[Rule],
                      gpu: bool = False) -> list[Sketch]:
    """All sketches of a task; deterministic order (rule order, then derivation order)."""
    if not ops:
        return []
    outputs = [o for o in ops if not any(o.index in p.producers for p in ops)]
    if len(outputs) != 1:
        return []  # several outputs: not tiled from one anchor yet
    start = State(Sketch(anchor=outputs[0].name, gpu=gpu), len(ops) - 1)
    queue: deque[State] = deque([start])
    done: list[Sketch] = []
    while queue:
        state = queue.popleft()
        if state.index < 0:
            if state.sketch not in done:
                done.append(state.sketch)
            continue
        for rule in rules:
            decision = rule.condition(ops, state)
            if decision == Decision.SKIP:
                continue
            queue.extend(rule.apply(ops, state))
            if decision == Decision.APPLY_AND_SKIP_REST:
                break
    return done
