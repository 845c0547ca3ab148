"""Sketch generation: derivation rules applied from the output op backwards.

A state is (partial sketch, index of the next op to visit). Each rule says whether it
applies to the op at that index and returns successor states, exactly as in Ansor (§4.1).
"""
from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, replace
from typing import Protocol, Sequence

from mlir_ansor.dialect_helpers.linalg_info import OpInfo


@dataclass(frozen=True)
class Sketch:
    """The loop structure of a program, before any numbers are chosen."""

    anchor: str  # the output op, tiled by the outermost (parallel, workgroup) level
    root: str = ""  # the op given multi-level tiling ("" = none)
    fuse_consumer: bool = False  # the anchor is an elementwise consumer fused into root's tiles
    cache_write: bool = False  # root accumulates into a local tile written back once
    rfactor: bool = False  # the root's reduction is split into a parallel loop
    inlined: tuple[str, ...] = ()  # ops computed inside their consumer's tile
    rules: tuple[str, ...] = ()  # names of the rules that built it, in order
    gpu: bool = False  # a GPU sketch ("SSSRRSRS": blocks, virtual threads, threads)
    cache_read: bool = False  # GPU: the root's inputs are read through shared memory

    @property
    def name(self) -> str:
        parts = [r for r in self.rules if r != "Skip"]
        return "+".join(parts) if parts else "Plain"


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


def add_rule(sketch: Sketch, rule: str, **changes) -> Sketch:
    return replace(sketch, rules=sketch.rules + (rule,), **changes)


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
