"""Small bf16 constants as plain dense attributes.

torch-mlir imports every constant tensor as a `dense_resource` blob. IREE 3.13 inlines a
constant of up to a few hundred bytes into the dispatch that reads it, and its llvm-cpu
backend then fails on a bf16 blob there ("'arith.constant' op failed to verify that all of
{value, result} have same type"): any bf16 model with a small weight (a bias) does not
compile. The same values as a `dense<...>` attribute compile, so the small ones are
rewritten so; large ones (never inlined) stay blobs.
"""
from __future__ import annotations

import re

import numpy as np
from iree.compiler import ir

from mlir_ansor.dialect_helpers.dispatch import walk_ops

# Bytes up to which a bf16 constant becomes a dense attribute: above IREE's inlining limit
# (--iree-dispatch-creation-inline-constants-max-byte-length, 256 by default), well below
# a size whose text would matter.
INLINE_LIMIT_BYTES = 4096
# A blob in the module's resource section: name, then hex of a 4-byte alignment header
# and the little-endian data.
_BLOB = re.compile(r'^\s*([\w.$-]+): "0x([0-9A-Fa-f]*)"', re.M)
_NAME = re.compile(r"dense_resource<([^>]+)>")


def densify_small_bf16_constants(model_mlir: str) -> tuple[str, int]:
    """(`model_mlir` with every bf16 `dense_resource` constant of at most
    INLINE_LIMIT_BYTES as a dense attribute, how many were rewritten)."""
    if "bf16" not in model_mlir or "dense_resource" not in model_mlir:
        return model_mlir, 0
    done = 0
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(model_mlir)
        small = []  # (op, its tensor type, its blob's name)
        for op in walk_ops(module.operation, "arith.constant"):
            attr = op.attributes["value"]
            # (The bindings neither downcast nor type-identify resource attributes.)
            name = _NAME.match(str(attr))
            if name is None:
                continue
            t = ir.RankedTensorType(attr.type)
            if isinstance(t.element_type, ir.BF16Type) \
                    and 2 * np.prod(t.shape, dtype=np.int64) <= INLINE_LIMIT_BYTES:
                small.append((op, t, name.group(1)))
        # Only the blobs rewritten are copied out of the (possibly large) text.
        wanted = {n for _, _, n in small}
        blobs = {m.group(1): m.group(2) for m in _BLOB.finditer(model_mlir)
                 if m.group(1) in wanted}
        for op, t, name in small:
            data = blobs.get(name)
            if data is None:
                raise ValueError(f"no data for the bf16 constant {name} in the module's "
                                 "resources")
            raw = bytes.fromhex(data[8:])  # (after the alignment header)
            bits = np.frombuffer(raw, dtype="<u2").reshape(t.shape)
            op.attributes["value"] = ir.DenseElementsAttr.get(bits, type=t)
            done += 1
        return (str(module), done) if done else (model_mlir, 0)
