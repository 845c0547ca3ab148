"""The memory layout of a model's image inputs and outputs (`--io-layout`).

A PyTorch model is written for NCHW tensors, but a convnet served fast keeps its images in
torch's channels_last memory format (NHWC in memory; NDHWC for 5-D): PyTorch's oneDNN convs
run 1.2-30x faster on such tensors here, and a pipeline feeding them never transposes.

With "channels-last" the module tuned and handed back takes and returns every rank-4/5
tensor in that physical layout: its inputs are `x.permute(0, 2, 3, 1)` of the model's NCHW
inputs (a view, no copy, of a channels_last tensor) and its rank-4/5 outputs come back NHWC
(`y.permute(0, 3, 1, 2)` is then the model's output, channels_last). It is done by
wrapping the user's model in torch before import: the wrapper permutes at both ends, so the
import, torch's reference outputs and every check see the same contract, and the transposes
the import brings meet the channels-last convolutions' own and cancel
(dialect_helpers/activation_layout.py). The wrapper is a plain torch module: torch's own
timing of it is torch on channels_last tensors.

"as-imported" (the default) keeps the model's own signature.
"""
from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any

from mlir_ansor.errors import FrontendError

IO_LAYOUTS = ("as-imported", "channels-last")
# Ranks torch has a channels-last memory format for (channels_last, channels_last_3d).
_RANKS = (4, 5)


def to_last(rank: int) -> list[int]:
    """The permutation NC... -> N...C of a rank-`rank` tensor."""
    return [0, *range(2, rank), 1]


def to_first(rank: int) -> list[int]:
    """The permutation N...C -> NC... (inverse of `to_last`)."""
    return [0, rank - 1, *range(1, rank - 1)]


def _exchanged(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor) and x.dim() in _RANKS


def boundary_wrapper(cls_name: str, model: Any, forward: Any) -> Any:
    """A torch module named `cls_name` running `forward(self, *args)` with `self.inner` the
    user's `model`: the forward keeps the model's argument names (torch.export binds
    `dynamic_shapes` by them) and the model's training flag."""
    import torch

    try:
        params = list(inspect.signature(getattr(model, "forward", model)).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params:
        self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
        forward.__signature__ = inspect.Signature([self_param, *params])  # type: ignore
    cls = type(cls_name, (torch.nn.Module,), {"forward": forward})
    wrapper = cls()
    wrapper.inner = model
    # The wrapper's own flag only: train() would reset every submodule's the user set.
    wrapper.training = bool(getattr(model, "training", False))
    return wrapper


def wrap_channels_last(name: str, model: Any, inputs: tuple) -> tuple[Any, tuple]:
    """(a torch module taking and returning the rank-4/5 tensors of `model` channels-last,
    its example inputs): a FrontendError if `model` has no rank-4/5 input."""
    import torch
    import torch.utils._pytree as pytree

    if not any(_exchanged(x) for x in inputs):
        ranks = ", ".join(str(x.dim()) if isinstance(x, torch.Tensor) else type(x).__name__
                          for x in inputs)
        raise FrontendError(f"--io-layout channels-last: model {name} has no 4-D or 5-D input "
                            f"(input ranks: {ranks}); nothing to exchange channels-last")

    def last(x):
        return x.permute(*to_last(x.dim())) if _exchanged(x) else x

    def first(x):
        return x.permute(*to_first(x.dim())) if _exchanged(x) else x

    def forward(self, *args):
        # Every rank-4/5 tensor of the output, however nested (tuples, lists, dicts).
        return pytree.tree_map(last, self.inner(*(first(a) for a in args)))

    wrapper = boundary_wrapper("ChannelsLastIO", model, forward)
    # contiguous(): the example is an ordinary NHWC tensor, as a user's channels_last view
    # permuted would be.
    return wrapper, tuple(last(x).contiguous() if _exchanged(x) else x for x in inputs)


def map_dynamic(resolved: Any, inputs: tuple) -> Any:
    """`resolved` (dynamic.Resolved, against the model's own NCHW inputs) with each spec's
    dimension of a rank-4/5 input renumbered for its channels-last form."""
    # (Named as the user wrote them: x:3 stays "x_3" in labels, the report and torch.)
    dims = tuple(replace(d, dim=to_last(inputs[p].dim()).index(d.dim),
                         name=d.name or d.symbol)
                 if _exchanged(inputs[p]) else d
                 for d, p in zip(resolved.dims, resolved.positions))
    return replace(resolved, dims=dims)
