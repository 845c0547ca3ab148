"""Small builders and tests of tensor values that the model rewrites share (the Winograd
form, transposed convolutions): the op defining a value, zero fills, zero padding, slices
and reshape groups. Each builds at the caller's insertion point and location."""
from __future__ import annotations

from typing import Sequence

from iree.compiler import ir
from iree.compiler.dialects import arith, linalg, tensor


def defining(value: ir.Value) -> ir.Operation | None:
    """The op that defines `value` (None for a block argument)."""
    owner = value.owner
    if isinstance(owner, ir.OpView):
        owner = owner.operation
    return owner if isinstance(owner, ir.Operation) else None


def is_zero_fill(value: ir.Value) -> bool:
    """Whether `value` is a linalg.fill of the float constant 0.0."""
    owner = defining(value)
    if owner is None or owner.name != "linalg.fill":
        return False
    src = defining(owner.operands[0])
    if src is None or src.name != "arith.constant":
        return False
    attr = src.attributes["value"]
    return isinstance(attr, ir.FloatAttr) and attr.value == 0.0


def zeros(shape: Sequence[int], et: ir.Type) -> ir.Value:
    """A fresh tensor of `shape` filled with 0.0 (a linalg.fill of a tensor.empty)."""
    zero = arith.ConstantOp(et, ir.FloatAttr.get(et, 0.0)).result
    return linalg.fill(zero, outs=[tensor.EmptyOp(list(shape), et).result])


def padded(value: ir.Value, low: Sequence[int], high: Sequence[int]) -> ir.Value:
    """`value` with zeros around it (itself where nothing is added)."""
    if not any(low) and not any(high):
        return value
    t = ir.RankedTensorType(value.type)
    shape = [n + lo + hi for n, lo, hi in zip(t.shape, low, high)]
    pad = tensor.PadOp(ir.RankedTensorType.get(shape, t.element_type), value, [], [],
                       list(low), list(high))
    block = pad.region.blocks.append(*[ir.IndexType.get()] * len(shape))
    with ir.InsertionPoint(block):
        tensor.YieldOp(arith.constant(t.element_type, 0.0))
    return pad.result


def sliced(value: ir.Value, offsets: Sequence[int], sizes: Sequence[int],
           strides: Sequence[int] | None = None) -> ir.Value:
    """The static slice of `value` at `offsets` of `sizes` (unit strides by default)."""
    t = ir.RankedTensorType(value.type)
    result = ir.RankedTensorType.get(list(sizes), t.element_type)
    return tensor.extract_slice(result, value, [], [], [], list(offsets), list(sizes),
                                list(strides) if strides is not None else [1] * len(sizes))


def reassociation(groups: Sequence[Sequence[int]]) -> ir.ArrayAttr:
    """The dimension groups of a tensor.expand_shape / collapse_shape."""
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, k) for k in g])
                             for g in groups])


def reassociation_groups(op: ir.Operation) -> list[list[int]]:
    """The dimension groups of a tensor.expand_shape / collapse_shape op (the inverse of
    `reassociation`): per source dim of an expand, the result dims it becomes."""
    return [[ir.IntegerAttr(k).value for k in ir.ArrayAttr(g)]
            for g in ir.ArrayAttr(op.attributes["reassociation"])]


def zero_init(op: ir.Operation) -> None:
    """`op` (two inputs, one init) accumulates into a zero fill; a generic after it adds
    its old init (a bias)."""
    init = op.operands[2]
    t = init.type
    et, rank = t.element_type, len(t.shape)
    identity = ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    with ir.InsertionPoint(op), op.location:
        fill = zeros(t.shape, et)
        add = linalg.GenericOp([t], [op.results[0], init], [tensor.EmptyOp(t.shape, et).result],
                               ir.ArrayAttr.get([identity] * 3),
                               ir.ArrayAttr.get([parallel] * rank))
        body = add.regions[0].blocks.append(et, et, et)
        with ir.InsertionPoint(body):
            linalg.YieldOp([arith.AddFOp(body.arguments[0], body.arguments[1]).result])
    op.move_before(add)
    for use in list(op.results[0].uses):
        if use.owner != add.operation:
            use.owner.operands[use.operand_number] = add.result
    op.operands[2] = fill
