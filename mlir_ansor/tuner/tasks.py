"""Tasks: one per distinct dispatch IREE forms for a model (deduplicated, weighted)."""
from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np
from iree.compiler import ir

from mlir_ansor.dialect_helpers.dispatch import codegen_view, flow_dispatches
from mlir_ansor.dialect_helpers.dynamic_sizes import NOMINAL_SIZE, SizeExpr, dynamic_ops
from mlir_ansor.dialect_helpers.linalg_info import OpInfo, analyze_task
from mlir_ansor.dialect_helpers.size_dispatch import untagged
from mlir_ansor.errors import CompileError, UnsupportedDispatch
from mlir_ansor.sketch_passes.annotation import dynamic_peelable
from mlir_ansor.sketch_passes.iree_seed import Levels, iree_tile_levels
from mlir_ansor.sketch_passes.rules import rules_for
from mlir_ansor.sketch_passes.sketch import Sketch, generate_sketches
from mlir_ansor.targets import get_target
from mlir_ansor.tuner.builder import first_error_line
from mlir_ansor.tuner.procs import run_isolated
from mlir_ansor.tuner.toolchain import Toolchain, target_flags

_DTYPES = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i32": np.int32,
           "i64": np.int64, "i8": np.int8, "i1": np.bool_}
# Element types of dispatch arguments numpy has no dtype for, or IREE's tools write no
# .npy of (bf16: "unsupported data encoding"): such dispatches are not tuned.
_NO_FILES = ("bf16",)
# A ranked tensor type: its dims ("4x?x8x"), its element type.
_TENSOR_TYPE = re.compile(r"tensor<((?:[\d?]+x)*)(\w+)>")


@dataclass(frozen=True)
class SizeSample:
    """One assignment of the model's dynamic input dimensions: ((input, dim), size) pairs."""

    sizes: tuple[tuple[tuple[int, int], int], ...]
    weight: float = 1.0

    @property
    def dims(self) -> dict[tuple[int, int], int]:
        return dict(self.sizes)

    @property
    def label(self) -> str:
        return ",".join(str(n) for n in dict.fromkeys(n for _, n in self.sizes))


@dataclass(frozen=True)
class Task:
    task_id: str  # symbol-safe id used in libraries and file names
    name: str  # IREE's name of the first dispatch seen
    key: str  # content hash of the task function: identical dispatches share it
    weight: int  # occurrences in the model
    task_mlir: str  # the dispatch's linalg body as a tensor function (analysis, matcher)
    module_mlir: str  # runnable: the dispatch exactly as IREE formed it, called by @main
    input_types: tuple[str, ...]  # of the runnable @main
    output_types: tuple[str, ...]
    ops: tuple[OpInfo, ...] = ()
    sketches: tuple[Sketch, ...] = ()
    skip_reason: str = ""  # why the task is left to IREE's default
    view_mlir: str = ""  # the payload as codegen hands it over (set by with_codegen_view)
    layout_of: str = ""  # key of the task this one re-lays out (its weight packed), if any
    # Only the model's other form has this dispatch (its name: "Winograd", "direct"); the
    # hand-back builds both forms tuned and keeps the faster (layout_choice.other_form).
    form: str = ""
    iree_levels: tuple[Levels, ...] = ()  # IREE's default tile levels per op (seeds)
    target: str = "llvm-cpu"  # what the task is tuned for (a name or file: `targets`)
    # A dynamic dispatch (`--dynamic`): per `?` of the runnable @main's inputs, (input, dim,
    # its size in the model's input dimensions); per workload ordinal, its size; per `?` of
    # the analyzed function's arguments, (argument, dim, ordinal).
    size_exprs: tuple[tuple[int, int, SizeExpr], ...] = ()
    ordinal_exprs: tuple[SizeExpr, ...] = ()
    dynamic_dims: tuple[tuple[int, int, int], ...] = ()
    # The sizes it is measured at (joint objective) and the one its ops are read at.
    samples: tuple[SizeSample, ...] = ()
    # (workload ordinal, its largest valid size): `DispatchFunc.ordinal_bounds`.
    ordinal_bounds: tuple[tuple[int, int], ...] = ()
    # Per argument of `task_mlir`, the runnable @main's input it is loaded from (None: a
    # hoisted constant): `DispatchFunc.arg_sources`.
    arg_sources: tuple[int | None, ...] = ()

    @property
    def flops(self) -> int:
        return sum(o.flops for o in self.ops)

    @property
    def dynamic(self) -> bool:
        return bool(self.size_exprs)

    def input_types_at(self, sample: "SizeSample") -> tuple[str, ...]:
        """The runnable @main's input types with the sample's sizes."""
        types = [list(parse_tensor_type(t, dynamic=True)[0]) for t in self.input_types]
        for i, d, e in self.size_exprs:
            types[i][d] = e.evaluate(sample.dims)
        return tuple(re.sub(r"tensor<((?:[\d?]+x)*)", "tensor<" + "".join(
            f"{n}x" for n in shape), t, count=1) for shape, t in zip(types, self.input_types))

    def ordinal_sizes(self, sample: "SizeSample") -> dict[int, int]:
        return {k: e.evaluate(sample.dims) for k, e in enumerate(self.ordinal_exprs)}

    def runs_at(self, sample: "SizeSample") -> bool:
        """Whether the dispatch can run at `sample`: no workload size over its bound."""
        sizes = self.ordinal_sizes(sample)
        return all(k not in sizes or sizes[k] <= most for k, most in self.ordinal_bounds)

    @property
    def tunable(self) -> bool:
        return not self.skip_reason


def parse_tensor_type(t: str, dynamic: bool = False) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of a tensor type; with `dynamic`, `?` dims read as -1."""
    m = _TENSOR_TYPE.fullmatch(t)
    if not m or m.group(2) not in _DTYPES or (not dynamic and "?" in m.group(1)):
        raise UnsupportedDispatch(f"unsupported tensor type {t}")
    dims = tuple(-1 if d == "?" else int(d) for d in m.group(1).split("x") if d)
    return dims, np.dtype(_DTYPES[m.group(2)])


def flow_source(model_mlir: Path, target: str, tools: Toolchain, timeout_s: float,
                flags: Sequence[str] = ()) -> str:
    """The model after IREE's dispatch formation (`--compile-to=flow`); `flags`: the
    model's own build flags (e.g. data tiling)."""
    cmd = [tools.compile, str(model_mlir), *target_flags(target), *flags, "--compile-to=flow",
           "-o", "-"]
    res = run_isolated(cmd, timeout_s)
    if res.returncode != 0:
        raise CompileError("iree-compile could not form dispatches: "
                           f"{first_error_line(res.stderr)}")
    return res.stdout


def _keyed_dispatches(flow_text: str) -> list[tuple[str, object]]:
    """(content key, dispatch) per executable of a flow-level module, in program order."""
    return [(k, d) for k, _, d in tagged_dispatches(flow_text)]


def tagged_dispatches(flow_text: str) -> list[tuple[str, str, object]]:
    """(content key, size-branch tag or "", dispatch) per executable of a flow-level
    module, in program order. The key ignores the tag: a dispatch copied into the branches
    of a size dispatcher (`size_dispatch`) is one task."""
    out = []
    with ir.Context() as ctx:
        module = ir.Module.parse(flow_text, ctx)
        for d in flow_dispatches(module):
            text, tag = untagged(d.pattern.task_mlir) if d.pattern else (d.name, "")
            out.append((hashlib.sha256(text.encode()).hexdigest()[:12], tag, d))
    return out


def dispatch_keys(flow_text: str) -> list[str]:
    """The task key of every executable, in program order (not deduplicated)."""
    return [k for k, _ in _keyed_dispatches(flow_text)]


def dispatch_calls(flow_text: str) -> Counter[str]:
    """Calls per inference of each task key of a flow-level module (an executable IREE
    formed once may be dispatched several times: `dispatch_keys` counts it once)."""
    calls: Counter[str] = Counter()
    for key, d in _keyed_dispatches(flow_text):
        calls[key] += d.weight
    return calls


def extract_tasks(flow_text: str, target: str = "llvm-cpu") -> list[Task]:
    """Deduplicated tasks of a flow-level module, in first-seen order, with the sketches of
    `target`'s rules."""
    merged: dict[str, dict] = {}
    for key, d in _keyed_dispatches(flow_text):
        entry = merged.setdefault(key, {"d": d, "weight": 0})
        entry["weight"] += d.weight
    tasks = []
    for i, (key, e) in enumerate(merged.items()):
        d = e["d"]
        task = Task(task_id=f"t{i}", name=d.name, key=key, weight=e["weight"],
                    task_mlir=d.pattern.task_mlir if d.pattern else "",
                    module_mlir=d.module_mlir, input_types=d.input_types,
                    output_types=d.output_types, skip_reason=d.skip_reason, target=target,
                    size_exprs=d.size_exprs, ordinal_exprs=d.ordinal_exprs,
                    dynamic_dims=d.pattern.dynamic_dims if d.pattern else (),
                    ordinal_bounds=d.pattern.ordinal_bounds if d.pattern else (),
                    arg_sources=d.pattern.arg_sources if d.pattern else ())
        unexchangeable = sorted({t for t in (*d.input_types, *d.output_types)
                                 if _element_type(t) in _NO_FILES})
        if unexchangeable and not task.skip_reason:
            task = replace(task, skip_reason=(
                f"arguments of type {', '.join(unexchangeable)}: numpy and IREE's tools "
                "exchange no such files, so a candidate cannot be checked: left to IREE"))
        tasks.append(_analyzed(task, task.task_mlir, target)
                     if d.pattern and not task.skip_reason else task)
    return tasks


def _element_type(t: str) -> str:
    m = _TENSOR_TYPE.fullmatch(t)
    return m.group(2) if m else ""


def nominal_sample(task: Task) -> dict[int, int]:
    """Ordinal -> size the analysis reads a dynamic task at: its middle sample."""
    if not task.samples:
        return {k: NOMINAL_SIZE for k in range(len(task.ordinal_exprs))}
    return task.ordinal_sizes(middle_sample(task.samples))


def middle_sample(samples: tuple[SizeSample, ...]) -> SizeSample:
    """The sample a dynamic task's analysis reads its ops at (the nominal size)."""
    by_size = sorted(samples, key=lambda s: [n for _, n in s.sizes])
    return by_size[len(by_size) // 2]


def _analyzed(task: Task, func_mlir: str, target: str = "llvm-cpu") -> Task:
    """The task with ops and sketches read from `func_mlir` (or the reason it is skipped)."""
    try:
        if task.dynamic:
            ops = dynamic_ops(func_mlir, task.dynamic_dims, nominal_sample(task))
        else:
            ops = tuple(analyze_task(func_mlir))
    except UnsupportedDispatch as err:
        return replace(task, ops=(), sketches=(), skip_reason=str(err))
    sketches = tuple(generate_sketches(ops, rules_for(target),
                                         gpu=get_target(target).backend == "cuda"))
    if task.dynamic:
        sketches = tuple(s for s in sketches if dynamic_peelable(ops, s))
    why = ""
    if not any(o.is_linalg for o in ops):
        ext = sorted(set(re.findall(r"\biree_linalg_ext\.[\w.]+", func_mlir)))
        why = f"no linalg op ({', '.join(ext) if ext else 'a copy'}): left to IREE"
    elif task.dynamic and target != "llvm-cpu":
        why = f"dynamic shapes on {target}: left to IREE's default codegen"
    elif task.dynamic and not sketches:
        reduces = any(l in o.reduction_dims for o in ops for l in o.dynamic_loops)
        what = "a dynamic reduction loop" if reduces else "its dynamic loops"
        why = f"no micro-kernel sketch serves {what}: left to IREE's default codegen"
    elif not ops[-1].parallel_dims:
        # No parallel loop to give workgroups. On llvm-cpu a lone reduction (after its
        # init) runs in a one-workgroup forall (emitter.one_workgroup_reduction); anything
        # else has nothing to tile.
        if not ops[-1].reduction_dims:
            why = "a scalar op: left to IREE"
        elif target != "llvm-cpu":
            why = f"a full reduction to a scalar: left to IREE on {target}"
        elif any(o.op_name != "linalg.fill" for o in ops[:-1]):
            why = "a full reduction to a scalar with other ops: left to IREE"
        elif ops[-1].scalar:
            # Its one-workgroup split needs a combiner the tiling recognizes.
            why = ("a full reduction to a scalar without a plain combiner (an argmax, an "
                   "i1 'all'): left to IREE")
    elif not sketches:
        why = "no sketch (several outputs): left to IREE"
    return replace(task, ops=ops, sketches=sketches, skip_reason=why)


def with_codegen_view(task: Task, configured: str, target: str = "llvm-cpu") -> Task:
    """Re-analyze the task on the payload IREE's codegen hands to a strategy."""
    try:
        view = codegen_view(configured)
    except UnsupportedDispatch as err:
        return replace(task, ops=(), sketches=(), skip_reason=str(err))
    return _analyzed(replace(task, view_mlir=view.task_mlir, dynamic_dims=view.dynamic_dims,
                             iree_levels=iree_tile_levels(configured)), view.task_mlir, target)
