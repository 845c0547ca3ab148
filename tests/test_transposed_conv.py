"""The sub-pixel decomposition of transposed convs (dialect_helpers/transposed_conv.py):
every form torch-mlir imports is split into its phases and still computes torch's numbers;
other convs are left alone."""
import pytest
import torch
from torch import nn

from mlir_ansor.dialect_helpers.transposed_conv import decompose_transposed_convs
from mlir_ansor.tuner.frontend import import_model
from tests.conftest import assert_computes_torchs_numbers

CASES = {  # name: (module, input shape, phase convs after the decomposition)
    "k4s2p1": (nn.ConvTranspose2d(6, 4, 4, 2, 1, bias=False), (1, 6, 5, 5), 4),
    "k3s2p1-output-padding": (nn.ConvTranspose2d(4, 4, 3, 2, 1, output_padding=1),
                              (2, 4, 5, 7), 4),
    "k2s2-bias": (nn.ConvTranspose2d(4, 3, 2, 2), (1, 4, 6, 6), 4),
    "rectangular": (nn.ConvTranspose2d(3, 2, (5, 3), (3, 2), (2, 1)), (1, 3, 5, 6), 6),
    # Kernel 1: one phase meets the input, the other three are zeros (nothing computed).
    "k1s2": (nn.ConvTranspose2d(3, 3, 1, 2, bias=False), (1, 3, 4, 4), 1),
    "1d": (nn.ConvTranspose1d(4, 6, 5, 3, 2), (1, 4, 9), 3),
    "3d": (nn.ConvTranspose3d(2, 3, 3, 2, 1, bias=False), (1, 2, 3, 4, 3), 8),
}


@pytest.mark.parametrize("name", list(CASES))
def test_transposed_convs_lose_their_zeros_and_keep_the_numbers(name, tools, tmp_path):
    conv, shape, phases = CASES[name]
    torch.manual_seed(0)
    model, inputs = conv.eval(), (torch.randn(*shape),)
    text = import_model(model, inputs)  # (the frontend decomposes)
    n_convs = sum(text.count(f"linalg.conv_{k}") for k in ("1d_ncw", "2d_nchw", "3d_ncdhw"))
    assert n_convs == phases, text[:3000]
    assert "tensor.insert_slice %arg0" not in text  # no input spread with zeros is left
    assert_computes_torchs_numbers(text, model, inputs, tools, tmp_path, atol=1e-5)


@pytest.mark.parametrize("conv, shape", [
    (nn.ConvTranspose2d(3, 3, 3, 1, 1), (1, 3, 6, 6)),  # stride 1: no zeros
    (nn.Conv2d(3, 4, 3, 2, 1), (1, 3, 8, 8)),  # a plain strided conv
    (nn.ConvTranspose2d(4, 4, 3, 2, 1, groups=2), (1, 4, 5, 5)),  # grouped: not this form
])
def test_other_convs_are_left_alone(conv, shape):
    text = import_model(conv.eval(), (torch.randn(*shape),))
    assert decompose_transposed_convs(text) == (text, 0)
