"""torch.topk and a sort read through a leading slice become IREE's top-k op at import
(dialect_helpers/sorts.py): n*k work instead of IREE's n^2 bubble sort. The module
computes torch's values and indices; a sort used whole stays a sort."""
import numpy as np
import pytest
import torch
from torch import nn

from mlir_ansor.tuner.frontend import import_model


class Heads(nn.Module):
    def forward(self, x, n):
        top, idx = x.topk(5, dim=-1)
        low, low_idx = x.topk(3, dim=1, largest=False)
        first = torch.sort(x, dim=-1, descending=True)[0][:, :2]
        whole = torch.sort(x, dim=0)[0]
        counts, count_idx = n.topk(4, dim=-1)
        return top, idx, low, low_idx, first, whole, counts, count_idx


def _run(text: str, inputs) -> list[np.ndarray]:
    import iree.compiler as ic
    import iree.runtime as rt

    vmfb = ic.compile_str(text, target_backends=["llvm-cpu"],
                          extra_args=["--iree-llvmcpu-target-cpu=host"])
    module = rt.load_vm_flatbuffer(vmfb, driver="local-task")
    outs = module.main(*[x.numpy() for x in inputs])
    return [np.asarray(o) for o in (outs if isinstance(outs, (tuple, list)) else (outs,))]


def test_topk_and_leading_sort_slices_become_topk_ops_and_match_torch():
    torch.manual_seed(0)
    x = torch.randn(6, 300)
    n = torch.randperm(6 * 50).reshape(6, 50)  # distinct ints: no ties to order
    model = Heads().eval()
    text = import_model(model, (x, n))
    # Four top-k (largest 5, smallest 3, the sort's first 2, the ints' 4); the sort along
    # the rows, used whole, stays.
    assert text.count("iree_linalg_ext.topk") == 4, text
    assert text.count("tm_tensor.sort") == 1
    assert "cmpf ugt" in text and "cmpf ult" in text and "cmpi sgt" in text
    with torch.no_grad():
        want = [t.numpy() for t in model(x, n)]
    got = _run(text, (x, n))
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, i
        np.testing.assert_array_equal(g, w, err_msg=f"output {i}")


@pytest.mark.parametrize("k", [1, 7])
def test_ties_keep_the_values_and_give_each_index_once(k):
    """torch orders tied elements as its kernel happens to (1, 4, 2 for three equal
    values here); the top-k gives the same values, distinct indices that hold them, the
    lower index first."""
    class TopK(nn.Module):
        def forward(self, x):
            return x.topk(k, dim=0)

    x = torch.tensor([1.0, 3.0, 3.0, 2.0, 3.0, 0.5, 2.0, 2.0, -1.0])
    text = import_model(TopK().eval(), (x,))
    assert "iree_linalg_ext.topk" in text
    values, idx = _run(text, (x,))
    want_v, _ = TopK()(x)
    np.testing.assert_array_equal(values, want_v.numpy())
    assert len(set(idx.tolist())) == k
    np.testing.assert_array_equal(x.numpy()[idx], values)
    for a, b in zip(idx[:-1], idx[1:]):
        assert x[a] > x[b] or a < b


def test_a_row_with_fewer_finite_values_than_k_reports_its_minus_inf_entries():
    """Masked logits (-inf for banned entries) then top-k: the slots start empty (NaN), so
    the -inf entries fill the rest with their own indices (review: with -inf slots and a
    strict comparator they never entered and reported index 0, repeated)."""
    class TopK(nn.Module):
        def forward(self, x):
            return x.topk(4, dim=-1)

    x = torch.tensor([[-float("inf"), 2.0, -float("inf"), 1.0, -float("inf")],
                      [0.5, 3.0, -1.0, 2.0, 7.0]])
    text = import_model(TopK().eval(), (x,))
    values, idx = _run(text, (x,))
    want_v, _ = TopK()(x)
    np.testing.assert_array_equal(values, want_v.numpy())
    for row in range(2):
        assert len(set(idx[row].tolist())) == 4
        np.testing.assert_array_equal(x.numpy()[row, idx[row]], values[row])
