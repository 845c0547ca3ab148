# RUN: %PYTHON %s %DATA/softmax_scale.mlir %t | FileCheck %s
# A dispatch with an aggregate op (linalg.softmax) and a body that captures a constant (so
# the loop-structure matcher). IREE decomposes the softmax before it configures the
# dispatch, so the matcher that applies is the one of the codegen view (decomposed, the
# scale fused into the last generic); the matcher of the task's own pattern walks it
# undecomposed (it used to index the decomposed ops into it and crash).
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from pathlib import Path

from helpers import compile_with

from mlir_ansor.sketch_passes.annotation import annotate
from mlir_ansor.transform_scripts.library import TunedEntry, library_text
from mlir_ansor.tuner.measure import MeasureConfig, TaskMeasurer
from mlir_ansor.tuner.tasks import extract_tasks, flow_source
from mlir_ansor.tuner.toolchain import Toolchain
import random

payload_path, work = Path(sys.argv[1]), Path(sys.argv[2])
work.mkdir(parents=True, exist_ok=True)
tools = Toolchain.find()
[task] = extract_tasks(flow_source(payload_path, "llvm-cpu", tools, 300))
m = TaskMeasurer(task, work / "tasks", tools, MeasureConfig())
m.prepare()  # IREE's default build: the codegen view
t = m.task
prog = annotate(t.ops, t.sketches[0], random.Random(0))
lib = work / "lib.mlir"
lib.write_text(library_text([TunedEntry("t0", t.task_mlir, t.ops, prog, t.view_mlir)]))
print(lib.read_text())
sys.stdout.flush()
# The task's own pattern: softmax whole, then the scaling generic (one input).
# CHECK: transform.named_sequence @match_t0(
# CHECK-NOT: cast_compatible_dag_from_root
# CHECK: transform.match.operation_name %{{.*}} ["linalg.softmax"]
# CHECK: transform.match.operation_name %{{.*}} ["linalg.generic"]
# CHECK: transform.param.constant 1 : i64
# CHECK: transform.iree.match.dims_equal %{{.*}}, [32, 64]
# The view: two reductions and the normalizing generic with the scale (three inputs).
# CHECK: transform.named_sequence @match_t0_view(
# CHECK: transform.param.constant 3 : i64
# CHECK: transform.iree.match.dims_equal %{{.*}}, [32, 64]

compile_with(tools, payload_path, lib, work, "same")
# CHECK: same rc 0 applied ['strategy_t0']
other = work / "other.mlir"
other.write_text(payload_path.read_text().replace("32x64", "16x64"))
compile_with(tools, other, lib, work, "other")
# CHECK: other rc 0 applied []
