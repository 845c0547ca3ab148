"""Targets as data: detection of this machine, flags, device kinds, target files, and the
annotation caps that follow a target."""
import dataclasses
import math
import os
import random
from pathlib import Path

import pytest

from mlir_ansor.dialect_helpers.layout_rewrite import DEFAULT_TILE, pack_tile
from mlir_ansor.sketch_passes.annotation import (AnnotationLimits, annotate, annotation_limits,
                                                 violations)
from mlir_ansor.sketch_passes.gpu_annotation import GpuLimits
from mlir_ansor.sketch_passes.program import SplitStep
from mlir_ansor.sketch_passes.rules import MultiLevelTile, default_cpu_rules, default_gpu_rules
from mlir_ansor.sketch_passes.sketch import Sketch, generate_sketches
from mlir_ansor.sketch_passes.template import sample_template
from mlir_ansor.targets import (AARCH64, DEFAULT_CPU, X86_AVX512, Target, TargetError,
                                cache_sizes, cuda, detect_cpu, get_target, host, load_target)
from mlir_ansor.transform_scripts.tuning_spec import TEMPLATE_RULE
from mlir_ansor.tuner.toolchain import target_flags
from tests.conftest import MATMUL, ops_of

HOST_FLAGS = ("--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
              "--iree-llvmcpu-target-cpu=host")


def _cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


# --- this machine ------------------------------------------------------------------------

@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 host")
def test_host_is_detected_from_this_machine():
    """The vector width follows /proc/cpuinfo (this VM shows AVX2 only: 8 f32 lanes; the
    Zen 4 of 2026-11-24 showed AVX-512: 16), the cores the ones this process may use."""
    t = host()
    flags = _cpu_flags()
    want = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    assert t.f32_lanes == want and t.vector_registers == (32 if want == 16 else 16)
    assert t.cores == len(os.sched_getaffinity(0))
    assert t.l1d_bytes >= 16 << 10 and t.l2_bytes > t.l1d_bytes
    assert t.triple == "x86_64-unknown-linux-gnu" and t.cpu == "host"
    assert get_target("llvm-cpu") is t  # detected once


def test_host_flags_are_the_historical_ones():
    assert host().compile_flags() == HOST_FLAGS
    assert target_flags("llvm-cpu") == HOST_FLAGS


@pytest.mark.parametrize("flags, bits, regs, kind", [
    ("fpu sse sse2 avx avx2 fma avx512f avx512bw", 512, 32, "x86_64-avx512"),
    ("fpu sse sse2 avx avx2 fma", 256, 16, "x86_64-avx2"),
    ("fpu sse sse2 sse4_2", 128, 16, "x86_64-sse"),
])
def test_detect_x86_vector_width(flags, bits, regs, kind):
    t = detect_cpu("x86_64", f"processor\t: 0\nflags\t\t: {flags}\n", {}, 4)
    assert (t.vector_bits, t.vector_registers, t.device_kind, t.cores) == (bits, regs, kind, 4)
    assert t.f32_lanes == bits // 32


def test_detect_aarch64():
    t = detect_cpu("aarch64", "Features\t: fp asimd evtstrm aes crc32\n", {}, 8)
    assert (t.vector_bits, t.vector_registers, t.device_kind) == (128, 32, "aarch64-neon")
    assert t.features == ("+neon",)


def test_cache_sizes_from_sysfs(tmp_path):
    for i, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"),
                                              (2, "Unified", "2048K"), (3, "Unified", "96M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    sizes = cache_sizes(tmp_path)
    assert sizes == {"l1d_bytes": 48 << 10, "l2_bytes": 2 << 20, "l3_bytes": 96 << 20}
    t = detect_cpu("x86_64", "flags : avx2", sizes, 1)
    assert (t.l1d_bytes, t.l2_bytes, t.l3_bytes) == (48 << 10, 2 << 20, 96 << 20)


def test_cache_sizes_fall_back_when_sysfs_has_none(tmp_path):
    t = detect_cpu("x86_64", "flags : avx2", cache_sizes(tmp_path / "missing"), 1)
    assert (t.l1d_bytes, t.l2_bytes) == (32 << 10, 1 << 20)


# --- built-in targets: flags and device kinds ----------------------------------------------

def test_flags_per_target():
    base = HOST_FLAGS[:2]
    assert target_flags("aarch64") == base + (
        "--iree-llvmcpu-target-triple=aarch64-unknown-linux-gnu",
        "--iree-llvmcpu-target-cpu=neoverse-n1")
    assert target_flags("x86_64-avx512") == base + (
        "--iree-llvmcpu-target-triple=x86_64-unknown-linux-gnu", "--iree-llvmcpu-target-cpu=znver4")
    assert target_flags("cuda") == ("--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80")
    # IREE 3.13 cannot configure sm_90 kernels (iree-org/iree#22147): sm_89 PTX, which the
    # driver compiles for an H100; the records still say cuda-sm90.
    assert target_flags("cuda:sm_90") == ("--iree-hal-target-device=cuda",
                                          "--iree-cuda-target=sm_89")
    assert target_flags("cuda:sm_86")[-1] == "--iree-cuda-target=sm_86"
    assert get_target("cuda:sm_90").device_kind == "cuda-sm90"
    sve = dataclasses.replace(AARCH64, name="v1", cpu="neoverse-v1", features=("+sve",))
    assert sve.compile_flags()[-1] == "--iree-llvmcpu-target-cpu-features=+sve"
    assert sve.device_kind == "aarch64-sve"


def test_device_kinds_are_distinct():
    avx2 = detect_cpu("x86_64", "flags : avx2", {}, 1)
    targets = [avx2, X86_AVX512, AARCH64, cuda(), cuda("sm_90")]
    kinds = [t.device_kind for t in targets]
    assert kinds == ["x86_64-avx2", "x86_64-avx512", "aarch64-neon", "cuda-sm80", "cuda-sm90"]
    assert get_target("aarch64").f32_lanes == 4 and get_target("cuda:sm_90").sm == "sm_90"


def test_unknown_target_names_the_supported_ones():
    for bad in ("tpu", "cuda:sm80", "cuda:"):
        with pytest.raises(ValueError, match=f"unknown target '{bad}'") as e:
            target_flags(bad)
        assert isinstance(e.value, TargetError)
    with pytest.raises(TargetError) as e:
        get_target("tpu")
    assert "llvm-cpu" in str(e.value) and "aarch64" in str(e.value) and "cuda" in str(e.value)


# --- target files ----------------------------------------------------------------------------

@pytest.mark.parametrize("target", [host(), X86_AVX512, AARCH64, cuda(), cuda("sm_90")],
                         ids=lambda t: t.name)
def test_json_round_trip(target, tmp_path):
    assert Target.from_json(target.to_json()) == target
    f = tmp_path / "t.json"
    f.write_text(target.to_json())
    assert load_target(f) == target and get_target(str(f)) == target


def test_a_users_file_with_defaults(tmp_path):
    f = tmp_path / "graviton"  # any existing file, .json or not
    f.write_text('{"backend": "llvm-cpu", "name": "g2", "triple": "aarch64-unknown-linux-gnu",'
                 ' "cpu": "neoverse-n1", "vector_registers": 32, "cores": 64}')
    t = get_target(str(f))
    assert (t.name, t.cores, t.vector_bits, t.f32_lanes, t.features) == ("g2", 64, 128, 4, ())
    assert target_flags(str(f))[-1] == "--iree-llvmcpu-target-cpu=neoverse-n1"


@pytest.mark.parametrize("text, field", [
    ('{"name": "x"}', "'backend': missing"),
    ('{"backend": "llvm-cpu"}', "'name': missing"),
    ('{"backend": "vulkan", "name": "x"}', "'backend'"),
    ('{"backend": "llvm-cpu", "name": "x", "vector_bits": "512"}', "'vector_bits': expected an"),
    ('{"backend": "llvm-cpu", "name": "x", "vector_bits": true}', "'vector_bits': expected an"),
    ('{"backend": "llvm-cpu", "name": "x", "vector_bits": 100}', "'vector_bits'"),
    ('{"backend": "llvm-cpu", "name": "x", "cores": 0}', "'cores': must be positive"),
    ('{"backend": "llvm-cpu", "name": "x", "features": "+sve"}', "'features': expected a list"),
    ('{"backend": "llvm-cpu", "name": "x", "vectorbits": 512}', "'vectorbits': unknown"),
    ('{"backend": "llvm-cpu", "name": "x", "cpu": "neoverse-n1"}', "'triple'"),
    ('{"backend": "cuda", "name": "x", "sm": "80"}', "'sm'"),
    ('{"backend": "llvm-cpu", "name": "x",}', "not valid JSON (line 1)"),
    ('["llvm-cpu"]', "JSON object"),
])
def test_bad_target_file_names_the_problem(tmp_path, text, field):
    f = tmp_path / "bad.json"
    f.write_text(text)
    with pytest.raises(TargetError, match=str(f)) as e:
        get_target(str(f))
    assert field in str(e.value)


def test_missing_target_file(tmp_path):
    with pytest.raises(TargetError, match="cannot read target file"):
        get_target(str(tmp_path / "nope.json"))


# --- the search space follows the target -----------------------------------------------------

def _register_tile(ops, prog, lanes=16) -> tuple[int, int]:
    """(innermost tile of the contiguous output loop n, vector registers of the register
    tile: rows x vectors accumulators, a row of vectors, a broadcast)."""
    inner = {s.loop: s.lengths[-1] for s in prog.steps
             if isinstance(s, SplitStep) and ops[1].iterators[s.loop] == "parallel"}
    vectors = -(-inner[1] // lanes)
    return inner[1], inner[0] * vectors + vectors + 1


def test_annotation_limits_follow_the_target():
    assert annotation_limits() == AnnotationLimits.of(DEFAULT_CPU) == AnnotationLimits(64, 16, 32)
    assert AnnotationLimits.of(AARCH64) == AnnotationLimits(16, 4, 32)  # 4 NEON vectors
    avx2 = AnnotationLimits.of(detect_cpu("x86_64", "flags : avx2", {}, 1))
    assert avx2 == AnnotationLimits(32, 8, 16)
    # AVX2's 16 registers hold the 6x16 BLAS kernel (12 accumulators, 2 + 1 operands), not 7x16.
    ops = ops_of(MATMUL)
    assert avx2.registers(ops[1], {0: 6, 1: 16}) == 15
    assert avx2.register_tile_fits(ops[1], {0: 6, 1: 16})
    assert not avx2.register_tile_fits(ops[1], {0: 7, 1: 16})
    assert DEFAULT_TILE == 16 and pack_tile(AARCH64) == 4
    with pytest.raises(TargetError, match="llvm-cpu"):
        AnnotationLimits.of(cuda())


def test_aarch64_gets_smaller_vector_and_register_tiles():
    """The same matmul (64x48 output, n contiguous): the default target picks innermost n
    tiles up to 48 and register tiles up to 256 elements; aarch64 keeps to 16 and 64, and
    the default's wider programs are violations there."""
    ops = ops_of(MATMUL)
    sks = generate_sketches(ops, default_cpu_rules())
    rng = random.Random(0)
    wide = [p for p in (annotate(ops, sks[1], rng) for _ in range(200))
            if _register_tile(ops, p)[0] > 16 or _register_tile(ops, p, 4)[1] > 32]
    assert wide and not violations(ops, wide[0])
    assert violations(ops, wide[0], target=AARCH64)
    for p in (annotate(ops, sk, rng, target=AARCH64) for sk in sks for _ in range(100)):
        n, reg = _register_tile(ops, p, 4)
        assert n <= 16 and reg <= 32 and not violations(ops, p, target=AARCH64)
    template = Sketch(sks[1].anchor, (MultiLevelTile(sks[1].root),), (TEMPLATE_RULE,))
    for _ in range(50):
        p = sample_template(ops, template, rng, target=AARCH64)
        inner = {s.loop: s.lengths[-1] for s in p.steps if s.loop in (0, 1)}
        assert inner[0] * -(-inner[1] // 4) + -(-inner[1] // 4) + 1 <= 32


def test_gpu_threads_follow_the_target():
    """A GPU with 128 threads per block: no program uses more; the default sm_80 (1024) does."""
    small = dataclasses.replace(cuda(), name="small", max_threads_per_block=128)
    ops = ops_of(MATMUL)
    sks = generate_sketches(ops, default_gpu_rules(), gpu=True)
    rng = random.Random(0)

    def threads(p):
        return math.prod(s.lengths[0] for s in p.steps
                         if isinstance(s, SplitStep) and ops[1].iterators[s.loop] == "parallel")

    assert max(threads(annotate(ops, sks[1], rng)) for _ in range(100)) > 128
    progs = [annotate(ops, sks[1], rng, target=small) for _ in range(100)]
    assert max(threads(p) for p in progs) <= 128
    assert not any(violations(ops, p, target=small) for p in progs)
    assert GpuLimits.of(small).max_threads == 128
    with pytest.raises(TargetError, match="cuda"):
        GpuLimits.of(AARCH64)


def test_the_search_reads_the_task_target():
    """Policies size their programs for the task's target (the run's, from --target), not
    for a machine written into code: aarch64 programs keep to its 16 lanes."""
    from mlir_ansor.tuner.evolution import EvolutionPolicy
    from mlir_ansor.tuner.search import RandomPolicy
    from mlir_ansor.tuner.tasks import Task

    ops = ops_of(MATMUL)
    sks = tuple(generate_sketches(ops, default_cpu_rules()))
    task = Task("t0", "mm", "k", 1, MATMUL, "", (), (), ops=tuple(ops), sketches=sks,
                target="aarch64")
    for policy in (RandomPolicy(task, 0), EvolutionPolicy(task, 0)):
        progs = policy.propose(60, set(), [])
        assert len(progs) == 60
        assert max(_register_tile(ops, p)[0] for p in progs) <= 16
        assert not any(violations(ops, p, target=AARCH64) for p in progs)
    wide = RandomPolicy(dataclasses.replace(task, target="x86_64-avx512"), 0).propose(60, set())
    assert max(_register_tile(ops, p)[0] for p in wide) > 16
