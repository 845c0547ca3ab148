"""Pruning rules: which programs each flags, for which target, and what the search does
with them."""
import random
from dataclasses import replace

import numpy as np

from mlir_ansor.sketch_passes.annotation import annotate
from mlir_ansor.sketch_passes.pruning import DEMOTE, RULES, Pruner, demote, flagged
from mlir_ansor.targets import X86_AVX2
from mlir_ansor.tuner.evolution import EvolutionConfig, EvolutionPolicy
from mlir_ansor.tuner.features import root_nest
from tests.conftest import MATMUL, mul_add_generic, ops_of
from tests.test_cost_model import make_task

TWO_CORES = replace(X86_AVX2, cores=2)


def programs(n=300, seed=0):
    ops = ops_of(MATMUL)
    task = make_task(ops)
    rng = random.Random(seed)
    return ops, task, [annotate(ops, task.sketches[i % 2], rng, target=TWO_CORES)
                       for i in range(n)]


def test_each_rule_flags_what_it_names():
    ops, _, progs = programs()
    seen = set()
    for p in progs:
        n = root_nest(ops, p)
        names = flagged(ops, p, TWO_CORES)
        seen.update(names)
        assert ("vector-not-filled" in names) == (n.lanes < 8 and n.lane_extent % 8 == 0)
        assert ("idle-cores" in names) == (n.workgroups < 2)
        assert ("odd-vector-row" in names) == (n.lanes in (24, 40, 48, 56))
        # 64x48 output: up to 14 accumulators fit AVX2's 16 registers; under 4 is flagged
        # (a row of 12 lanes takes 2 registers).
        rows = n.reg_tile // n.lanes
        assert ("small-register-tile" in names) == (rows * -(-n.lanes // 8) < 4)
    assert {"vector-not-filled", "idle-cores", "small-register-tile", "odd-vector-row"} <= seen
    # The same programs judged for a machine with one core.
    assert not any("idle-cores" in flagged(ops, p, replace(TWO_CORES, cores=1)) for p in progs)


def test_gpu_programs_are_not_judged():
    ops, _, progs = programs(5)
    assert flagged(ops, progs[0], replace(TWO_CORES, backend="cuda", name="g", sm="sm_80")) == []


def test_demotion_lowers_every_score():
    s = np.array([2.0, -2.0, 0.5])
    assert list(demote(s, [DEMOTE, DEMOTE, 1.0])) == [1.0, -3.0, 0.5]


def test_random_proposals_prefer_unflagged_programs_and_are_counted():
    ops, task, progs = programs()
    assert any(flagged(ops, p, TWO_CORES) for p in progs)  # random sampling hits them
    pruner = Pruner(TWO_CORES)
    pol = EvolutionPolicy(replace(task, target="x86_64-avx2"), 0,
                          EvolutionConfig(population=64), pruner=pruner)
    pol.target = TWO_CORES
    out = pol.propose(16, set(), [])
    assert len(out) == 16 and not any(flagged(ops, p, TWO_CORES) for p in out)
    assert pruner.seen >= 16 and sum(pruner.counts.values()) > 0
    line = pruner.line()
    assert all(r.name in line for r in RULES) and "judged" in line


def test_the_search_draws_whole_vectors_instead_of_rejecting_partial_ones(monkeypatch):
    """The search's random sampling keeps only programs no rule flags; vector-not-filled
    flagged about half of all draws on ResNet-50's convs (each draw annotated, checked and
    judged in vain). Drawn with full_vectors, none is flagged by it, and the vector tile
    takes every value the unflagged plain draws take."""
    from mlir_ansor.tuner import evolution

    ops = ops_of(MATMUL)
    task = make_task(ops)
    rng = random.Random(3)
    plain = [annotate(ops, task.sketches[i % 2], rng, target=TWO_CORES) for i in range(300)]
    full = [annotate(ops, task.sketches[i % 2], rng, target=TWO_CORES, full_vectors=True)
            for i in range(300)]
    unfilled = [p for p in plain if "vector-not-filled" in flagged(ops, p, TWO_CORES)]
    assert len(unfilled) > 50
    assert not any("vector-not-filled" in flagged(ops, p, TWO_CORES) for p in full)
    assert {root_nest(ops, p).lanes for p in full} == \
        {root_nest(ops, p).lanes for p in plain if p not in unfilled} == {8, 12, 16, 24}
    seen = []
    real = evolution.annotate
    monkeypatch.setattr(evolution, "annotate", lambda *a, **kw: seen.append(kw) or real(*a, **kw))
    pol = EvolutionPolicy(replace(task, target="x86_64-avx2"), 0, EvolutionConfig(population=16))
    pol.propose(4, set(), [])
    assert seen and all(kw.get("full_vectors") for kw in seen)


BATCHED_DEPTHWISE = mul_add_generic(
    "4x8x30x30", "8x3x3", "4x8x28x28", "n, c, h, w, kh, kw",
    ("n, c, h + kh, w + kw", "c, kh, kw", "n, c, h, w"),
    "parallel, parallel, parallel, parallel, reduction, reduction")


def test_a_depthwise_conv_has_no_outer_product_to_grow():
    """Every row of a depthwise register tile (batch, channel or image row) loads its own
    input vector: no row count is too small, so the register-tile rule never flags it."""
    ops = ops_of(BATCHED_DEPTHWISE)
    task = make_task(ops)
    rng = random.Random(0)
    nests = 0
    for i in range(100):
        p = annotate(ops, task.sketches[i % len(task.sketches)], rng, target=TWO_CORES)
        n = root_nest(ops, p)
        if n is not None:
            nests += 1
            assert n.row_room == 1
            assert "small-register-tile" not in flagged(ops, p, TWO_CORES)
    assert nests > 50


def test_a_larger_tile_only_of_three_vector_rows_does_not_make_a_small_one():
    """small-register-tile asks for tiles the loops admit; rows of 3 vectors are demoted
    themselves (odd-vector-row), so they do not count: 48 lanes x 6 rows admit 18
    accumulators in 3-vector rows but 12 in 2-vector rows, under twice a quarter of
    AVX-512's 32 registers."""
    from mlir_ansor.targets import X86_AVX512
    from mlir_ansor.tuner.features import RootNest
    from mlir_ansor.sketch_passes.pruning import _small_register_tile

    nest = RootNest(lanes=16, lane_extent=48, workgroups=8, parallel_iterations=1 << 20,
                    reg_tile=16 * 2, row_room=6)
    assert not _small_register_tile(nest, X86_AVX512)
    assert _small_register_tile(replace(nest, lane_extent=64), X86_AVX512)  # 4 x 6 = 24


NHWC_CONV = mul_add_generic(
    "1x10x10x8", "3x3x8x16", "1x8x8x16", "n, h, w, f, kh, kw, c",
    ("n, h + kh, w + kw, c", "kh, kw, c, f", "n, h, w, f"),
    "parallel, parallel, parallel, parallel, reduction, reduction, reduction")


def test_a_window_split_across_reduction_steps_is_flagged():
    """window-cut flags exactly the programs whose R0 step holds part of a window (kh or
    kw tiled under its extent); the channel loop's steps do not count, and ops without a
    window or without a reduction beside it (a depthwise conv) are never flagged."""
    for text, judged in ((NHWC_CONV, True), (BATCHED_DEPTHWISE, False)):
        ops = ops_of(text)
        task = make_task(ops)
        root = next(o for o in ops if o.reduction_dims)
        window = [l for l in root.reduction_dims if l in (4, 5)]
        rng = random.Random(1)
        cut = whole = 0
        for i in range(120):
            p = annotate(ops, task.sketches[i % len(task.sketches)], rng, target=TWO_CORES)
            if not p.sketch.root:
                continue
            is_cut = any(p.split(root.name, l).lengths[0] < root.extents[l] for l in window)
            assert ("window-cut" in flagged(ops, p, TWO_CORES)) == (is_cut and judged)
            cut, whole = cut + is_cut, whole + (not is_cut)
        assert cut > 10 and whole > 10
    _, _, progs = programs(100)
    assert not any("window-cut" in flagged(ops_of(MATMUL), p, TWO_CORES) for p in progs)


def test_a_row_narrower_than_a_vector_counts_as_one_register():
    """An NCHW conv's 7-wide output rows: 16 rows of 7 lanes hold 16 of AVX-512's 32
    registers in accumulators (not 112 / 16 = 7 registers' worth of elements), enough;
    4 rows are too few where 16 fit."""
    from mlir_ansor.targets import X86_AVX512
    from mlir_ansor.tuner.features import RootNest
    from mlir_ansor.sketch_passes.pruning import _small_register_tile, accumulators

    nest = RootNest(lanes=7, lane_extent=7, workgroups=32, parallel_iterations=512 * 49,
                    reg_tile=16 * 7, row_room=512)
    assert accumulators(nest, X86_AVX512) == 16
    assert not _small_register_tile(nest, X86_AVX512)
    assert _small_register_tile(replace(nest, reg_tile=4 * 7), X86_AVX512)
