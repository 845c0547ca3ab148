"""IREE dispatches as tasks: a runnable module per dispatch, and its linalg body as a
plain tensor function.

A dispatch function reads its operands through `iree_tensor_ext.dispatch.tensor.load`
(from function arguments at flow level, from bindings later) and writes results with
`...tensor.store`. Its tensor-function form (`func.func @main(tensors) -> tensors`: loads
become arguments, stores results, large constants arguments) is what the analysis reads
and what the exported library's matcher compares against a payload.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from iree.compiler import ir

from mlir_ansor.dialect_helpers.dynamic_sizes import SizeExpr, size_expr
from mlir_ansor.errors import UnsupportedDispatch

_LOADS = ("iree_tensor_ext.dispatch.tensor.load", "iree_codegen.load_from_buffer")
_STORES = ("iree_tensor_ext.dispatch.tensor.store", "iree_codegen.store_to_buffer")
_SUBSPAN = "hal.interface.binding.subspan"
_ORDINAL = "iree_tensor_ext.dispatch.workload.ordinal"
# Index plumbing of a dynamic dispatch: dead once loads are arguments and sizes tensor.dim.
_SIZE_PLUMBING = ("flow.dispatch.tie_shape", _ORDINAL, "hal.interface.constant.load",
                  "arith.index_cast", "arith.index_castui", "arith.extui", "arith.extsi",
                  "arith.trunci", "arith.ori", "arith.shli", "util.assume.int")


@dataclass(frozen=True)
class DispatchFunc:
    """One dispatch of a model, rewritten as a standalone tensor function."""

    name: str  # IREE's name for the dispatch, e.g. main_dispatch_1_conv_...
    task_mlir: str  # module text holding `func.func @main`
    input_types: tuple[str, ...]
    output_types: tuple[str, ...]
    # Per `?` of an argument: (argument, dim, workload ordinal of its size); equal ordinals
    # are equal sizes.
    dynamic_dims: tuple[tuple[int, int, int], ...] = ()
    # (workload ordinal, the most it can be): a dynamic slice of a binding whose type is
    # static there (IREE folded a cast: a branch that only runs for small sizes reads a
    # 1x1x1 buffer as 1x?x1). Larger sizes would read past the buffer.
    ordinal_bounds: tuple[tuple[int, int], ...] = ()
    # Per argument of the task function, the argument of the dispatch (of the runnable
    # module's @main) it loads from, or None (a constant hoisted out of the body): the
    # function reads loads in body order, sliced, not the dispatch's arguments.
    arg_sources: tuple[int | None, ...] = ()


def walk_ops(op: ir.Operation, name: str) -> list[ir.Operation]:
    """Every op named `name` nested in `op` (pre-order)."""
    found: list[ir.Operation] = []

    def visit(o: ir.Operation) -> ir.WalkResult:
        if o.name == name:
            found.append(o)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found


def within(op, ancestor: ir.Operation) -> bool:
    """`op` (an Operation or OpView) is `ancestor` or nested in its regions."""
    p = op.operation if hasattr(op, "operation") else op
    while p is not None:
        if p == ancestor.operation:
            return True
        p = p.parent
    return False


def defined_within(value: ir.Value, op: ir.Operation) -> bool:
    """`value` is defined inside `op`'s regions (by an op there, or as a block argument)."""
    owner = value.owner
    parent = owner.owner if isinstance(owner, ir.Block) else owner.operation.parent
    return parent is not None and within(parent, op)


def _is_hoistable_constant(op: ir.Operation) -> bool:
    if op.name != "arith.constant" or not isinstance(op.results[0].type, ir.RankedTensorType):
        return False
    value = op.attributes["value"]
    if isinstance(value, ir.DenseElementsAttr):
        return not value.is_splat
    return True  # dense_resource and friends: a blob we do not carry along


@dataclass(frozen=True)
class FlowDispatch:
    """One `flow.executable` of a flow-level module and how the program calls it."""

    name: str
    pattern: DispatchFunc | None  # its linalg body as a tensor function (None: unsupported)
    module_mlir: str  # runnable: the executable verbatim + `@main` calling it once
    weight: int  # number of flow.dispatch ops calling it
    skip_reason: str = ""
    input_types: tuple[str, ...] = ()  # of the runnable @main
    output_types: tuple[str, ...] = ()
    # Per `?` of the runnable @main's inputs: (input, dim, its size in the model's inputs).
    size_exprs: tuple[tuple[int, int, SizeExpr], ...] = ()
    ordinal_exprs: tuple[SizeExpr, ...] = ()  # per workload ordinal: its size in the model


def flow_dispatches(module: ir.Module) -> list[FlowDispatch]:
    """Every executable of a flow-level module (`iree-compile --compile-to=flow`).

    The runnable module keeps the executable exactly as IREE formed it, so compiling it
    gives the model's dispatch payload (re-forming dispatches from a tensor function does
    not: IREE may re-specialize and re-expand ops).
    """
    exes: dict[str, ir.Operation] = {}
    calls: dict[str, list[ir.Operation]] = {}

    def visit(o: ir.Operation) -> ir.WalkResult:
        if o.name == "flow.executable":
            exes[ir.StringAttr(o.attributes["sym_name"]).value] = o
            return ir.WalkResult.SKIP
        if o.name == "flow.dispatch":
            ref = str(o.attributes["entry_points"]).strip("[]@").split("::")[0]
            calls.setdefault(ref, []).append(o)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    out = []
    with module.context, ir.Location.unknown():
        for name, exe in exes.items():
            users = calls.get(name, [])
            if not users:
                continue
            if all(_in_initializer(u) for u in users):
                out.append(FlowDispatch(name, None, "", len(users),
                                        "runs once, at module load (an initializer): left "
                                        "to IREE"))
                continue
            try:
                out.append(_flow_dispatch(name, exe, users))
            except UnsupportedDispatch as e:
                out.append(FlowDispatch(name, None, "", len(users), str(e)))
    return out


def encoded(op: ir.Operation) -> bool:
    """Whether a tensor in `op` carries an encoding (IREE's data tiling marks the operands
    of the contractions it will turn into packed mmt4d kernels in codegen)."""
    found = False

    def visit(o: ir.Operation) -> ir.WalkResult:
        nonlocal found
        for r in o.results:
            if isinstance(r.type, ir.RankedTensorType) and \
                    ir.RankedTensorType(r.type).encoding is not None:
                found = True
                return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found


def _segments(op: ir.Operation) -> list[list[ir.Value]]:
    """The operands of `op` split by its operandSegmentSizes."""
    sizes = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    operands, out, at = list(op.operands), [], 0
    for n in sizes:
        out.append(operands[at:at + n])
        at += n
    return out


def _tensor_dim(tensor: ir.Value, dim: int) -> ir.Value:
    """`tensor.dim %tensor, dim` at the current insertion point."""
    c = ir.Operation.create("arith.constant", results=[ir.IndexType.get()], attributes={
        "value": ir.IntegerAttr.get(ir.IndexType.get(), dim)}).result
    return ir.Operation.create("tensor.dim", results=[ir.IndexType.get()],
                               operands=[tensor, c]).result


def _in_initializer(op: ir.Operation) -> bool:
    """Whether `op` lies in a `util.initializer` (code IREE runs once, when the module
    loads: none of a call's time)."""
    parent = op.parent
    while parent is not None:
        if parent.name == "util.initializer":
            return True
        if parent.name == "builtin.module":
            return False
        parent = parent.parent
    return False


def _flow_dispatch(name: str, exe: ir.Operation, users: list[ir.Operation]) -> FlowDispatch:
    """The runnable module: `@main(tensors)` calls the dispatch once. A dynamic dispatch's
    index operands (workload, sizes) become `tensor.dim`s of @main's arguments, and each
    `?` of those keeps how the model computes it (`SizeExpr`)."""
    from iree.compiler.dialects import func as func_d

    call = users[0]
    funcs = walk_ops(exe, "func.func")
    if len(funcs) != 1:
        raise UnsupportedDispatch(f"executable {name}: {len(funcs)} functions")
    if encoded(funcs[0]):
        raise UnsupportedDispatch(
            f"left to IREE's data tiling (executable {name}: encoded tensors, packed mmt4d "
            "kernels in codegen)")
    if walk_ops(funcs[0], "tensor.pad"):
        # (IREE's pad fusion: without it no dispatch of ours held a pad.) No strategy of
        # ours is applied to such a dispatch: every candidate of C1D-b16's conv and of a
        # padded depthwise conv was "not configured", so trials there would be wasted.
        raise UnsupportedDispatch(
            f"left to IREE's kernel (executable {name}: a pad fused into the dispatch, "
            "which our strategies do not take)")
    workload, args, arg_dims, _ = _segments(call)
    tensors = [v for v in args if isinstance(v.type, ir.RankedTensorType)]
    # Which main argument dimension each size value of the call is.
    sized: list[tuple[ir.Value, int, int]] = []
    dims_iter = iter(arg_dims)
    for i, v in enumerate(tensors):
        for d, n in enumerate(v.type.shape):
            if v.type.is_dynamic_dim(d):
                sized.append((next(dims_iter), i, d))
    exprs = tuple((i, d, size_expr(v)) for v, i, d in sized)
    runnable = ir.Module.create()
    with ir.InsertionPoint(runnable.body):
        exe.clone()
        ftype = ir.FunctionType.get([v.type for v in tensors], [r.type for r in call.results])
        main = func_d.FuncOp("main", ftype)
        entry = main.add_entry_block()
        with ir.InsertionPoint(entry):
            dims = [_tensor_dim(entry.arguments[i], d) for _, i, d in sized]
            new_call = call.clone()
            t = 0
            for k, v in enumerate(call.operands):
                if isinstance(v.type, ir.RankedTensorType):
                    new_call.operands[k] = entry.arguments[t]
                    t += 1
                    continue
                at = next((j for j, (s, _, _) in enumerate(sized) if s == v), None)
                if at is None:
                    raise UnsupportedDispatch(
                        f"executable {name}: an index operand is not a size of its tensor "
                        "operands")
                new_call.operands[k] = dims[at]
            func_d.ReturnOp(list(new_call.results))
    if not runnable.operation.verify():
        raise UnsupportedDispatch(f"executable {name}: task module does not verify")
    # The pattern is cut from a private copy of the dispatch function.
    holder = ir.Module.create()
    with ir.InsertionPoint(holder.body):
        copy = funcs[0].clone()
    return FlowDispatch(name, to_task_function(copy), str(runnable), len(users), "",
                        tuple(str(v.type) for v in tensors),
                        tuple(str(r.type) for r in call.results), exprs,
                        tuple(size_expr(v) for v in workload) if sized else ())


def codegen_view(configured: str) -> DispatchFunc:
    """The dispatch as IREE's codegen hands it to a strategy, from a
    `--iree-hal-dump-executable-configurations-to` file (codegen may have rewritten the
    dispatch since dispatch formation, e.g. re-expanded unit dims of a convolution)."""
    with ir.Context() as ctx:
        module = ir.Module.parse(configured, ctx)
        funcs = [f for f in walk_ops(module.operation, "func.func")]
        if len(funcs) != 1:
            raise UnsupportedDispatch(f"configured executable has {len(funcs)} functions")
        # Drop IREE's own decisions: the view is the payload, not a configuration.
        def strip(o: ir.Operation) -> ir.WalkResult:
            for key in ("translation_info", "lowering_config", "compilation_info"):
                if key in o.attributes:
                    del o.attributes[key]
            return ir.WalkResult.ADVANCE

        funcs[0].walk(strip)
        return to_task_function(funcs[0])


def to_task_function(func: ir.Operation) -> DispatchFunc:
    """Rewrite `func` (in place, then detached into a new module) into a tensor function."""
    with func.context:
        return _to_task_function(func)


def _dynamic_result_sizes(load: ir.Operation) -> list[tuple[int, ir.Value]]:
    """(result dim, size value) of each `?` a load produces: from its sizes (flow level) or
    from the dynamic dims of the binding it reads (codegen's load_from_buffer)."""
    rtype = ir.RankedTensorType(load.results[0].type)
    dyn = [d for d in range(rtype.rank) if rtype.is_dynamic_dim(d)]
    if not dyn:
        return []
    if "static_sizes" in load.attributes:
        sizes = _segments(load)[3]
    else:
        src = load.operands[0].owner
        if src.name == _SUBSPAN:
            return list(zip(dyn, _segments(src)[-1]))
        if src.name != "memref.subview" or src.operands[0].owner.name != _SUBSPAN:
            raise UnsupportedDispatch(f"a dynamic tensor loaded from '{src.name}'")
        sizes = _segments(src)[2]  # a slice of a binding: codegen's rank-reducing load
    # The `?` of the sizes (a load's, a slice's) are those of the result, in order: a
    # rank-reducing one drops only unit (static) sizes.
    if len(sizes) != len(dyn):
        raise UnsupportedDispatch(f"a load of {len(sizes)} dynamic sizes into a tensor with "
                                  f"{len(dyn)}")
    return list(zip(dyn, sizes))


def _static_shape(t: ir.Type) -> list[int | None] | None:
    """The shape of a dispatch tensor type (None per `?`), None if it is no tensor."""
    m = re.search(r"tensor<((?:[\d?]+x)+)\w", str(t))  # (not the dispatch.tensor<...)
    return None if m is None else [None if d == "?" else int(d)
                                   for d in m.group(1).split("x")[:-1]]


def _ordinal_bounds(func: ir.Operation, ordinals: list[tuple[ir.Value, int]]
                    ) -> tuple[tuple[int, int], ...]:
    """(ordinal, most) for every workload ordinal that sizes a slice of a binding whose
    extent there is static (`DispatchFunc.ordinal_bounds`); flow-level loads and stores."""
    bounds: dict[int, int] = {}
    for kind, sizes_at, buf_at in ((_LOADS[0], 3, 0), (_STORES[0], 4, 1)):
        for op in walk_ops(func, kind):
            shape = _static_shape(op.operands[buf_at].type)
            if shape is None:
                continue
            static = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
            offsets = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
            dyn = iter(_segments(op)[sizes_at])
            for d, n in enumerate(static):
                if n != ir.ShapedType.get_dynamic_size():
                    continue
                size = next(dyn)
                k = next((k for v, k in ordinals if v == size), None)
                if k is None or d >= len(shape) or shape[d] is None or \
                        offsets[d] == ir.ShapedType.get_dynamic_size():
                    continue
                bounds[k] = min(bounds.get(k, shape[d]), shape[d] - offsets[d])
    return tuple(sorted(bounds.items()))


def _to_task_function(func: ir.Operation) -> DispatchFunc:
    name = ir.StringAttr(func.attributes["sym_name"]).value
    if walk_ops(func, "hal.interface.constant.load") and not walk_ops(func, _ORDINAL):
        raise UnsupportedDispatch(f"dispatch {name}: push constants that are no workload "
                                  "size: left to IREE's default codegen")
    ordinals = [(o.results[0], ir.IntegerAttr(o.attributes["ordinal"]).value)
                for o in walk_ops(func, _ORDINAL)]
    bounds = _ordinal_bounds(func, ordinals)
    block = func.regions[0].blocks[0]
    n_orig_args = len(block.arguments)  # flow-level dispatches take dispatch tensors as args
    ops = list(block.operations)
    loc = ir.Location.unknown(func.context)
    in_types: list[ir.Type] = []
    arg_sources: list[int | None] = []
    out_values: list[ir.Value] = []
    to_erase: list[ir.Operation] = []
    dynamic: list[tuple[int, int, int]] = []  # (argument, dim, ordinal)
    sources: list[tuple[ir.Value, ir.Value, int]] = []  # (size value, argument, dim)
    for op in ops:
        op = op.operation
        if op.name in _LOADS or _is_hoistable_constant(op):
            result = op.results[0]
            in_types.append(result.type)
            arg_sources.append(_source_argument(op, block, n_orig_args)
                               if op.name in _LOADS else None)
            arg = block.add_argument(result.type, loc)
            for d, size in _dynamic_result_sizes(op) if op.name in _LOADS else ():
                k = next((k for v, k in ordinals if v == size), None)
                if k is None:
                    raise UnsupportedDispatch(f"dispatch {name}: a dynamic size that is no "
                                              "workload ordinal")
                dynamic.append((len(in_types) - 1, d, k))
                sources.append((size, arg, d))
            result.replace_all_uses_with(arg)
            to_erase.append(op)
        elif op.name in _STORES:
            out_values.append(op.operands[0])
            to_erase.append(op)
        # Bindings are left to the dead-op sweep below: views of them (memref.subview of an
        # output written into a padded buffer) must go first, or erasing a binding that
        # still has users corrupts the heap.
    if not out_values:
        raise UnsupportedDispatch(f"dispatch {name}: writes no tensor")
    # A size the body uses (tensor.empty(%m)) becomes the dimension of the argument it sizes.
    with ir.InsertionPoint.at_block_begin(block), loc:
        for v, _ in ordinals:
            src = next(((a, d) for s, a, d in sources if s == v), None)
            if src is None:
                raise UnsupportedDispatch(f"dispatch {name}: a workload size that sizes no "
                                          "input")
            v.replace_all_uses_with(_tensor_dim(*src))
    terminator = ops[-1].operation
    with ir.InsertionPoint.at_block_terminator(block), loc:
        ir.Operation.create("func.return", operands=out_values)
    terminator.erase()
    for op in reversed(to_erase):  # stores first, then loads
        op.erase()
    # Bindings, their views, the index constants that fed them and a dynamic dispatch's
    # size plumbing are dead now.
    changed = True
    while changed:
        changed = False
        for op in reversed(list(block.operations)):
            op = op.operation
            dead = op.results and all(not list(r.uses) for r in op.results)
            if dead and (op.name in ("arith.constant", _SUBSPAN, *_SIZE_PLUMBING)
                         or all(isinstance(r.type, ir.MemRefType) for r in op.results)):
                op.erase()
                changed = True
    for _ in range(n_orig_args):
        block.erase_argument(0)
    out_types = [v.type for v in out_values]
    func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(in_types, out_types))
    func.attributes["sym_name"] = ir.StringAttr.get("main")
    with loc:
        new_module = ir.Module.create()
    func.detach_from_parent()
    new_module.body.append(func)
    if not new_module.operation.verify():
        raise UnsupportedDispatch(f"dispatch {name}: rewritten function does not verify")
    return DispatchFunc(
        name=name,
        task_mlir=str(new_module),
        input_types=tuple(str(t) for t in in_types),
        output_types=tuple(str(t) for t in out_types),
        dynamic_dims=tuple(dynamic),
        ordinal_bounds=bounds,
        arg_sources=tuple(arg_sources),
    )


def _source_argument(load: ir.Operation, block: ir.Block, n_args: int) -> int | None:
    """The position among the block's first `n_args` arguments that `load` reads from
    (a flow-level dispatch's tensor argument), else None (a codegen-level binding)."""
    src = load.operands[0]
    for i in range(n_args):
        if src == block.arguments[i]:
            return i
    return None
