"""Micro-kernel loops (PeelStep): a register tile that need not divide its loop, the partial
last tile peeled. Which loops get one, what is valid, and that such programs run correctly."""
import json
import math
import random
from dataclasses import replace

import pytest

from mlir_ansor.sketch_passes.annotation import annotate, peel_candidates, violations
from mlir_ansor.sketch_passes.loops import reduction_tile
from mlir_ansor.sketch_passes.mutations import mutate_tile_size
from mlir_ansor.sketch_passes.program import PackStep, ParallelStep, PeelStep, Program
from mlir_ansor.sketch_passes.rules import default_cpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from mlir_ansor.tuner.features import FEATURE_NAMES, program_features
from mlir_ansor.tuner.status import Status
from tests.conftest import MATMUL, linalg_func, ops_of, prepared_measurer


def matmul(m, k=256, n=384):
    return linalg_func(f"%a: tensor<{m}x{k}xf32>, %b: tensor<{k}x{n}xf32>", f"tensor<{m}x{n}xf32>",
                       f"""
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{m}x{n}xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %r = linalg.matmul ins(%a, %b : tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>)
       outs(%f : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  return %r : tensor<{m}x{n}xf32>""")


def programs(text, n=200, seed=0):
    ops = ops_of(text)
    sks = generate_sketches(ops, default_cpu_rules())
    rng = random.Random(seed)
    return ops, [annotate(ops, sks[i % len(sks)], rng) for i in range(n)]


def test_only_loops_without_a_good_register_tile_are_peeled():
    ops, progs = programs(matmul(197))
    root = ops[-1]
    assert peel_candidates(root, generate_sketches(ops, default_cpu_rules())[0]) == [0]
    peeled = [p for p in progs if p.peeled(root.name)]
    assert 0.3 < len(peeled) / len(progs) < 0.7  # half of them: the other half divides
    for p in peeled:
        assert p.peeled(root.name) == {0} and not violations(ops, p)
        c = p.split(root.name, 0).lengths
        assert c[:2] == (1, 1) and 197 % c[2] and 0 not in p.find(ParallelStep, root.name).loops
    ops128, progs128 = programs(MATMUL)
    r128 = ops128[-1].name  # (blocked peels aside: test_block_peel)
    assert not any(p.peeled(r128) - set(p.blocks(r128)) for p in progs128)


def test_lanes_with_no_tile_of_whole_vectors_are_peeled():
    # 58 lanes (ShuffleNet's channels): divisors 29 and 58 carry a partial vector through
    # the kernel; 48 and 64 lanes have whole-vector tiles and stay as they were.
    for n, peels in ((58, True), (40, True), (48, False), (64, False)):
        ops = ops_of(matmul(96, k=32, n=n))
        root = ops[-1]
        sk = generate_sketches(ops, default_cpu_rules())[0]
        assert (1 in peel_candidates(root, sk)) == peels, n
    ops = ops_of(matmul(96, k=32, n=58))
    sks = generate_sketches(ops, default_cpu_rules())
    rng = random.Random(0)
    progs = [annotate(ops, sks[i % len(sks)], rng, full_vectors=True) for i in range(80)]
    lane = [p.split(ops[-1].name, 1).lengths[-1] for p in progs if 1 in p.peeled(ops[-1].name)]
    assert lane and all(c % 16 == 0 for c in lane)  # whole vectors, a peeled partial one
    assert all(not violations(ops, p) for p in progs)


def test_what_a_peeled_program_may_not_be():
    ops, progs = programs(matmul(197))
    root = ops[-1].name
    p = next(q for q in progs if q.peeled(root))
    assert Program.from_json(json.loads(json.dumps(p.to_json()))) == p

    def edit(prog, old, new):
        return Program(prog.sketch, tuple(new if s == old else s for s in prog.steps))

    split0 = p.split(root, 0)
    assert violations(ops, edit(p, split0, replace(split0, lengths=(2, 1, 7))))  # not (1,1,c)
    par = p.find(ParallelStep, root)
    assert any("parallel loops" in e for e in violations(ops, edit(p, par, replace(
        par, loops=(0,) + par.loops))))  # a peeled loop is never distributed
    two = Program(p.sketch, p.steps + (PeelStep(root, 1),))  # 384 has good tiles
    assert any("no good register tile" in e for e in violations(ops, two))
    rng = random.Random(3)
    kids = [mutate_tile_size(ops, p, rng) for _ in range(40)]
    assert any(k is not None and k.split(root, 0) != split0 for k in kids)
    assert all(k is None or (k.peeled(root) == {0} and not violations(ops, k)) for k in kids)


def relu(result: str, source: str, init: str, shape: str) -> str:
    """`%result = relu(%source)` as an elementwise linalg.generic over a 2-D `shape`
    ("MxN") writing `%init` (with `%c0` the zero of `matmul`)."""
    t = f"tensor<{shape}xf32>"
    return f"""
  %{result} = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
       iterator_types = ["parallel", "parallel"]}} ins(%{source} : {t})
       outs(%{init} : {t}) {{
    ^bb0(%x: f32, %o: f32):
      %z = arith.maximumf %x, %c0 : f32
      linalg.yield %z : f32
  }} -> {t}"""


def matmul_relu(m, k, n):
    """`matmul` with an elementwise consumer (relu) to fuse."""
    tail = relu("y", "r", "e", f"{m}x{n}") + f"\n  return %y : tensor<{m}x{n}xf32>"
    return matmul(m, k, n).replace(f"  return %r : tensor<{m}x{n}xf32>", tail)


def test_two_loops_without_a_good_tile_may_both_be_peeled():
    # Attention scores over 197 tokens: with one loop peeled the other's tile is one row.
    ops, progs = programs(matmul(197, 32, 197))
    root = ops[-1].name
    two = [p for p in progs if len(p.peeled(root)) == 2]
    assert 0.1 < len(two) / len(progs) < 0.4  # half of the peeling half
    for p in two:
        assert not violations(ops, p) and p.s1_peeled(root) == 0
        # The outer one is peeled at S1: its S1 tile is the register tile (the local tile
        # of a cache write is c x 197, not the whole 197 x 197).
        c = p.split(root, 0).lengths[-1]
        assert reduction_tile(ops[-1], p)[0] == c and reduction_tile(ops[-1], p)[1] == 197
    rng = random.Random(5)
    kids = [mutate_tile_size(ops, two[0], rng) for _ in range(40)]
    assert all(k is None or (len(k.peeled(root)) == 2 and not violations(ops, k)) for k in kids)


def searched_programs(seed):
    """300 programs of a 197 x 32 x 197 matmul as the search samples them (full_vectors)."""
    ops = ops_of(matmul(197, 32, 197))
    sks = generate_sketches(ops, default_cpu_rules())
    rng = random.Random(seed)
    return ops, ops[-1].name, rng, [annotate(ops, sks[i % len(sks)], rng, full_vectors=True)
                                     for i in range(300)]


def test_searched_peels_of_the_contiguous_loop_are_whole_vectors():
    # The search samples with full_vectors: a peeled output-contiguous loop (197 columns)
    # takes multiples of the vector width; the row loop any tile.
    ops, root, _, progs = searched_programs(0)
    cols = [p.split(root, 1).lengths[-1] for p in progs if 1 in p.peeled(root)]
    rows = [p.split(root, 0).lengths[-1] for p in progs if 0 in p.peeled(root)]
    assert cols and all(c % 16 == 0 for c in cols), cols
    assert any(r % 16 for r in rows)


def test_a_loop_peeled_at_s1_counts_its_buffers_twice():
    # The S1 peel copies the fused consumer's local tile and the packed panel (one for the
    # full S1 tiles, one for the partial): 2 x (9 x 197 + 16 x 197) floats overflow the
    # 32 KiB stack although one copy fits (a ViT program failed to compile so).
    ops = ops_of(matmul_relu(197, 64, 197))
    root = ops[1].name
    sk = next(s for s in generate_sketches(ops, default_cpu_rules()) if s.local_tile)
    rng = random.Random(0)
    p = next(q for q in (annotate(ops, sk, rng) for _ in range(2000))
             if len(q.peeled(root)) == 2)
    steps = [s for s in p.steps if not isinstance(s, PackStep)]
    steps = [replace(s, lengths=(1, 1, 9)) if getattr(s, "loop", None) == 0 and
             getattr(s, "lengths", None) else
             replace(s, lengths=(16, 4)) if getattr(s, "loop", None) == 2 and
             getattr(s, "lengths", None) else s for s in steps]
    plain = Program(p.sketch, tuple(steps))
    assert not violations(ops, plain), violations(ops, plain)
    packed = Program(p.sketch, tuple(steps[:-1]) + (PackStep(root, 1), steps[-1]))
    assert any("stack" in e for e in violations(ops, packed))


def test_features_count_the_partial_tile():
    ops, progs = programs(matmul(197))
    p = next(q for q in progs if q.peeled(ops[-1].name))
    c = p.split(ops[-1].name, 0).lengths[2]
    row = program_features(ops, p)[-1]
    others = math.prod(p.split(ops[-1].name, 1).lengths[1:2])
    s2 = row[FEATURE_NAMES.index("trip_s2")]
    assert s2 == pytest.approx(math.log2(1 + math.ceil(197 / c) * others))


def test_peeled_programs_compile_apply_and_match(tools, tmp_path):
    m = prepared_measurer(tools, tmp_path, matmul(37, 64, 96))
    root = m.task.ops[-1].name
    rng = random.Random(0)
    progs = []
    while len(progs) < 3:
        sk = m.task.sketches[len(progs) % len(m.task.sketches)]
        p = annotate(m.task.ops, sk, rng)
        if p.peeled(root):
            progs.append(p)
    got = list(m.measure_iter(progs))
    assert [r.status for r in got] == [Status.OK] * 3, [r.error for r in got]


def batch_matmul(b, m, k, n):
    return linalg_func(f"%a: tensor<{b}x{m}x{k}xf32>, %b: tensor<{b}x{k}x{n}xf32>",
                       f"tensor<{b}x{m}x{n}xf32>", f"""
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{b}x{m}x{n}xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<{b}x{m}x{n}xf32>) -> tensor<{b}x{m}x{n}xf32>
  %r = linalg.batch_matmul ins(%a, %b : tensor<{b}x{m}x{k}xf32>, tensor<{b}x{k}x{n}xf32>)
       outs(%f : tensor<{b}x{m}x{n}xf32>) -> tensor<{b}x{m}x{n}xf32>
  return %r : tensor<{b}x{m}x{n}xf32>""")


@pytest.mark.parametrize("payload", [matmul_relu(37, 32, 67), matmul(37, 32, 67),
                                     batch_matmul(4, 37, 16, 67)],
                         ids=["fused-consumer", "cache-write-and-plain", "batch"])
def test_two_peeled_loops_compile_apply_and_match(tools, tmp_path, payload):
    # Every sketch (the consumer fused into the S1 tile, whose copy in the peeled S1 tile
    # goes on with the root's; a cache write's local tile; the root alone), and a batch
    # loop tiled above the peeled ones.
    m = prepared_measurer(tools, tmp_path, payload)
    root = next(o.name for o in m.task.ops if o.reduction_dims)
    rng = random.Random(0)
    progs, tries = [], 0
    while len(progs) < 2 * len(m.task.sketches) and tries < 4000:
        tries += 1
        sk = m.task.sketches[len(progs) % len(m.task.sketches)]
        p = annotate(m.task.ops, sk, rng)
        if len(p.peeled(root)) == 2:
            progs.append(p)
    assert len(progs) == 2 * len(m.task.sketches)
    assert {p.sketch for p in progs} == set(m.task.sketches)
    got = list(m.measure_iter(progs))
    assert [r.status for r in got] == [Status.OK] * len(progs), [r.error for r in got]


def test_mutation_keeps_a_peeled_contiguous_loop_in_whole_vectors():
    ops, root, rng, progs = searched_programs(1)
    p = next(q for q in progs if 1 in q.peeled(root))
    kids = [mutate_tile_size(ops, p, rng) for _ in range(200)]
    cols = {k.split(root, 1).lengths[-1] for k in kids if k is not None}
    assert len(cols) > 1 and all(c % 16 == 0 for c in cols), cols
