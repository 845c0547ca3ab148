"""Merge several tuned transform libraries into the one library IREE takes.

`iree-compile` accepts one `--iree-codegen-transform-dialect-library`, and each library of
`library.py` has its own `@__kernel_config` whose `foreach_match` lists (matcher, action)
pairs. The merged library holds every source's sequences, with the names that clash renamed
(`strategy_t3` of the second library becomes `strategy_l1_t3`: the `strategy_` prefix stays,
which `build.sh` and `api.strategy_symbols` look for), and one `@__kernel_config` listing all
pairs in source order. A matcher equal to one of an earlier library (the same dispatch) is
left out with its action and strategy: the earlier library's strategy is kept, and a note
says so.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from iree.compiler import ir

from mlir_ansor.errors import AnsorError
from mlir_ansor.transform_scripts.library import IREE_VERSION_ATTR, build_kernel_config

KERNEL_CONFIG = "__kernel_config"
_SYMBOL_REF = re.compile(r"@([A-Za-z_][A-Za-z0-9_$.]*)")


class LibraryMergeError(AnsorError):
    """A library cannot be read as a tuned library, or the merge does not verify."""


@dataclass(frozen=True)
class MergeResult:
    text: str
    notes: tuple[str, ...]  # one line per dropped duplicate, rename or version mismatch


@dataclass(frozen=True)
class _Source:
    name: str  # for messages: a file name, or "library N"
    module: ir.Module
    pairs: tuple[tuple[str, str], ...]  # (matcher, action) of its foreach_match, in order


def _sym(op) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value


def _top_symbols(module: ir.Module) -> dict[str, ir.Operation]:
    return {_sym(op): op.operation for op in module.body.operations
            if "sym_name" in op.attributes}


def _references(op: ir.Operation, names: set[str]) -> set[str]:
    """Symbols of `names` that `op` or an op nested in it refers to. Read from the printed
    attributes: a codegen_spec inside #iree_codegen.translation_info is not reachable as a
    SymbolRefAttr from Python."""
    found: set[str] = set()

    def visit(o: ir.Operation) -> ir.WalkResult:
        for key in o.attributes:
            if key != "sym_name":
                found.update(n for n in _SYMBOL_REF.findall(str(o.attributes[key]))
                             if n in names)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found


def _reachable(roots: Sequence[str], symbols: dict[str, ir.Operation]) -> set[str]:
    seen: set[str] = set()
    todo = [r for r in roots if r in symbols]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += _references(symbols[name], set(symbols)) - seen
    return seen


def _parse(text: str, name: str) -> ir.Module:
    try:
        return ir.Module.parse(text)
    except ir.MLIRError as e:
        diag = e.error_diagnostics[0] if e.error_diagnostics else None
        # loc("-":204:1) -> name:204:1
        where = re.search(r":(\d+:\d+)\)$", str(diag.location)) if diag else None
        msg = (diag.message if diag else str(e)).splitlines()[0]
        raise LibraryMergeError(f"cannot parse {name}{':' + where.group(1) if where else ''}: "
                                f"{msg}") from None


def _pairs(module: ir.Module, name: str) -> tuple[tuple[str, str], ...]:
    config = _top_symbols(module).get(KERNEL_CONFIG)
    if config is None:
        raise LibraryMergeError(f"{name} has no @{KERNEL_CONFIG} (not a tuned library)")
    found: list[ir.Operation] = []

    def visit(o: ir.Operation) -> ir.WalkResult:
        if o.name == "transform.foreach_match":
            found.append(o)
        return ir.WalkResult.ADVANCE

    config.walk(visit)
    if len(found) != 1:
        raise LibraryMergeError(f"{name}: @{KERNEL_CONFIG} has {len(found)} foreach_match "
                                "ops, expected one")
    matchers, actions = ([ir.FlatSymbolRefAttr(a).value
                          for a in ir.ArrayAttr(found[0].attributes[key])]
                         for key in ("matchers", "actions"))
    return tuple(zip(matchers, actions))


def _fresh(name: str, tag: str, taken: set[str]) -> str:
    """`strategy_t3` -> `strategy_l1_t3` (the kind prefix stays first), numbered on."""
    head, sep, tail = name.partition("_")
    base = f"{head}_{tag}_{tail}" if sep and head else f"{tag}_{name}"
    new, k = base, 2
    while new in taken:
        new, k = f"{base}_{k}", k + 1
    return new


def _same_matcher(a: ir.Operation, b: ir.Operation) -> bool:
    """Equal bodies (locations and the symbol name aside): they match the same dispatches."""
    saved = _sym(b)
    ir.SymbolTable.set_symbol_name(b, _sym(a))
    try:
        return a.is_structurally_equivalent(b, ir.OperationEquivalenceFlags.IGNORE_LOCATIONS)
    finally:
        ir.SymbolTable.set_symbol_name(b, saved)


def _strategies_of(action: ir.Operation, symbols: dict[str, ir.Operation]) -> list[str]:
    return sorted(n for n in _reachable([_sym(action)], symbols) if n.startswith("strategy_"))


def _listed(symbols: Sequence[str]) -> str:
    return ", ".join(f"@{s}" for s in symbols) or "no strategy"


def merge_libraries(texts: Sequence[str], names: Sequence[str] = ()) -> MergeResult:
    """One library with every (matcher, action) pair of `texts` (tuned libraries, as
    `library.library_text` writes them). `names` label the sources in errors and notes."""
    if not texts:
        raise LibraryMergeError("no library to merge")
    names = list(names) or [f"library {i + 1}" for i in range(len(texts))]
    if len(names) != len(texts):
        raise ValueError(f"{len(names)} names for {len(texts)} libraries")
    notes: list[str] = []
    with ir.Context(), ir.Location.unknown():
        sources = []
        for text, name in zip(texts, names):
            module = _parse(text, name)
            sources.append(_Source(name, module, _pairs(module, name)))

        merged = ir.Module.create()
        merged.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
        versions = []
        for src in sources:
            attrs = src.module.operation.attributes
            v = (ir.StringAttr(attrs[IREE_VERSION_ATTR]).value
                 if IREE_VERSION_ATTR in attrs else "unknown")
            if v not in versions:
                versions.append(v)
        if len(versions) > 1:
            notes.append(f"the libraries were made by different IREE versions: "
                         f"{', '.join(versions)}")
        merged.operation.attributes[IREE_VERSION_ATTR] = ir.StringAttr.get(", ".join(versions))

        pairs: list[tuple[str, str]] = []
        taken: set[str] = {KERNEL_CONFIG}  # symbols of the merged library
        # (matcher op, its library, the strategies its action applies) of the pairs kept
        kept: list[tuple[ir.Operation, str, list[str]]] = []
        with ir.InsertionPoint(merged.body):
            for i, src in enumerate(sources):
                own = _top_symbols(src.module)
                mine: list[tuple[str, str]] = []
                for m, a in src.pairs:
                    twin = next((k for k in kept if _same_matcher(k[0], own[m])), None)
                    if twin is None:
                        mine.append((m, a))
                        continue
                    notes.append(
                        f"{src.name}: @{m} matches the same dispatch as @{_sym(twin[0])} of "
                        f"{twin[1]}: kept {_listed(twin[2])} of {twin[1]}, left out "
                        f"{_listed(_strategies_of(own[a], own))}")
                # Copy all but what only the left-out pairs reach (a sequence no pair
                # reaches is not ours to judge: it is kept).
                dropped = (_reachable([x for p in src.pairs for x in p], own)
                           - _reachable([x for p in mine for x in p], own))
                copied = [s for s in own if s != KERNEL_CONFIG and s not in dropped]
                # Rename what clashes, in the source module first: every reference follows
                # (codegen_spec in the actions' translation_info too).
                renames: dict[str, str] = {}
                for sym in copied:
                    if sym in taken:
                        renames[sym] = _fresh(sym, f"l{i}",
                                              taken | set(own) | set(renames.values()))
                for old, new in renames.items():
                    ir.SymbolTable.replace_all_symbol_uses(old, new, src.module.operation)
                    ir.SymbolTable.set_symbol_name(own[old], new)
                if renames:
                    old, new = next(iter(renames.items()))
                    notes.append(f"{src.name}: {len(renames)} symbols renamed (prefix l{i}_), "
                                 f"e.g. @{old} -> @{new}")
                for sym in copied:
                    own[sym].clone()
                    taken.add(renames.get(sym, sym))
                own = _top_symbols(src.module)
                mine = [(renames.get(m, m), renames.get(a, a)) for m, a in mine]
                kept += [(own[m], src.name, _strategies_of(own[a], own)) for m, a in mine]
                pairs += mine
            build_kernel_config(pairs)
        if not merged.operation.verify():
            raise LibraryMergeError("the merged library does not verify")
        text = str(merged)
    with ir.Context():
        _parse(text, "the merged library")  # what IREE will read back
    return MergeResult(text, tuple(notes))
