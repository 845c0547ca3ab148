"""Sketch generation and annotation decisions (counts, kinds, determinism, round trip)."""
import json
import math
import random
from dataclasses import dataclass, replace

import pytest

from iree.compiler import ir

from mlir_ansor.sketch_passes.annotation import annotate, sample_programs, violations
from mlir_ansor.sketch_passes.program import Program, SplitStep
from mlir_ansor.sketch_passes.rules import (CacheWrite, FuseConsumer, MultiLevelTile,
                                            default_cpu_rules, register_rule, _USER_RULES)
from mlir_ansor.sketch_passes.sketch import (Decision, Sketch, State, StructureStep, add_rule,
                                             generate_sketches)
from mlir_ansor.transform_scripts.emitter import emit_standalone
from tests.conftest import DATA, ELEMENTWISE, MATMUL, ROW_SUM, ops_of


def sketches(text):
    ops = ops_of(text)
    return ops, generate_sketches(ops, default_cpu_rules())


def test_matmul_sketches():
    """Two sketches: (1) cache write + SSRSRS, (2) SSRSRS accumulating in place."""
    _, sks = sketches(MATMUL)
    assert [s.name for s in sks] == ["AddCacheWrite+MultiLevelTiling", "MultiLevelTiling"]
    assert sks[0].has(CacheWrite) and not sks[1].has(CacheWrite)
    assert all(s.root == "op1_matmul" and s.anchor == "op1_matmul" for s in sks)


def test_matmul_relu_sketch():
    """One sketch: SSRSRS with the relu consumer fused."""
    _, sks = sketches((DATA / "mm_relu_512.mlir").read_text())
    assert len(sks) == 1
    assert sks[0].has(FuseConsumer) and sks[0].root == "op1_matmul"
    assert sks[0].anchor == "op2_generic"


def test_elementwise_sketch():
    """One sketch: the add inlined into the exp's tile."""
    _, sks = sketches(ELEMENTWISE)
    assert len(sks) == 1 and sks[0].root == "" and sks[0].inlined == ("op0_generic",)


def test_conv_sketch(conv_tasks):
    """conv + bn/relu epilogue: one SSRSRS-with-fusion sketch."""
    t = [t for t in conv_tasks if t.tunable][0]
    assert [s.name for s in t.sketches] == ["MultiLevelTilingWithFusion"]
    # Window reduction loops have one split level: the validity check must read them so.
    rng = random.Random(0)
    for _ in range(20):
        assert violations(t.ops, annotate(t.ops, t.sketches[0], rng)) == []


def test_same_seed_same_programs():
    ops, sks = sketches(MATMUL)
    a = sample_programs(ops, sks, 10, random.Random(7))
    b = sample_programs(ops, sks, 10, random.Random(7))
    c = sample_programs(ops, sks, 10, random.Random(8))
    assert a == b and [p.key for p in a] == [p.key for p in b]
    assert a != c


def test_annotation_respects_extents_and_register_tile():
    ops, sks = sketches(MATMUL)
    rng = random.Random(0)
    for _ in range(50):
        p = annotate(ops, sks[1], rng)
        splits = [s for s in p.steps if isinstance(s, SplitStep)]
        inner = {}
        blocks = p.blocks(ops[1].name)
        for s in splits:
            ext = ops[1].extents[s.loop]
            if ops[1].iterators[s.loop] == "parallel":
                prod = 1
                for x in s.lengths:
                    prod *= x
                if s.loop in blocks:  # (a, 1, c): a blocks divide, c need not
                    assert ext % (s.lengths[0] * blocks[s.loop]) == 0
                else:
                    assert ext % prod == 0
                inner[s.loop] = s.lengths[-1]
            else:  # (r1, v): v tiles r1, r1 tiles the reduction
                r1, v = s.lengths
                assert ext % r1 == 0 and r1 % v == 0 and v <= 16
        # rows x vectors accumulators + one row of vectors + a broadcast: within the 32
        # registers of the default target (AVX-512, 16 lanes).
        rows = math.prod(c for l, c in inner.items() if l != 1)
        vectors = -(-inner[1] // 16)
        assert rows * vectors + vectors + 1 <= 32


def test_program_json_round_trip():
    ops, sks = sketches(MATMUL)
    p = annotate(ops, sks[0], random.Random(3))
    q = Program.from_json(p.to_json())
    assert q == p and q.key == p.key


class _TileAllReductions:
    """The README's example user rule: SSRSRS for reductions without data reuse too."""

    name = "TileAllReductions"

    def condition(self, ops, state):
        op = ops[state.index]
        ok = op.is_linalg and op.reduction_dims and not state.sketch.root
        return Decision.APPLY if ok else Decision.SKIP

    def apply(self, ops, state):
        sk = add_rule(state.sketch, self.name, MultiLevelTile(ops[state.index].name))
        return [State(sk, state.index - 1)]


def test_user_rule_is_registered_in_order():
    register_rule(_TileAllReductions())
    try:
        rules = default_cpu_rules()
        assert [r.name for r in rules][-2:] == ["TileAllReductions", "Skip"]
        ops, sks = sketches(ROW_SUM)
        # Built-in sketches first, then the user rule's, then Skip's.
        assert [s.name for s in sks] == ["AddRfactor", "TileAllReductions", "Plain"]
        prog = annotate(ops, sks[1], random.Random(0))
        with ir.Context(), ir.Location.unknown():
            text = str(emit_standalone(ops, prog))
        assert "tile_using_forall" in text and "vectorize" in text
        _, mm = sketches(MATMUL)  # data reuse: MultiLevelTiling ends the rule list first
        assert not any("TileAllReductions" in s.rules for s in mm)
    finally:
        _USER_RULES.clear()
    assert [r.name for r in default_cpu_rules()][-2:] == ["MultiLevelTiling", "Skip"]


@dataclass(frozen=True)
class _WideRowSums(StructureStep):
    """A user's own kind of structure: the root's last reduction loop becomes at least 8
    partial sums (the emitter and annotation read only this step's hooks)."""

    kind = "test_wide_row_sums"
    makes_root = True

    def partial_sum_loop(self, root, inner):
        return root.reduction_dims[-1]

    def inner_reduction_lanes(self, vector_lanes):
        return 8, vector_lanes


class _WideRowSumsRule(_TileAllReductions):  # same condition, its own step
    name = "WideRowSums"

    def apply(self, ops, state):
        return [State(add_rule(state.sketch, self.name, _WideRowSums(ops[state.index].name)),
                      state.index - 1)]


def test_a_user_step_brings_its_own_structure():
    """A new kind of step: stored by kind in the program's JSON (and read back), obeyed by
    annotation (>= 8 partial sums) and by the emitter (the loop becomes partial sums)."""
    register_rule(_WideRowSumsRule())
    try:
        ops, sks = sketches(ROW_SUM)
    finally:
        _USER_RULES.clear()
    (sk,) = [s for s in sks if s.name == "WideRowSums"]
    assert sk.root == "op1_reduce" and sk.to_json()["structure"] == [
        {"kind": "test_wide_row_sums", "op": "op1_reduce"}]
    rng = random.Random(0)
    for _ in range(20):
        p = annotate(ops, sk, rng)
        r1, v = p.split("op1_reduce", 1).lengths
        assert (v >= 8 or r1 < 8) and not violations(ops, p)
        assert Program.from_json(json.loads(json.dumps(p.to_json()))) == p
    p = next(q for q in (annotate(ops, sk, rng) for _ in range(100))
             if q.split("op1_reduce", 1).lengths[0] >= 8)
    bad = Program(sk, tuple(replace(s, lengths=(s.lengths[0], 4))
                            if isinstance(s, SplitStep) and s.loop == 1 else s
                            for s in p.steps))
    assert any("innermost tile 4 < 8" in e for e in violations(ops, bad))
    with ir.Context(), ir.Location.unknown():
        text = str(emit_standalone(ops, p))
    assert "tile_reduction_using_for" in text
    with pytest.raises(ValueError, match="unknown structure step kind 'nope'"):
        Program.from_json({"sketch": {"anchor": "a", "structure": [{"kind": "nope", "op": "a"}]},
                           "steps": []})


def test_stored_sketch_fields_are_unchanged():
    """Programs keep the JSON fields (and so the keys) they had as flag records."""
    ops, sks = sketches((DATA / "mm_relu_512.mlir").read_text())
    assert sks[0].to_json() == {
        "anchor": "op2_generic", "root": "op1_matmul", "fuse_consumer": True,
        "cache_write": False, "rfactor": False, "inlined": [],
        "rules": ["MultiLevelTilingWithFusion"]}
    assert Sketch.from_json(sks[0].to_json()) == sks[0]
