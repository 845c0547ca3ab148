"""Micro-kernel seeds: the register tile the target's registers admit, the workgroups per
core, and valid programs of the task's own sketches."""
from dataclasses import replace

from mlir_ansor.sketch_passes.annotation import violations
from mlir_ansor.sketch_passes.kernel_seed import (WORKGROUPS_PER_CORE, kernel_seed_programs,
                                                  register_tile, workgroup_tile)
from mlir_ansor.sketch_passes.loops import op_by_name
from mlir_ansor.targets import X86_AVX2, X86_AVX512
from mlir_ansor.tuner.features import root_nest
from tests.conftest import DATA, MATMUL, ops_of
from tests.test_cost_model import make_task
from tests.test_pruning import BATCHED_DEPTHWISE

AVX2 = replace(X86_AVX2, cores=2)


def root(ops):
    return next(o for o in ops if o.reduction_dims)


def test_the_register_tile_fills_the_register_file_with_the_most_reuse():
    mm = root(ops_of(MATMUL))  # 64x48 (k 32): loops m 0, n 1
    # AVX2 (16 registers, 8 lanes): 4 rows x 3 vectors = 12 accumulators + 3 + 1 = 16
    # registers, 1.71 FMAs a load (14x8 reuses less: 0.93; 6 rows divide no 64).
    assert register_tile(mm, AVX2) == {1: 24, 0: 4}
    # AVX-512 (32 registers, 16 lanes): 8 rows x 3 vectors, 24 accumulators + 4 <= 32.
    assert register_tile(mm, X86_AVX512) == {1: 48, 0: 8}


def test_no_seed_without_an_outer_product():
    assert register_tile(root(ops_of(BATCHED_DEPTHWISE)), AVX2) is None


def test_workgroups_reach_the_cores_share_in_register_tile_multiples():
    mm = root(ops_of(MATMUL))
    reg = register_tile(mm, AVX2)
    wg = workgroup_tile(mm, reg, WORKGROUPS_PER_CORE * AVX2.cores)
    assert (64 // wg[0]) * (48 // wg[1]) >= 16
    assert all(wg[l] % reg[l] == 0 for l in reg)


def test_seeds_are_valid_programs_of_the_task_s_sketches():
    for text in (MATMUL, (DATA / "conv_nhwc_map_store.mlir").read_text()):
        ops = ops_of(text)
        task = make_task(ops)
        seeds = kernel_seed_programs(ops, task.sketches, AVX2)
        assert seeds, text[:80]
        for p in seeds:
            assert p.sketch in task.sketches and p.sketch.root
            assert violations(ops, p, target=AVX2) == []
            n = root_nest(ops, p)
            assert n.reg_tile >= 8 * 4  # at least 4 accumulator vectors
    # A GPU target gets none.
    ops = ops_of(MATMUL)
    assert kernel_seed_programs(ops, make_task(ops).sketches,
                                replace(AVX2, backend="cuda", name="g", sm="sm_80")) == []
    assert op_by_name(ops, root(ops).name)


def test_one_seed_packs_the_panel_the_register_tile_rows_share():
    """The B panel (read by every row of the register tile, along the lanes) is copied to
    a contiguous buffer in one seed and read in place in the other."""
    from mlir_ansor.sketch_passes.program import PackStep

    ops = ops_of(MATMUL)
    seeds = kernel_seed_programs(ops, make_task(ops).sketches, AVX2)
    packs = [[s.operand for s in p.steps if isinstance(s, PackStep)] for p in seeds]
    assert [1] in packs and [] in packs  # operand 1: B (k x n), indexed by the lanes' loop
