"""GPU ("SSSRRSRS") sketches for cuda: which rules apply, and random programs of GMM, C2D and
TBS compile to PTX with the strategy attached (no GPU here: compile only)."""
import random

import pytest

from mlir_ansor.examples.operators import SUITE
from mlir_ansor.sketch_passes.annotation import annotate
from mlir_ansor.sketch_passes.gpu_annotation import (MAX_SHARED_BYTES, MAX_THREAD_TILE,
                                                     MAX_THREADS, shared_bytes)
from mlir_ansor.sketch_passes.rules import default_gpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from mlir_ansor.tuner.compile_check import COMPILED, check_programs, codegen_task
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.tasks import extract_tasks, flow_source
from tests.conftest import ELEMENTWISE, MATMUL, ROW_SUM, ops_of


def _gpu_sketches(text):
    ops = ops_of(text)
    return ops, generate_sketches(ops, default_gpu_rules(), gpu=True)


def test_gpu_sketch_kinds():
    """matmul: SSSRRSRS with the inputs cache-read into shared memory, and without;
    elementwise chain: the producer inlined; a row sum: one plain sketch (threads over rows)."""
    for text, want in ((MATMUL, ["AddCacheReadShared+MultiLevelTilingGPU", "MultiLevelTilingGPU"]),
                       (ELEMENTWISE, ["AlwaysInline"]),
                       (ROW_SUM, ["Plain"])):
        _, sks = _gpu_sketches(text)
        assert [s.name for s in sks] == want and all(s.gpu for s in sks)


def test_gpu_annotation_limits():
    ops, sks = _gpu_sketches(MATMUL)
    rng = random.Random(0)
    warps = 0
    for i in range(100):
        p = annotate(ops, sks[i % 2], rng)
        if p.sketch.cache_read:
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
                 for i in range(2)]
        checks = check_programs(task, progs, tmp_path, tools, "cuda", timeout_s=120)
        assert [c.status for c in checks] == [COMPILED] * 2, [c.error for c in checks]
        for i, p in enumerate(progs):
            (ptx,) = (tmp_path / task.task_id / f"check{i}" / "binaries").glob("*.ptx")
            text = ptx.read_text()
            assert ".entry" in text and "%tid.x" in text
            if p.sketch.cache_read:  # tiles staged in shared memory between barriers
                assert ".shared" in text and "bar.sync" in text
