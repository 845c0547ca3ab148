"""Program features are exact functions of the steps (no compile needed)."""
import math
import random

import numpy as np

from mlir_ansor.sketch_passes.annotation import annotate, violations
from mlir_ansor.sketch_passes.program import ParallelStep, Program, SplitStep, UnrollStep, \
    VectorizeStep
from mlir_ansor.sketch_passes.rules import default_cpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from mlir_ansor.tuner.features import FEATURE_NAMES, program_features
from tests.conftest import ELEMENTWISE, MATMUL, ops_of

IDX = {n: i for i, n in enumerate(FEATURE_NAMES)}


def lg(x):
    return math.log2(1 + x)


def matmul_program(ops, sketch, m, n, k, par=(0, 1), unroll=2):
    """MATMUL is 64x48x32 (i, j, k); m, n: (a, b, c) split lengths; k: (r1, v)."""
    return Program(sketch, (SplitStep("op1_matmul", 0, m), SplitStep("op1_matmul", 1, n),
                            SplitStep("op1_matmul", 2, k), ParallelStep("op1_matmul", par),
                            UnrollStep("op1_matmul", unroll), VectorizeStep("op1_matmul")))


def test_loop_nest_features_are_exact():
    ops = ops_of(MATMUL)
    sk = generate_sketches(ops, default_cpu_rules())[0]
    m, n, k = (ops[1].extents[i] for i in range(3))
    prog = matmul_program(ops, sk, (2, 2, 4), (1, 3, 8), (8, 1))
    assert violations(ops, prog) == []
    f = program_features(ops, prog)
    assert f.shape == (2, len(FEATURE_NAMES))  # fill + matmul
    root = f[1]
    assert root[IDX["role_root"]] == 1 and root[IDX["sk_cache_write"]] == 1
    wgs = (m // 16) * (n // 24)
    assert root[IDX["workgroups"]] == np.float32(lg(wgs))
    assert root[IDX["trip_s3"]] == np.float32(lg(4 * 8))  # register tile 4x8
    assert root[IDX["lanes"]] == np.float32(lg(8))
    assert root[IDX["trip_r0"]] == np.float32(lg(k // 8))
    assert root[IDX["trip_r1"]] == np.float32(lg(8))
    assert root[IDX["unroll"]] == np.float32(lg(2))
    # Register level, per reduction step: A is a 4x1 column, B a 1x8 row, C 4x8.
    assert root[IDX["b0_bytes_reg"]] == np.float32(lg(4 * 4))
    assert root[IDX["b1_bytes_reg"]] == np.float32(lg(8 * 4))
    assert root[IDX["b3_bytes_reg"]] == np.float32(lg(32 * 4))
    # Workgroup level: A 16x32, B 32x24.
    assert root[IDX["b0_bytes_wg"]] == np.float32(lg(16 * 32 * 4))
    assert root[IDX["b1_bytes_wg"]] == np.float32(lg(32 * 24 * 4))
    assert root[IDX["b1_stride"]] == np.float32(lg(1))  # B is contiguous along j
    assert root[IDX["b0_stride"]] == np.float32(lg(0))  # A does not depend on j
    assert root[IDX["flops"]] == np.float32(lg(2 * m * n * k))


def test_features_separate_programs():
    ops = ops_of(MATMUL)
    sk = generate_sketches(ops, default_cpu_rules())[0]
    progs = [matmul_program(ops, sk, (2, 2, 4), (1, 3, 8), (8, 1)),
             matmul_program(ops, sk, (2, 2, 4), (1, 3, 8), (8, 1), unroll=4),
             matmul_program(ops, sk, (1, 8, 2), (2, 3, 4), (32, 4), unroll=1, par=(0,))]
    assert all(violations(ops, p) == [] for p in progs)
    a, b, c = (program_features(ops, p) for p in progs)
    assert not np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.array_equal(a, program_features(ops, progs[0]))


def test_every_sampled_program_has_finite_features():
    for text in (MATMUL, ELEMENTWISE):
        ops = ops_of(text)
        sks = generate_sketches(ops, default_cpu_rules())
        rng = random.Random(0)
        for i in range(50):
            f = program_features(ops, annotate(ops, sks[i % len(sks)], rng))
            assert f.shape == (len(ops), len(FEATURE_NAMES)) and np.isfinite(f).all()


def test_memoized_facts_are_shared_and_immutable():
    """The search's caches: an op's loop facts and a program's root nest are computed once
    and cannot be changed by a caller (a mutated cached set would corrupt every later
    candidate); the program's memo is not part of its identity."""
    from mlir_ansor.sketch_passes.loops import batch_loops, reuse_rows, unit_loops
    from mlir_ansor.tuner.features import root_nest

    ops = ops_of(MATMUL)
    mm = ops[1]
    assert unit_loops(mm) is unit_loops(mm) and isinstance(unit_loops(mm), frozenset)
    assert isinstance(batch_loops(mm), frozenset) and isinstance(reuse_rows(mm, 1), tuple)
    sk = generate_sketches(ops, default_cpu_rules())[0]
    prog = matmul_program(ops, sk, (2, 2, 4), (1, 3, 8), (8, 1))
    first = program_features(ops, prog)
    assert len(prog.memo) == 1  # the root's nest, shared with pruning's root_nest
    assert root_nest(ops, prog).reg_tile == 32 and len(prog.memo) == 1
    twin = matmul_program(ops, sk, (2, 2, 4), (1, 3, 8), (8, 1))
    assert twin == prog and twin.key == prog.key and not twin.memo
    assert np.array_equal(first, program_features(ops, twin))


def test_rows_of_other_ops_are_shared_across_programs_unchanged():
    """A task's rows of ops other than the root are cached across programs (the search
    computes thousands per proposal): every program's matrix is the same as computed alone,
    and the cache is hit."""
    from pathlib import Path

    data = Path(__file__).parent / "data"
    for name in ("linear_const.mlir", "softmax_scale.mlir", "conv_nhwc_map_store.mlir"):
        ops = ops_of((data / name).read_text())
        sks = generate_sketches(ops, default_cpu_rules())
        assert len(ops) > 1
        rng, seen, others = random.Random(1), {}, 0
        for i in range(300):
            p = annotate(ops, sks[i % len(sks)], rng)
            assert np.array_equal(program_features(ops, p, rows_seen=seen),
                                  program_features(ops, p)), (name, p.key)
            others += sum(1 for op in ops if op.name != p.sketch.root)
        assert 0 < len(seen) < others / 2, (name, len(seen), others)
