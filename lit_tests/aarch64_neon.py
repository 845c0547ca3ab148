# REQUIRES: llvm-mca
# RUN: %PYTHON %s %DATA/mm_relu_512.mlir %t | FileCheck %s
# AArch64 (Neoverse N1) from this x86 machine: a strategy of ours for the matmul+relu
# dispatch, cross-compiled by stock iree-compile, is applied, and its hot loop is NEON
# broadcast FMAs on 4 f32 lanes (fmla v.4s by element), which llvm-mca rates near the N1's
# 16 f32 FLOPs per cycle.
import random
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from pathlib import Path

from mlir_ansor.dialect_helpers.linalg_info import analyze_task
from mlir_ansor.sketch_passes.program import (ParallelStep, Program, SplitStep, UnrollStep,
                                              VectorizeStep)
from mlir_ansor.sketch_passes.rules import default_cpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from mlir_ansor.transform_scripts.library import TunedEntry, library_text
from mlir_ansor.tuner import mca
from mlir_ansor.tuner.measure import applied_strategies
from mlir_ansor.tuner.procs import run_isolated
from mlir_ansor.tuner.tasks import extract_tasks, flow_source
from mlir_ansor.tuner.toolchain import Toolchain, target_flags

payload, work = Path(sys.argv[1]), Path(sys.argv[2])
work.mkdir(parents=True, exist_ok=True)
tools = Toolchain.find()
task = extract_tasks(flow_source(payload, "aarch64", tools, 300))[0]
ops = analyze_task(task.task_mlir)
sketch = next(s for s in generate_sketches(ops, default_cpu_rules())
              if s.root)
R = sketch.root
# Register tile 8 rows x 8 columns (16 accumulators of 4 lanes), k unrolled by 4.
prog = Program(sketch, (SplitStep(R, 0, (8, 8, 8)), SplitStep(R, 1, (4, 16, 8)),
                        SplitStep(R, 2, (64, 1)), ParallelStep(R, (0, 1)), UnrollStep(R, 4),
                        VectorizeStep(R)))
print("sketch", sketch.name)
lib = work / "lib.mlir"
lib.write_text(library_text([TunedEntry("a64", task.task_mlir, tuple(ops), prog)]))
res = run_isolated([tools.compile, str(payload), *target_flags("aarch64"),
                    f"--iree-codegen-transform-dialect-library={lib}",
                    f"--iree-hal-dump-executable-configurations-to={work / 'cfg'}",
                    f"--iree-hal-dump-executable-files-to={work / 'files'}",
                    "-o", str(work / "mm.vmfb")], 300, 6 << 30)
print("rc", res.returncode, "applied", sorted(applied_strategies(work / "cfg")))
# CHECK: rc 0 applied ['strategy_a64']
asm = "\n".join(p.read_text() for p in sorted((work / "files").glob("*.s")))
print("elf", "embedded_elf_arm_64" in " ".join(p.name for p in (work / "files").glob("*.s")))
# CHECK: elf True
loop = mca.hot_loop(asm)
print("hot loop flops per iteration", loop.flops)
# 8 rows x 2 vectors x k unrolled 4 = 64 fmla of 4 lanes.
# CHECK: hot loop flops per iteration 512.0
print("\n".join(x for x in loop.body if "fmla" in x))
# CHECK: fmla v{{[0-9]+}}.4s, v{{[0-9]+}}.4s, v{{[0-9]+}}.s[{{[0-3]}}]
# CHECK-NOT: fmla {{.*}}.2d
rate = loop.flops / mca.cycles_per_iteration(loop.body, "aarch64-unknown-linux-gnu",
                                             "neoverse-n1", mca.find_mca())
print("flops per cycle at least 12:", rate >= 12, "at most 16:", rate <= 16.01)
# CHECK: flops per cycle at least 12: True at most 16: True
