# RUN: %PYTHON %s %DATA/scale_rows.mlir %t | FileCheck %s
# An op body that captures a constant from outside (IREE's DAG matcher never matches
# those): the library falls back to the loop-structure matcher, which applies to this
# dispatch and not to one with other extents.
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
task = extract_tasks(flow_source(payload_path, "llvm-cpu", tools, 300))[0]
ops, prog = program_of(task.task_mlir, 0, seed=0)
lib = work / "lib.mlir"
lib.write_text(library_text([TunedEntry("t1", task.task_mlir, tuple(ops), prog)]))
print(lib.read_text())
# CHECK: transform.named_sequence @match_t1
# CHECK-NOT: cast_compatible_dag_from_root
# CHECK: transform.match.operation_name %{{.*}} ["linalg.generic"]
# CHECK: transform.match.structured
# CHECK: transform.match.structured.dim %{{.*}}[all]
# CHECK: transform.match.structured.dim %{{.*}}[0] parallel
# CHECK: transform.iree.match.dims_equal %{{.*}}, [16384]


def compile_and_report(src: Path, name: str) -> None:
    cfg = work / f"cfg_{name}"
    res = run_isolated([tools.compile, str(src), *target_flags("llvm-cpu"),
                        f"--iree-codegen-transform-dialect-library={lib}",
                        f"--iree-hal-dump-executable-configurations-to={cfg}",
                        "-o", str(work / f"{name}.vmfb")], 120, 6 << 30)
    print(name, "rc", res.returncode, "applied", sorted(applied_strategies(cfg)))


compile_and_report(payload_path, "same")
# CHECK: same rc 0 applied ['strategy_t1']
other = work / "other.mlir"
other.write_text(payload_path.read_text().replace("64x256", "32x256"))
compile_and_report(other, "other")
# CHECK: other rc 0 applied []
