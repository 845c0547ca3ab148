# RUN: %PYTHON %s %DATA/mm_relu_512.mlir %t | FileCheck %s
# The exported selector library applied by stock iree-compile: the matmul+relu dispatch is
# configured with our strategy (codegen_spec), and a library whose matcher does not fit
# the payload leaves it to IREE's default.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from pathlib import Path

from helpers import program_of
from mlir_ansor.transform_scripts.library import TunedEntry, library_text
from mlir_ansor.tuner.measure import applied_strategies
from mlir_ansor.tuner.tasks import flow_source, extract_tasks
from mlir_ansor.tuner.toolchain import Toolchain, run_isolated, target_flags

payload_path, work = Path(sys.argv[1]), Path(sys.argv[2])
work.mkdir(parents=True, exist_ok=True)
tools = Toolchain.find()
# The task is the dispatch IREE forms, rewritten as a tensor function (as the tuner does).
task = extract_tasks(flow_source(payload_path, "llvm-cpu", tools, 300))[0]
ops, prog = program_of(task.task_mlir, 0, seed=3)
lib = work / "lib.mlir"
lib.write_text(library_text([TunedEntry("t7", task.task_mlir, tuple(ops), prog)]))
payload = payload_path.read_text()
print(lib.read_text())
# CHECK: transform.named_sequence @strategy_t7
# CHECK: transform.named_sequence @match_t7
# CHECK: transform.iree.match.cast_compatible_dag_from_root
# CHECK: transform.named_sequence @__kernel_config
# CHECK: transform.foreach_match in
# CHECK-NEXT: @match_t7 -> @apply_t7

cfg = work / "cfg"
res = run_isolated([tools.compile, str(payload_path), *target_flags("llvm-cpu"),
                    f"--iree-codegen-transform-dialect-library={lib}",
                    f"--iree-hal-dump-executable-configurations-to={cfg}",
                    "-o", str(work / "out.vmfb")], 120, 6 << 30)
print("rc", res.returncode, "applied", sorted(applied_strategies(cfg)))
# CHECK: rc 0 applied ['strategy_t7']

other = payload.replace("512x512", "256x256")  # same ops, other shapes: must not match
cfg2 = work / "cfg2"
(work / "other.mlir").write_text(other)
res = run_isolated([tools.compile, str(work / "other.mlir"), *target_flags("llvm-cpu"),
                    f"--iree-codegen-transform-dialect-library={lib}",
                    f"--iree-hal-dump-executable-configurations-to={cfg2}",
                    "-o", str(work / "other.vmfb")], 120, 6 << 30)
print("rc", res.returncode, "applied", sorted(applied_strategies(cfg2)))
# CHECK: rc 0 applied []
