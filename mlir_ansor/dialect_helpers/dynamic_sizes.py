"""Dynamic sizes of a dispatch, expressed in the model's input dimensions.

A dispatch of a model with `--dynamic` dimensions takes `index` operands (its workload and
the `?` sizes of its tensors). IREE computes them in the program from the inputs'
`hal.buffer_view.dim`; a `SizeExpr` is that computation, read from the flow-level program,
so every size of a dispatch is known for any input sizes (e.g. B*S of a flattened batch x
sequence) without running the model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from iree.compiler import ir

from mlir_ansor.errors import UnsupportedDispatch

# Integer arith ops on sizes, evaluated (also by small_sizes.py).
BINARY_OPS = {
    "arith.addi": lambda a, b: a + b,
    "arith.subi": lambda a, b: a - b,
    "arith.muli": lambda a, b: a * b,
    "arith.divui": lambda a, b: a // b,
    "arith.divsi": lambda a, b: int(a / b),
    "arith.floordivsi": lambda a, b: a // b,
    "arith.ceildivui": lambda a, b: -(-a // b),
    "arith.ceildivsi": lambda a, b: -(-a // b),
    "arith.remui": lambda a, b: a % b,
    "arith.remsi": lambda a, b: a - b * int(a / b),
    "arith.maxsi": max, "arith.maxui": max, "arith.minsi": min, "arith.minui": min,
}
CAST_OPS = ("arith.index_cast", "arith.index_castui", "arith.extui", "arith.extsi",
          "arith.trunci")


@dataclass(frozen=True)
class SizeExpr:
    """`op` over `args`: "input" (args: input position, dim), "const" (args: value), or an
    arith op name over two sub-expressions."""

    op: str
    args: tuple

    def evaluate(self, dims: Mapping[tuple[int, int], int]) -> int:
        """The size when input `pos` has size `dims[(pos, dim)]` in dimension `dim`."""
        if self.op == "input":
            key = (self.args[0], self.args[1])
            if key not in dims:
                raise KeyError(f"no size given for input {key[0]} dimension {key[1]}")
            return int(dims[key])
        if self.op == "const":
            return int(self.args[0])
        a, b = (e.evaluate(dims) for e in self.args)
        return int(BINARY_OPS[self.op](a, b))

    def __str__(self) -> str:
        if self.op == "input":
            return f"in{self.args[0]}[{self.args[1]}]"
        if self.op == "const":
            return str(self.args[0])
        return f"{self.op.removeprefix('arith.')}({self.args[0]}, {self.args[1]})"


def size_expr(value: ir.Value) -> SizeExpr:
    """How the program computes the index `value` from its inputs' dimensions (an
    UnsupportedDispatch naming the op it cannot follow)."""
    if isinstance(value.owner, ir.Block):
        raise UnsupportedDispatch("a dynamic size is a function argument, not an input's "
                                  "dimension")
    op = value.owner
    name = op.name
    if name == "hal.buffer_view.dim":
        view = op.operands[0]
        if not isinstance(view.owner, ir.Block):
            raise UnsupportedDispatch("a dynamic size reads a buffer view that is not an input")
        return SizeExpr("input", (ir.BlockArgument(view).arg_number,
                                  ir.IntegerAttr(op.attributes["index"]).value))
    if name == "arith.constant":
        return SizeExpr("const", (ir.IntegerAttr(op.attributes["value"]).value,))
    if name in CAST_OPS:
        return size_expr(op.operands[0])
    if name in BINARY_OPS:
        return SizeExpr(name, (size_expr(op.operands[0]), size_expr(op.operands[1])))
    raise UnsupportedDispatch(f"a dynamic size is computed by '{name}': not followed")


# The size a dynamic function is read at when no better one is known (any size works: its
# strategies do not depend on it).
NOMINAL_SIZE = 97


def specialize(func_mlir: str, dynamic_dims: Sequence[tuple[int, int, int]],
               ordinal_sizes: Mapping[int, int]) -> str:
    """The tensor function with its `?` arguments made static (`dynamic_dims`: (argument,
    dim, workload ordinal); `ordinal_sizes`: ordinal -> size) and the sizes folded through
    its body: what the analysis reads a dynamic task at."""
    from iree.compiler.passmanager import PassManager

    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(func_mlir)
        func = module.body.operations[0]
        block = func.regions[0].blocks[0]
        shapes = {i: list(ir.RankedTensorType(a.type).shape)
                  for i, a in enumerate(block.arguments)}
        for i, d, k in dynamic_dims:
            shapes[i][d] = int(ordinal_sizes[k])
        new_types = []
        with ir.InsertionPoint.at_block_begin(block):
            for i, arg in enumerate(list(block.arguments)):
                t = ir.RankedTensorType(arg.type)
                static = ir.RankedTensorType.get(shapes[i], t.element_type, t.encoding)
                new_types.append(static)
                if static == t:
                    continue
                arg.set_type(static)
                cast = ir.Operation.create("tensor.cast", results=[t], operands=[arg])
                for use in list(arg.uses):
                    if use.owner != cast:
                        use.owner.operands[use.operand_number] = cast.result
        ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        func.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(new_types, ftype.results))
        PassManager.parse("builtin.module(func.func(canonicalize,cse))").run(module.operation)
        return str(module)


def dynamic_ops(func_mlir: str, dynamic_dims: Sequence[tuple[int, int, int]],
                sizes: Mapping[int, int], decompose: bool = True) -> tuple:
    """The ops (`linalg_info.OpInfo`) of a dynamic function read at `sizes`, each with its
    dynamic loops: those whose extent moves with the sizes (`decompose=False`: as the
    payload holds them, None for an aggregate op; `linalg_info.analyze_undecomposed`)."""
    from dataclasses import replace

    from mlir_ansor.dialect_helpers.linalg_info import analyze_task, analyze_undecomposed

    analyze = analyze_task if decompose else analyze_undecomposed
    ops = analyze(specialize(func_mlir, dynamic_dims, sizes))
    other = analyze(specialize(func_mlir, dynamic_dims,
                               {k: 2 * v + 1 for k, v in sizes.items()}))
    known = [(o, p) for o, p in zip(ops, other) if o is not None]
    if known and all(o.extents == p.extents for o, p in known) and dynamic_dims:
        raise UnsupportedDispatch("no loop extent follows the dynamic sizes")
    return tuple(None if o is None else replace(o, dynamic_loops=tuple(
        l for l, (a, b) in enumerate(zip(o.extents, p.extents)) if a != b))
        for o, p in zip(ops, other))


def signature_dims(func_mlir: str) -> tuple[tuple[int, int, int], ...]:
    """(argument, dim, 0) for every `?` of a function's arguments: one shared size, for
    reading a pattern whose workload ordinals are not known (a library's matcher)."""
    with ir.Context():
        module = ir.Module.parse(func_mlir)
        args = module.body.operations[0].regions[0].blocks[0].arguments
        return tuple((i, d, 0) for i, a in enumerate(args)
                     if isinstance(a.type, ir.RankedTensorType)
                     for d in range(a.type.rank) if a.type.is_dynamic_dim(d))
