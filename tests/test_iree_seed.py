"""Seed programs from IREE's own tile sizes: how its levels map onto our splits, the stack
rule of map_store outputs, the first-batch policy, and that seeds compile, apply and
validate."""

import pytest

from mlir_ansor.sketch_passes.annotation import violations
from mlir_ansor.sketch_passes.loops import op_by_name
from mlir_ansor.sketch_passes.iree_seed import iree_tile_levels, seed_program, seed_programs
from mlir_ansor.sketch_passes.program import ParallelStep, UnrollStep
from mlir_ansor.sketch_passes.rules import default_cpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from mlir_ansor.tuner.records import Record
from mlir_ansor.tuner.search import RandomPolicy, SeededPolicy, iree_seeds
from tests.conftest import DATA, MATMUL, ops_of, prepared_measurer

CONFIGURED = """
func.func @main(%a: tensor<64x32xf32>, %b: tensor<32x48xf32>) -> tensor<64x48xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x48xf32>
  %f = linalg.fill {lowering_config = #iree_cpu.lowering_config<vector_common_parallel = [8, 16]>}
      ins(%c0 : f32) outs(%e : tensor<64x48xf32>) -> tensor<64x48xf32>
  %r = linalg.matmul {lowering_config = #iree_cpu.lowering_config<distribution = [32, 32, 0],
      vector_common_parallel = [8, 16, 0], vector_reduction = [0, 0, 16]>}
      ins(%a, %b : tensor<64x32xf32>, tensor<32x48xf32>) outs(%f : tensor<64x48xf32>) -> tensor<64x48xf32>
  return %r : tensor<64x48xf32>
}"""


def test_levels_are_read_per_op_in_payload_order():
    levels = iree_tile_levels(CONFIGURED)
    assert levels == ((("vector_common_parallel", (8, 16)),),
                      (("distribution", (32, 32, 0)), ("vector_common_parallel", (8, 16, 0)),
                       ("vector_reduction", (0, 0, 16))))


def test_seed_follows_iree_tiles_rounded_to_divisors():
    """64x48x32 matmul, IREE: workgroup 32x32, register 8x16, reduction vector 16. The 48
    loop gets the largest divisors not above IREE's sizes (workgroup 24, register 12)."""
    ops = ops_of(MATMUL)
    sketches = generate_sketches(ops, default_cpu_rules())
    seeds = seed_programs(ops, sketches, iree_tile_levels(CONFIGURED))
    # One seed per sketch with a root (cache write and plain multi-level tiling).
    assert [p.sketch.name for p in seeds] == [s.name for s in sketches if s.root]
    root = op_by_name(ops, seeds[0].sketch.root)
    for p in seeds:
        assert p.split(root.name, 0).lengths == (4, 1, 8)
        assert p.split(root.name, 1).lengths == (2, 1, 12)
        assert p.split(root.name, 2).lengths == (32, 16)
        assert p.find(ParallelStep, root.name).loops == (0, 1)
        assert p.find(UnrollStep, root.name).factor == 1
        assert violations(ops, p) == []


def test_no_seed_without_a_workgroup_level():
    ops = ops_of(MATMUL)
    sk = [s for s in generate_sketches(ops, default_cpu_rules()) if s.root][0]
    assert seed_program(ops, sk, (("vector_common_parallel", (8, 16, 0)),)) is None
    # Levels that do not line up with the analyzed ops (a rewritten payload): no seeds.
    assert seed_programs(ops, [sk], ()) == []


def test_map_store_output_shrinks_the_workgroup_tile():
    """IREE tiles this map_store'd conv output whole (16x16x16 floats, twice on the stack:
    over 32 KiB); the seed halves workgroup tiles until the stack rule holds."""
    ops = ops_of((DATA / "conv_nhwc_map_store.mlir").read_text())
    sk = [s for s in generate_sketches(ops, default_cpu_rules()) if s.root][0]
    root = op_by_name(ops, sk.root)
    levels = [()] * len(ops)
    levels[root.index] = (("distribution", (0,) * 7), ("vector_common_parallel", (1, 1, 8, 16, 0, 0, 0)),
                          ("vector_reduction", (0, 0, 0, 0, 1, 1, 8)))
    p = seed_program(ops, sk, levels[root.index])
    assert p is not None and violations(ops, p) == []
    wg = [p.split(root.name, l).lengths for l in root.parallel_dims]
    assert sum(s[0] * s[1] * s[2] for s in wg) < sum(root.extents[l] for l in root.parallel_dims)
    assert [s[-1] for s in wg] == [1, 1, 8, 16]  # register tiles kept (row loops: 1)


@pytest.fixture(scope="module")
def mm_measurer(tools, tmp_path_factory):
    return prepared_measurer(tools, tmp_path_factory.mktemp("seed"), MATMUL)


def test_seeds_of_a_real_task_compile_apply_and_validate(mm_measurer):
    task = mm_measurer.task
    assert task.iree_levels, "the default build's configuration was not read"
    seeds = seed_programs(task.ops, task.sketches, task.iree_levels)
    assert seeds
    recs = mm_measurer.measure(seeds)
    assert [r.status for r in recs] == ["ok"] * len(seeds), [r.error for r in recs]


class _Inner:
    """Records what the seeded policy asks of the policy it wraps."""

    def __init__(self, task):
        self.random, self.calls = RandomPolicy(task, 0), []

    def propose(self, n, measured, records=()):
        self.calls.append((n, frozenset(measured)))
        return self.random.propose(n, measured, records)


def test_seeded_policy_proposes_seeds_first_then_defers(mm_measurer):
    task = mm_measurer.task
    seeds = seed_programs(task.ops, task.sketches, task.iree_levels)
    inner = _Inner(task)
    pol = SeededPolicy(inner, task, iree_seeds)
    first = pol.propose(len(seeds) + 3, set(), [])
    assert first[:len(seeds)] == seeds and len(first) == len(seeds) + 3
    # The inner policy fills the rest and is told the seeds are taken.
    assert inner.calls == [(3, frozenset(p.key for p in seeds))]
    # Once the task has records, only the inner policy proposes.
    rec = Record(task_key=task.key, program=first[0].to_json(), program_key=first[0].key,
                 status="ok", latency_s=1e-3)
    later = pol.propose(4, {first[0].key}, [rec])
    assert inner.calls[-1] == (4, frozenset({first[0].key})) and len(later) == 4


def test_seeds_beyond_the_first_batch_come_in_the_next_ones(mm_measurer):
    """A batch smaller than the seeds (--batch 4): the next proposals go on with the seeds
    not yet offered, skipping any measured meanwhile, before the inner policy's."""
    task = mm_measurer.task
    seeds = RandomPolicy(task, 7).propose(5, set())
    inner = _Inner(task)
    pol = SeededPolicy(inner, task, lambda t: seeds)
    first = pol.propose(2, set(), [])
    assert first == seeds[:2] and inner.calls == [(0, frozenset(p.key for p in first))]
    rec = Record(task_key=task.key, program=first[0].to_json(), program_key=first[0].key,
                 status="ok", latency_s=1e-3)
    measured = {p.key for p in first} | {seeds[2].key}  # seeds[2] measured elsewhere
    rest = seeds[3:]
    later = pol.propose(len(rest) + 2, measured, [rec])
    assert later[:len(rest)] == rest and len(later) == len(rest) + 2
    assert pol.propose(3, measured | {p.key for p in later}, [rec])[0] not in seeds


def test_seed_kinds_combine_in_order_without_duplicates(mm_measurer):
    """--kernel-seeds and --iree-seeds together: kernel seeds first, then IREE's, a program
    both give proposed once, then the inner policy."""
    from mlir_ansor.tuner.search import kernel_seeds, with_seeds

    task = mm_measurer.task
    ks, iree = kernel_seeds(task), iree_seeds(task)
    assert ks and iree
    inner = []
    factory = with_seeds(lambda t, s: inner.append(_Inner(t)) or inner[-1], kernel_seeds,
                         iree_seeds, kernel_seeds)
    want = ks + [p for p in iree if p not in ks]
    first = factory(task, 0).propose(len(want) + 2, set(), [])
    assert first[:len(want)] == want and len(first) == len(want) + 2
    assert inner[0].calls == [(2, frozenset(p.key for p in want))]
