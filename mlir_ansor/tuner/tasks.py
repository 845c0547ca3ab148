"""Tasks: one per distinct dispatch IREE forms for a model (deduplicated, weighted)."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from iree.compiler import ir

from mlir_ansor.dialect_helpers.dispatch import dispatch_funcs, to_task_function
from mlir_ansor.dialect_helpers.linalg_info import OpInfo, analyze_task
from mlir_ansor.errors import CompileError, UnsupportedDispatch
from mlir_ansor.sketch_passes.rules import default_cpu_rules
from mlir_ansor.sketch_passes.sketch import Sketch, generate_sketches
from mlir_ansor.tuner.toolchain import Toolchain, run_isolated, target_flags

_DTYPES = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i32": np.int32,
           "i64": np.int64, "i8": np.int8, "i1": np.bool_}


@dataclass(frozen=True)
class Task:
    task_id: str  # symbol-safe id used in libraries and file names
    name: str  # IREE's name of the first dispatch seen
    key: str  # content hash of the task function: identical dispatches share it
    weight: int  # occurrences in the model
    task_mlir: str
    input_types: tuple[str, ...]
    output_types: tuple[str, ...]
    ops: tuple[OpInfo, ...] = ()
    sketches: tuple[Sketch, ...] = ()
    skip_reason: str = ""  # why the task is left to IREE's default

    @property
    def flops(self) -> int:
        return sum(o.flops for o in self.ops)

    @property
    def tunable(self) -> bool:
        return not self.skip_reason


def parse_tensor_type(t: str) -> tuple[tuple[int, ...], np.dtype]:
    m = re.fullmatch(r"tensor<((?:\d+x)*)(\w+)>", t)
    if not m or m.group(2) not in _DTYPES:
        raise UnsupportedDispatch(f"unsupported tensor type {t}")
    dims = tuple(int(d) for d in m.group(1).split("x") if d)
    return dims, np.dtype(_DTYPES[m.group(2)])


def random_inputs(types: tuple[str, ...], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for t in types:
        shape, dtype = parse_tensor_type(t)
        if dtype.kind == "f":
            out.append(rng.uniform(-1, 1, size=shape).astype(dtype))
        elif dtype.kind == "b":
            out.append(rng.integers(0, 2, size=shape).astype(dtype))
        else:
            out.append(rng.integers(-4, 5, size=shape).astype(dtype))
    return out


def executable_sources(model_mlir: Path, target: str, tools: Toolchain, timeout_s: float) -> str:
    cmd = [tools.compile, str(model_mlir), *target_flags(target),
           "--compile-to=executable-sources", "-o", "-"]
    res = run_isolated(cmd, timeout_s)
    if res.returncode != 0:
        raise CompileError(f"iree-compile could not form dispatches: {res.stderr.strip()[:500]}")
    return res.stdout


def extract_tasks(sources: str) -> list[Task]:
    """Deduplicated tasks of executable sources, in first-seen order."""
    by_key: dict[str, dict] = {}
    with ir.Context() as ctx:
        module = ir.Module.parse(sources, ctx)
        for func in dispatch_funcs(module):
            name = ir.StringAttr(func.attributes["sym_name"]).value
            try:
                d = to_task_function(func)
            except UnsupportedDispatch as e:
                key = hashlib.sha256(name.encode()).hexdigest()[:12]
                by_key.setdefault(key, {"name": name, "weight": 0, "d": None, "why": str(e)})
                by_key[key]["weight"] += 1
                continue
            key = hashlib.sha256(d.task_mlir.encode()).hexdigest()[:12]
            entry = by_key.setdefault(key, {"name": name, "weight": 0, "d": d, "why": ""})
            entry["weight"] += 1
    tasks = []
    for i, (key, e) in enumerate(by_key.items()):
        d, why = e["d"], e["why"]
        ops: tuple[OpInfo, ...] = ()
        sketches: tuple[Sketch, ...] = ()
        if d is not None:
            try:
                ops = tuple(analyze_task(d.task_mlir))
                sketches = tuple(generate_sketches(ops, default_cpu_rules()))
                if not any(o.is_linalg for o in ops):
                    why = "no linalg op (a copy): left to IREE"
                elif not sketches:
                    why = "no sketch (several outputs): left to IREE"
            except UnsupportedDispatch as err:
                why = str(err)
        tasks.append(Task(task_id=f"t{i}", name=e["name"], key=key, weight=e["weight"],
                          task_mlir=d.task_mlir if d else "",
                          input_types=d.input_types if d else (),
                          output_types=d.output_types if d else (),
                          ops=ops, sketches=sketches, skip_reason=why))
    return tasks
