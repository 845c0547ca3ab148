"""Shared by the lit tests: emit a program of a payload file with a fixed seed."""
import random
import sys
from pathlib import Path
from typing import Callable, Sequence

from iree.compiler import ir

from mlir_ansor.dialect_helpers.linalg_info import OpInfo, analyze_task
from mlir_ansor.sketch_passes.annotation import annotate
from mlir_ansor.sketch_passes.rules import default_cpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from mlir_ansor.transform_scripts.emitter import emit_standalone


DATA = Path(__file__).resolve().parent.parent / "tests" / "data"


def payload(name: str) -> str:
    """A payload function shared with the pytest suite (tests/data/NAME.mlir)."""
    return (DATA / f"{name}.mlir").read_text()


def program_of(payload: str, sketch_index: int, seed: int):
    ops = analyze_task(payload)
    sketches = generate_sketches(ops, default_cpu_rules())
    return ops, annotate(ops, sketches[sketch_index], random.Random(seed))


def print_strategy(payload: str, sketch_index: int, seed: int) -> None:
    ops, prog = program_of(payload, sketch_index, seed)
    print("// sketch:", prog.sketch.name)
    for s in prog.steps:
        print("// step:", s)
    with ir.Context(), ir.Location.unknown():
        print(emit_standalone(ops, prog))
    sys.stdout.flush()


def print_gpu_strategy(ops, sketch, seed: int) -> None:
    """A random program of a GPU sketch: its steps, then its verified strategy."""
    from mlir_ansor.transform_scripts.gpu_emitter import build_gpu_strategy

    prog = annotate(ops, sketch, random.Random(seed))
    print("// sketch:", prog.sketch.name)
    for s in prog.steps:
        print("// step:", s)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.create()
        module.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
        with ir.InsertionPoint(module.body):
            build_gpu_strategy(ops, prog, "gpu_strategy")
        assert module.operation.verify()
        print(module)
    sys.stdout.flush()


def library_for(payload_path, work, task_id: str, seed: int):
    """Export a one-task library for the dispatch IREE forms from a payload file (as the
    tuner does); returns (library path, toolchain)."""
    from pathlib import Path

    from mlir_ansor.transform_scripts.library import TunedEntry, library_text
    from mlir_ansor.tuner.tasks import extract_tasks, flow_source
    from mlir_ansor.tuner.toolchain import Toolchain

    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    tools = Toolchain.find()
    task = extract_tasks(flow_source(Path(payload_path), "llvm-cpu", tools, 300))[0]
    ops, prog = program_of(task.task_mlir, 0, seed=seed)
    lib = work / "lib.mlir"
    lib.write_text(library_text([TunedEntry(task_id, task.task_mlir, tuple(ops), prog)]))
    return lib, tools


def compile_with(tools, src, lib, work, name: str, extra=()):
    """Compile `src` with the library (and `extra` flags); print the return code and the
    applied strategies; return the process result."""
    from pathlib import Path

    from mlir_ansor.tuner.measure import applied_strategies
    from mlir_ansor.tuner.procs import run_isolated
    from mlir_ansor.tuner.toolchain import target_flags

    cfg = Path(work) / f"cfg_{name}"
    res = run_isolated([tools.compile, str(src), *target_flags("llvm-cpu"),
                        f"--iree-codegen-transform-dialect-library={lib}",
                        f"--iree-hal-dump-executable-configurations-to={cfg}",
                        "-o", str(Path(work) / f"{name}.vmfb"), *extra], 120, 6 << 30)
    print(name, "rc", res.returncode, "applied", sorted(applied_strategies(cfg)))
    sys.stdout.flush()
    return res


def lowered_program(work: str, payload: str, name: str,
                    steps: Callable[[Sequence[OpInfo]], dict]) -> str:
    """Compile tests/data/PAYLOAD.mlir with one program of its first task (`steps(ops)`:
    the program's JSON given the task's ops; the library is WORK/lib_NAME.mlir). Prints
    the compile line; returns the IR after IREE's lowering of the executable (our strategy
    applied)."""
    from pathlib import Path

    from mlir_ansor.sketch_passes.program import Program
    from mlir_ansor.transform_scripts.library import TunedEntry, library_text
    from mlir_ansor.tuner.tasks import extract_tasks, flow_source
    from mlir_ansor.tuner.toolchain import Toolchain

    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    tools = Toolchain.find()
    src = DATA / f"{payload}.mlir"
    task = extract_tasks(flow_source(src, "llvm-cpu", tools, 300))[0]
    ops = analyze_task(task.task_mlir)
    prog = Program.from_json(steps(ops))
    lib = work / f"lib_{name}.mlir"
    lib.write_text(library_text([TunedEntry("t0", task.task_mlir, tuple(ops), prog)]))
    return compile_with(tools, src, lib, work, name, (
        "--mlir-print-ir-after=iree-llvmcpu-lower-executable-target",)).stderr


def lowered_bmm_tile(work, rows: int, cols: int, k: int) -> str:
    """Compile tests/data/bmm_scale_4x64x48x32.mlir (a batch matmul and its fused scaling)
    with one program: register tiles of 1 x rows x cols, inner reduction tile k, under a
    local tile of one batch's 64 x 48 (`lowered_program`)."""
    mm = "op1_batch_matmul"
    sketch = {"anchor": "op2_generic", "root": mm, "fuse_consumer": True,
              "cache_write": False, "rfactor": False, "inlined": [],
              "rules": ["MultiLevelTilingWithFusion"]}

    def split(loop, lengths):
        return {"op": mm, "loop": loop, "lengths": lengths, "kind": "split"}

    steps = {"sketch": sketch, "steps": [
        split(0, [2, 1, 1]), split(1, [1, 64 // rows, rows]), split(2, [1, 48 // cols, cols]),
        split(3, [32 // k, k]), {"op": mm, "loops": [0], "kind": "parallel"},
        {"op": mm, "factor": 1, "kind": "unroll"}, {"op": mm, "kind": "vectorize"}]}
    return lowered_program(work, "bmm_scale_4x64x48x32", f"{rows}x{cols}_k{k}",
                           lambda ops: steps)
