"""Contractions that read their broadcast operand by columns (A[k][m] beside a second row
loop: a 1x1 conv from a channels-first input into a channels-last output, ShuffleNet's
first conv after it splits its NCHW input): which ops are such, the register tiles the
search gives them, and that their strategy folds the tile's unit dims (lit_tests/
apply_column_read.py checks the lowered kernel)."""
import random

from iree.compiler import ir

from mlir_ansor.sketch_passes.annotation import (MAX_OTHER_INNER, annotate, annotation_limits,
                                                 inner_limit, violations)
from mlir_ansor.sketch_passes.kernel_seed import register_tile
from mlir_ansor.sketch_passes.loops import column_read_loop
from mlir_ansor.sketch_passes.pruning import flagged
from mlir_ansor.sketch_passes.rules import default_cpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from mlir_ansor.targets import DEFAULT_CPU
from mlir_ansor.transform_scripts.emitter import emit_standalone
from tests.conftest import BATCH_MATMUL, MATMUL, mul_add_generic, ops_of

CONV = "parallel, parallel, parallel, reduction"
CF_TO_CL = mul_add_generic("16x4x12", "16x58", "4x12x58", "h, w, co, ci",
                           ("ci, h, w", "ci, co", "h, w, co"), CONV)
NHWC_1X1 = mul_add_generic("4x12x16", "16x58", "4x12x58", "h, w, co, ci",
                           ("h, w, ci", "ci, co", "h, w, co"), CONV)
NCHW_1X1 = mul_add_generic("16x4x12", "58x16", "58x4x12", "co, h, w, ci",
                           ("ci, h, w", "co, ci", "co, h, w"), CONV)
# A's contiguous dim p also indexes the lane operand: not a row, so not a column read.
P_SHARED = mul_add_generic("8x4x6x10", "8x10x40", "4x6x10x40", "m, q, p, n, k",
                           ("k, m, q, p", "k, p, n", "m, q, p, n"),
                           "parallel, parallel, parallel, parallel, reduction")
TRANSPOSED_A = mul_add_generic("16x48", "16x58", "48x58", "m, n, k",
                               ("k, m", "k, n", "m, n"), "parallel, parallel, reduction")


def root(ops):
    return next(o for o in ops if o.reduction_dims)


def sampled(text, n=120, seed=0):
    ops = ops_of(text)
    sks = generate_sketches(ops, default_cpu_rules())
    rng = random.Random(seed)
    return ops, [annotate(ops, sks[i % len(sks)], rng, full_vectors=True) for i in range(n)]


def test_a_column_read_needs_a_second_row_loop():
    assert column_read_loop(root(ops_of(CF_TO_CL))) == 1  # w: the input's contiguous dim
    # A[m][k] reads, lanes the input varies along, and a plain transposed-A matmul (its
    # contraction lowers to outer products as it is) are not.
    for text in (NHWC_1X1, NCHW_1X1, TRANSPOSED_A, P_SHARED, MATMUL, BATCH_MATMUL):
        assert column_read_loop(root(ops_of(text))) is None


def test_column_reads_take_one_vector_of_lanes_and_rows_along_the_column():
    lim = annotation_limits()
    r = root(ops_of(CF_TO_CL))
    assert [inner_limit(r, l) for l in r.parallel_dims] == [1, MAX_OTHER_INNER, lim.f32_lanes]
    plain = root(ops_of(NHWC_1X1))
    assert [inner_limit(plain, l) for l in plain.parallel_dims] == \
        [MAX_OTHER_INNER, MAX_OTHER_INNER, lim.vector_lanes]


def test_the_search_draws_valid_column_kernels_and_peels_odd_lanes():
    ops, progs = sampled(CF_TO_CL)
    r = root(ops)
    lanes, peeled = set(), 0
    for p in progs:
        assert violations(ops, p) == []
        reg = {l: p.split(r.name, l).lengths[-1] for l in r.parallel_dims}
        assert reg[0] == 1 and reg[2] <= annotation_limits().f32_lanes
        lanes.add(reg[2])
        peeled += 2 in p.peeled(r.name)
    # 58 lanes have no tile of whole vectors: a full vector and a peeled partial one.
    assert annotation_limits().f32_lanes in lanes and peeled > 0


def test_column_read_strategies_fold_unit_dims():
    for text, folds in ((CF_TO_CL, True), (NHWC_1X1, False)):
        ops, progs = sampled(text, n=4)
        with ir.Context(), ir.Location.unknown():
            emitted = [str(emit_standalone(ops, p)) for p in progs]
        assert all(("fold_unit_extent_dims_via_slices" in e) == folds for e in emitted)


def test_pruning_and_seeds_know_the_column_kernel():
    # A 6 x 16 tile is the most a column read of 12 rows admits in two-register steps:
    # not demoted as a small register tile (it was, judged against 4 vectors of lanes).
    ops, progs = sampled(CF_TO_CL, n=200)
    r = root(ops)
    kernels = [p for p in progs
               if [p.split(r.name, l).lengths[-1] for l in r.parallel_dims] == [1, 6, 16]]
    assert kernels and not any("small-register-tile" in flagged(ops, p, DEFAULT_CPU)
                               for p in kernels)
    # The micro-kernel seed (lanes it divides: 64): one vector of lanes, rows along the
    # column (it took 4 vectors x 6 rows, cut to 16 lanes by the limit).
    cl64 = CF_TO_CL.replace("58", "64")
    assert register_tile(root(ops_of(cl64)), DEFAULT_CPU) == {2: 16, 1: 12}
    # The column is the outer row loop h (input [ci][w][h]): rows along h, not along the
    # output's innermost row w.
    h_column = mul_add_generic("16x12x4", "16x64", "4x12x64", "h, w, co, ci",
                               ("ci, w, h", "ci, co", "h, w, co"), CONV)
    assert column_read_loop(root(ops_of(h_column))) == 0
    assert register_tile(root(ops_of(h_column)), DEFAULT_CPU) == {2: 16, 0: 4}
