"""Turn IREE dispatch functions into standalone tensor functions (one per task).

IREE's executable sources hold each dispatch as a `func.func` with no arguments that
reads `hal.interface.binding.subspan` bindings through `iree_tensor_ext.dispatch.tensor.load`
and writes them with `...tensor.store`. For tuning we need the same linalg ops as a plain
`func.func @main(tensors...) -> tensors` that IREE will form into the same dispatch again:
loads become arguments, stores become results, large constants become arguments (so the
task carries no weight blobs and gets random inputs).
"""
from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir

from mlir_ansor.errors import UnsupportedDispatch

_LOAD = "iree_tensor_ext.dispatch.tensor.load"
_STORE = "iree_tensor_ext.dispatch.tensor.store"
_SUBSPAN = "hal.interface.binding.subspan"
_UNSUPPORTED = ("hal.interface.constant.load", "iree_tensor_ext.dispatch.workload.ordinal")


@dataclass(frozen=True)
class DispatchFunc:
    """One dispatch of a model, rewritten as a standalone tensor function."""

    name: str  # IREE's name for the dispatch, e.g. main_dispatch_1_conv_...
    task_mlir: str  # module text holding `func.func @main`
    input_types: tuple[str, ...]
    output_types: tuple[str, ...]


def _walk_ops(op: ir.Operation, name: str) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(o: ir.Operation) -> ir.WalkResult:
        if o.name == name:
            found.append(o)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found


def _is_hoistable_constant(op: ir.Operation) -> bool:
    if op.name != "arith.constant" or not isinstance(op.results[0].type, ir.RankedTensorType):
        return False
    value = op.attributes["value"]
    if isinstance(value, ir.DenseElementsAttr):
        return not value.is_splat
    return True  # dense_resource and friends: a blob we do not carry along


def dispatch_funcs(module: ir.Module) -> list[ir.Operation]:
    """The dispatch `func.func`s inside the `hal.executable`s of executable sources."""
    funcs = []
    for exe in _walk_ops(module.operation, "hal.executable"):
        for f in _walk_ops(exe, "func.func"):
            funcs.append(f)
    return funcs


def to_task_function(func: ir.Operation) -> DispatchFunc:
    """Rewrite `func` (in place, then detached into a new module) into a tensor function."""
    with func.context:
        return _to_task_function(func)


def _to_task_function(func: ir.Operation) -> DispatchFunc:
    name = ir.StringAttr(func.attributes["sym_name"]).value
    for bad in _UNSUPPORTED:
        if _walk_ops(func, bad):
            raise UnsupportedDispatch(f"dispatch {name}: '{bad}' (dynamic shapes) is not supported yet")
    block = func.regions[0].blocks[0]
    ops = list(block.operations)
    loc = ir.Location.unknown(func.context)
    in_types: list[ir.Type] = []
    out_values: list[ir.Value] = []
    to_erase: list[ir.Operation] = []
    for op in ops:
        op = op.operation
        if op.name == _LOAD or _is_hoistable_constant(op):
            result = op.results[0]
            in_types.append(result.type)
            arg = block.add_argument(result.type, loc)
            result.replace_all_uses_with(arg)
            to_erase.append(op)
        elif op.name == _STORE:
            out_values.append(op.operands[0])
            to_erase.append(op)
        elif op.name == _SUBSPAN:
            to_erase.append(op)
    if not out_values:
        raise UnsupportedDispatch(f"dispatch {name}: writes no tensor")
    terminator = ops[-1].operation
    with ir.InsertionPoint.at_block_terminator(block), loc:
        ir.Operation.create("func.return", operands=out_values)
    terminator.erase()
    for op in reversed(to_erase):  # stores first, then loads, then bindings
        op.erase()
    # Index constants that only fed the bindings are dead now.
    for op in list(block.operations):
        op = op.operation
        if op.name == "arith.constant" and len(op.results) == 1 and not list(op.results[0].uses):
            op.erase()
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
    )
