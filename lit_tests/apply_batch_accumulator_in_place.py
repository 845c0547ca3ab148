# RUN: %PYTHON %s %t | FileCheck %s
# A batch contraction with a fused consumer (attention's scores / sqrt(d)): the register
# tile's unit batch dim is folded, and hoisting its accumulator out of the reduction loop
# leaves the slice and its rank-reduced view as two loop-carried tensors. Unless they are
# folded before bufferizing, the register tile is copied element by element into a stack
# buffer and back around every reduction loop (BERT's attention batch matmul ran 1.5-2.8x
# slower). After our strategy no linalg op (such a copy) and no register-tile buffer remain:
# only the fused consumer's local tile.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from pathlib import Path

from helpers import DATA, compile_with

from mlir_ansor.dialect_helpers.linalg_info import analyze_task
from mlir_ansor.sketch_passes.program import Program
from mlir_ansor.transform_scripts.library import TunedEntry, library_text
from mlir_ansor.tuner.tasks import extract_tasks, flow_source
from mlir_ansor.tuner.toolchain import Toolchain

work = Path(sys.argv[1])
work.mkdir(parents=True, exist_ok=True)
tools = Toolchain.find()
src = DATA / "bmm_scale_4x64x48x32.mlir"
task = extract_tasks(flow_source(src, "llvm-cpu", tools, 300))[0]
ops = analyze_task(task.task_mlir)
MM = "op1_batch_matmul"
SKETCH = {"anchor": "op2_generic", "root": MM, "fuse_consumer": True, "cache_write": False,
          "rfactor": False, "inlined": [], "rules": ["MultiLevelTilingWithFusion"]}


def split(loop, lengths):
    return {"op": MM, "loop": loop, "lengths": lengths, "kind": "split"}


# Register tiles (1, rows, cols) under a local tile of one batch's 64 x 48; without the fold
# the first two were copied (the third was not: kept as a control).
for rows, cols, k in ((2, 24, 1), (8, 24, 4), (8, 16, 8)):
    prog = Program.from_json({"sketch": SKETCH, "steps": [
        split(0, [2, 1, 1]), split(1, [1, 64 // rows, rows]), split(2, [1, 48 // cols, cols]),
        split(3, [32 // k, k]), {"op": MM, "loops": [0], "kind": "parallel"},
        {"op": MM, "factor": 1, "kind": "unroll"}, {"op": MM, "kind": "vectorize"}]})
    lib, name = work / "lib.mlir", f"{rows}x{cols}_k{k}"
    lib.write_text(library_text([TunedEntry("t0", task.task_mlir, tuple(ops), prog)]))
    lowered = compile_with(tools, src, lib, work, name, (
        "--mlir-print-ir-after=iree-llvmcpu-lower-executable-target",)).stderr
    buffers = [line.split("memref<")[1].split(">")[0] for line in lowered.splitlines()
               if "memref.alloca" in line]
    print(f"{name}: linalg ops {lowered.count('linalg.')} buffers {buffers}")
    sys.stdout.flush()
# CHECK: 2x24_k1 rc 0 applied ['strategy_t0']
# CHECK-NEXT: 2x24_k1: linalg ops 0 buffers ['1x64x48xf32']
# CHECK: 8x24_k4 rc 0 applied ['strategy_t0']
# CHECK-NEXT: 8x24_k4: linalg ops 0 buffers ['1x64x48xf32']
# CHECK: 8x16_k8 rc 0 applied ['strategy_t0']
# CHECK-NEXT: 8x16_k8: linalg ops 0 buffers ['1x64x48xf32']
