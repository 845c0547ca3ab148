"""Import (tuner/frontend.py): the no-op expands torch's matmul broadcasting leaves in a
dynamic model are dropped before torch-mlir lowers them to per-element gathers; an expand
that broadcasts stays; the module computes what torch does, also at size 1."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mlir_ansor.tuner.frontend import drop_identity_expands, import_model


class Attention(nn.Module):
    """softmax(q k^T) v over 4-D tensors (heads), the pattern every transformer has, plus a
    real broadcast (a 1-row bias expanded over the sequence)."""

    def __init__(self, d: int = 32, heads: int = 2):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.bias = nn.Parameter(torch.randn(1, 1, d))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.reshape(b, s, self.h, d // self.h).transpose(1, 2)
                   for t in self.qkv(x).split(d, dim=-1))
        att = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
        out = (att @ v).transpose(1, 2).reshape(b, s, d)
        return out + self.bias.expand(b, s, d)


def _dynamic():
    torch.manual_seed(0)
    return Attention().eval(), (torch.randn(1, 8, 32),), \
        {"x": {1: torch.export.Dim("s", min=2, max=64)}}


def test_only_the_no_op_expands_are_dropped():
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    model, inputs, shapes = _dynamic()
    program = torch.export.export(model, inputs, dynamic_shapes=shapes, strict=False)
    program = program.run_decompositions(get_decomposition_table())

    def expands():
        return [n for n in program.graph.nodes if n.target == torch.ops.aten.expand.default]

    before = len(expands())
    # q, k^T before the first batched matmul, att and v before the second: no-ops; the
    # bias's expand broadcasts a size-1 row over the sequence and must stay.
    assert drop_identity_expands(program) == 4 and before == 5
    (kept,) = expands()
    assert kept.args[0].meta["val"].shape[1] == 1


def test_a_dynamic_attention_imports_without_gathers_and_matches_torch(tmp_path):
    import iree.compiler as ic
    import iree.runtime as rt

    model, inputs, shapes = _dynamic()
    text = import_model(model, inputs, shapes)
    # The dropped expands were per-element gathers (tensor.extract at indices computed
    # from linalg.index; the one index left is softmax's max).
    assert "tensor.extract " not in text and text.count("linalg.index") == 1
    assert "tensor<1x?x32xf32>" in text
    vmfb = ic.compile_str(text, target_backends=["llvm-cpu"],
                          extra_args=["--iree-llvmcpu-target-cpu=host"])
    module = rt.load_vm_flatbuffer(vmfb, driver="local-task")
    for s in (1, 2, 37, 64):  # 1: torch.export exported at 8, specialising nothing
        x = torch.randn(1, s, 32)
        got = np.asarray(module.main(x.numpy()))
        with torch.no_grad():
            want = model(x).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(4, 3), (1, 3)])
def test_a_static_expand_that_broadcasts_is_kept(shape):
    class Broadcast(nn.Module):
        def forward(self, x):
            return x.expand(4, 3) * 2

    text = import_model(Broadcast().eval(), (torch.randn(*shape),))
    assert "tensor<4x3xf32>" in text


class FixedMask(nn.Module):
    """A causal mask of a fixed 16 x 16 added to the scores: the sequence cannot vary."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.triu(torch.full((16, 16), -1e9), 1))

    def forward(self, x):
        return torch.softmax(x @ x.transpose(-1, -2) + self.mask, dim=-1)


def test_a_dimension_the_model_specialises_is_named_in_one_line():
    from mlir_ansor.errors import FrontendError

    with pytest.raises(FrontendError) as err:
        import_model(FixedMask().eval(), (torch.randn(16, 8),),
                     {"x": {0: torch.export.Dim("x_0", min=2, max=32)}})
    msg = str(err.value)
    assert "\n" not in msg and "the model fixes x_0 to 16" in msg


class SegmentSum(nn.Module):
    """Rows summed into segments by a buffer of segment ids (`index_add`, which decomposes
    to `index_put` with the ids inside its list of indices)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("seg", torch.arange(12) % 5)

    def forward(self, x):
        out = torch.zeros(5, x.shape[1]).index_add(0, self.seg, x)
        return out * 2


def test_a_buffer_of_indices_imports_and_matches_torch():
    import iree.compiler as ic
    import iree.runtime as rt

    torch.manual_seed(0)
    model, x = SegmentSum().eval(), torch.randn(12, 6)
    # torch-mlir alone refuses it ("Heterogeneous lists are not supported").
    text = import_model(model, (x,))
    vmfb = ic.compile_str(text, target_backends=["llvm-cpu"],
                          extra_args=["--iree-llvmcpu-target-cpu=host"])
    module = rt.load_vm_flatbuffer(vmfb, driver="local-task")
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(np.asarray(module.main(x.numpy())), want, rtol=1e-5, atol=1e-6)


class Bf16Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(32, 48), nn.Linear(48, 16)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def test_a_bf16_model_imports_compiles_and_matches_torch_through_an_f32_boundary(tools,
                                                                                   tmp_path):
    """Its small bf16 weights (the biases) become dense attributes (IREE's llvm-cpu fails
    on a bf16 blob inlined into a dispatch); its boundary is exchanged as f32; its
    dispatches with bf16 arguments are left to IREE with that reason."""
    import iree.compiler as ic
    import iree.runtime as rt

    from mlir_ansor.tuner.io_dtypes import bf16_boundary, wrap_f32_boundary
    from mlir_ansor.tuner.tasks import extract_tasks, flow_source

    torch.manual_seed(0)
    model, x = Bf16Mlp().eval().bfloat16(), torch.randn(8, 32).bfloat16()
    assert bf16_boundary(model, (x,)) == ["input 0", "output 0"]
    wrapped, (x32,) = wrap_f32_boundary(model, (x,))
    assert x32.dtype == torch.float32
    text = import_model(wrapped, (x32,))
    assert "func.func @main(%arg0: tensor<8x32xf32>) -> tensor<8x16xf32>" in text
    assert "dense_resource<torch_tensor_48_torch.bfloat16>" not in text  # a bias, 96 bytes
    vmfb = ic.compile_str(text, target_backends=["llvm-cpu"],
                          extra_args=["--iree-llvmcpu-target-cpu=host"])
    module = rt.load_vm_flatbuffer(vmfb, driver="local-task")
    with torch.no_grad():
        want = model(x).float().numpy()
    np.testing.assert_allclose(np.asarray(module.main(x32.numpy())), want, rtol=1e-2,
                               atol=1e-2)
    (tmp_path / "m.mlir").write_text(text)
    tasks = extract_tasks(flow_source(tmp_path / "m.mlir", "llvm-cpu", tools, 300))
    bf16 = [t for t in tasks if any("bf16" in ty for ty in (*t.input_types,
                                                              *t.output_types))]
    assert bf16 and all("bf16" in t.skip_reason and not t.sketches for t in bf16)


class AdaptiveMax(nn.Module):
    def __init__(self, out):
        super().__init__()
        self.out = out

    def forward(self, x):
        values, indices = F.adaptive_max_pool2d(x, self.out, return_indices=True)
        return values, indices, F.adaptive_avg_pool2d(x, 7)


@pytest.mark.parametrize("out", [(3, 4), (5, 7)])
def test_uneven_adaptive_max_pooling_imports_and_matches_torch(out):
    """20 x 21 -> 3 x 4: windows of unequal sizes, which torch-mlir's lowering refuses at
    run time ("only support cases with fixed stride size"); -> 5 x 7 divides and keeps
    torch-mlir's own lowering. Values and indices as torch's."""
    import iree.compiler as ic
    import iree.runtime as rt

    torch.manual_seed(0)
    model, x = AdaptiveMax(out).eval(), torch.randn(2, 3, 20, 21)
    text = import_model(model, (x,))
    vmfb = ic.compile_str(text, target_backends=["llvm-cpu"],
                          extra_args=["--iree-llvmcpu-target-cpu=host"])
    module = rt.load_vm_flatbuffer(vmfb, driver="local-task")
    got = [np.asarray(o) for o in module.main(x.numpy())]
    with torch.no_grad():
        want = [t.numpy() for t in model(x)]
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[2], want[2], rtol=1e-5, atol=1e-6)


def test_a_model_that_fails_on_its_example_inputs_is_named_in_one_error():
    from mlir_ansor.errors import FrontendError
    from mlir_ansor.tuner.io_dtypes import bf16_boundary

    class Broken(nn.Module):
        def forward(self, x):
            return x @ torch.ones(3, 2)  # x has 4 columns

    with pytest.raises(FrontendError, match="failed on its example inputs: RuntimeError"):
        bf16_boundary(Broken(), (torch.randn(2, 4),))
