"""IREE lowering-config tuning specs: the "template" space IREE's own tuner searches.

A spec keeps IREE's codegen pipeline for the dispatch and only overrides the root op's tile
sizes (`distribution`, `vector_common_parallel`, `vector_reduction`) through
`--iree-codegen-tuning-spec-path`. It is the limited-space baseline of the ablation (paper
figure 7): same tasks, same measurement, a template-sized space.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from iree.compiler import ir
from iree.compiler.dialects import transform

from mlir_ansor.dialect_helpers.linalg_info import OpInfo, operand_path
from mlir_ansor.dialect_helpers.transform_builder import any_op
from mlir_ansor.sketch_passes.loops import op_by_name
from mlir_ansor.sketch_passes.program import Program
from mlir_ansor.transform_scripts.library import build_kernel_config, match_task_dag

TEMPLATE_RULE = "IREETemplate"


def is_template(program: Program) -> bool:
    return program.sketch.rules == (TEMPLATE_RULE,)


def _fmt(xs: Sequence[int]) -> str:
    return "[" + ", ".join(map(str, xs)) + "]"


def consumer_config(ops: Sequence[OpInfo], program: Program) -> str:
    """Vector tiles of the fused consumer (anchor), from the root's vector tiles by output
    dim (IREE configures each op of the dispatch; the root's spec alone leaves the consumer
    as one whole-tensor vector)."""
    root = op_by_name(ops, program.sketch.root)
    anchor = op_by_name(ops, program.sketch.anchor)
    by_dim = {root.output_dim_of_loop(l): program.split(root.name, l).lengths[-1]
              for l in root.parallel_dims}
    vec = [by_dim.get(anchor.output_dim_of_loop(l), 1) if anchor.iterators[l] == "parallel"
           else 0 for l in range(len(anchor.extents))]
    return f"#iree_cpu.lowering_config<vector_common_parallel = {_fmt(vec)}>"


def lowering_config(ops: Sequence[OpInfo], program: Program) -> str:
    """The `#iree_cpu.lowering_config` of a template program (tile sizes per root loop)."""
    root = op_by_name(ops, program.sketch.root)
    dist, vec, red = [], [], []
    for l, ext in enumerate(root.extents):
        lengths = program.split(root.name, l).lengths
        if root.iterators[l] == "parallel":
            wg = math.prod(lengths)
            dist.append(0 if wg == ext else wg)
            vec.append(lengths[-1])
            red.append(0)
        else:
            dist.append(0)
            vec.append(0)
            red.append(lengths[0])
    return (f"#iree_cpu.lowering_config<distribution = {_fmt(dist)}, vector_common_parallel = "
            f"{_fmt(vec)}, vector_reduction = {_fmt(red)}>")


@dataclass(frozen=True)
class SpecEntry:
    task_id: str
    task_mlir: str
    ops: tuple[OpInfo, ...]
    program: Program
    pipeline: str  # IREE's pipeline for this dispatch, e.g. "#iree_cpu.pipeline<DoubleTilingExpert>"


def build_tuning_spec(entries: Sequence[SpecEntry]) -> ir.Module:
    """A tuning spec module (default entry point `@__kernel_config`). Needs a context."""
    module = ir.Module.create()
    module.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
    module.operation.attributes["iree_codegen.tuning_spec_with_default_entrypoint"] = \
        ir.UnitAttr.get()
    param_t = transform.AnyParamType.get()
    ro = {"transform.readonly": ir.UnitAttr.get()}
    with ir.InsertionPoint(module.body):
        apply = transform.NamedSequenceOp("apply_op_config", [any_op(), param_t], [],
                                          arg_attrs=[ro, ro])
        with ir.InsertionPoint(apply.body):
            transform.AnnotateOp(apply.bodyTarget, "compilation_info",
                                 param=apply.body.arguments[1])
            transform.YieldOp([])
        fused = transform.NamedSequenceOp("apply_fused_config",
                                          [any_op(), param_t, any_op(), param_t], [],
                                          arg_attrs=[ro, ro, ro, ro])
        with ir.InsertionPoint(fused.body):
            a = fused.body.arguments
            transform.AnnotateOp(a[0], "compilation_info", param=a[1])
            transform.AnnotateOp(a[2], "lowering_config", param=a[3])
            transform.YieldOp([])
        for e in entries:
            sk = e.program.sketch
            anchor, root = op_by_name(e.ops, sk.anchor), op_by_name(e.ops, sk.root)
            with_consumer = anchor is not root
            results = [any_op(), param_t] + ([any_op(), param_t] if with_consumer else [])
            seq = transform.NamedSequenceOp(f"match_{e.task_id}", [any_op()], results,
                                            arg_attrs=[ro])
            with ir.InsertionPoint(seq.body):
                match_task_dag(seq.bodyTarget, e.task_mlir, anchor.op_name)
                h = seq.bodyTarget
                for k in operand_path(e.task_mlir, anchor.index, root.index):
                    h = transform.GetProducerOfOperand(any_op(), h, k).result
                info = ir.Attribute.parse(
                    f"#iree_codegen.compilation_info<lowering_config = "
                    f"{lowering_config(e.ops, e.program)}, translation_info = "
                    f"#iree_codegen.translation_info<pipeline = {e.pipeline}>>")
                cfg = transform.ParamConstantOp(param_t, info).result
                if with_consumer:
                    lc = ir.Attribute.parse(consumer_config(e.ops, e.program))
                    transform.YieldOp([h, cfg, seq.bodyTarget,
                                       transform.ParamConstantOp(param_t, lc).result])
                else:
                    transform.YieldOp([h, cfg])
        entry = build_kernel_config([
            (f"match_{e.task_id}", "apply_op_config" if e.program.sketch.anchor ==
             e.program.sketch.root else "apply_fused_config") for e in entries])
        entry.operation.attributes["iree_codegen.tuning_spec_entrypoint"] = ir.UnitAttr.get()
    if not module.operation.verify():
        raise ValueError("tuning spec does not verify")
    return module


def tuning_spec_text(entries: Sequence[SpecEntry]) -> str:
    with ir.Context(), ir.Location.unknown():
        return str(build_tuning_spec(entries))
