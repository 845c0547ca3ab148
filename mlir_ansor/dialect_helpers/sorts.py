"""Top-k as top-k, not as a whole sort.

torch-mlir imports `torch.topk(x, k)` as a sort of the whole dim (`tm_tensor.sort`, values
with an iota of indices) followed by a slice of the first k, and IREE sorts on the CPU by
bubble sort, n^2 compare-and-swaps per row: a top-5 of 4 x 1000 logits ran 7.3 ms against
torch's 0.007. IREE has a top-k op (`iree_linalg_ext.topk`, n*k work: each element is
inserted into the k kept so far). A sort whose every use is such a leading slice becomes
one: the slices read the largest k they need, the indices (int32 in the op) are widened
back to the sort's type.

The top-k starts from k empty slots (NaN, compared unordered: every value, -inf included,
fills one, so a masked row reports the indices of its -inf entries too) and a comparator
that is strict on values (oge -> ugt), so ties keep the lower index first (torch leaves
their order unspecified: its CPU kernel returned 1, 4, 2 for three equal values; checks
against torch compare indices exactly, so inputs must not tie). A NaN input is ranked
wrongly (as by the sort it replaces); integer slots start at the type's extreme, which an
equal element does not displace.
"""
from __future__ import annotations

from iree.compiler import ir
from iree.compiler.dialects import arith, linalg, tensor

from mlir_ansor.dialect_helpers.dispatch import walk_ops
from mlir_ansor.dialect_helpers.tensor_building import defining, sliced

# Sort comparators (a before b) -> (the top-k's comparator, descending). Floats compare
# unordered-or-greater (less) against slots that start as NaN: any value, -inf included,
# displaces an empty slot, and equal values keep the lower index first. Integers compare
# strictly against slots at the type's extreme (unsigned sorts are left alone).
_FLOAT = {"oge": ("ugt", True), "ogt": ("ugt", True), "ole": ("ult", False),
          "olt": ("ult", False)}
_INT = {"sge": ("sgt", True), "sgt": ("sgt", True), "sle": ("slt", False),
        "slt": ("slt", False)}


def _iota_along(value: ir.Value, dim: int) -> bool:
    """Whether `value` is a linalg.generic writing each element's index along `dim`."""
    op = defining(value)
    if op is None or op.name != "linalg.generic" or len(op.operands) != 1:
        return False
    body = list(op.regions[0].blocks[0].operations)
    if len(body) != 3 or body[0].name != "linalg.index" or body[1].name != "arith.index_cast":
        return False
    return (ir.IntegerAttr(body[0].attributes["dim"]).value == dim
            and body[1].operands[0] == body[0].results[0]
            and body[2].operands[0] == body[1].results[0])


def _comparator(sort: ir.Operation) -> tuple[str, str, bool] | None:
    """(cmp op name, strict predicate, descending) of a sort comparing its values alone."""
    block = sort.regions[0].blocks[0]
    body = list(block.operations)
    if len(body) != 2 or body[0].name not in ("arith.cmpf", "arith.cmpi"):
        return None
    cmp = body[0]
    if list(cmp.operands) != [block.arguments[0], block.arguments[1]] \
            or body[1].operands[0] != cmp.results[0]:
        return None
    table, enum = ((_FLOAT, arith.CmpFPredicate) if cmp.name == "arith.cmpf"
                   else (_INT, arith.CmpIPredicate))
    pred = enum(ir.IntegerAttr(cmp.attributes["predicate"]).value).name.lower()
    if pred in table:
        strict, desc = table[pred]
        return cmp.name, strict, desc
    return None


def _leading_slices(sort: ir.Operation, dim: int) -> list[tuple[ir.Operation, int]] | None:
    """Every use of the sort's results as (extract_slice, k): each a unit-stride slice of
    the first k along `dim` and everything elsewhere; None if any use is not."""
    out = []
    for r in sort.results:
        shape = ir.RankedTensorType(r.type).shape
        for use in r.uses:
            op = use.owner
            if op.name != "tensor.extract_slice" or len(op.operands) != 1:
                return None
            offsets = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
            sizes = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
            strides = list(ir.DenseI64ArrayAttr(op.attributes["static_strides"]))
            if any(offsets) or any(s != 1 for s in strides) or ir.ShapedType.get_dynamic_size() \
                    in sizes:
                return None
            if any(sizes[d] != n for d, n in enumerate(shape) if d != dim):
                return None
            if ir.RankedTensorType(op.results[0].type).rank != len(shape):
                return None  # (a rank-reducing slice)
            out.append((op, sizes[dim]))
    return out


def _worst(et: ir.Type, descending: bool) -> ir.Value:
    """What an empty slot starts as: NaN for floats (see _FLOAT), the extreme integer."""
    if isinstance(et, ir.IntegerType):
        w = et.width
        return arith.constant(et, -(1 << (w - 1)) if descending else (1 << (w - 1)) - 1)
    return arith.constant(et, float("nan"))


def sorts_to_topk(model_mlir: str) -> tuple[str, int]:
    """(`model_mlir` with each sort read only through leading slices computed as a top-k,
    how many)."""
    if "tm_tensor.sort" not in model_mlir:
        return model_mlir, 0
    done = 0
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(model_mlir)
        for sort in walk_ops(module.operation, "tm_tensor.sort"):
            dim = ir.IntegerAttr(sort.attributes["dimension"]).value
            outs = list(sort.operands)
            if len(outs) not in (1, 2) or (len(outs) == 2 and not _iota_along(outs[1], dim)):
                continue
            vt = ir.RankedTensorType(outs[0].type)
            if not vt.has_static_shape:
                continue
            cmp = _comparator(sort)
            slices = _leading_slices(sort, dim)
            if cmp is None or not slices:
                continue
            k = max(n for _, n in slices)
            if k >= vt.shape[dim]:
                continue
            cmp_name, strict, descending = cmp
            shape = list(vt.shape)
            shape[dim] = k
            i32 = ir.IntegerType.get_signless(32)
            with ir.InsertionPoint(sort), sort.location:
                vals = linalg.fill(_worst(vt.element_type, descending),
                                   outs=[tensor.EmptyOp(shape, vt.element_type).result])
                idx = linalg.fill(arith.constant(i32, 0),
                                  outs=[tensor.EmptyOp(shape, i32).result])
                topk = ir.Operation.create(
                    "iree_linalg_ext.topk",
                    results=[ir.RankedTensorType.get(shape, vt.element_type),
                             ir.RankedTensorType.get(shape, i32)],
                    operands=[outs[0], vals, idx],
                    attributes={"dimension": ir.IntegerAttr.get(
                        ir.IntegerType.get_signless(64), dim)},
                    regions=1)
                block = topk.regions[0].blocks.append(vt.element_type, vt.element_type)
                with ir.InsertionPoint(block):
                    a, b = block.arguments
                    if cmp_name == "arith.cmpf":
                        c = arith.cmpf(getattr(arith.CmpFPredicate, strict.upper()), a, b)
                    else:
                        c = arith.cmpi(getattr(arith.CmpIPredicate, strict), a, b)
                    ir.Operation.create("iree_linalg_ext.yield", operands=[c])
                results = [topk.results[0]]
                if len(outs) == 2 and any(op.operands[0] == sort.results[1]
                                          for op, _ in slices):
                    it = ir.RankedTensorType(outs[1].type)
                    results.append(_widened(topk.results[1], it.element_type))
            for op, n in slices:
                which = 0 if op.operands[0] == sort.results[0] else 1
                with ir.InsertionPoint(op), op.location:
                    new = results[which] if n == k else sliced(
                        results[which], [0] * len(shape),
                        [n if d == dim else s for d, s in enumerate(shape)])
                op.results[0].replace_all_uses_with(new)
                op.erase()
            sort.erase()
            iota = defining(outs[1]) if len(outs) == 2 else None
            if iota is not None and not list(iota.results[0].uses):
                iota.erase()
            done += 1
        if not done:
            return model_mlir, 0
        if not module.operation.verify():
            raise ValueError("the model with top-k ops does not verify")
        return str(module), done


def _widened(indices: ir.Value, et: ir.Type) -> ir.Value:
    """`indices` (i32) as `et` (the sort's index type), elementwise."""
    t = ir.RankedTensorType(indices.type)
    if et == t.element_type:
        return indices
    ident = ir.AffineMap.get_identity(t.rank)
    op = linalg.GenericOp([ir.RankedTensorType.get(t.shape, et)], [indices],
                          [tensor.EmptyOp(list(t.shape), et).result],
                          ir.ArrayAttr.get([ir.AffineMapAttr.get(ident)] * 2),
                          ir.ArrayAttr.get([ir.Attribute.parse(
                              "#linalg.iterator_type<parallel>")] * t.rank))
    block = op.regions[0].blocks.append(t.element_type, et)
    with ir.InsertionPoint(block):
        linalg.YieldOp([arith.extsi(et, block.arguments[0])])
    return op.result

