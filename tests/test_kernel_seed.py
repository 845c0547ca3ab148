"""Micro-kernel seeds: the register tile the target's registers admit, the workgroups per
core, and valid programs of the task's own sketches."""
import math
from dataclasses import replace

from mlir_ansor.sketch_passes.annotation import violations
from mlir_ansor.sketch_passes.kernel_seed import (WORKGROUPS_PER_CORE, kernel_seed_programs,
                                                  register_tile, workgroup_tile)
from mlir_ansor.sketch_passes.loops import op_by_name
from mlir_ansor.targets import X86_AVX2, X86_AVX512
from mlir_ansor.tuner.features import root_nest
from tests.conftest import DATA, MATMUL, mul_add_generic, ops_of
from tests.test_cost_model import make_task
from tests.test_pruning import BATCHED_DEPTHWISE

AVX2 = replace(X86_AVX2, cores=2)


def root(ops):
    return next(o for o in ops if o.reduction_dims)


def test_the_register_tile_fills_the_register_file_with_the_most_reuse():
    mm = root(ops_of(MATMUL))  # 64x48 (k 32): loops m 0, n 1
    # AVX2 (16 registers, 8 lanes): whole vectors in powers of two: 4 rows x 2 vectors = 8
    # accumulators (hide the FMA latency) + 2 + 1 registers, 1.33 FMAs a load (8 x 1: 0.89).
    assert register_tile(mm, AVX2) == {1: 16, 0: 4}
    # AVX-512 (32 registers, 16 lanes): 48 columns hold 3 vectors, but a row of 3 is one
    # 48-lane LLVM vector (it lowered badly): 1 vector, 16 rows.
    assert register_tile(mm, X86_AVX512) == {1: 16, 0: 16}
    # 2048 columns: 4 vectors x 6 rows would be 24 accumulators, but 6 divides no 64 rows:
    # 4 x 4 (16 accumulators hide the FMA latency) over 2 x 8 for fewer loads per FMA.
    assert register_tile(root(ops_of(WIDE_MATMUL)), X86_AVX512) == {1: 64, 0: 4}


WIDE_MATMUL = mul_add_generic("64x32", "32x2048", "64x2048", "m, n, k",
                              ("m, k", "k, n", "m, n"), "parallel, parallel, reduction")
# x @ W^T with W packed to [n / 16, k, 16] (layout_rewrite's panels): loops m, n / 16, 16, k.
PANEL_MATMUL = mul_add_generic("128x768", "48x768x16", "128x48x16", "m, p, l, k",
                               ("m, k", "p, k, l", "m, p, l"),
                               "parallel, parallel, parallel, reduction")


def test_panels_of_a_packed_weight_are_the_register_tile_s_vectors():
    """Over a packed weight the lanes are one vector long; the panel loop beside them gives
    the vectors (3 panels of 16 lanes: each a vector of its own, not one 48-lane vector),
    the rows are m's; the seed keeps the activation's rows whole (they fit in L2) and
    spreads the 2.4 MB weight over workgroups along its panels, reads it in place (no
    packed copy of a packed panel) and reduces one element at a time (measured faster)."""
    from mlir_ansor.sketch_passes.kernel_seed import input_traffic
    from mlir_ansor.sketch_passes.loops import panel_loop
    from mlir_ansor.sketch_passes.program import PackStep, SplitStep

    op = root(ops_of(PANEL_MATMUL))
    assert panel_loop(op) == 1
    assert panel_loop(root(ops_of(MATMUL))) is None
    assert panel_loop(root(ops_of(WIDE_MATMUL))) is None
    reg = register_tile(op, X86_AVX512)
    assert reg == {2: 16, 1: 3, 0: 8}
    wg = workgroup_tile(op, reg, 16, X86_AVX512.l2_bytes)
    assert wg == {0: 128, 1: 3, 2: 16}
    # Without a cache the 0.4 MB activation counts once per workgroup along the panels too,
    # and the rows are cut.
    assert workgroup_tile(op, reg, 16)[0] < 128
    assert input_traffic(op, wg, X86_AVX512.l2_bytes) == (128 * 768 + 48 * 768 * 16) * 4
    ops = ops_of(PANEL_MATMUL)
    seeds = kernel_seed_programs(ops, make_task(ops).sketches, X86_AVX512)
    assert seeds and not any(isinstance(s, PackStep) for p in seeds for s in p.steps)
    for p in seeds:
        assert violations(ops, p, target=X86_AVX512) == []
        k = next(s for s in p.steps if isinstance(s, SplitStep) and s.loop == 3)
        assert k.lengths[-1] == 1


def test_only_a_packed_panel_is_a_panel_loop():
    """An NCHW conv's output rows sit beside its lanes and index the same input, but as
    window dims: no panel (its seed keeps rows, a reduction tile of 8 and a packed copy);
    nor are panels wider than one vector the seed's vectors."""
    from mlir_ansor.sketch_passes.kernel_seed import reduction_tile_of, seed_panel
    from mlir_ansor.sketch_passes.loops import panel_loop

    conv = root(ops_of(mul_add_generic(
        "1x8x18x18", "16x8x3x3", "1x16x16x16", "n, f, h, w, c, kh, kw",
        ("n, c, h + kh, w + kw", "f, c, kh, kw", "n, f, h, w"),
        "parallel, parallel, parallel, parallel, reduction, reduction, reduction")))
    assert panel_loop(conv) is None
    assert reduction_tile_of(conv, X86_AVX512) == 8
    wide = root(ops_of(mul_add_generic("128x768", "24x768x32", "128x24x32", "m, p, l, k",
                                       ("m, k", "p, k, l", "m, p, l"),
                                       "parallel, parallel, parallel, reduction")))
    assert panel_loop(wide) == 1 and seed_panel(wide, X86_AVX512) is None
    assert reduction_tile_of(wide, X86_AVX512) == 8


def test_rows_no_divisor_serves_are_peeled():
    """197 tokens (a prime): divisor rows would be 1; the seed takes rows that leave a
    partial last tile and peels it (PeelStep), the rows whole in each workgroup (not
    distributed), with 4 of the 32 registers left beside the tile (ViT's 14 rows x 2
    panels filled 31 and ran 1.2x slower than 12 rows)."""
    from mlir_ansor.sketch_passes.program import ParallelStep, PeelStep

    ops = ops_of(mul_add_generic("197x384", "96x384x16", "197x96x16", "m, p, l, k",
                                 ("m, k", "p, k, l", "m, p, l"),
                                 "parallel, parallel, parallel, reduction"))
    seeds = kernel_seed_programs(ops, make_task(ops).sketches, X86_AVX512)
    assert seeds
    for p in seeds:
        assert violations(ops, p, target=X86_AVX512) == []
        assert PeelStep(root(ops).name, 0) in p.steps
        rows, panels = (p.split(root(ops).name, l).lengths[-1] for l in (0, 1))
        assert rows > 1 and 197 % rows and rows * panels + panels + 1 <= 32 - 4
        assert all(0 not in s.loops for s in p.steps if isinstance(s, ParallelStep))


# ResNet-50's last 3x3 conv as IREE leaves it channels-first: out[f, y, x] over a 9x9
# padded input; the contiguous output dim holds 7 columns, under one vector.
NCHW_CONV_7 = mul_add_generic("64x9x9", "32x64x3x3", "32x7x7", "f, y, x, c, ky, kx",
                              ("c, y + ky, x + kx", "f, c, ky, kx", "f, y, x"),
                              "parallel, parallel, parallel, reduction, reduction, reduction")


def test_a_contiguous_dim_under_one_vector_is_one_partial_vector():
    """7 output columns are one vector of 7 lanes (no seed before: no whole vector divided
    them; the seed then ran at 0.99 of random search's best of 1000 programs, results.md),
    its rows the output channels that reuse it, as many as hide the FMA latency."""
    op = root(ops_of(NCHW_CONV_7))
    assert register_tile(op, X86_AVX512) == {2: 7, 0: 16}
    assert register_tile(op, AVX2) == {2: 7, 0: 8}
    task = make_task(ops_of(NCHW_CONV_7))
    seeds = kernel_seed_programs(task.ops, task.sketches, X86_AVX512)
    assert seeds
    for p in seeds:
        assert violations(task.ops, p, target=X86_AVX512) == []
        assert p.split(op.name, 2).lengths[-1] == 7


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


def test_one_seed_blocks_register_tiles_over_an_l1_sized_reduction_chunk():
    """A seed whose S1 tile is the workgroup's block of register tiles, so they share
    each reduction chunk in cache, with chunks whose slices under one register tile fit
    half of L1 (the 1024^3 matmul on a 48 KiB L1: 22.8-25.8 ms with one register tile per
    S1, 8.1-8.7 blocked with chunks of 64; this target's 32 KiB L1 takes 32). A 3x3 conv
    whose seed reads whole windows per chunk has none: 9 x 64 weights per input channel
    fit no chunk of 32 or more."""
    from mlir_ansor.sketch_passes.loops import footprint
    from mlir_ansor.sketch_passes.program import PackStep, SplitStep

    big = mul_add_generic("1024x1024", "1024x1024", "1024x1024", "m, n, k",
                          ("m, k", "k, n", "m, n"), "parallel, parallel, reduction")
    ops = ops_of(big)
    mm = root(ops)
    seeds = kernel_seed_programs(ops, make_task(ops).sketches, X86_AVX512)

    def lengths(p):
        return {s.loop: s.lengths for s in p.steps if isinstance(s, SplitStep)}

    blocked = [p for p in seeds if (lengths(p)[0][1] > 1 or lengths(p)[1][1] > 1)
               and not p.packed(mm.name)]  # (the packed block: the test below)
    assert blocked and all(violations(ops, p, target=X86_AVX512) == [] for p in seeds)
    # Without a local accumulator tile (no cache write) the whole workgroup is one block.
    (whole,) = [p for p in blocked if not p.sketch.local_tile]
    split = lengths(whole)
    (one,) = [p for p in seeds if p.sketch == whole.sketch and p not in blocked
              and not any(isinstance(s, PackStep) for s in p.steps)]
    plain = lengths(one)
    for l in (0, 1):  # the same register and workgroup tiles
        assert split[l][2] == plain[l][2] and split[l][0] == 1
        assert split[l][1] * split[l][2] == math.prod(plain[l])
    chunk = split[2][0]
    inputs = [o for o in mm.operands if not o.is_output]

    def under_one_tile(k):
        tile = {0: split[0][2], 1: split[1][2], 2: k}
        return sum(footprint(o, tile) * 4 for o in inputs)

    assert under_one_tile(chunk) <= X86_AVX512.l1d_bytes // 2 < under_one_tile(2 * chunk)

    conv = ops_of(mul_add_generic(
        "1x58x58x64", "3x3x64x64", "1x56x56x64", "n, h, w, co, kh, kw, ci",
        ("n, h + kh, w + kw, ci", "kh, kw, ci, co", "n, h, w, co"),
        "parallel, parallel, parallel, parallel, reduction, reduction, reduction"))
    conv_seeds = kernel_seed_programs(conv, make_task(conv).sketches, X86_AVX512)
    assert conv_seeds and all(lengths(p)[4] == (3,) for p in conv_seeds)  # whole windows
    assert not [p for p in conv_seeds if any(len(v) == 3 and v[1] > 1
                                             for v in lengths(p).values())]


def test_one_seed_packs_a_stack_sized_panel_under_every_row_of_the_workgroup():
    """GotoBLAS's blocking: the S1 tile is a block of the workgroup's rows by one register
    tile of columns, and B's panel (R0 chunk x those columns), packed once per chunk, is
    swept by all of them, in the largest chunk whose panel fits the stack: alone on it
    (matmul and fill) the whole 32 KiB under every row (128 x 64 on the 1024^3 matmul:
    10.2 ms against 11.2 for the search's best before, Zen 4), beside a fused consumer
    half of it."""
    from mlir_ansor.sketch_passes.annotation import STACK_LIMIT_BYTES, pack_bytes
    from mlir_ansor.sketch_passes.program import PackStep, SplitStep
    from tests.test_peel import matmul_relu

    def lengths(p):
        return {s.loop: s.lengths for s in p.steps if isinstance(s, SplitStep)}

    def gotos(ops):
        seeds = kernel_seed_programs(ops, make_task(ops).sketches, X86_AVX512)
        assert all(violations(ops, p, target=X86_AVX512) == [] for p in seeds)
        return [p for p in seeds if any(isinstance(s, PackStep) for s in p.steps)
                and lengths(p)[0][1] > 1]

    ops = ops_of(mul_add_generic("1024x1024", "1024x1024", "1024x1024", "m, n, k",
                                 ("m, k", "k, n", "m, n"), "parallel, parallel, reduction"))
    (p,) = [q for q in gotos(ops) if not q.sketch.local_tile]
    mm, split = root(ops), lengths(p)
    assert split[1][1] == 1 and split[1][2] == 64  # one register tile of columns
    assert split[0] == (1, 64, 4)  # every row of the workgroup
    assert p.packed(mm.name) == (1,) and split[2][0] == 128
    assert pack_bytes(mm, p, 1) == STACK_LIMIT_BYTES
    # A fused consumer's tile shares the stack: a panel of half of it (k chunks of 64) and
    # as many rows as leave room for the 4-row tiles' local S1 tile (32 rows: 8 KiB).
    # So does a cache write's local tile.
    relu = ops_of(matmul_relu(1024, 1024, 1024))
    (cached,) = [q for q in gotos(ops) if q.sketch.local_tile]
    (fused,) = gotos(relu)
    for q, o in ((cached, ops), (fused, relu)):
        assert q.sketch.local_tile and pack_bytes(root(o), q, 1) == STACK_LIMIT_BYTES // 2
        assert lengths(q)[0] == (8, 8, 4) and lengths(q)[1][1:] == (1, 64)
        assert lengths(q)[2][0] == 64


def test_a_transposed_input_gets_square_register_tiles():
    """Attention scores with the keys' transpose propagated into them read K[j, d] while
    the lanes run along j: every register tile of K is transposed. On AVX-512 the seeds
    take one vector of lanes and a reduction tile of one vector, so each transposed tile
    is 16 x 16 (the shuffle network the emitter lowers it with; the seeds' 64 x 8 tiles
    ran the scores 2x slower). A reduction no vector divides, or a target whose transposes
    the emitter moves element by element anyway (AVX2), keeps the plain tiles."""
    from mlir_ansor.sketch_passes.kernel_seed import _square_transposes
    from mlir_ansor.sketch_passes.loops import transposed_inputs
    from mlir_ansor.sketch_passes.program import SplitStep

    def scores(d):
        return ops_of(mul_add_generic(
            f"128x12x{d}", f"128x12x{d}", "12x128x128", "h, i, j, d",
            ("i, h, d", "j, h, d", "h, i, j"), "parallel, parallel, parallel, reduction"))

    def splits(p):
        return {s.loop: s.lengths for s in p.steps if isinstance(s, SplitStep)}

    ops = scores(64)
    assert transposed_inputs(root(ops)) == ((1, 3),)  # K, not Q (broadcast across lanes)
    assert transposed_inputs(root(ops_of(MATMUL))) == ()
    seeds = kernel_seed_programs(ops, make_task(ops).sketches, X86_AVX512)
    assert seeds
    for p in seeds:
        assert violations(ops, p, target=X86_AVX512) == []
        assert splits(p)[2][-1] == 16 and splits(p)[3][-1] == 16, splits(p)
    assert not _square_transposes(root(ops), AVX2)
    odd = scores(40)  # 40 = 2.5 vectors of 16
    assert not _square_transposes(root(odd), X86_AVX512)
    odd_seeds = kernel_seed_programs(odd, make_task(odd).sketches, X86_AVX512)
    assert odd_seeds and all(splits(p)[3][-1] != 16 for p in odd_seeds)


def test_one_seed_per_task_in_finer_workgroups(monkeypatch):
    """The first sketch's plain seed again in FINE_WORKGROUPS_PER_CORE workgroups per core
    (small dispatches balance better over IREE's workers), right after that sketch's
    seeds, so that a first batch of 4 measures it; the other seeds unchanged."""
    from mlir_ansor.sketch_passes import kernel_seed as KS
    from mlir_ansor.sketch_passes.program import PackStep
    from mlir_ansor.tuner.search import SeededPolicy, kernel_seeds
    from tests.test_iree_seed import _Inner

    ops = ops_of(mul_add_generic("128x12x64", "128x12x64", "12x128x128", "h, i, j, d",
                                 ("i, h, d", "j, h, d", "h, i, j"),
                                 "parallel, parallel, parallel, reduction"))
    task = make_task(ops)
    seeds = kernel_seed_programs(ops, task.sketches, X86_AVX512)
    many = KS.FINE_WORKGROUPS_PER_CORE * X86_AVX512.cores
    nests = [root_nest(ops, p) for p in seeds]
    fine = [p for p, n in zip(seeds, nests) if n.workgroups >= many]
    assert len(fine) == 1 and fine[0].sketch == seeds[0].sketch
    assert len({p.sketch for p in seeds}) == 2  # one sketch's seeds come after it
    at = seeds.index(fine[0])
    assert all(p.sketch == fine[0].sketch for p in seeds[:at]) and at < 4
    plain = [p for p in seeds[:at] if not any(isinstance(s, PackStep) for s in p.steps)]
    assert any(root_nest(ops, p).reg_tile == nests[at].reg_tile for p in plain)
    assert not any(isinstance(s, PackStep) for s in fine[0].steps)
    assert violations(ops, fine[0], target=X86_AVX512) == []
    assert fine[0] in SeededPolicy(_Inner(task), task, kernel_seeds).propose(4, set())
    # Without the finer cut the same seeds remain, in the same order.
    monkeypatch.setattr(KS, "FINE_WORKGROUPS_PER_CORE", KS.WORKGROUPS_PER_CORE)
    assert kernel_seed_programs(ops, task.sketches, X86_AVX512) == seeds[:at] + seeds[at + 1:]


def _two_term_transform() -> str:
    """out[i, t, c] = sum_k a[i, k] x[k, t, c] + b[i, k] y[k, t, c]: a Winograd input
    transform's shape (a block's terms and its neighbour's), reduction 6."""
    from tests.conftest import linalg_func
    m, v, o = "tensor<8x6xf32>", "tensor<6x11x64xf32>", "tensor<8x11x64xf32>"
    maps = ", ".join(f"affine_map<(i, t, c, k) -> ({r})>"
                     for r in ("i, k", "k, t, c", "i, k", "k, t, c", "i, t, c"))
    return linalg_func(f"%a: {m}, %x: {v}, %b: {m}, %y: {v}", o, f"""
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : {o}
  %f = linalg.fill ins(%c0 : f32) outs(%e : {o}) -> {o}
  %r = linalg.generic {{indexing_maps = [{maps}],
      iterator_types = ["parallel", "parallel", "parallel", "reduction"]}}
      ins(%a, %x, %b, %y : {m}, {v}, {m}, {v}) outs(%f : {o}) {{
    ^bb0(%p: f32, %q: f32, %s: f32, %u: f32, %acc: f32):
      %m1 = arith.mulf %p, %q : f32
      %m2 = arith.mulf %s, %u : f32
      %t = arith.addf %m1, %m2 : f32
      %n = arith.addf %acc, %t : f32
      linalg.yield %n : f32
  }} -> {o}
  return %r : {o}""")


def test_a_sum_of_several_products_is_reduced_one_element_at_a_time():
    """No vector.contract takes a body of two products: a reduction tile of k would hold k
    products per accumulator in registers (resnet_block's input transforms: tile 6 ran
    0.61 ms, 1 0.11). The same loops as one product keep the whole 6-deep tile."""
    from mlir_ansor.sketch_passes.kernel_seed import reduction_tile_of, sums_products
    from mlir_ansor.sketch_passes.program import SplitStep

    one = mul_add_generic("8x6", "6x11x64", "8x11x64", "i, t, c, k",
                          ("i, k", "k, t, c", "i, t, c"), "parallel, parallel, parallel, reduction")
    for text, several, tile in ((_two_term_transform(), True, 1), (one, False, 6)):
        ops = ops_of(text)
        op = root(ops)
        assert sums_products(op) is several
        assert reduction_tile_of(op, X86_AVX512) == (1 if several else 8)
        seeds = kernel_seed_programs(ops, make_task(ops).sketches, X86_AVX512)
        assert seeds
        for p in seeds:
            assert violations(ops, p, target=X86_AVX512) == []
            k = next(s for s in p.steps if isinstance(s, SplitStep) and s.op == op.name
                     and s.loop == 3)
            assert k.lengths[-1] == tile
