"""Finds stores to GPU workgroup (shared) memory whose address is the same in every thread
of a block: a write-write race between the block's threads unless one thread runs it.

IREE's GPU bufferization puts every buffer a strategy allocates in workgroup memory; a
per-thread tile or accumulator that lands there is shared by all threads, which then race
on it. On an H200 such kernels gave wrong answers in most candidates of a convolution
(2026-11-26); this check finds that class of bug where no GPU is at hand: in the kernel IR
after the strategy ran (threads mapped, loops lowered), a store into workgroup memory must
have an address (an index, or the offset of the view it stores into) that depends on the
thread id, or store a constant (all threads initializing a buffer with one value before a
barrier is benign; the read-modify-write that would follow is not)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from iree.compiler import ir

WORKGROUP = "#gpu.address_space<workgroup>"
# op name -> (index of the memref operand, index of the first index operand)
_STORES = {
    "memref.store": (1, 2),
    "vector.store": (1, 2),
    "vector.transfer_write": (1, 2),
    "vector.maskedstore": (0, 1),
}


@dataclass(frozen=True)
class SharedStore:
    """A store into workgroup memory that every thread makes at the same address."""

    function: str
    op: str  # the store, as printed (one line)

    def __str__(self) -> str:
        return f"{self.function}: thread-invariant store to workgroup memory: {self.op}"


class _ThreadDependence:
    """Whether a value depends on the thread id (memoized over the def chain)."""

    def __init__(self) -> None:
        self.memo: dict[int, bool] = {}

    def of(self, value: ir.Value) -> bool:
        key = hash(value)
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = False  # cycles (loop-carried values) count as independent
        owner = value.owner
        if isinstance(owner, ir.Block):
            # A loop's induction variable depends on the thread if its bounds do.
            parent = owner.owner.operation if owner.owner is not None else None
            dep = parent is not None and parent.name == "scf.for" and any(
                self.of(parent.operands[i]) for i in range(3))
        else:
            op = owner.operation if hasattr(owner, "operation") else owner
            dep = op.name in ("gpu.thread_id", "gpu.lane_id", "gpu.subgroup_id") or any(
                self.of(x) for x in op.operands)
        self.memo[key] = dep
        return dep


def _threads(func: ir.Operation) -> int | None:
    """The block size of a kernel from its translation_info (None if it names none)."""
    if "translation_info" not in func.attributes:
        return None
    m = re.search(r"workgroup_size = \[(\d+), (\d+), (\d+)\]",
                  str(func.attributes["translation_info"]))
    return int(m[1]) * int(m[2]) * int(m[3]) if m else None


def _defined_by(value: ir.Value, op_name: str) -> bool:
    owner = value.owner
    return not isinstance(owner, ir.Block) and owner.name == op_name


_EQ, _SLT, _ULT = 0, 2, 6  # arith.cmpi predicates


def _one_thread(op: ir.Operation) -> bool:
    """Whether `op` sits under an `scf.if` that admits one thread id: `tid == 0` or
    `tid < 1` (the guard thread mapping puts on a forall of one iteration). The guard reads
    one thread dimension; the others are assumed to be 1 there."""
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        if parent.name == "scf.if" and _defined_by(parent.operands[0], "arith.cmpi"):
            cond = parent.operands[0].owner
            pred = ir.IntegerAttr(cond.attributes["predicate"]).value
            lhs, rhs = cond.operands
            if _defined_by(lhs, "gpu.thread_id") and _defined_by(rhs, "arith.constant"):
                bound = ir.IntegerAttr(rhs.owner.attributes["value"]).value
                if (pred == _EQ and bound == 0) or (pred in (_SLT, _ULT) and bound == 1):
                    return True
        parent = parent.parent
    return False


def _walk(op: ir.Operation, visit) -> None:
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                visit(child.operation)
                _walk(child.operation, visit)


def thread_invariant_shared_stores(module_text: str) -> list[SharedStore]:
    """The stores into workgroup memory of every function of `module_text` (kernel IR
    after thread mapping) whose address no thread id reaches."""
    found: list[SharedStore] = []
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(module_text)
        dep = _ThreadDependence()
        funcs: list[ir.Operation] = []
        _walk(module.operation, lambda o: funcs.append(o) if o.name == "func.func" else None)
        for f in funcs:
            name = ir.StringAttr(f.attributes["sym_name"]).value
            if _threads(f) == 1:
                continue  # a block of one thread shares its memory with no one

            def visit(o: ir.Operation, name: str = name) -> None:
                spec = _STORES.get(o.name)
                if spec is None:
                    return
                mem_i, idx_i = spec
                mem = o.operands[mem_i]
                if WORKGROUP not in str(mem.type):
                    return
                indices = list(o.operands)[idx_i:]
                if o.name == "vector.maskedstore":
                    indices = indices[:-2]  # mask and value come last
                value = o.operands[-1 if o.name == "vector.maskedstore" else 0]
                if _defined_by(value, "arith.constant"):
                    return  # every thread writing one constant (an init) is benign
                if _one_thread(o):
                    return
                if not dep.of(mem) and not any(dep.of(i) for i in indices):
                    found.append(SharedStore(name, str(o).splitlines()[0].strip()))

            _walk(f, visit)
    return found
