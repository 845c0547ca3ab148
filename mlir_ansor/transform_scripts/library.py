"""Assemble a transform library that stock `iree-compile` consumes.

Form (IREE 3.13, verified): `@__kernel_config` runs `foreach_match` over each dispatch; a
matcher recognises a tuned task by its whole linalg DAG (`transform.iree.match.
cast_compatible_dag_from_root`, structure and shapes, not names) and the action sets
`translation_info = transform_dialect_codegen codegen_spec = @strategy_<task>`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from iree.compiler import ir
from iree.compiler.dialects import func as func_d
from iree.compiler.dialects import transform

from mlir_ansor.dialect_helpers.dispatch import within
from mlir_ansor.dialect_helpers.dynamic_sizes import (NOMINAL_SIZE, dynamic_ops,
                                                      signature_dims)
from mlir_ansor.dialect_helpers.linalg_info import (OpInfo,
                                                    analyze_undecomposed, operand_path,
                                                    tileable_ops)
from mlir_ansor.dialect_helpers.size_dispatch import TAG_ATTR
from mlir_ansor.dialect_helpers.transform_builder import any_op
from mlir_ansor.errors import UnsupportedDispatch
from mlir_ansor.sketch_passes.program import Program
from mlir_ansor.transform_scripts.emitter import build_strategy
from mlir_ansor.transform_scripts.gpu_emitter import build_gpu_strategy
from mlir_ansor.tuner.records import environment

# Module attribute naming the IREE that made the library ("3.13.0 (revision)"): a newer IREE
# may not parse it, and this says which one did. IREE 3.13 accepts it (verified with
# iree-compile: discardable attributes of an unregistered namespace are kept as they are).
IREE_VERSION_ATTR = "mlir_ansor.iree_version"


@dataclass(frozen=True)
class TunedEntry:
    task_id: str  # a symbol-safe id, e.g. "t3"
    task_mlir: str  # the task's standalone function (its body is the matcher's pattern)
    ops: tuple[OpInfo, ...]
    program: Program
    # The codegen-time form of the dispatch. Which form IREE's configuration sees depends on
    # the dispatch (a strided 1x1 conv is already a strided slice + plain contraction there,
    # a batch-less conv is not yet 4-D), so when it differs from task_mlir it gets a matcher
    # of its own.
    view_mlir: str = ""


def strategy_name(task_id: str) -> str:
    return f"strategy_{task_id}"


def _readonly() -> dict:
    return {"transform.readonly": ir.UnitAttr.get()}


def match_task_dag(target: ir.Value, task_mlir: str, anchor_name: str) -> None:
    """Match ops that `target` is the root of a DAG equal to the task's (shapes included)."""
    transform.MatchOperationNameOp(target, [anchor_name])
    any_value = transform.AnyValueType.get()
    dag = ir.Operation.create("transform.iree.match.cast_compatible_dag_from_root",
                              results=[any_value, any_value], operands=[target], regions=1)
    pattern = ir.Module.parse(task_mlir)
    func = pattern.body.operations[0]
    block = func.regions[0].blocks[0]
    ops = list(block.operations)
    ops[-1].operation.erase()  # func.return -> the pattern's implicit transform.yield
    with ir.InsertionPoint(block):
        transform.YieldOp([])
    block.append_to(dag.regions[0])


def captures_outer_values(task_mlir: str) -> bool:
    """Whether an op body uses a value from outside it that no op of the DAG takes as an
    operand (e.g. a scalar constant only the body reads). IREE's DAG matcher never matches
    such patterns (verified on 3.13: the same constant also feeding a linalg.fill is fine),
    so they need `match_task_structure`."""
    with ir.Context():
        module = ir.Module.parse(task_mlir)
        linalg = [o for o in tileable_ops(module.operation) if o.name.startswith("linalg.")]
        leaves = {_key(v) for op in linalg for v in op.operands}
        for op in linalg:
            if not len(op.regions):
                continue  # an aggregate op (linalg.softmax) has no body
            for block in op.regions[0].blocks:
                for inner in block.operations:
                    for v in inner.operands:
                        owner = v.owner.owner if isinstance(v.owner, ir.Block) else v.owner
                        if not within(owner, op) and _key(v) not in leaves:
                            return True
    return False


def _key(v: ir.Value) -> str:
    return v.get_name()


def _match_dims(target: ir.Value, op: OpInfo) -> None:
    """`target` has `op`'s loop kinds and extents (its static ones: a dynamic loop's extent
    is any)."""
    p64 = transform.ParamType.get(ir.IntegerType.get_signless(64))
    st = ir.Operation.create("transform.match.structured", results=[p64], operands=[target],
                             regions=1, attributes={"failure_propagation_mode": ir.IntegerAttr.get(
                                 ir.IntegerType.get_signless(32), 1)})
    block = st.regions[0].blocks.append(any_op())
    with ir.InsertionPoint(block):
        h = block.arguments[0]
        dims = ir.Operation.create("transform.match.structured.dim", results=[p64],
                                   operands=[h], attributes={
                                       "is_all": ir.UnitAttr.get(),
                                       "raw_dim_list": ir.DenseI64ArrayAttr.get([])}).result
        for i, kind in enumerate(op.iterators):
            ir.Operation.create("transform.match.structured.dim", operands=[h], attributes={
                kind: ir.UnitAttr.get(), "raw_dim_list": ir.DenseI64ArrayAttr.get([i])})
        # The operand counts too: without them a gather with no inputs (nearest upsampling)
        # matched a bias add of another dispatch with the same loops.
        n_in = sum(1 for o in op.operands if not o.is_output)
        for kind, want in (("num_inputs", n_in), ("num_inits", len(op.operands) - n_in)):
            got = ir.Operation.create(f"transform.match.structured.{kind}", results=[p64],
                                      operands=[h]).result
            ref = transform.ParamConstantOp(p64, ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), want)).result
            ir.Operation.create("transform.match.param.cmpi", operands=[got, ref], attributes={
                "predicate": ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 0)})
        ir.Operation.create("transform.match.structured.yield", operands=[dims])
    if not op.dynamic_loops:
        ir.Operation.create("transform.iree.match.dims_equal", operands=[st.results[0]],
                            attributes={"expected_values": ir.DenseI64ArrayAttr.get(
                                list(op.extents))})
        return
    for i, ext in enumerate(op.extents):
        # A dynamic loop must be dynamic in the payload too: a static dispatch of the same
        # structure (a BERT layer's static scaling beside its dynamic one) took a dynamic
        # task's strategy, whose peel failed there ("failed to peel the last iteration").
        st = ir.Operation.create("transform.match.structured", results=[p64],
                                 operands=[target], regions=1, attributes={
                                     "failure_propagation_mode": ir.IntegerAttr.get(
                                         ir.IntegerType.get_signless(32), 1)})
        block = st.regions[0].blocks.append(any_op())
        with ir.InsertionPoint(block):
            dim = ir.Operation.create("transform.match.structured.dim", results=[p64],
                                      operands=[block.arguments[0]], attributes={
                                          "raw_dim_list": ir.DenseI64ArrayAttr.get([i])}).result
            ir.Operation.create("transform.match.structured.yield", operands=[dim])
        dynamic = i in op.dynamic_loops  # (a dynamic extent reads as a negative number)
        want = transform.ParamConstantOp(p64, ir.IntegerAttr.get(
            ir.IntegerType.get_signless(64), 0 if dynamic else ext)).result
        ir.Operation.create("transform.match.param.cmpi", operands=[st.results[0], want],
                            attributes={"predicate": ir.IntegerAttr.get(
                                ir.IntegerType.get_signless(32), 2 if dynamic else 0)})


def match_task_structure(target: ir.Value, task_mlir: str) -> None:
    """Fallback matcher on loop structure: every op of the task's DAG, reached from the
    root through its operands, has the right name, loop kinds and extents. Bodies are not
    compared; a strategy only tiles and vectorizes, which is correct for any body."""
    dims = signature_dims(task_mlir)
    # The payload is matched before any decomposition (a linalg.softmax is one op there,
    # several after the strategy's prelude): the pattern's own ops, aggregates unread.
    infos = dynamic_ops(task_mlir, dims, {0: NOMINAL_SIZE}, decompose=False) if dims \
        else analyze_undecomposed(task_mlir)
    with ir.Context():
        raw = [o.name for o in tileable_ops(ir.Module.parse(task_mlir).operation)]
    tagged = _tagged_ops(task_mlir)
    for i, (name, info) in enumerate(zip(raw, infos)):
        h = _producer(target, operand_path(task_mlir, len(raw) - 1, i))
        transform.MatchOperationNameOp(h, [name])
        if info is not None and info.is_linalg:
            _match_dims(h, info)
        if i in tagged:  # a size branch's copy: only that branch's (see below)
            match_task_dag(h, tagged[i], name)


def _producer(root: ir.Value, path: Sequence[int]) -> ir.Value:
    """A handle to the op reached from `root` through the operand indices `path`."""
    h = root
    for k in path:
        h = transform.GetProducerOfOperand(any_op(), h, k).result
    return h


def _tagged_ops(task_mlir: str) -> dict[int, str]:
    """Tileable op index -> a one-op pattern of it, for the ops that carry a size-branch
    tag (`size_dispatch.TAG_ATTR`): its operands are arguments (wildcards), so the DAG
    matcher compares only the op itself, attributes included. The structure above compares
    no attributes, and without this a tagged strategy matched every branch's copy."""
    out: dict[int, str] = {}
    if TAG_ATTR not in task_mlir:
        return out
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(task_mlir)
        for i, op in enumerate(tileable_ops(module.operation)):
            if TAG_ATTR in op.attributes:
                out[i] = _one_op_pattern(op)
    return out


def _one_op_pattern(op: ir.Operation) -> str:
    """`op` alone in a function whose arguments are its operands. Every wrapper of the new
    module's ops dies with this frame, before the module: a wrapper outliving its module
    is a dangling pointer the bindings may hand out again for a new op at the same
    address (heap corruption seen when one module per tagged op was rebound in a loop)."""
    one = ir.Module.create()
    with ir.InsertionPoint(one.body):
        f = func_d.FuncOp("pattern", ([v.type for v in op.operands],
                                      [r.type for r in op.results]))
    block = f.add_entry_block()
    copy = op.clone(ir.InsertionPoint(block))
    for k, a in enumerate(block.arguments):
        copy.operands[k] = a
    _own_captures(copy, block)
    f.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in block.arguments], [r.type for r in op.results]))
    with ir.InsertionPoint(block):
        func_d.ReturnOp(list(copy.results))
    text = str(one)
    del copy, block, f
    return text


def _own_captures(copy: ir.Operation, block: ir.Block) -> None:
    """Values `copy`'s body reads from above (a constant divisor) are defined in the
    original module: a constant is copied into `block`, anything else becomes an argument
    of it too (the wrappers made here die with this frame, see `_one_op_pattern`)."""
    captured: dict[ir.Value, ir.Value] = {}

    def own(o: ir.Operation) -> ir.WalkResult:
        for k, v in enumerate(o.operands):
            owner = v.owner if isinstance(v, ir.OpResult) else v.owner.owner
            if not within(owner, copy):
                if v not in captured:
                    src = getattr(owner, "operation", owner)
                    if isinstance(v, ir.OpResult) and src.name == "arith.constant":
                        captured[v] = src.clone(ir.InsertionPoint.at_block_begin(block)
                                                ).results[0]
                    else:
                        captured[v] = block.add_argument(v.type, ir.Location.unknown())
                o.operands[k] = captured[v]
        return ir.WalkResult.ADVANCE

    for region in copy.regions:
        for b in region.blocks:
            for inner in b.operations:
                inner.operation.walk(own)


def _patterns(entry: TunedEntry) -> list[tuple[str, str]]:
    """(matcher name, pattern) pairs of an entry."""
    out = [(f"match_{entry.task_id}", entry.task_mlir)]
    if entry.view_mlir and entry.view_mlir != entry.task_mlir:
        out.append((f"match_{entry.task_id}_view", entry.view_mlir))
    return out


def _root_op_name(pattern: str) -> str:
    """Name of the pattern's last tileable op (the DAG's root); read without the analysis,
    which needs static shapes."""
    with ir.Context():
        return tileable_ops(ir.Module.parse(pattern).operation)[-1].name


def sizes_as_arguments(pattern: str) -> str:
    """A dynamic task's pattern with each use of a `tensor.dim` (the body's read of a
    dynamic size) an index argument of its own: the DAG matcher takes arguments as
    wildcards; in the payload a size is a workload ordinal, not a tensor.dim; and IREE
    3.13's matcher fails on one argument used twice (softmax's row statistics and its
    output sized by the same rows: never configured)."""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(pattern)
        func = module.body.operations[0]
        block = func.regions[0].blocks[0]
        dims = [o for o in block.operations if o.operation.name == "tensor.dim"]
        if not dims:
            return pattern
        for d in dims:
            for use in list(d.operation.results[0].uses):
                use.owner.operands[use.operand_number] = block.add_argument(
                    ir.IndexType.get(), ir.Location.unknown())
            d.operation.erase()
        for o in list(block.operations):
            o = o.operation
            if o.name == "arith.constant" and not list(o.results[0].uses):
                o.erase()
        ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [a.type for a in block.arguments], ftype.results))
        return str(module)


# What may give a pattern argument's tensor in the payload: the ops a dispatch reads memory
# with where IREE configures it (3.13 on llvm-cpu: load_from_buffer; the flow-level load
# too, should a pipeline configure earlier), a constant IREE inlined (a batch norm's
# parameters), and ops that only reshape or slice one of those. No computing op.
LEAF_OPS = ("iree_codegen.load_from_buffer", "iree_tensor_ext.dispatch.tensor.load",
            "arith.constant", "tensor.empty", "tensor.expand_shape", "tensor.collapse_shape",
            "tensor.extract_slice", "tensor.cast")


def match_loaded_leaves(target: ir.Value, pattern: str) -> None:
    """Every tensor a pattern op takes as an argument of the pattern is loaded (or a
    constant) in the payload too, not computed there (LEAF_OPS). The DAG matcher takes
    arguments as wildcards, so on ResNet-50 a batch norm + ReLU task's strategy took a
    conv + batch norm + ReLU dispatch of the same shape (and failed to compile there), and
    a conv's took the conv whose pad IREE's pad fusion had put into its dispatch."""
    module = ir.Module.parse(pattern)
    ops = tileable_ops(module.operation)
    entry = module.body.operations[0].regions[0].blocks[0]
    for i, op in enumerate(ops):
        leaves = [k for k, v in enumerate(op.operands)
                  if isinstance(v, ir.BlockArgument) and v.owner == entry
                  and isinstance(v.type, ir.RankedTensorType)]
        if not leaves:
            continue
        try:
            path = operand_path(pattern, len(ops) - 1, i)
        except UnsupportedDispatch:  # reached through a reshape, not a tileable op: the
            continue  # DAG matcher alone decides there
        h = _producer(target, path)
        for k in leaves:
            transform.MatchOperationNameOp(_producer(h, [k]), list(LEAF_OPS))


def _build_matcher(name: str, pattern: str) -> None:
    seq = transform.NamedSequenceOp(name, [any_op()], [any_op()], arg_attrs=[_readonly()])
    with ir.InsertionPoint(seq.body):
        if captures_outer_values(pattern):
            match_task_structure(seq.bodyTarget, pattern)
        else:
            match_task_dag(seq.bodyTarget, sizes_as_arguments(pattern),
                           _root_op_name(pattern))
        match_loaded_leaves(seq.bodyTarget, pattern)
        transform.YieldOp([seq.bodyTarget])


def _build_action(entry: TunedEntry) -> None:
    seq = transform.NamedSequenceOp(f"apply_{entry.task_id}", [any_op()], [],
                                    arg_attrs=[_readonly()])
    with ir.InsertionPoint(seq.body):
        func = transform.GetParentOp(any_op(), seq.bodyTarget, op_name="func.func").result
        info = ir.Attribute.parse(
            "#iree_codegen.translation_info<pipeline = #iree_codegen.transform_dialect_codegen"
            f" codegen_spec = @{strategy_name(entry.task_id)}>")
        param = transform.ParamConstantOp(transform.AnyParamType.get(), info).result
        transform.AnnotateOp(func, "translation_info", param=param)
        transform.YieldOp([])


def build_kernel_config(pairs: Sequence[tuple[str, str]]) -> transform.NamedSequenceOp:
    """`@__kernel_config`: `foreach_match` over the dispatch with (matcher, action) pairs."""
    entry = transform.NamedSequenceOp("__kernel_config", [any_op()], [any_op()],
                                      arg_attrs=[{"transform.consumed": ir.UnitAttr.get()}])
    with ir.InsertionPoint(entry.body):
        res = transform.ForeachMatchOp(
            any_op(), [], entry.bodyTarget, [],
            ir.ArrayAttr.get([ir.FlatSymbolRefAttr.get(m) for m, _ in pairs]),
            ir.ArrayAttr.get([ir.FlatSymbolRefAttr.get(a) for _, a in pairs]))
        transform.YieldOp([res.results[0]])
    return entry


def build_library(entries: Sequence[TunedEntry]) -> ir.Module:
    """The whole library (strategies, matchers, actions, `@__kernel_config`). Needs a context."""
    module = ir.Module.create()
    module.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
    module.operation.attributes[IREE_VERSION_ATTR] = ir.StringAttr.get(environment()["iree"])
    with ir.InsertionPoint(module.body):
        for e in entries:
            build = build_gpu_strategy if e.program.sketch.gpu else build_strategy
            build(e.ops, e.program, strategy_name(e.task_id))
        for e in entries:
            for name, pattern in _patterns(e):
                _build_matcher(name, pattern)
            _build_action(e)
        build_kernel_config([(name, f"apply_{e.task_id}") for e in entries
                             for name, _ in _patterns(e)])
    if not module.operation.verify():
        raise ValueError("transform library does not verify")
    return module


def library_text(entries: Sequence[TunedEntry]) -> str:
    with ir.Context(), ir.Location.unknown():
        return str(build_library(entries))
