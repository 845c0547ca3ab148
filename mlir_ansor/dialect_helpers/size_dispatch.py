"""A run-time dispatcher on a dynamic size, built into the model before IREE sees it
(DietCode's dispatcher, issue 17).

The entry function's work that depends on its arguments moves into a private function,
which is copied once per size range ("branch"); every linalg op of copy `i` is tagged
`{ansor_kernel = "b<i>"}` (unless the branches are a model form that needs no tags:
dialect_helpers/small_sizes.py). The entry keeps what does not depend on the arguments
(weights and their transposes, computed once) and calls the copy of the range the size falls in,
through a chain of conditional branches (`cf.cond_br`) on `tensor.dim` of one argument:
blocks of the entry function, not `scf.if` regions, because IREE 3.13 hoists constant
work (its data tiling's weight packing) only out of the function's own blocks; under
`scf.if` every call re-packed the weights (the MLP at 16 rows: 2.25 ms against 1.35 ms with
the branches as blocks). IREE inlines the private calls
and forms one dispatch per branch that keeps the tag (verified on 3.13), so a library
pattern carrying the tag picks the micro-kernel of its range, and a dispatch with no
pattern for its tag runs IREE's default codegen. Every branch computes
the same function: a size outside the tuned range takes the first or last branch, whose
kernels are shape-generic (fixed tiles + peeled remainder), so it is still correct.
"""
from __future__ import annotations

from typing import Sequence

from iree.compiler import ir
from iree.compiler.dialects import arith, cf, func, tensor

from mlir_ansor.errors import AnsorError

TAG_ATTR = "ansor_kernel"
BODY_PREFIX = "ansor_size_branch"


class DispatcherError(AnsorError):
    """The model cannot take a size dispatcher (the message says why)."""


def branch_tag(i: int) -> str:
    return f"b{i}"


def branch_index(tag: str) -> int:
    """The branch a tag names (`branch_tag`'s inverse)."""
    return int(tag.removeprefix("b"))


def entry_function(module: ir.Module) -> ir.Operation:
    """The module's one public function (a DispatcherError otherwise)."""
    funcs = [op.operation for op in module.body.operations
             if op.operation.name == "func.func"
             and "sym_visibility" not in op.operation.attributes]
    if len(funcs) != 1:
        raise DispatcherError(f"expected one public entry function, found {len(funcs)}")
    return funcs[0]


def _walk_operands(op: ir.Operation):
    """Every operand of `op` and of the ops nested in it."""
    yield from op.operands
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield from _walk_operands(inner.operation)


def _defined_in(value: ir.Value, ops: set) -> bool:
    owner = value.owner
    if isinstance(owner, ir.Block):
        return False
    return owner in ops


def _argument_of(value: ir.Value, block: ir.Block) -> bool:
    return isinstance(value.owner, ir.Block) and value.owner == block


def branch_by_size(model_mlir: str, arg: int, dim: int, thresholds: Sequence[int],
                   tag: bool = True) -> str:
    """The model with its argument-dependent work in one tagged copy per size range:
    range 0 is size < thresholds[0], range i is thresholds[i-1] <= size < thresholds[i], the
    last range is the rest. `arg` and `dim` name the entry argument's dimension that the
    size is read from. `tag`: whether each copy's linalg ops carry their branch's tag
    (a dispatcher whose branches run different strategies for the same dispatch)."""
    cuts = list(thresholds)
    if not cuts:
        raise DispatcherError("a dispatcher needs at least one threshold")
    if any(b <= a for a, b in zip(cuts, cuts[1:])) or cuts[0] < 1:
        raise DispatcherError(f"thresholds must be positive and increasing: {cuts}")
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(model_mlir)
        entry = entry_function(module)
        if len(entry.regions[0].blocks) != 1:
            raise DispatcherError("the entry function already branches (several blocks)")
        block = entry.regions[0].blocks[0]
        if arg >= len(block.arguments):
            raise DispatcherError(f"the entry takes {len(block.arguments)} arguments, not "
                                  f"argument {arg}")
        size_arg = block.arguments[arg]
        if not isinstance(size_arg.type, ir.RankedTensorType) or \
                dim >= size_arg.type.rank or not size_arg.type.is_dynamic_dim(dim):
            raise DispatcherError(f"argument {arg} ({size_arg.type}) has no dynamic dim {dim}")
        ops = [o.operation for o in block.operations]
        ret = ops[-1]
        # Ops that (through their operands, or values their regions use) depend on an
        # argument: the work a branch does. The rest is computed once, before the branches.
        moving: list[ir.Operation] = []
        moved: set = set()
        for op in ops[:-1]:
            if any(_argument_of(v, block) or _defined_in(v, moved) for v in _walk_operands(op)):
                moving.append(op)
                moved.add(op)
        if not moving:
            raise DispatcherError("no work of the entry depends on its arguments")
        # Values the branch work reads from outside it: the arguments, then what stays.
        outside: list[ir.Value] = list(block.arguments)
        for op in moving:
            for v in _walk_operands(op):
                if not _argument_of(v, block) and not _defined_in(v, moved) and \
                        not _inside_any(v, moving) and v not in outside:
                    outside.append(v)
        results = list(ret.operands)
        result_types = [v.type for v in results]

        with ir.InsertionPoint(module.body):
            body = func.FuncOp(f"{BODY_PREFIX}_0", ([v.type for v in outside], result_types),
                               visibility="private")
        inner = body.add_entry_block()
        for op in moving:
            inner.append(op)  # moves it (its uses stay connected)
        for v, a in zip(outside, inner.arguments):
            keep = _users_outside(v, body.operation)
            if keep:
                v.replace_all_uses_except(a, keep)
            else:
                v.replace_all_uses_with(a)
        with ir.InsertionPoint(inner):
            func.ReturnOp([_mapped(v, outside, inner) for v in results])

        bodies = [body.operation]
        for i in range(1, len(cuts) + 1):
            copy = body.operation.clone(ir.InsertionPoint(module.body))
            copy.attributes["sym_name"] = ir.StringAttr.get(f"{BODY_PREFIX}_{i}")
            bodies.append(copy)
        for i, b in enumerate(bodies):
            if tag:
                _tag_linalg(b, branch_tag(i))

        # The entry: the size, then one test block per cut, each branch one call.
        ret.erase()
        with ir.InsertionPoint(block):
            index = ir.IndexType.get()
            size = tensor.DimOp(size_arg, arith.ConstantOp(index, dim).result).result
        _branches(block, size, cuts, bodies, outside, result_types)
        if not module.operation.verify():
            raise DispatcherError("the dispatched model does not verify")
        return str(module)


def _nested_in(op: ir.Operation | None, ancestors: Sequence[ir.Operation]) -> bool:
    """Whether `op` is one of `ancestors` or nested in one of them."""
    while op is not None:
        if any(op == a for a in ancestors):
            return True
        op = op.parent
    return False


def _inside_any(value: ir.Value, ops: Sequence[ir.Operation]) -> bool:
    """Whether `value` is defined inside the region of one of `ops` (a body's own value)."""
    owner = value.owner
    return _nested_in(owner.owner if isinstance(owner, ir.Block) else owner, ops)


def _users_outside(value: ir.Value, body: ir.Operation) -> list[ir.Operation]:
    return [use.owner.operation for use in value.uses
            if not _nested_in(use.owner.operation, [body])]


def _mapped(v: ir.Value, outside: list[ir.Value], inner: ir.Block) -> ir.Value:
    """A returned value inside the body: an argument passed straight through is the body's
    argument (an entry result that needs no work)."""
    for o, a in zip(outside, inner.arguments):
        if o == v:
            return a
    return v


def linalg_ops_in(op: ir.Operation) -> list[ir.Operation]:
    """The linalg ops in `op`, not those of their bodies (linalg.yield)."""
    out: list[ir.Operation] = []

    def visit(o: ir.Operation) -> ir.WalkResult:
        if o.name.startswith("linalg."):
            out.append(o)
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return out


def _tag_linalg(op: ir.Operation, tag: str) -> None:
    attr = ir.StringAttr.get(tag)
    for o in linalg_ops_in(op):
        o.attributes[TAG_ATTR] = attr


def _branches(entry: ir.Block, size: ir.Value, cuts: list[int], bodies: list[ir.Operation],
              args: list[ir.Value], types: list[ir.Type]) -> None:
    """Ends `entry` with `size < cuts[0] ? body0 : (size < cuts[1] ? body1 : ...)` as
    blocks: a test block per cut, a call block per body, all branching to one exit block
    that returns the call's results."""
    exit_block = entry.create_after(*types)
    with ir.InsertionPoint(exit_block):
        func.ReturnOp(list(exit_block.arguments))
    calls = []
    for b in reversed(bodies):
        call = entry.create_after()
        name = ir.StringAttr(b.attributes["sym_name"]).value
        with ir.InsertionPoint(call):
            out = func.CallOp(types, ir.FlatSymbolRefAttr.get(name), args).results
            cf.BranchOp(list(out), exit_block)
        calls.insert(0, call)
    tests = [entry] + [calls[i].create_before() for i in range(1, len(cuts))]
    index = ir.IndexType.get()
    for i, (test, cut) in enumerate(zip(tests, cuts)):
        otherwise = tests[i + 1] if i + 1 < len(cuts) else calls[-1]
        with ir.InsertionPoint(test):
            below = arith.CmpIOp(arith.CmpIPredicate.ult, size,
                                 arith.ConstantOp(index, cut).result).result
            cf.CondBranchOp(below, [], [], calls[i], otherwise)


def untagged(func_mlir: str) -> tuple[str, str]:
    """A dispatch's function without the branch tags, and its tag ("" if none): copies of
    one dispatch in several branches are one task."""
    if TAG_ATTR not in func_mlir:
        return func_mlir, ""
    tags: set[str] = set()
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(func_mlir)

        def visit(o: ir.Operation) -> ir.WalkResult:
            if TAG_ATTR in o.attributes:
                tags.add(ir.StringAttr(o.attributes[TAG_ATTR]).value)
                del o.attributes[TAG_ATTR]
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        if len(tags) != 1:
            raise DispatcherError(f"a dispatch with ops of several branches: {sorted(tags)}")
        return str(module), tags.pop()


def retag(func_mlir: str, like: str) -> str:
    """`func_mlir` with the branch tags of `like` (another form of the same dispatch, e.g.
    codegen's view of it) on the linalg ops at the same positions; "" where the two do not
    have the same linalg ops in the same order."""
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        target, model = ir.Module.parse(func_mlir), ir.Module.parse(like)
        mine, theirs = linalg_ops_in(target.operation), linalg_ops_in(model.operation)
        if [o.name for o in mine] != [o.name for o in theirs]:
            return ""
        for a, b in zip(mine, theirs):
            if TAG_ATTR in b.attributes:
                a.attributes[TAG_ATTR] = b.attributes[TAG_ATTR]
        return str(target)
