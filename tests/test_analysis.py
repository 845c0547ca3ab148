"""The analysis predicates, read from iterator types and indexing maps."""
from mlir_ansor.sketch_passes import analysis as A
from tests.conftest import BATCH_MATMUL, ELEMENTWISE, MATMUL, ROW_SUM, ops_of


def test_matmul_reuse_and_extents():
    fill, mm = ops_of(MATMUL)
    assert mm.iterators == ("parallel", "parallel", "reduction")
    assert mm.extents == (64, 48, 32)
    assert mm.flops == 2 * 64 * 48 * 32
    assert A.has_data_reuse(mm) and not A.has_data_reuse(fill)
    assert A.is_strict_inlinable(ops_of(MATMUL), 0)  # the fill feeds the matmul
    assert not A.is_strict_inlinable(ops_of(MATMUL), 1)  # output
    assert not A.has_more_reduction_parallel(mm)


def test_batch_matmul():
    _, bmm = ops_of(BATCH_MATMUL)
    assert bmm.extents == (4, 64, 48, 32)
    assert A.has_data_reuse(bmm) and not A.has_window_access(bmm)


def test_elementwise_chain():
    ops = ops_of(ELEMENTWISE)
    assert [A.is_elementwise(o) for o in ops] == [True, True]
    assert A.is_strict_inlinable(ops, 0) and not A.is_strict_inlinable(ops, 1)
    assert not any(A.has_data_reuse(o) for o in ops)


def test_reduction_has_no_reuse_but_wants_rfactor():
    _, red = ops_of(ROW_SUM)
    assert red.reduction_dims == (1,)
    assert not A.has_data_reuse(red)  # the input is read once: nothing to reuse
    assert A.has_more_reduction_parallel(red)


def test_mm_relu_fusible_consumer(tmp_path):
    from tests.conftest import DATA

    ops = ops_of((DATA / "mm_relu_512.mlir").read_text())
    assert A.has_fusible_consumer(ops, 1)
    assert not A.has_fusible_consumer(ops, 2)


def test_conv_as_torch_mlir_emits_it(conv_tasks):
    convs = [t for t in conv_tasks if t.tunable]
    assert convs, [t.skip_reason for t in conv_tasks]
    ops = convs[0].ops
    conv = [o for o in ops if o.reduction_dims][0]
    assert A.has_data_reuse(conv) and A.has_window_access(conv)
    assert conv.extents[-3:] == (8, 3, 3)  # input channels, kernel window
    consumer = A.consumers(ops, conv.index)
    assert len(consumer) == 1 and A.has_fusible_consumer(ops, conv.index)


def test_captured_values_pick_the_structural_matcher():
    from mlir_ansor.transform_scripts.library import captures_outer_values
    from tests.conftest import DATA, ELEMENTWISE, MATMUL

    assert not captures_outer_values(MATMUL)
    assert not captures_outer_values(ELEMENTWISE)
    assert captures_outer_values((DATA / "scale_rows.mlir").read_text())
    # The relu's 0.0 also feeds the matmul's fill: a DAG leaf, which the DAG matcher maps.
    assert not captures_outer_values((DATA / "mm_relu_512.mlir").read_text())
