"""Element types at a model's boundary that numpy and IREE's tools cannot exchange.

Candidates and models are checked and timed through `iree-run-module` /
`iree-benchmark-module` with .npy files; numpy has no bfloat16, and IREE's tools write no
.npy of a bf16 result ("unsupported data encoding"). A model taking or returning bf16
tensors is therefore wrapped in torch before import: its bf16 inputs arrive as f32 and are
rounded to bf16 first thing, its bf16 outputs leave widened to f32. Inside, the model
computes in bf16 as written; the module handed back has the f32 boundary (exact: every
bf16 is an f32, and the conversions are elementwise ops IREE fuses into their neighbours).
"""
from __future__ import annotations

from typing import Any

from mlir_ansor.errors import FrontendError
from mlir_ansor.tuner.io_layout import boundary_wrapper


def _unexchangeable(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16


def bf16_boundary(model: Any, inputs: tuple) -> list[str]:
    """The model's inputs and outputs (on `inputs`) in bf16, named ("input 0", "output
    1"); runs the model once to see its outputs."""
    import torch
    import torch.utils._pytree as pytree

    with torch.no_grad():
        try:
            outs = pytree.tree_leaves(model(*inputs))
        except Exception as e:  # user code: its error is the message, not our traceback
            raise FrontendError(f"the model failed on its example inputs: "
                                f"{type(e).__name__}: {e}") from e
    return ([f"input {i}" for i, x in enumerate(inputs) if _unexchangeable(x)] +
            [f"output {i}" for i, y in enumerate(outs) if _unexchangeable(y)])


def wrap_f32_boundary(model: Any, inputs: tuple) -> tuple[Any, tuple]:
    """(a torch module taking f32 where `model` takes bf16 and returning f32 where it
    returns bf16, its example inputs)."""
    import torch
    import torch.utils._pytree as pytree

    narrowed = tuple(_unexchangeable(x) for x in inputs)

    def widen(y):
        return y.float() if _unexchangeable(y) else y

    def forward(self, *args):
        return pytree.tree_map(widen, self.inner(*(
            a.to(torch.bfloat16) if n else a for a, n in zip(args, narrowed))))

    wrapper = boundary_wrapper("F32BoundaryIO", model, forward)
    return wrapper, tuple(x.float() if n else x for x, n in zip(inputs, narrowed))
