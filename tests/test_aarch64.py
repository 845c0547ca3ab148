"""AArch64 from this x86 machine: candidates cross-compiled, checked under qemu with the
aarch64 IREE runtime, rated by llvm-mca (unmeasured), and the hand-back run under qemu.

The tools come from `make test` (tools/setup_devices.sh: Debian qemu-user, the arm64 cross
libc, llvm-19, and the aarch64 iree-base-runtime wheel). Where set-up could not install
them (not root), the tests that need them are skipped with the reason printed (`-rs`)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from mlir_ansor.errors import ToolchainError
from mlir_ansor.tuner import emulation, mca
from mlir_ansor.tuner.emulation import Emulator
from mlir_ansor.tuner.runner import LocalRunner, ProxyRunner, RunInput
from mlir_ansor.tuner.status import Status
from mlir_ansor.tuner.toolchain import Toolchain
from tests.conftest import QUICK_CLI, compiled_matmul, tune_cli

ROOT = Path(__file__).resolve().parents[1]
MLP = f"{ROOT / 'tests' / 'data' / 'small_mlp.py'}:make"
CONV = f"{ROOT / 'tests' / 'data' / 'small_mlp.py'}:make_conv"


def _emulator() -> Emulator | None:
    try:
        return Emulator.find("aarch64", "neoverse-n1")
    except ToolchainError:
        return None


def _mca() -> str | None:
    try:
        return mca.find_mca()
    except ToolchainError:
        return None


EMU = _emulator()
needs_qemu = pytest.mark.skipif(EMU is None, reason="qemu-aarch64, the arm64 cross libc or "
                                "the aarch64 IREE runtime not installed (tools/setup_devices.sh "
                                "needs root + apt)")
needs_mca = pytest.mark.skipif(_mca() is None, reason="llvm-mca >= 17 not installed "
                               "(apt-get install llvm-19)")

# Two loops, the second nested in the third (which is not innermost), and a scalar loop.
ASM = """\
func:
.LBB0_1:
\tldr\tq0, [x1], #16
\tfmla\tv1.4s, v0.4s, v2.s[0]
\tfmla\tv3.4s, v0.4s, v2.s[1]
\tsubs\tx2, x2, #1
\tb.ne\t.LBB0_1
.LBB0_2:
\tmov\tx4, #0
.LBB0_3:                        // inner
\tldr\ts0, [x5, x4, lsl #2]
\tfmadd\ts1, s0, s2, s1
\tadd\tx4, x4, #1
\tcmp\tx4, #8
\tb.lo\t.LBB0_3
\tsubs\tx6, x6, #1
\tb.ne\t.LBB0_2
\tret
"""


@pytest.mark.parametrize("line, flops", [
    ("\tfmla\tv1.4s, v0.4s, v2.s[0]", 8), ("\tfmla\tv1.2d, v0.2d, v2.2d", 4),
    ("\tfadd\tv1.4s, v0.4s, v2.4s", 4), ("\tfmax\tv1.4s, v0.4s, v2.4s", 4),
    ("\tfmadd\ts1, s0, s2, s1", 2), ("\tfmul\ts1, s0, s2", 1),
    ("\tadd\tv1.4s, v0.4s, v2.4s", 0), ("\tldr\tq0, [x1]", 0), ("\tmov\tv1.16b, v0.16b", 0),
])
def test_flops_of_an_instruction(line, flops):
    assert mca.flops_of(line) == flops


def test_innermost_loops_and_the_hot_loop():
    loops = mca.innermost_loops(ASM)
    assert [(len(lp.body), lp.flops) for lp in loops] == [(5, 16.0), (5, 2.0)]
    hot = mca.hot_loop(ASM)
    assert hot.flops == 16 and hot.body[1].startswith("\tfmla")
    assert all(not x.strip().startswith((".", "//")) for x in hot.body)


def test_straight_code_is_one_block_and_no_float_work_is_an_error():
    assert mca.hot_loop("f:\n\tfmla\tv1.4s, v0.4s, v2.4s\n\tret\n").flops == 8
    with pytest.raises(mca.ProxyError, match="no floating-point work"):
        mca.hot_loop("f:\n.LBB0_1:\n\tadd\tx1, x1, #1\n\tb\t.LBB0_1\n")


@needs_mca
def test_llvm_mca_rates_a_dependent_chain_slower_than_independent_fmas():
    """One accumulator: each FMA waits for the last (latency-bound); four: throughput."""
    triple, cpu, tool = "aarch64-unknown-linux-gnu", "neoverse-n1", mca.find_mca()
    chain = tuple(f"\tfmla\tv1.4s, v0.4s, v2.s[{i}]" for i in range(4))
    wide = tuple(f"\tfmla\tv{i + 1}.4s, v0.4s, v9.s[{i}]" for i in range(4))
    slow = 32 / mca.cycles_per_iteration(chain, triple, cpu, tool)
    fast = 32 / mca.cycles_per_iteration(wide, triple, cpu, tool)
    assert fast > 2 * slow and fast <= 16.01


def test_missing_qemu_names_the_packages(monkeypatch):
    monkeypatch.setattr(emulation.shutil, "which", lambda name: None)
    with pytest.raises(ToolchainError, match="apt-get install qemu-user libc6-arm64-cross"):
        Emulator.find("aarch64")
    with pytest.raises(ToolchainError, match="no emulation for architecture 'riscv64'"):
        Emulator.find("riscv64")


@needs_qemu
@needs_mca
def test_proxy_runner_validates_under_qemu_and_rates_with_mca(tmp_path):
    dump = f"--iree-hal-dump-executable-files-to={tmp_path / 'c' / 'files'}"
    vmfb, (a_p, b_p, ref, wrong, mag) = compiled_matmul(tmp_path, "aarch64", (dump,))
    validator = LocalRunner(EMU.tool("iree-run-module"), EMU.tool("iree-benchmark-module"),
                            launcher=EMU.launcher())
    runner = ProxyRunner(validator, 2 * 64 ** 3, "aarch64-unknown-linux-gnu", "neoverse-n1",
                         mca.find_mca())
    ok = runner.run(RunInput(vmfb, (a_p, b_p), (ref,), (mag,)))
    assert ok.status == Status.OK and len(ok.samples_s) == 1
    # The whole 64^3 matmul at no more than the N1's 16 FLOPs per cycle.
    assert ok.samples_s[0] >= 2 * 64 ** 3 / (16 * mca.CLOCK_HZ) * 0.999
    bad = runner.run(RunInput(vmfb, (a_p, b_p), (wrong,), (mag,)))
    assert bad.status == Status.WRONG_ANSWER
    shutil.rmtree(vmfb.parent / "files")
    gone = runner.run(RunInput(vmfb, (a_p, b_p)))
    assert gone.status == Status.RUN_ERROR and "no assembly" in gone.error


@needs_qemu
@needs_mca
def test_tune_for_aarch64_checks_under_qemu_and_withholds_unmeasured(tmp_path):
    """Without a runner on the device, the run checks every candidate under qemu and ranks
    by llvm-mca; IREE's default is handed back unless the user passes --allow-unmeasured,
    and a rerun with it hands back exactly what was withheld, from the records alone."""
    out = tmp_path / "out"
    res = tune_cli(CONV, "--target", "aarch64", "--trials", "8", "--out", str(out),
                   *QUICK_CLI, timeout=1500)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "never timed (UNMEASURED)" in res.stdout + res.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["unmeasured"] and report["device_kind"] == "aarch64-neon-mca"
    (e2e,) = report["e2e"].values()
    assert e2e["measured"] is False and e2e["tuned_s"] is None
    assert e2e["max_abs_error"] < 1e-3  # the aarch64 module under qemu against torch
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 8 and {r["device_kind"] for r in records} == {"aarch64-neon-mca"}
    assert sum(r["status"] == "ok" for r in records) >= 4
    text = (out / "report.txt").read_text()
    assert "UNMEASURED" in text and "run under qemu" in text
    withheld = [t["task"] for t in report["tasks"]
                if t["status"].startswith("withheld: unmeasured")]
    assert withheld and f"Withheld, unmeasured: {len(withheld)} strategies" in text
    assert f"tasks {', '.join(withheld)}; to hand them back" in text and "--trials 0" in text
    assert e2e["handed_back"] == "default" and not e2e["applied"]
    assert not (out / "tuned_library.mlir").exists()
    build = (out / "build.sh").read_text()
    assert "--iree-llvmcpu-target-triple=aarch64-unknown-linux-gnu" in build

    again = tmp_path / "again"
    res = tune_cli(CONV, "--target", "aarch64", "--allow-unmeasured", "--trials", "0",
                   "--reuse", str(out / "records.jsonl"), "--out", str(again), *QUICK_CLI,
                   timeout=1500)
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads((again / "report.json").read_text())
    (e2e,) = report["e2e"].values()
    assert [t["task"] for t in report["tasks"] if t["status"] == "tuned"] == withheld
    assert e2e["handed_back"] == "tuned" and len(e2e["applied"]) == len(withheld)
    assert e2e["max_abs_error"] < 1e-3
    assert (again / "tuned_library.mlir").exists()
    built = subprocess.run(["bash", str(again / "build.sh"), str(tmp_path / "re.vmfb")],
                           capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "IREE_COMPILE":
                                Toolchain.find().compile})
    assert built.returncode == 0, built.stderr[-1000:]
