"""The bundled and held-out models compute something an end-to-end check can see."""
import sys
from pathlib import Path

import pytest
import torch

from mlir_ansor.examples import mobilenet_v2, resnet50

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import heldout_models  # noqa: E402


@pytest.mark.parametrize("make", [mobilenet_v2, resnet50, heldout_models.efficientnet_b0],
                         ids=["mobilenet_v2", "resnet50", "efficientnet_b0"])
def test_no_convolution_output_vanishes(make):
    """Every conv's output keeps a magnitude (batch norms calibrated on the example
    input): with fresh statistics MobileNet-V2's last convs put out 1e-7 and its result
    was the classifier's bias alone, whatever the convs computed."""
    model, inputs = make()
    peaks = []
    hooks = [m.register_forward_hook(lambda m, i, o: peaks.append(o.abs().max().item()))
             for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    with torch.no_grad():
        model(*inputs)
    for h in hooks:
        h.remove()
    assert len(peaks) > 50 and min(peaks) > 1e-2, min(peaks)


import unseen_models  # noqa: E402


@pytest.mark.parametrize("name", sorted(unseen_models.UNSEEN))
def test_unseen_models_compute_something(name):
    """tools/sweep_models.py's models run in torch and put out finite values that depend
    on the input (a constant output would let any module pass the end-to-end check)."""
    model, inputs = unseen_models.UNSEEN[name]()
    with torch.no_grad():
        out = model(*inputs)
        # (Bool masks kept: flipped, a row could be wholly masked.)
        shifted = tuple(x * 0.5 + 0.25 if x.dtype.is_floating_point else
                        x if x.dtype == torch.bool else (x + 1) % 1000 for x in inputs)
        other = model(*shifted)
    outs = out if isinstance(out, tuple) else (out,)
    others = other if isinstance(other, tuple) else (other,)
    assert all(torch.isfinite(o.float()).all() for o in outs)
    assert any(not torch.equal(a, b) for a, b in zip(outs, others))
