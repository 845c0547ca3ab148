"""Packed operands (PackStep) and blocked micro-kernel loops (BlockPeelStep): which programs
get them, what is valid, how the search edits them, what the cost model sees, and that such
programs compile, apply and match."""
import math
import random
from collections import Counter
from dataclasses import replace

import pytest

from mlir_ansor.sketch_passes.annotation import (annotate, block_candidates, pack_bytes,
                                                 pack_candidates, violations)
from mlir_ansor.sketch_passes.mutations import mutate_pack, mutate_tile_size, with_pack
from mlir_ansor.sketch_passes.program import (BlockPeelStep, PackStep, ParallelStep, Program,
                                              SplitStep, UnrollStep, VectorizeStep)
from mlir_ansor.sketch_passes.rules import default_cpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from mlir_ansor.tuner.features import FEATURE_NAMES, program_features
from mlir_ansor.tuner.status import Status
from tests.conftest import ELEMENTWISE, MATMUL, ops_of, prepared_measurer
from tests.test_peel import matmul, matmul_relu, relu

R = "op1_matmul"


def programs(text, n=300, seed=0):
    ops = ops_of(text)
    sks = generate_sketches(ops, default_cpu_rules())
    rng = random.Random(seed)
    return ops, sks, [annotate(ops, sks[i % len(sks)], rng) for i in range(n)]


def plain_mlt(sks):
    return next(s for s in sks if s.root and len(s.structure) == 1)


def program(sketch, m, n, k, *, block=None, pack=None, unroll=1, par=(0, 1)):
    steps = [SplitStep(R, 0, m), SplitStep(R, 1, n)]
    steps += [BlockPeelStep(R, 0, block)] if block else []
    steps += [SplitStep(R, 2, k), ParallelStep(R, par), UnrollStep(R, unroll)]
    steps += [PackStep(R, pack)] if pack is not None else []
    return Program(sketch, tuple(steps) + (VectorizeStep(R),))


def test_pack_candidates_are_reused_inputs_of_a_reduction():
    ops, sks, progs = programs(MATMUL)
    root = ops[-1]
    # A (not indexed by the columns) and B (not by the rows); never the output.
    assert pack_candidates(root, plain_mlt(sks)) == [0, 1]
    ew = ops_of(ELEMENTWISE)
    assert all(pack_candidates(o, s) == [] for s in generate_sketches(ew, default_cpu_rules())
               for o in ew)
    packed = [p for p in progs if p.sketch.root and p.packed(R)]
    rooted = [p for p in progs if p.sketch.root]
    assert 0.3 < len(packed) / len(rooted) < 0.7
    assert {p.packed(R) for p in packed} == {(0,), (1,)}
    assert not any(violations(ops, p) for p in packed)


def relu_of_a_matmul(m, k, n):
    """`matmul` whose A is computed in the dispatch (an elementwise relu of an argument)."""
    head = (f"\n  %ea = tensor.empty() : tensor<{m}x{k}xf32>" + relu("ra", "a", "ea", f"{m}x{k}")
            + "\n  %r = linalg.matmul ins(%ra, %b")
    return matmul(m, k, n).replace("\n  %r = linalg.matmul ins(%a, %b", head)


def test_a_panel_is_alone_on_the_stack_only_beside_nothing_else():
    """`stack_alone`: a plain multi-level tiling of a dispatch holding the root and its
    fill; not with a cache write's or rfactor's buffers, a map_store's staged output, a
    loop peeled at S1 (its copies of the S1 tile), or another op in the dispatch."""
    from mlir_ansor.sketch_passes.annotation import stack_alone
    from mlir_ansor.sketch_passes.program import PeelStep
    from mlir_ansor.sketch_passes.rules import Rfactor
    from mlir_ansor.sketch_passes.sketch import Sketch

    ops = ops_of(matmul(256, 512, 384))
    sks = generate_sketches(ops, default_cpu_rules())
    sk, root = plain_mlt(sks), ops[-1]
    p = program(sk, (2, 8, 8), (3, 2, 32), (128, 1), pack=1)
    assert stack_alone(ops, p, root)
    cached = next(s for s in sks if s.local_tile)
    assert not stack_alone(ops, Program(cached, p.steps), root)
    rf = Sketch(sk.anchor, sk.structure + (Rfactor(R),), sk.rules + ("AddRfactor",))
    assert not stack_alone(ops, Program(rf, p.steps), root)
    staged = [replace(o, map_stored=True) if o is root else o for o in ops]
    assert not stack_alone(staged, p, staged[-1])
    relu = ops_of(matmul_relu(256, 512, 384))
    assert not stack_alone(relu, p, next(o for o in relu if o.name == R))
    # Two peeled loops: the outer one peeled at S1.
    two = ops_of(matmul(197, 64, 197))
    two_sk = plain_mlt(generate_sketches(two, default_cpu_rules()))
    peeled = Program(two_sk, (SplitStep(R, 0, (1, 1, 8)), SplitStep(R, 1, (1, 1, 16)),
                              PeelStep(R, 0), PeelStep(R, 1), SplitStep(R, 2, (64, 1)),
                              ParallelStep(R, (0,)), UnrollStep(R, 1), PackStep(R, 1),
                              VectorizeStep(R)))
    assert peeled.s1_peeled(R) is not None
    assert not stack_alone(two, peeled, two[-1])
    assert stack_alone(two, Program(two_sk, tuple(st for st in peeled.steps
                                                  if st != PeelStep(R, 0))), two[-1])


def test_what_a_packed_program_may_not_be():
    ops = ops_of(matmul(256, 512, 384))
    sk = plain_mlt(generate_sketches(ops, default_cpu_rules()))
    ok = program(sk, (2, 8, 8), (3, 2, 32), (64, 1), pack=1)
    assert pack_bytes(ops[-1], ok, 1) == 64 * 64 * 4 and not violations(ops, ok)
    # The B slice of a k step of 512 under 64 columns: 128 KiB, over the stack limit.
    big = program(sk, (2, 8, 8), (3, 2, 32), (512, 1), pack=1)
    assert any("exceeds the stack" in e for e in violations(ops, big))
    # 24 KiB (k steps of 64 under 96 columns): alone on the stack (the dispatch holds the
    # matmul and its fill, no cache write) the panel may fill it, 32 KiB and no more ...
    mid = program(sk, (2, 8, 8), (4, 2, 48), (64, 1), pack=1, par=(0,))
    assert pack_bytes(ops[-1], mid, 1) == 24 << 10 and not violations(ops, mid)
    full = program(sk, (2, 8, 8), (3, 2, 32), (128, 1), pack=1)
    assert pack_bytes(ops[-1], full, 1) == 32 << 10 and not violations(ops, full)
    # ... but beside a fused consumer's tile, or a cache write's local tile, it takes at
    # most half of it.
    fused_ops = ops_of(matmul_relu(256, 512, 384))
    fused = [s for s in generate_sketches(fused_ops, default_cpu_rules()) if s.root]
    assert fused
    for f in fused:
        assert violations(fused_ops, Program(f, mid.steps)) == [
            "the packed operand's buffer exceeds the stack"], f.rules
    # An inlined producer's tile too (relu of A computed under the S1 tile), with no
    # cache write.
    inlined_ops = ops_of(relu_of_a_matmul(256, 512, 384))
    inlined = [s for s in generate_sketches(inlined_ops, default_cpu_rules())
               if s.root and not s.local_tile]
    assert inlined
    mm = next(o for o in inlined_ops if o.op_name == "linalg.matmul").name
    for f in inlined:
        steps = tuple(replace(st, op=mm) for st in mid.steps)
        assert violations(inlined_ops, Program(f, steps)) == [
            "the packed operand's buffer exceeds the stack"], f.rules
    cached = next(s for s in generate_sketches(ops, default_cpu_rules()) if s.local_tile)
    small = program(cached, (16, 1, 8), (3, 2, 32), (64, 1), pack=1)
    assert pack_bytes(ops[-1], small, 1) == 16 << 10 and not violations(ops, small)
    wide = program(cached, (16, 1, 8), (4, 2, 48), (64, 1), pack=1, par=(0,))
    assert pack_bytes(ops[-1], wide, 1) == 24 << 10
    assert violations(ops, wide) == ["the packed operand's buffer exceeds the stack"]
    out = program(sk, (2, 8, 8), (3, 2, 32), (64, 1), pack=2)  # the output
    assert any("packed operands" in e for e in violations(ops, out))
    two = Program(sk, ok.steps[:-1] + (PackStep(R, 0), ok.steps[-1]))
    assert any("packed operands" in e for e in violations(ops, two))


def test_mutating_the_pack_edits_only_the_pack_and_keeps_keys_stable():
    ops, sks, progs = programs(MATMUL)
    rng = random.Random(1)
    changed = 0
    for p in [q for q in progs if q.sketch.root][:60]:
        c = mutate_pack(ops, p, rng)
        if c is None:
            continue
        changed += 1
        assert c.packed(R) != p.packed(R) and not violations(ops, c)
        rest = [s for s in c.steps if not isinstance(s, PackStep)]
        assert rest == [s for s in p.steps if not isinstance(s, PackStep)]
        # Where annotation would have put it: the same program has the same key.
        assert with_pack(c, R, p.packed(R)[0] if p.packed(R) else None).key == p.key
    assert changed >= 30


def test_features_see_the_packed_buffer():
    ops = ops_of(matmul(256, 512, 384))
    sk = plain_mlt(generate_sketches(ops, default_cpu_rules()))
    plain = program(sk, (2, 8, 8), (3, 2, 32), (64, 1))
    packed = program(sk, (2, 8, 8), (3, 2, 32), (64, 1), pack=1)
    a, b = program_features(ops, plain)[-1], program_features(ops, packed)[-1]
    col = FEATURE_NAMES.index
    assert a[col("b1_packed")] == 0 and b[col("b1_packed")] == 1 and b[col("b0_packed")] == 0
    assert b[col("alloc_pack_bytes")] == pytest.approx(math.log2(1 + 64 * 64 * 4))
    assert a[col("alloc_pack_bytes")] == 0


def test_block_candidates_are_row_loops_with_good_tiles():
    ops, sks, progs = programs(MATMUL)
    # The rows (64); not the contiguous columns (a partial tile would be a partial vector).
    assert block_candidates(ops[-1], plain_mlt(sks)) == [0]
    blocked = [p for p in progs if p.sketch.root and p.blocks(R)]
    assert blocked and not any(violations(ops, p) for p in blocked)
    for p in blocked:
        (a, one, c), block = p.split(R, 0).lengths, p.blocks(R)[0]
        assert one == 1 and block % c and 64 % (a * block) == 0
    # A loop with no good register tile is a plain peel, not a blocked one.
    ops197 = ops_of(matmul(197))
    assert block_candidates(ops197[-1], plain_mlt(generate_sketches(
        ops197, default_cpu_rules()))) == []


def test_what_a_blocked_program_may_not_be():
    ops = ops_of(matmul(256, 512, 384))
    sk = plain_mlt(generate_sketches(ops, default_cpu_rules()))
    ok = program(sk, (2, 1, 6), (2, 2, 32), (64, 1), block=64)
    assert not violations(ops, ok)
    for bad in (program(sk, (2, 1, 8), (2, 2, 32), (64, 1), block=64),  # 8 divides 64
                program(sk, (2, 2, 6), (2, 2, 32), (64, 1), block=64),  # not (a, 1, c)
                program(sk, (8, 1, 6), (2, 2, 32), (64, 1), block=64)):  # 8 x 64 > 256
        assert any("blocked loop" in e for e in violations(ops, bad)), bad
    # 15 rows x 2 vectors: 30 accumulators + 2 + 1, over the default target's 32 registers.
    wide = program(sk, (1, 1, 15), (2, 2, 32), (64, 1), block=64)
    assert "register tile too large" in violations(ops, wide)


def test_mutations_of_a_blocked_loop_stay_valid_and_move_every_decision():
    ops, sks, progs = programs(matmul(256, 512, 384), 400)
    rng = random.Random(2)
    moved = set()
    for p in [q for q in progs if q.sketch.root and q.blocks(R)][:40]:
        for _ in range(6):
            c = mutate_tile_size(ops, p, rng)
            if c is None or c.split(R, 0) == p.split(R, 0) and c.blocks(R) == p.blocks(R) \
                    or not c.blocks(R):  # (back to a dividing tile: see the next test)
                continue
            assert not violations(ops, c)
            (a0, _, c0), (a1, _, c1) = p.split(R, 0).lengths, c.split(R, 0).lengths
            moved |= {n for n, x, y in (("a", a0, a1), ("c", c0, c1),
                                        ("block", p.blocks(R)[0], c.blocks(R)[0])) if x != y}
    assert moved == {"a", "c", "block"}


def test_features_count_the_blocks_partial_tiles():
    ops = ops_of(matmul(256, 512, 384))
    sk = plain_mlt(generate_sketches(ops, default_cpu_rules()))
    p = program(sk, (2, 1, 6), (2, 2, 32), (64, 1), block=64)
    row = program_features(ops, p)[-1]
    col = FEATURE_NAMES.index
    # rows: 256 / 128 = 2 workgroups, 2 blocks each, ceil(64 / 6) = 11 register tiles a
    # block; columns: 384 / 128 = 3 workgroups, 2 S1 tiles each, 2 register tiles.
    assert row[col("trip_s0")] == pytest.approx(math.log2(1 + 2 * 3))
    assert row[col("trip_s1")] == pytest.approx(math.log2(1 + 2 * 2))
    assert row[col("trip_s2")] == pytest.approx(math.log2(1 + 11 * 2))


def test_blocked_and_packed_programs_compile_apply_and_match(tools, tmp_path):
    m = prepared_measurer(tools, tmp_path, matmul(96, 128, 64))
    sk = next(s for s in m.task.sketches if s.root and len(s.structure) == 1)
    progs = [program(sk, (1, 1, 6), (2, 1, 32), (64, 1), block=32, pack=1, unroll=4, par=(0,)),
             program(sk, (1, 2, 4), (2, 2, 16), (32, 1), pack=0, par=(0,)),
             program(sk, (3, 1, 5), (1, 2, 32), (128, 1), block=16, par=(0,))]
    assert [violations(m.task.ops, p) for p in progs] == [[]] * 3
    got = list(m.measure_iter(progs))
    assert [r.status for r in got] == [Status.OK] * 3, [r.error for r in got]


def test_a_packed_root_with_a_fused_consumer_emits():
    """The consumer is still tiled to rows by the root's S1 tile after the pack (the pack's
    panel shape once overwrote that tile: IndexError on a depthwise conv + bias)."""
    from iree.compiler import ir

    from mlir_ansor.transform_scripts.emitter import emit_standalone
    from tests.conftest import linalg_func

    text = linalg_func("%a: tensor<64x32xf32>, %b: tensor<32x48xf32>", "tensor<64x48xf32>", """
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x48xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<64x48xf32>) -> tensor<64x48xf32>
  %r = linalg.matmul ins(%a, %b : tensor<64x32xf32>, tensor<32x48xf32>)
       outs(%f : tensor<64x48xf32>) -> tensor<64x48xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
       iterator_types = ["parallel", "parallel"]} ins(%r : tensor<64x48xf32>)
       outs(%e : tensor<64x48xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.maximumf %x, %c0 : f32
    linalg.yield %m : f32
  } -> tensor<64x48xf32>
  return %y : tensor<64x48xf32>""")
    ops = ops_of(text)
    sks = generate_sketches(ops, default_cpu_rules())
    rng = random.Random(0)
    packed = [p for p in (annotate(ops, sks[i % len(sks)], rng) for i in range(60))
              if p.sketch.root and p.packed(p.sketch.root)]
    assert packed and all(p.sketch.consumer_fused for p in packed)
    def tiles(prog):
        text = str(emit_standalone(ops, prog))
        return text, Counter(line.split("tile_sizes")[1].split(":")[0]
                             for line in text.splitlines() if "tile_using_for" in line)

    with ir.Context(), ir.Location.unknown():
        for p in packed:
            text, packed_tiles = tiles(p)
            assert "copy_tensor_operand" in text
            # The same tiles as the program unpacked, and one more: the copy's rows.
            diff = packed_tiles - tiles(with_pack(p, p.sketch.root, None))[1]
            assert sum(diff.values()) == 1, diff


def test_tile_mutations_switch_a_row_loop_between_dividing_and_blocked_tiles():
    """The workgroup and S1 tiles stay; only the register tile changes kind (4x16 <-> 6x16
    on a power-of-two matmul), so the search can walk from one to the other."""
    ops, sks, progs = programs(matmul(256, 512, 384), 300)
    rng = random.Random(3)
    to_block = from_block = 0
    for p in [q for q in progs if q.sketch.root][:120]:
        for _ in range(10):
            c = mutate_tile_size(ops, p, rng)
            if c is None or bool(c.blocks(R)) == bool(p.blocks(R)):
                continue
            assert not violations(ops, c)
            (a, b, k), (a2, b2, k2) = p.split(R, 0).lengths, c.split(R, 0).lengths
            if c.blocks(R):
                to_block += 1
                assert a2 == a and c.blocks(R)[0] == b * k and (b * k) % k2
            else:
                from_block += 1
                assert a2 == a and b2 * k2 == p.blocks(R)[0]
            # The same program annotation would write: steps in its order.
            assert [s.kind for s in c.steps] == [s.kind for s in annotate_order(c)]
    assert to_block >= 5 and from_block >= 5


def annotate_order(p):
    """`p`'s steps in annotation's order: parallel splits, peels, reduction splits, the
    rest as they are."""
    par = [s for s in p.steps if isinstance(s, SplitStep) and s.loop in (0, 1)]
    peel = [s for s in p.steps if isinstance(s, BlockPeelStep)]
    rest = [s for s in p.steps if s not in par and s not in peel]
    return par + peel + rest
