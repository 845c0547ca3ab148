"""Which contractions of a model IREE data-tiles: `iree.opt.data_tiling` hints.

With `--iree-dispatch-creation-data-tiling`, IREE 3.13 marks every matmul-like op for data
tiling (packed operands, mmt4d kernels) unless some op of the model already carries the
hint attribute `iree.opt.data_tiling`; then only the hinted ops are data-tiled. Hinting a
subset lets a model keep IREE's data tiling where it builds and helps and leave the rest
to the tuner (on the dynamic BERT layer the flag alone fails to compile its batch matmuls:
"'affine.delinearize_index' op no basis element may be statically non-positive").

A site is a contraction (named or generic linalg op whose indexing maps are all projected
permutations, with a reduction loop, two inputs and one output) addressed by its position
among the model's linalg ops in program order, so a site list applies to the same model
text it was found on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from iree.compiler import ir

from mlir_ansor.dialect_helpers.linalg_info import generic_forms, is_contraction, linalg_ops
from mlir_ansor.dialect_helpers.winograd import WINOGRAD_OP_ATTR
from mlir_ansor.errors import AnsorError

HINT_ATTR = "iree.opt.data_tiling"


class DataTilingHintError(AnsorError):
    """A hint site list that does not fit the model text (the message says why)."""


@dataclass(frozen=True)
class HintSite:
    index: int  # position among the model's linalg ops (program order)
    signature: str  # op name and operand types: sites of one signature are decided together


def hint_sites(model_mlir: str) -> list[HintSite]:
    """The contractions IREE's data tiling may take, in program order (not those of a
    Winograd rewrite)."""
    with ir.Context():
        forms = generic_forms(model_mlir)
        if forms is None:
            raise DataTilingHintError("cannot pair the model's linalg ops with their generic "
                                      "forms")
        return [HintSite(i, f"{op.name}({', '.join(str(v.type) for v in op.operands)})")
                for i, (op, gen) in enumerate(zip(forms.ops, forms.generics))
                if is_contraction(gen) and WINOGRAD_OP_ATTR not in op.attributes]


def with_hints(model_mlir: str, sites: Sequence[int]) -> str:
    """`model_mlir` with the data-tiling hint on the linalg ops at `sites` (positions as
    `hint_sites` gives them); verified after the edit."""
    with ir.Context():
        module = ir.Module.parse(model_mlir)
        ops = linalg_ops(module)
        for i in sites:
            if not 0 <= i < len(ops):
                raise DataTilingHintError(f"hint site {i} outside the model's {len(ops)} "
                                          "linalg ops (a layout of another model?)")
            ops[i].attributes[HINT_ATTR] = ir.UnitAttr.get()
        if not module.operation.verify():
            raise DataTilingHintError("the model does not verify with its data-tiling hints")
        return str(module)


def same_contractions(before: str, after: str, sites: Sequence[int]) -> tuple[int, ...]:
    """`sites` of model text `before` at their positions in `after`, the same model with
    ops added or removed that are no contraction (e.g. a Winograd conv's bias split off):
    the k-th contraction of one is the k-th of the other. DataTilingHintError where the
    two do not have the same contractions in the same order."""
    old, new = hint_sites(before), hint_sites(after)
    if [s.signature for s in old] != [s.signature for s in new]:
        raise DataTilingHintError("the two model forms do not have the same contractions")
    rank = {s.index: i for i, s in enumerate(old)}
    missing = [i for i in sites if i not in rank]
    if missing:
        raise DataTilingHintError(f"hint sites {missing} are no contraction of the model")
    return tuple(new[rank[i]].index for i in sites)
