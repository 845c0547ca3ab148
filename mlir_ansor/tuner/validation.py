"""What a candidate is checked against: inputs drawn over each operand's valid range, and a
per-element error bound scaled by the magnitude of the computation.

Inputs: floats uniform in [-1, 1] (signed: cancellations in a reduction are exercised),
except those a sum adds into a divisor (a softmax whose division IREE does not raise to
its own op, a normalisation by a sum), which are drawn from [0, 1): a signed sum near
zero makes the quotient as large, and as sensitive to the order of the sum, as the sum is
small, so that a correct reordering would fail the bound; integers (and floats) that a
dispatch uses as indices (`index_cast`, `fptosi`, a select's wrap of negative indices,
into `tensor.extract`) cover the whole indexed dimension; other integers are signed;
booleans 0/1.

Error bound: |got - ref| <= atol + rtol * max(|ref|, mag), per element, where `mag` is the
reference build's output on the absolute values of the float inputs: for sums of products
it is the sum of |terms|, which bounds the rounding error of any reordering (rfactor,
other tilings, FMA contraction: about sqrt(K) * 6e-8 * mag for K terms, 4e-6 * mag at
K = 4608) while a wrong term or a missing one stands out. Candidates are compared with IREE's
own default build (the same math lowering) at rtol 1e-4; whole models with torch, another
implementation of exp, erf and tanh, at 1e-3 (`MeasureConfig.model_rtol`)."""
from __future__ import annotations

from typing import Callable, Sequence, TypeVar

import numpy as np
from iree.compiler import ir

from mlir_ansor.dialect_helpers.dispatch import walk_ops
from mlir_ansor.dialect_helpers.dynamic_sizes import CAST_OPS
from mlir_ansor.dialect_helpers.tensor_building import defining

SIGNED_INT_RANGE = 64  # non-index integers are drawn from [-64, 64]
T = TypeVar("T")


# What an index may come through on its way to a tensor.extract: integer casts and float
# -> integer conversions (bilinear sampling positions).
_CONVERSIONS = (*CAST_OPS, "arith.fptosi", "arith.fptoui")


def _index_bound(value: ir.Value) -> int | None:
    """The smallest extent `value` indexes in a tensor.extract: through integer casts,
    float -> integer conversions, and as a value a select picks (torch's negative-index
    wrap, `select(x < 0, x + n, x)`: an x in [0, n) passes unchanged)."""
    bound = None
    for use in value.uses:
        user = use.owner
        name = user.name
        if name in _CONVERSIONS or (name == "arith.select" and use.operand_number > 0):
            b = _index_bound(user.results[0])
        elif name == "tensor.extract" and use.operand_number > 0:
            shape = ir.RankedTensorType(user.operands[0].type).shape
            b = shape[use.operand_number - 1]
        else:
            continue
        if b is not None and b > 0:
            bound = b if bound is None else min(bound, b)
    return bound


def _converted_input(generic: ir.Operation, result: int) -> int | None:
    """The input of an elementwise `generic` whose element its `result` yields through
    conversions only (fptosi, casts): None if it computes anything else."""
    block = generic.regions[0].blocks[0]
    value = list(block.operations)[-1].operands[result]
    while (owner := defining(value)) is not None:
        if owner.name not in _CONVERSIONS:
            return None
        value = owner.operands[0]
    args = list(block.arguments)
    n_in = len(args) - len(generic.results)
    pos = next((i for i, a in enumerate(args) if a == value), None)
    return pos if pos is not None and pos < n_in else None


def _task_function(task_mlir: str, arg_types: Sequence[str] | None,
                   analyze: Callable[[ir.Operation, list[ir.Value]], T], empty: T) -> T:
    """`analyze(func, args)` of the task function in `task_mlir`; `empty` unless its
    arguments are the first of `arg_types` (the runnable module's inputs, which may add a
    destination buffer), when given."""
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(task_mlir)
        func = module.body.operations[0].operation
        args = list(func.regions[0].blocks[0].arguments)
        if arg_types is not None and \
                [str(a.type) for a in args] != list(arg_types)[:len(args)]:
            return empty
        return analyze(func, args)


def _n_inputs(generic: ir.Operation) -> int:
    return ir.DenseI32ArrayAttr(generic.attributes["operandSegmentSizes"])[0]


def index_bounds(task_mlir: str, arg_types: Sequence[str] | None = None) -> dict[int, int]:
    """Argument position -> exclusive upper bound, for arguments of the task function that
    index a tensor, directly or converted by an elementwise op first (IREE's bilinear
    sampling: fptosi of the positions, then the gather); empty unless its arguments are
    the first of `arg_types`, when given (`_task_function`)."""
    def analyze(func: ir.Operation, args: list[ir.Value]) -> dict[int, int]:
        out: dict[int, int] = {}

        def bound_value(src: ir.Value, b: int) -> None:
            if src in args:
                pos = args.index(src)
                out[pos] = min(out.get(pos, b), b)
                return
            owner = defining(src)
            if owner is not None and owner.name == "linalg.generic":
                i = _converted_input(owner, src.result_number)
                if i is not None:
                    bound_value(owner.operands[i], b)

        for op in walk_ops(func, "linalg.generic"):
            block = op.regions[0].blocks[0]
            for i in range(_n_inputs(op)):
                b = _index_bound(block.arguments[i])
                if b is not None:
                    bound_value(op.operands[i], b)
        return out

    return _task_function(task_mlir, arg_types, analyze, {})


# Ops that pass a value's relative error on to their result: a sum's cancellation error
# reaches a quotient through them. Others (exp, max, a sigmoid's 1 + exp(-x)) end the path:
# what comes out of them does not cancel.
_ERROR_CARRYING_OPS = frozenset({"arith.addf", "arith.subf", "arith.mulf", "arith.divf",
                                 "arith.negf", "arith.extf", "arith.truncf", "math.sqrt",
                                 "math.rsqrt"})


def _body_ops(generic: ir.Operation) -> set[str]:
    return {o.operation.name for o in generic.regions[0].blocks[0].operations} - {
        "linalg.yield"}


def _carries(generic: ir.Operation) -> bool:
    return _body_ops(generic) <= _ERROR_CARRYING_OPS


def _is_sum(generic: ir.Operation) -> bool:
    """A reduction that yields an addf, its body of error-carrying ops only (sum(exp(x)),
    a max and a product are not sums that can cancel)."""
    if not any("reduction" in str(t) for t in ir.ArrayAttr(generic.attributes["iterator_types"])):
        return False
    yielded = defining(list(generic.regions[0].blocks[0].operations)[-1].operands[0])
    return _carries(generic) and yielded is not None and yielded.name == "arith.addf"


def _body_inputs(value: ir.Value, block_args: list[ir.Value], seen: list[ir.Operation]
                 ) -> set[int]:
    """The block arguments of a generic's body that `value` is computed from through
    error-carrying ops."""
    if value in block_args:
        return {block_args.index(value)}
    owner = defining(value)
    if owner is None or owner.name not in _ERROR_CARRYING_OPS or any(owner == o for o in seen):
        return set()
    seen.append(owner)
    return set().union(*(_body_inputs(v, block_args, seen) for v in owner.operands))


def summed_divisor_inputs(task_mlir: str, arg_types: Sequence[str] | None = None
                          ) -> frozenset[int]:
    """Positions of the float arguments of the task function that a sum (`_is_sum`) adds
    into a divisor (an `arith.divf`'s right operand in a linalg.generic), with only
    error-carrying ops (`_ERROR_CARRYING_OPS`: in generics, and tensor reshapes and slices
    between them) on the way from the argument to the divisor; empty unless its arguments
    are the first of `arg_types`, when given (`_task_function`)."""
    def analyze(func: ir.Operation, args: list[ir.Value]) -> frozenset[int]:
        out: set[int] = set()
        visited: list[tuple[ir.Operation, bool]] = []

        def sources(value: ir.Value, summed: bool) -> None:
            # The arguments `value` is computed from, kept if a sum is on the way; each
            # producer is followed once either way.
            if value in args:
                if summed:
                    out.add(args.index(value))
                return
            owner = defining(value)
            if owner is None or any(o == owner and s == summed for o, s in visited):
                return
            visited.append((owner, summed))
            generic = owner.name == "linalg.generic"
            is_sum = generic and _is_sum(owner)
            if is_sum or (generic and _carries(owner)):
                for v in list(owner.operands)[:_n_inputs(owner)]:
                    sources(v, summed or is_sum)
            elif owner.name.startswith("tensor."):  # reshapes, slices, casts
                for v in owner.operands:
                    sources(v, summed)

        for op in walk_ops(func, "linalg.generic"):
            block = op.regions[0].blocks[0]
            block_args = list(block.arguments)
            for inner in block.operations:
                if inner.operation.name == "arith.divf":
                    for i in _body_inputs(inner.operands[1], block_args, []):
                        if i < _n_inputs(op):
                            sources(op.operands[i], False)
        return frozenset(out)

    return _task_function(task_mlir, arg_types, analyze, frozenset())


def random_inputs(types: Sequence[tuple[tuple[int, ...], np.dtype]], seed: int,
                  bounds: dict[int, int] | None = None,
                  positive: frozenset[int] = frozenset()) -> list[np.ndarray]:
    """Inputs of the given (shape, dtype)s; `bounds`: index arguments' upper bounds;
    `positive`: float arguments drawn from [0, 1) (`summed_divisor_inputs`)."""
    rng = np.random.default_rng(seed)
    bounds = bounds or {}
    out = []
    for i, (shape, dtype) in enumerate(types):
        if dtype.kind == "f" and i in bounds:  # positions converted to indices
            out.append(rng.uniform(0, bounds[i], size=shape).astype(dtype))
        elif dtype.kind == "f" and i in positive:
            out.append(rng.uniform(0, 1, size=shape).astype(dtype))
        elif dtype.kind == "f":
            out.append(rng.uniform(-1, 1, size=shape).astype(dtype))
        elif dtype.kind == "b":
            out.append(rng.integers(0, 2, size=shape).astype(dtype))
        elif i in bounds:
            out.append(rng.integers(0, bounds[i], size=shape).astype(dtype))
        else:
            lo = 0 if dtype.kind == "u" else -SIGNED_INT_RANGE
            out.append(rng.integers(lo, SIGNED_INT_RANGE + 1, size=shape).astype(dtype))
    return out


def absolute(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The inputs with floats replaced by their absolute values (indices untouched)."""
    return [np.abs(a) if a.dtype.kind == "f" else a for a in inputs]


def outputs_match(got: Sequence[np.ndarray], ref: Sequence[np.ndarray],
                  magnitude: Sequence[np.ndarray] | None = None, rtol: float = 1e-4,
                  atol: float = 1e-5) -> str:
    """'' if every result matches within the bound, else a one-line reason."""
    if len(got) != len(ref):
        return f"{len(got)} results, expected {len(ref)}"
    for i, (g, r) in enumerate(zip(got, ref)):
        if g.shape != r.shape:
            return f"output {i}: shape {g.shape} != {r.shape}"
        if r.dtype.kind != "f":
            if not np.array_equal(g, r):
                return f"output {i}: {int(np.sum(g != r))} of {r.size} elements differ"
            continue
        g64, r64 = g.astype(np.float64), r.astype(np.float64)
        scale = np.abs(r64)
        if magnitude is not None:
            scale = np.maximum(scale, np.abs(magnitude[i].astype(np.float64)))
        err = np.abs(g64 - r64)
        # Equal values (an infinity included: a masked score is -inf in both, and its
        # difference is NaN) and NaN in both match; an infinity matches only itself (its
        # magnitude bound is infinite too).
        same = (g64 == r64) | (np.isnan(g64) & np.isnan(r64))
        finite = np.isfinite(g64) & np.isfinite(r64)
        with np.errstate(invalid="ignore"):
            bad = ~((finite & (err <= atol + rtol * scale)) | same)
        if np.any(bad):
            j = int(np.argmax(np.where(bad, err - rtol * scale, -np.inf)))
            return (f"output {i}: {int(bad.sum())} of {r.size} elements off, e.g. "
                    f"{g64.flat[j]:.6g} vs {r64.flat[j]:.6g} (bound "
                    f"{atol + rtol * scale.flat[j]:.3g})")
    return ""
