"""Read the loop structure of the tileable ops of a task function.

Named linalg ops are generalized first (on a private copy) so every op is read the same
way: iterator types, indexing maps, loop extents. Nothing here depends on op names.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from iree.compiler import ir
from iree.compiler.passmanager import PassManager

from mlir_ansor.dialect_helpers.dispatch import walk_ops
from mlir_ansor.dialect_helpers.tensor_building import defining
from mlir_ansor.errors import UnsupportedDispatch

# Body ops that count as one floating-point (or integer) operation each.
_ARITH_PREFIXES = ("arith.", "math.")
_FREE_OPS = ("arith.constant", "arith.index_cast", "linalg.yield", "linalg.index")


@dataclass(frozen=True)
class OperandInfo:
    shape: tuple[int, ...]
    map_results: tuple[tuple[tuple[int, int], ...], ...]  # per tensor dim: ((loop, coeff), ...)
    is_output: bool
    elem_bytes: int = 4
    elem_type: str = "f32"  # MLIR element type, e.g. f32, i8

    @property
    def loops(self) -> frozenset[int]:
        """The loops that index this operand (any of its dims)."""
        return frozenset(l for t in self.map_results for l, _ in t)


@dataclass(frozen=True)
class OpInfo:
    """One tileable op of a dispatch, in payload order."""

    index: int
    name: str  # role name used by programs, e.g. "op1_generic"
    op_name: str  # e.g. linalg.matmul, tensor.pad
    iterators: tuple[str, ...]  # "parallel" / "reduction" per loop
    extents: tuple[int, ...]
    operands: tuple[OperandInfo, ...]
    body_ops: int  # arithmetic ops per loop iteration
    producers: tuple[int, ...]  # indices of ops whose results this op reads
    body_kinds: tuple[str, ...] = ()  # names of the arithmetic body ops (for features)
    prelude: tuple[str, ...] = ()  # passes a strategy runs first to see these ops (decomposition)
    # Left to scalar loops (the vectorizer would reject it): the body reads with
    # tensor.extract at computed indices, or a reduction's yielded value is not one
    # combining op applied to its accumulator (`_vectorizable_reduction`).
    scalar: bool = False
    # The result reaches its binding through an `iree_linalg_ext.map_store` (IREE 3.13 folds
    # the reshape into a padded consumer's buffer into one): that op follows in payload order
    # and is tileable too, so the strategy tiles it as the workgroup root.
    map_stored: bool = False
    # Loops whose extent is a dynamic size (`?`): `extents` holds them at a nominal size
    # (the task's analysis sample); strategies must not depend on it (micro-kernels).
    dynamic_loops: tuple[int, ...] = ()

    @property
    def is_linalg(self) -> bool:
        return self.op_name.startswith("linalg.")

    @functools.cached_property
    def reduction_dims(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.iterators) if t == "reduction")

    @functools.cached_property
    def parallel_dims(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.iterators) if t == "parallel")

    @functools.cached_property
    def flops(self) -> int:
        return math.prod(self.extents) * max(self.body_ops, 1) if self.is_linalg else 0

    @functools.cached_property
    def output(self) -> OperandInfo:
        return [o for o in self.operands if o.is_output][0]

    def output_dim_of_loop(self, loop: int) -> int | None:
        """Which dim of the (first) output tensor loop `loop` indexes, if any."""
        return self._output_dims.get(loop)

    @functools.cached_property
    def _output_dims(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for pos, terms in enumerate(self.output.map_results):
            if len(terms) == 1 and terms[0][1] == 1:
                out.setdefault(terms[0][0], pos)  # the first dim a loop indexes alone
        return out

    @functools.cached_property
    def memo(self) -> dict:
        """Loop facts other modules derive from this op once (sketch_passes.loops.op_fact):
        the op never changes, and the search asks for them per candidate."""
        return {}


def _affine_terms(expr: ir.AffineExpr) -> tuple[tuple[int, int], ...] | None:
    """Linear terms (dim, coefficient) of an affine expression; None if not linear."""
    if isinstance(expr, ir.AffineDimExpr):
        return ((expr.position, 1),)
    if isinstance(expr, ir.AffineConstantExpr):
        return ()
    if isinstance(expr, ir.AffineAddExpr):
        lhs, rhs = _affine_terms(expr.lhs), _affine_terms(expr.rhs)
        if lhs is None or rhs is None:
            return None
        return lhs + rhs
    if isinstance(expr, ir.AffineMulExpr):
        for a, b in ((expr.lhs, expr.rhs), (expr.rhs, expr.lhs)):
            if isinstance(b, ir.AffineConstantExpr) and isinstance(a, ir.AffineDimExpr):
                return ((a.position, b.value),)
    return None


def _static_shape(t: ir.Type) -> tuple[int, ...]:
    if isinstance(t, (ir.FloatType, ir.IntegerType, ir.IndexType)):
        return ()  # a scalar operand (e.g. the value of a fill)
    if not isinstance(t, ir.RankedTensorType) or not t.has_static_shape:
        raise UnsupportedDispatch(f"operand type {t} is not a static tensor")
    return tuple(t.shape)


def _elem_bytes(t: ir.Type) -> int:
    et = t.element_type if isinstance(t, ir.ShapedType) else t
    width = getattr(et, "width", 32) if hasattr(et, "width") else 32
    return max(1, width // 8)


def _elem_type(t: ir.Type) -> str:
    return str(t.element_type) if isinstance(t, ir.ShapedType) else str(t)


def _read_generic(op: ir.Operation) -> tuple[tuple[str, ...], tuple[OperandInfo, ...],
                                              tuple[str, ...]]:
    maps = [ir.AffineMapAttr(a).value for a in op.attributes["indexing_maps"]]
    iterators = tuple(str(a).split("<")[-1].rstrip(">") for a in op.attributes["iterator_types"])
    n_inputs = len(op.operands) - len(op.results)
    operands = []
    for i, (value, amap) in enumerate(zip(op.operands, maps)):
        terms = []
        for r in amap.results:
            t = _affine_terms(r)
            if t is None:
                raise UnsupportedDispatch(f"non-linear indexing map {amap} in {op.name}")
            terms.append(t)
        operands.append(OperandInfo(_static_shape(value.type), tuple(terms), i >= n_inputs,
                                    _elem_bytes(value.type),
                                    _elem_type(value.type)))
    body = op.regions[0].blocks[0]
    kinds = tuple(
        b.operation.name for b in body.operations
        if b.operation.name.startswith(_ARITH_PREFIXES) and b.operation.name not in _FREE_OPS
    )
    return iterators, tuple(operands), kinds


# Ops the vectorizer recognizes as a reduction's combiner (vector.CombiningKind).
_COMBINERS = frozenset({
    "arith.addf", "arith.addi", "arith.mulf", "arith.muli", "arith.andi", "arith.ori",
    "arith.xori", "arith.maxnumf", "arith.minnumf", "arith.maximumf", "arith.minimumf",
    "arith.maxsi", "arith.minsi", "arith.maxui", "arith.minui"})


def _vectorizable_reduction(op: ir.Operation, iterators: tuple[str, ...]) -> bool:
    """Whether every accumulator of a reducing generic is updated by one combining op that
    reads it directly (what linalg's vectorizer takes). Not so for an argmax's `select`, nor
    for an i1 accumulator: IREE stores i1 as i8 before our strategy runs, the combiner then
    sits between casts (`extui(andi(x, trunci(acc)))`). Such tiles fail to vectorize."""
    if "reduction" not in iterators:
        return True
    body = op.regions[0].blocks[0]
    n_out = len(op.results)
    accumulators = list(body.arguments)[len(body.arguments) - n_out:]
    yielded = list(body.operations)[-1].operands
    for acc, value in zip(accumulators, yielded):
        if str(acc.type) == "i1":
            return False
        owner = defining(value)
        if owner is None or owner.name not in _COMBINERS:
            return False
        if not any(v == acc for v in owner.operands):
            return False
    return True


def _extents(iterators: tuple[str, ...], operands: tuple[OperandInfo, ...]) -> tuple[int, ...]:
    extents: list[int | None] = [None] * len(iterators)
    for o in operands:
        for size, terms in zip(o.shape, o.map_results):
            if len(terms) == 1 and terms[0][1] == 1 and extents[terms[0][0]] is None:
                extents[terms[0][0]] = size
    if any(e is None for e in extents):
        raise UnsupportedDispatch("a loop extent cannot be derived from the operand shapes")
    return tuple(int(e) for e in extents)  # type: ignore[arg-type]


# Aggregate ops read (and tiled) as the ops they decompose into, with the pass that does it.
DECOMPOSE = {"linalg.softmax": "iree-codegen-decompose-softmax"}


def tileable_ops(func: ir.Operation) -> list[ir.Operation]:
    ops: list[ir.Operation] = []

    def visit(o: ir.Operation) -> ir.WalkResult:
        if o.name.startswith("linalg.") and o.name != "linalg.yield" and o.name != "linalg.index":
            ops.append(o)
            return ir.WalkResult.SKIP
        if o.name == "tensor.pad":
            ops.append(o)
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    func.walk(visit)
    return ops


def linalg_ops(module: ir.Module) -> list[ir.Operation]:
    """The linalg ops of a module in program order (not those inside their bodies)."""
    return [o for o in tileable_ops(module.operation) if o.name.startswith("linalg.")]


@dataclass(frozen=True)
class GenericForms:
    """A model's linalg ops (program order) beside their `linalg.generic` forms; holds both
    modules, which must outlive the ops read from them (parse inside an ir.Context)."""

    module: ir.Module
    generalized: ir.Module
    ops: tuple[ir.Operation, ...]
    generics: tuple[ir.Operation, ...]


def is_contraction(generic: ir.Operation) -> bool:
    """A generic op with a reduction loop, two inputs, one output and projected-permutation
    maps (what IREE's data tiling takes)."""
    if generic.name != "linalg.generic":
        return False
    iterators = [str(a) for a in ir.ArrayAttr(generic.attributes["iterator_types"])]
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(generic.attributes["indexing_maps"])]
    inputs = ir.DenseI32ArrayAttr(generic.attributes["operandSegmentSizes"])[0]
    return (any("reduction" in it for it in iterators) and inputs == 2 and len(maps) == 3
            and all(m.is_projected_permutation for m in maps))


def generic_forms(model_mlir: str) -> GenericForms | None:
    """Parse `model_mlir` twice, once with its named linalg ops generalized; None when the
    two lists of linalg ops do not pair up."""
    module = ir.Module.parse(model_mlir)
    generalized = ir.Module.parse(model_mlir)
    PassManager.parse("builtin.module(func.func(linalg-generalize-named-ops))").run(
        generalized.operation)
    ops, generics = (tuple(linalg_ops(m)) for m in (module, generalized))
    if len(ops) != len(generics):
        return None
    return GenericForms(module, generalized, ops, generics)


def analyze_task(task_mlir: str) -> list[OpInfo]:
    """Ops of the task's `@main`, in payload order (the order the strategy's split_handle
    sees: aggregate ops such as linalg.softmax decomposed, as the strategy's prelude does)."""
    return _analyze(task_mlir, decompose=True)


def analyze_undecomposed(task_mlir: str) -> list[OpInfo | None]:
    """Ops of the task's `@main` as the payload holds them before any decomposition (what a
    library's matcher sees): None for an aggregate op (linalg.softmax)."""
    return _analyze(task_mlir, decompose=False)


def _analyze(task_mlir: str, decompose: bool) -> list:
    with ir.Context() as ctx:
        module = ir.Module.parse(task_mlir, ctx)
        present = {o.name for o in tileable_ops(module.operation)}
        prelude = tuple(p for name, p in DECOMPOSE.items() if name in present) \
            if decompose else ()
        for p in prelude:
            PassManager.parse(f"builtin.module(func.func({p}))").run(module.operation)
        names_before = [o.name for o in tileable_ops(module.operation)]
        pm = PassManager.parse("builtin.module(func.func(linalg-generalize-named-ops))")
        pm.run(module.operation)
        ops = tileable_ops(module.operation)
        if len(ops) != len(names_before):
            raise UnsupportedDispatch("generalization changed the number of ops")
        stored = _map_stored(module.operation, ops)
        infos = []
        for i, (op, orig_name) in enumerate(zip(ops, names_before)):
            if not decompose and op.name in DECOMPOSE:
                infos.append(None)
                continue
            owners = [getattr(v.owner, "operation", v.owner) for v in op.operands]
            producers = [j for j, earlier in enumerate(ops[:i]) if earlier in owners]
            short = orig_name.split(".")[-1]
            if op.name == "linalg.generic":
                iterators, operands, kinds = _read_generic(op)
                extents = _extents(iterators, operands)
                scalar = (any(b.operation.name == "tensor.extract"
                              for b in op.regions[0].blocks[0].operations)
                          or not _vectorizable_reduction(op, iterators))
            elif op.name == "tensor.pad":
                shape = _static_shape(op.results[0].type)
                iterators = ("parallel",) * len(shape)
                ident = tuple(((d, 1),) for d in range(len(shape)))
                operands = (OperandInfo(shape, ident, True, _elem_bytes(op.results[0].type)),)
                extents, kinds, scalar = shape, (), False
            else:
                raise UnsupportedDispatch(f"op '{orig_name}' cannot be generalized")
            infos.append(OpInfo(i, f"op{i}_{short}", orig_name, iterators, extents, operands,
                                len(kinds), tuple(producers), kinds, prelude, scalar,
                                i in stored))
        return infos


MAP_STORE = "iree_linalg_ext.map_store"


def _map_stored(func: ir.Operation, ops: list[ir.Operation]) -> set[int]:
    """Indices of `ops` whose result an `iree_linalg_ext.map_store` writes out; only the
    last op's (the strategy tiles that map_store as the workgroup root)."""
    stores = walk_ops(func, MAP_STORE)
    found = set()
    for st in stores:
        owner = getattr(st.operands[0].owner, "operation", st.operands[0].owner)
        idx = [i for i, o in enumerate(ops) if o == owner]
        if not idx or idx[0] != len(ops) - 1 or len(stores) > 1:
            raise UnsupportedDispatch("a map_store of another op than the dispatch's last")
        found.add(idx[0])
    return found


def operand_path(task_mlir: str, start: int, target: int) -> list[int]:
    """Operand indices leading from tileable op `start` back to its producer `target`
    (indices in payload order)."""
    with ir.Context():
        module = ir.Module.parse(task_mlir)
        ops = tileable_ops(module.operation)
        paths: dict[int, list[int]] = {start: []}
        frontier = [start]
        while frontier:
            i = frontier.pop(0)
            if i == target:
                return paths[i]
            for k, v in enumerate(ops[i].operands):
                owner = getattr(v.owner, "operation", v.owner)
                for j, o in enumerate(ops):
                    if o == owner and j not in paths:
                        paths[j] = paths[i] + [k]
                        frontier.append(j)
    raise UnsupportedDispatch(f"op {target} does not feed op {start}")
