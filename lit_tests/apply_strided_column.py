# RUN: %PYTHON %s %t | FileCheck %s
# A batch contraction with a reduction tile of one (what a prime reduction extent allows:
# ViT's attention times V over 197 tokens): folding the tile's unit dims leaves the left
# operand's tile as a strided 1-D read (a column). Lowered as IREE would, that read is a
# loop of scalar loads inserted into a vector, taken apart again by the outer products
# (0.33 against 0.15 ms for the same ViT program). Our strategy unrolls it into one scalar
# read per row, which LLVM turns into a broadcast from memory: no load loop is left.
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


# Two column reads (k tile 1) and a control whose left tile is 8 contiguous rows of 8.
for rows, cols, k in ((8, 16, 1), (2, 24, 1), (8, 16, 8)):
    prog = Program.from_json({"sketch": SKETCH, "steps": [
        split(0, [2, 1, 1]), split(1, [1, 64 // rows, rows]), split(2, [1, 48 // cols, cols]),
        split(3, [32 // k, k]), {"op": MM, "loops": [0], "kind": "parallel"},
        {"op": MM, "factor": 1, "kind": "unroll"}, {"op": MM, "kind": "vectorize"}]})
    lib, name = work / "lib.mlir", f"{rows}x{cols}_k{k}"
    lib.write_text(library_text([TunedEntry("t0", task.task_mlir, tuple(ops), prog)]))
    lowered = compile_with(tools, src, lib, work, name, (
        "--mlir-print-ir-after=iree-llvmcpu-lower-executable-target",)).stderr
    lines = lowered.splitlines()
    scalar_reads = sum("vector.transfer_read" in l and "vector<f32>" in l for l in lines)
    print(f"{name}: loop loads {lowered.count('memref.load')} scalar reads {scalar_reads}")
    sys.stdout.flush()
# CHECK: 8x16_k1 rc 0 applied ['strategy_t0']
# CHECK-NEXT: 8x16_k1: loop loads 0 scalar reads 8
# CHECK: 2x24_k1 rc 0 applied ['strategy_t0']
# CHECK-NEXT: 2x24_k1: loop loads 0 scalar reads 2
# CHECK: 8x16_k8 rc 0 applied ['strategy_t0']
# CHECK-NEXT: 8x16_k8: loop loads 0 scalar reads 0
