"""The smallest sizes of a dynamic dimension as static shapes (issue 17: small batches).

A shape-generic kernel is slow exactly where a dynamic model spends little work: at one or
a few rows. IREE's data tiling pads a dynamic row count to its 16-row tile (16x the work
at one row), and a dynamic kernel's loops cannot be specialised to the size. Static
bucketing pads the whole model, which is wrong where an op mixes rows (a softmax over the
batch, attention over the sequence). Here only the heavy ops are padded, which is exact:

In branch `i` of a size dispatcher (`size_dispatch.branch_by_size`, sizes up to
`tops[i]`), every op with a reduction loop (contraction, convolution, pooling) whose
dynamic loops are all parallel, plain dims of every operand, and have the dispatcher's
size as extent gets its operands zero-padded along those loops to `tops[i]`, runs on the
static shape, and its result is cut back to the size. An output element of such a loop
reads its operands only at its own index there, so the padded rows change no element that
is kept. IREE then builds a kernel for the static shape (data tiling takes its narrow
tiles: at one row the MLP's matmuls ran 5x faster), and the tuner sees static tasks.

The extent is known to be the size where the output's dynamic dim is computed from the
inputs' dims by integer arithmetic (a `tensor.dim` of one of the symbol's argument dims,
a reshape's size computation) and equals the size at every size the branches serve
(checked exhaustively, 1..64 at most); other ops stay dynamic in every branch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from iree.compiler import ir
from iree.compiler.dialects import arith, linalg, tensor

from mlir_ansor.dialect_helpers.dynamic_sizes import BINARY_OPS, CAST_OPS
from mlir_ansor.dialect_helpers.linalg_info import generic_forms
from mlir_ansor.dialect_helpers.size_dispatch import (BODY_PREFIX, DispatcherError,
                                                      branch_by_size, entry_function,
                                                      linalg_ops_in)

# Per padded op, per operand: the dims padded to the branch's size (a marker between the
# analysis on the model and the rewrite in the branches; none is left in the result).
PAD_ATTR = "ansor_pad_dims"


@dataclass(frozen=True)
class SmallSizes:
    """Static branches for the smallest sizes of one dynamic dimension: branch i serves
    sizes up to `tops[i]` (above the previous top), the rest keeps the dynamic model.
    `arg`, `dim`: the entry argument dimension the size is read from; `same`: every
    (argument, dim) whose extent is that size (the specs of one symbol)."""

    arg: int
    dim: int
    tops: tuple[int, ...]
    same: tuple[tuple[int, int], ...]

    @property
    def cuts(self) -> tuple[int, ...]:
        return tuple(t + 1 for t in self.tops)


def _constant_index(v: ir.Value) -> int | None:
    op = v.owner
    if isinstance(op, ir.Block) or op.name != "arith.constant":
        return None
    attr = op.attributes["value"]
    return ir.IntegerAttr(attr).value if isinstance(attr, ir.IntegerAttr) else None


_PREDICATES = {0: lambda a, b: a == b, 1: lambda a, b: a != b, 2: lambda a, b: a < b,
               3: lambda a, b: a <= b, 4: lambda a, b: a > b, 5: lambda a, b: a >= b,
               6: lambda a, b: a < b, 7: lambda a, b: a <= b, 8: lambda a, b: a > b,
               9: lambda a, b: a >= b}  # arith.cmpi's predicates (6-9 unsigned)


def _value_at(v: ir.Value, entry: ir.Block, same: set[tuple[int, int]], n: int,
              memo: dict) -> int | None:
    """The integer `v` holds when the size is `n` (None: not computed from the entry's
    sizes and constants by ops followed here)."""
    key = (v, n)
    if key in memo:
        return memo[key]
    op = v.owner
    out = None
    if not isinstance(op, ir.Block):
        name, args = op.name, list(op.operands)
        if name == "tensor.dim":
            src, index = args
            if isinstance(src.owner, ir.Block) and src.owner == entry:
                d = _constant_index(index)
                t = ir.RankedTensorType(src.type)
                if (ir.BlockArgument(src).arg_number, d) in same:
                    out = n
                elif d is not None and not t.is_dynamic_dim(d):
                    out = t.shape[d]
        elif name == "arith.constant":
            out = _constant_index(v)
        elif name in CAST_OPS:
            out = _value_at(args[0], entry, same, n, memo)
        elif name in BINARY_OPS or name in ("arith.cmpi", "arith.select"):
            vals = [_value_at(a, entry, same, n, memo) for a in args]
            if None not in vals:
                try:
                    if name == "arith.cmpi":
                        pred = ir.IntegerAttr(op.attributes["predicate"]).value
                        if pred < 6 or min(vals) >= 0:  # (unsigned: only where alike)
                            out = int(_PREDICATES[pred](*vals))
                    elif name == "arith.select":
                        out = vals[1] if vals[0] else vals[2]
                    else:
                        out = int(BINARY_OPS[name](*vals))
                except ZeroDivisionError:
                    out = None
    memo[key] = out
    return out


def _is_size(v: ir.Value, entry: ir.Block, same: set[tuple[int, int]], most: int,
             memo: dict) -> bool:
    """Whether `v` equals the size at every size 1..`most` (all a static branch serves):
    a `tensor.dim` of one of the size's argument dims, or integer arithmetic on it (a
    reshape's size computation), checked exhaustively."""
    return all(_value_at(v, entry, same, n, memo) == n for n in range(1, most + 1))


def _output_sizes(init: ir.Value) -> list[ir.Value] | None:
    """The size values of `init`'s dynamic dims: a `tensor.empty`, maybe written by linalg
    ops first (a fill, a bias broadcast)."""
    op = init.owner
    while not isinstance(op, ir.Block) and op.name.startswith("linalg.") \
            and len(op.results) == 1:
        op = op.operands[len(op.operands) - 1].owner  # its destination
    if isinstance(op, ir.Block) or op.name != "tensor.empty":
        return None
    return list(op.operands)


def mark_paddable(model_mlir: str, small: SmallSizes) -> tuple[str, int]:
    """`model_mlir` with PAD_ATTR on every op with a reduction loop (contraction,
    convolution, pooling) whose dynamic loops are all parallel with the size as extent, and
    how many were marked."""
    same = set(small.same)
    most = max(small.tops)
    memo: dict = {}
    with ir.Context():
        forms = generic_forms(model_mlir)
        if forms is None:
            raise DispatcherError("cannot pair the model's linalg ops with their generic forms")
        entry = entry_function(forms.module)
        marked = 0
        for op, gen in zip(forms.ops, forms.generics):
            if op.parent != entry:
                continue
            pads = _pad_dims(op, gen, entry.regions[0].blocks[0], same, most, memo)
            if pads is not None:
                op.attributes[PAD_ATTR] = ir.ArrayAttr.get(
                    [ir.DenseI64ArrayAttr.get(p) for p in pads])
                marked += 1
        return str(forms.module), marked


def _loops_of(e: ir.AffineExpr) -> set[int]:
    """The loops an indexing expression reads."""
    if isinstance(e, ir.AffineDimExpr):
        return {e.position}
    if isinstance(e, ir.AffineBinaryExpr):
        return _loops_of(e.lhs) | _loops_of(e.rhs)
    return set()


_DIVISIONS = ("arith.divsi", "arith.divui", "arith.remsi", "arith.remui", "arith.floordivsi",
              "arith.ceildivsi", "arith.ceildivui")


def _divides(gen: ir.Operation) -> bool:
    """Whether the op's body divides (integer division traps on the padded zeros)."""
    return any(o.operation.name in _DIVISIONS
               for o in gen.regions[0].blocks[0].operations)


def _pad_dims(op: ir.Operation, gen: ir.Operation, entry: ir.Block,
              same: set[tuple[int, int]], most: int, memo: dict) -> list[list[int]] | None:
    """Per operand of `op`, its dims along the loops to pad; None where the op would not
    become static (a dynamic loop that is a reduction, or whose extent is not the size) or
    a padded loop is not a plain dim of some operand (a convolution's window reads
    `h + kh`: its batch pads, its image rows would not)."""
    if gen.name != "linalg.generic" or len(op.results) != 1 or \
            not all(isinstance(v.type, ir.RankedTensorType) for v in op.operands):
        return None  # (an aggregate op, several results, a scalar operand: not padded)
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(gen.attributes["indexing_maps"])]
    iterators = [str(a) for a in ir.ArrayAttr(gen.attributes["iterator_types"])]
    if len(maps) != len(op.operands) or not any("reduction" in it for it in iterators):
        return None
    if _divides(gen):  # a padded zero would be a divisor: an integer one traps
        return None
    init = op.operands[len(op.operands) - 1]
    out_type = ir.RankedTensorType(init.type)
    sizes = _output_sizes(init)
    if sizes is None:
        return None
    loops: set[int] = set()
    k = 0
    for j, e in enumerate(maps[-1].results):
        if out_type.is_dynamic_dim(j):
            if not isinstance(e, ir.AffineDimExpr) \
                    or not _is_size(sizes[k], entry, same, most, memo) \
                    or "parallel" not in iterators[e.position]:
                return None
            loops.add(e.position)
            k += 1
    if not loops:
        return None
    pads = []
    for v, m in zip(op.operands, maps):
        t = ir.RankedTensorType(v.type)
        dims = []
        for j, e in enumerate(m.results):  # every dynamic dim padded, and only those
            padded = bool(_loops_of(e) & loops)
            if t.is_dynamic_dim(j) != padded or (padded and not isinstance(e, ir.AffineDimExpr)):
                return None
            if padded:
                dims.append(j)
        pads.append(dims)
    return pads


def with_small_sizes(model_mlir: str, small: SmallSizes) -> str:
    """The model with a static branch per top of `small` (module docstring) and the
    dynamic model for the rest; a DispatcherError where no op can be padded."""
    marked, count = mark_paddable(model_mlir, small)
    if not count:
        raise DispatcherError("no contraction or convolution has the dynamic size as its "
                              "only dynamic extent: static branches would change nothing")
    text = branch_by_size(marked, small.arg, small.dim, small.cuts, tag=False)
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        for f in module.body.operations:
            attrs = f.operation.attributes
            name = ir.StringAttr(attrs["sym_name"]).value if "sym_name" in attrs else ""
            branch = (int(name.rsplit("_", 1)[1]) if name.startswith(BODY_PREFIX + "_")
                      else None)
            for op in (o for o in linalg_ops_in(f.operation) if PAD_ATTR in o.attributes):
                if branch is not None and branch < len(small.tops):
                    _pad(op, small.tops[branch])
                del op.attributes[PAD_ATTR]
        if not module.operation.verify():  # a bug of ours, not a property of the model
            raise RuntimeError("the model with static small-size branches does not verify")
        return str(module)


def _zero(t: ir.Type) -> ir.Value:
    attr = (ir.FloatAttr.get(t, 0.0) if isinstance(t, ir.FloatType) else ir.IntegerAttr.get(t, 0))
    return arith.ConstantOp(t, attr).result


def _pad(op: ir.Operation, top: int) -> None:
    """`op` on operands padded to `top` along the marked dims, its result cut back."""
    pads = [list(ir.DenseI64ArrayAttr(a)) for a in ir.ArrayAttr(op.attributes[PAD_ATTR])]
    index = ir.IndexType.get()
    dyn = ir.ShapedType.get_dynamic_size()
    n = len(op.operands)
    out_dims = pads[-1]
    with ir.InsertionPoint(op):
        init = op.operands[n - 1]  # the size: the dynamic accumulator's dims
        kept = [tensor.DimOp(init, arith.ConstantOp(index, j).result).result
                for j in out_dims]
        for k, dims in enumerate(pads):
            if not dims:
                continue
            v = op.operands[k]
            t = ir.RankedTensorType(v.type)
            shape = [top if j in dims else t.shape[j] for j in range(t.rank)]
            output = k == n - 1
            src = v.owner
            if output and not isinstance(src, ir.Block) and src.name == "linalg.fill":
                # A fresh static accumulator: the same fill, no copy of the dynamic one.
                static = linalg.fill(src.operands[0],
                                     outs=[tensor.EmptyOp(shape, t.element_type).result])
            else:
                # Inputs padded with zeros (the padded rows' results are cut away; an
                # accumulator's padded part is never read either).
                sizes = [tensor.DimOp(v, arith.ConstantOp(index, j).result).result
                         for j in dims]
                dest = tensor.EmptyOp(shape, t.element_type).result
                if not output:
                    dest = linalg.fill(_zero(t.element_type), outs=[dest])
                static = tensor.InsertSliceOp(
                    v, dest, [], sizes, [], ir.DenseI64ArrayAttr.get([0] * t.rank),
                    ir.DenseI64ArrayAttr.get([dyn if j in dims else t.shape[j]
                                              for j in range(t.rank)]),
                    ir.DenseI64ArrayAttr.get([1] * t.rank)).result
            # Typed as before: canonicalization folds the cast into the op, which becomes
            # static, and casts its result back.
            op.operands[k] = tensor.CastOp(t, static).result
    result = op.results[0]
    rt = ir.RankedTensorType(result.type)
    with ir.InsertionPoint.after(op):
        cut = tensor.ExtractSliceOp(
            rt, result, [], kept, [], ir.DenseI64ArrayAttr.get([0] * rt.rank),
            ir.DenseI64ArrayAttr.get([dyn if j in out_dims else rt.shape[j]
                                      for j in range(rt.rank)]),
            ir.DenseI64ArrayAttr.get([1] * rt.rank))
    result.replace_all_uses_except(cut.result, cut.operation)
