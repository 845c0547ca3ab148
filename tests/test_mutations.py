"""Mutations and crossover give valid programs that differ from their parents in the
intended genes only."""
import math
import random

import pytest

from mlir_ansor.sketch_passes.annotation import annotate, violations
from mlir_ansor.sketch_passes.mutations import (crossover, mutate, mutate_parallel,
                                                mutate_tile_size, mutate_unroll, split_levels)
from mlir_ansor.sketch_passes.program import (PackStep, ParallelStep, Program, SplitStep,
                                              UnrollStep)
from mlir_ansor.sketch_passes.rules import default_cpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from tests.conftest import BATCH_MATMUL, ELEMENTWISE, MATMUL, ops_of


def programs(text, n, seed=0):
    ops = ops_of(text)
    sks = generate_sketches(ops, default_cpu_rules())
    rng = random.Random(seed)
    return ops, [annotate(ops, sks[0], rng) for _ in range(n)]


def genes(p):
    """Steps by decision; the packed operand (a step only some programs have) apart."""
    return {(s.op, s.kind, getattr(s, "loop", None)): s for s in p.steps
            if not isinstance(s, PackStep)}


@pytest.mark.parametrize("text", [MATMUL, BATCH_MATMUL, ELEMENTWISE])
def test_mutants_are_valid_and_new(text):
    ops, progs = programs(text, 100)
    rng = random.Random(1)
    made = 0
    for p in progs:
        c = mutate(ops, p, rng)
        if c is None:
            continue
        made += 1
        assert violations(ops, c) == [] and c.key != p.key and c.sketch == p.sketch
    assert made >= 90


def test_tile_size_mutation_moves_one_factor():
    ops, progs = programs(MATMUL, 50)
    rng = random.Random(2)
    for p in progs:
        c = mutate_tile_size(ops, p, rng)
        if c is None or p.peeled(ops[1].name) or c.peeled(ops[1].name):
            continue  # micro-kernel loops: tests/test_peel.py, tests/test_pack_and_block.py
        changed = [(a, b) for a, b in zip(p.steps, c.steps)
                   if a != b and isinstance(a, SplitStep)]
        assert len(changed) == 1
        a, b = changed[0]
        levels_a, levels_b = split_levels(ops[1], a), split_levels(ops[1], b)
        ratios = sorted(x / y for x, y in zip(levels_a, levels_b) if x != y)
        assert len(ratios) == 2 and math.isclose(ratios[0] * ratios[1], 1.0)  # p and 1/p


def test_unroll_and_parallel_mutations_change_only_their_step():
    ops, progs = programs(MATMUL, 60)
    rng = random.Random(3)
    for fn, kind in ((mutate_unroll, UnrollStep), (mutate_parallel, ParallelStep)):
        changed = 0
        for p in progs:
            c = fn(ops, p, rng)
            if c is None:
                continue
            diff = [a for a, b in zip(p.steps, c.steps) if a != b]
            assert len(diff) == 1 and isinstance(diff[0], kind)
            assert violations(ops, c) == []
            changed += 1
        assert changed > 0


def test_crossover_combines_parents_genes():
    ops, progs = programs(BATCH_MATMUL, 40)
    rng = random.Random(4)
    mixed = packs = 0
    for a, b in zip(progs[::2], progs[1::2]):
        c = crossover(ops, a, b, rng)
        if c is None:
            continue
        assert violations(ops, c) == []
        ga, gb, gc = genes(a), genes(b), genes(c)
        assert set(gc) == set(ga)
        # Every split comes from one of the parents (parallel/unroll are re-derived only
        # when neither parent's choice fits the child's tiles).
        assert all(gc[k] in (ga[k], gb[k]) for k in gc if isinstance(gc[k], SplitStep))
        from_a = any(gc[k] == ga[k] != gb[k] for k in gc if isinstance(gc[k], SplitStep))
        from_b = any(gc[k] == gb[k] != ga[k] for k in gc if isinstance(gc[k], SplitStep))
        mixed += from_a and from_b
        root = a.sketch.root
        assert c.packed(root) in (a.packed(root), b.packed(root))
        packs += a.packed(root) != b.packed(root)
    assert mixed >= 5 and packs >= 3


def test_crossover_takes_whole_nodes_when_several_carry_steps():
    ops, progs = programs(MATMUL, 2)
    a, b = progs
    # Give the fill node steps of its own in both parents (a two-node program).
    fill_a = SplitStep("op0_fill", 0, (4,))
    fill_b = SplitStep("op0_fill", 0, (8,))
    a2 = type(a)(a.sketch, a.steps + (fill_a,))
    b2 = type(b)(b.sketch, b.steps + (fill_b,))
    rng = random.Random(5)
    for _ in range(20):
        c = crossover(ops, a2, b2, rng)
        if c is None:
            continue
        gc = genes(c)
        root_from_a = all(gc[k] == genes(a2)[k] for k in gc if k[0] == "op1_matmul")
        root_from_b = all(gc[k] == genes(b2)[k] for k in gc if k[0] == "op1_matmul")
        assert root_from_a or root_from_b
        # The packed operand travels with the root's node.
        assert c.packed("op1_matmul") == (a2 if root_from_a else b2).packed("op1_matmul") or \
            (root_from_a and root_from_b)
        assert gc[("op0_fill", "split", 0)] in (fill_a, fill_b)


def test_crossover_needs_same_sketch():
    ops = ops_of(MATMUL)
    sks = generate_sketches(ops, default_cpu_rules())
    rng = random.Random(0)
    a, b = annotate(ops, sks[0], rng), annotate(ops, sks[1], rng)
    assert crossover(ops, a, b, rng) is None


def test_split_levels_round_trip():
    from mlir_ansor.sketch_passes.mutations import from_levels

    ops = ops_of(MATMUL)  # 64x48x32
    mm = ops[1]
    for step, levels in ((SplitStep(mm.name, 0, (2, 4, 8)), [1, 2, 4, 8]),
                         (SplitStep(mm.name, 2, (16, 4)), [2, 4, 4]),
                         (SplitStep(mm.name, 2, (16,)), [2, 16])):
        assert split_levels(mm, step) == levels
        assert from_levels(mm, step, levels) == step


def test_unrolled_block_stays_within_the_cap():
    # A straight-line block past MAX_UNROLLED_MACS spilled beyond IREE's worker stack
    # (SIGSEGV at run time): sampling, mutation and violations all keep under it.
    from mlir_ansor.sketch_passes.annotation import (MAX_UNROLLED_MACS, unroll_choices,
                                                     unrolled_block_macs)
    # A matmul whose register tiles (up to 8 x 64) and reduction tiles (up to 32 of k=512)
    # reach the cap.
    big_mm = MATMUL.replace("64x32", "256x512").replace("32x48", "512x64").replace(
        "64x48", "256x64")
    ops, progs = programs(big_mm, 3000)
    root = ops[1]
    unrolled = [(p, p.find(UnrollStep, root.name).factor) for p in progs]
    assert all(f == 1 or unrolled_block_macs(root, p) * f <= MAX_UNROLLED_MACS
               for p, f in unrolled)
    # The cap binds: programs whose reduction trip count admits an unroll factor that would
    # pass it; those factors (and only those) are not offered.
    def trip(p):
        r1, v = p.split(root.name, root.reduction_dims[-1]).lengths
        return r1 // v
    def over(p):
        return [f for f in (2, 4, 8) if trip(p) % f == 0 and
                unrolled_block_macs(root, p) * f > MAX_UNROLLED_MACS]
    capped = [p for p, _ in unrolled if over(p)]
    assert len(capped) >= 5
    for p in capped:
        allowed = [f for f in (1, 2, 4, 8) if trip(p) % f == 0 and f not in over(p)]
        assert unroll_choices(root, p) == allowed
        unrolled_more = Program(p.sketch, tuple(
            UnrollStep(root.name, over(p)[0]) if isinstance(st, UnrollStep) else st
            for st in p.steps))
        assert any("unroll" in e for e in violations(ops, unrolled_more))
    rng = random.Random(3)
    for p in capped[:20]:
        c = mutate_unroll(ops, p, rng)
        assert c is None or unrolled_block_macs(root, c) * \
            c.find(UnrollStep, root.name).factor <= MAX_UNROLLED_MACS
