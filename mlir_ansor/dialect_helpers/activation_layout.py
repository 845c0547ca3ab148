"""Channels-last activations: a whole-model layout alternative for NCHW convolutions.

torch-mlir imports convolutions in PyTorch's NCHW layout (`linalg.conv_2d_nchw_fchw`): the
output's innermost, contiguous dim is the width, so vector lanes run along short rows (56,
28, 14, 7 wide) and the weight does not index them. IREE's preprocessing pass
`iree-preprocessing-convert-conv-to-channels-last` rewrites every such op to NHWC / HWCF with
transposes around it and propagates them, so that convs and the elementwise ops between
them meet in one layout and the transposes cancel (only the model's inputs, outputs and ops
the pass does not convert, e.g. NCHW pooling, keep one). The output channel is then the
innermost dim: the lanes a register tile vectorizes, indexed by the (constant) weight.

Whether that is faster depends on the model and on what runs each dispatch, so the tuner
measures both forms (tuner/layouts.py) and keeps the faster.
"""
from __future__ import annotations

from iree.compiler import ir
from iree.compiler.passmanager import PassManager

from mlir_ansor.dialect_helpers.dispatch import walk_ops
from mlir_ansor.dialect_helpers.layout_rewrite import LayoutRewriteError

# The named NCHW convolution the pass converts (2-D, channels first).
_CHANNELS_FIRST = "linalg.conv_2d_nchw_fchw"
_PASS = "iree-preprocessing-convert-conv-to-channels-last"
_PIPELINE = f"builtin.module(func.func({_PASS}),canonicalize,cse)"
# The same rewrite inside a stock iree-compile run (the anchor of tools/bench_models.py).
CHANNELS_LAST_FLAG = f"--iree-preprocessing-pass-pipeline=builtin.module(util.func({_PASS}))"


def channels_first_convs(model_mlir: str) -> int:
    """How many NCHW convolutions the model has (0: nothing to rewrite)."""
    with ir.Context():
        return len(walk_ops(ir.Module.parse(model_mlir).operation, _CHANNELS_FIRST))


def to_channels_last(model_mlir: str) -> str:
    """`model_mlir` with every NCHW convolution in NHWC / HWCF (same function signature)."""
    with ir.Context():
        module = ir.Module.parse(model_mlir)
        before = len(walk_ops(module.operation, _CHANNELS_FIRST))
        if not before:
            raise LayoutRewriteError("the model has no NCHW convolution to convert")
        pipeline = PassManager.parse(_PIPELINE)
        try:
            pipeline.run(module.operation)
        except ir.MLIRError as e:  # a pass failed on this model; the diagnostics say why
            raise LayoutRewriteError(f"converting to channels-last failed: {e}") from e
        left = len(walk_ops(module.operation, _CHANNELS_FIRST))
        if left:
            raise LayoutRewriteError(f"{left} of {before} NCHW convolutions were not converted")
        if not module.operation.verify():
            raise LayoutRewriteError("the channels-last model does not verify")
        return str(module)
