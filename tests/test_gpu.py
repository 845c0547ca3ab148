"""GPU ("SSSRRSRS") sketches for cuda: which rules apply, and random programs of GMM, C2D and
TBS compile to PTX with the strategy attached (no GPU here: compile only)."""
import random

import pytest

from mlir_ansor.examples.operators import SUITE
from mlir_ansor.sketch_passes.annotation import annotate, violations
from mlir_ansor.sketch_passes.gpu_annotation import (MAX_BLOCK_ROWS, MAX_SHARED_BYTES,
                                                     MAX_THREAD_TILE, MAX_THREADS,
                                                     shared_bytes)
from mlir_ansor.sketch_passes.mutations import crossover, mutate
from mlir_ansor.sketch_passes.program import SplitStep
from mlir_ansor.sketch_passes.rules import CacheReadShared, default_gpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from mlir_ansor.targets import get_target
from mlir_ansor.dialect_helpers.shared_stores import thread_invariant_shared_stores
from mlir_ansor.tuner.compile_check import COMPILED, check_programs, codegen_task
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.tasks import extract_tasks, flow_source
from tests.conftest import ELEMENTWISE, MATMUL, ROW_SUM, ops_of


def _gpu_sketches(text):
    ops = ops_of(text)
    return ops, generate_sketches(ops, default_gpu_rules(), gpu=True)


def test_gpu_sketch_kinds():
    """matmul: SSSRRSRS with the inputs cache-read into shared memory, and without;
    elementwise chain: the producer inlined; a row sum: its rows split over a block's threads
    (cross-thread reduction), and the plain sketch (a thread per row)."""
    for text, want in ((MATMUL, ["AddCacheReadShared+MultiLevelTilingGPU", "MultiLevelTilingGPU"]),
                       (ELEMENTWISE, ["AlwaysInline"]),
                       (ROW_SUM, ["AddCrossThreadReduction", "Plain"])):
        _, sks = _gpu_sketches(text)
        assert [s.name for s in sks] == want and all(s.gpu for s in sks)


def test_gpu_annotation_limits():
    ops, sks = _gpu_sketches(MATMUL)
    rng = random.Random(0)
    warps = 0
    for i in range(100):
        p = annotate(ops, sks[i % 2], rng)
        if p.sketch.has(CacheReadShared):
            assert shared_bytes(ops[-1], p) <= MAX_SHARED_BYTES
        par = [s.lengths for s in p.steps if getattr(s, "lengths", None) and len(s.lengths) == 3]
        threads = 1
        tile = 1
        for th, vt, inner in par:
            threads *= th
            tile *= vt * inner
        assert threads <= MAX_THREADS and tile <= MAX_THREAD_TILE
        warps += threads >= 32
    assert warps > 90  # a 512x512 output always allows a full warp


@pytest.mark.parametrize("name", ["GMM-b1", "C2D-b1", "TBS-b1"])
def test_cuda_programs_compile_to_ptx(tools, tmp_path, name):
    model, inputs = SUITE[name]()
    (tmp_path / "m.mlir").write_text(import_model(model, inputs))
    tasks = [t for t in extract_tasks(flow_source(tmp_path / "m.mlir", "cuda", tools, 300),
                                      "cuda") if t.tunable]
    assert tasks
    for task in tasks:
        task = codegen_task(task, tmp_path, tools, "cuda")
        assert task.sketches and all(s.gpu for s in task.sketches), task.skip_reason
        rng = random.Random(0)
        progs = [annotate(task.ops, task.sketches[i % len(task.sketches)], rng)
                 for i in range(4)]
        # Compiled, applied, and free of thread-invariant stores to shared memory (the
        # check in check_programs: per-thread tiles and accumulators are private).
        # A known gap: a plain sketch that recomputes a row statistic in every thread of a
        # block (threads split the row) writes a block-level tensor; the check rejects it.
        checks = check_programs(task, progs, tmp_path, tools, "cuda", timeout_s=120)
        for p, c in zip(progs, checks):
            assert c.status == COMPILED or (c.error.startswith("race:") and
                                            p.sketch.name == "Plain"), c.error
        assert sum(c.status == COMPILED for c in checks) >= 3, [c.error for c in checks]
        for i, p in enumerate(progs):
            (ptx,) = (tmp_path / task.task_id / f"check{i}" / "binaries").glob("*.ptx")
            text = ptx.read_text()
            assert ".entry" in text and "%tid.x" in text
            if p.sketch.has(CacheReadShared):  # tiles staged in shared memory between barriers
                assert ".shared" in text and "bar.sync" in text


def test_cross_thread_annotation():
    """Rows per block within the limit, the row split over a warp or more of threads that
    divide it, and every sampled program valid by `violations`."""
    ops, sks = _gpu_sketches(ROW_SUM)
    red = ops[-1]
    rng = random.Random(0)
    seen = set()
    for _ in range(50):
        p = annotate(ops, sks[0], rng)
        rows = p.split(red.name, 0).lengths
        threads, vec = p.split(red.name, 1).lengths
        assert len(rows) == 1 and rows[0] <= MAX_BLOCK_ROWS
        assert 32 <= threads <= MAX_THREADS and 4096 % (threads * vec) == 0
        assert violations(ops, p) == []
        seen.add(threads)
    assert len(seen) > 3  # the thread count is searched


def test_gpu_programs_mutate_and_cross():
    """GPU programs evolve: mutations and crossover (for the cuda target, as the offline
    rounds run them) give valid, different programs, and `violations` rejects a block of
    too many threads."""
    cuda = get_target("cuda")
    for text in (MATMUL, ROW_SUM):
        ops, sks = _gpu_sketches(text)
        rng = random.Random(1)
        for sk in sks:
            progs = [annotate(ops, sk, rng, target=cuda) for _ in range(12)]
            children = [c for p in progs for c in [mutate(ops, p, rng, target=cuda)]
                        if c is not None]
            assert len(children) >= 8, sk.name
            assert all(violations(ops, c, target=cuda) == [] for c in children)
            kids = [crossover(ops, a, b, rng, target=cuda) for a, b in zip(progs, progs[1:])]
            assert all(violations(ops, k) == [] for k in kids if k is not None)
    ops, sks = _gpu_sketches(MATMUL)
    p = annotate(ops, sks[1], random.Random(0))
    s = p.split(ops[-1].name, 0)
    bad = type(p)(p.sketch, tuple(SplitStep(s.op, s.loop, (512, 1, 1)) if st is s else st
                                  for st in p.steps))
    assert violations(ops, bad)


def test_cross_thread_reduction_compiles_to_ptx(tools, tmp_path):
    """NRM-b16 (16 sums of squares of 65536): the cross-thread programs compile to PTX with
    the partial results in shared memory and barriers between the phases."""
    model, inputs = SUITE["NRM-b16"]()
    (tmp_path / "m.mlir").write_text(import_model(model, inputs))
    (task,) = [t for t in extract_tasks(flow_source(tmp_path / "m.mlir", "cuda", tools, 300),
                                        "cuda") if t.tunable]
    task = codegen_task(task, tmp_path, tools, "cuda")
    assert [s.name for s in task.sketches] == ["AddCrossThreadReduction", "Plain"]
    rng = random.Random(0)
    progs = [annotate(task.ops, task.sketches[0], rng) for _ in range(2)]
    checks = check_programs(task, progs, tmp_path, tools, "cuda", timeout_s=120)
    assert [c.status for c in checks] == [COMPILED] * 2, [c.error for c in checks]
    for i in range(2):
        (ptx,) = (tmp_path / task.task_id / f"check{i}" / "binaries").glob("*.ptx")
        text = ptx.read_text()
        assert "%tid.x" in text and ".shared" in text and "bar.sync" in text


SHARED_STORES = """
func.func @k(%v: f32) {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  %t = gpu.thread_id x
  %buf = memref.alloc() : memref<64xf32, #gpu.address_space<workgroup>>
  %acc = memref.alloc() : memref<4xf32, #gpu.address_space<workgroup>>
  %priv = memref.alloca() : memref<4xf32, #gpu.address_space<private>>
  %i = affine.apply affine_map<()[s0] -> (s0 * 2)>()[%t]
  memref.store %v, %buf[%i] : memref<64xf32, #gpu.address_space<workgroup>>
  scf.for %j = %c0 to %c4 step %c1 {
    memref.store %v, %acc[%j] : memref<4xf32, #gpu.address_space<workgroup>>
    memref.store %v, %priv[%j] : memref<4xf32, #gpu.address_space<private>>
  }
  scf.for %j = %t to %c4 step %c1 {
    memref.store %v, %acc[%j] : memref<4xf32, #gpu.address_space<workgroup>>
  }
  %zero = arith.constant 0.0 : f32
  memref.store %zero, %acc[%c0] : memref<4xf32, #gpu.address_space<workgroup>>
  %first = arith.cmpi ult, %t, %c1 : index
  scf.if %first {
    memref.store %v, %acc[%c0] : memref<4xf32, #gpu.address_space<workgroup>>
  }
  %sub = memref.subview %buf[%i] [2] [1] : memref<64xf32, #gpu.address_space<workgroup>> to memref<2xf32, strided<[1], offset: ?>, #gpu.address_space<workgroup>>
  memref.store %v, %sub[%c0] : memref<2xf32, strided<[1], offset: ?>, #gpu.address_space<workgroup>>
  return
}
"""


def test_shared_store_check():
    """Only the store every thread makes at one address of workgroup memory is flagged: an
    address from the thread id (directly, through a loop's start or a view's offset), a
    constant (an init), a store only thread 0 makes, private memory, and a kernel of one
    thread pass."""
    found = thread_invariant_shared_stores(SHARED_STORES)
    assert len(found) == 1 and found[0].function == "k"
    assert found[0].op.startswith("memref.store %arg0, %alloc_0[%arg1]"), found[0].op
    assert "workgroup" in str(found[0])
    one = SHARED_STORES.replace(
        "func.func @k(%v: f32) {",
        "func.func @k(%v: f32) attributes {translation_info = #iree_codegen.translation_info<"
        "pipeline = #iree_codegen.no_pipeline workgroup_size = [1, 1, 1] subgroup_size = 32>} {")
    assert thread_invariant_shared_stores(one) == []
