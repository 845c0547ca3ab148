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


def _depthwise_chw(stride: int) -> str:
    """A batch-1 depthwise conv as IREE hands it over (channels first, no batch loop)."""
    from tests.conftest import linalg_func

    o, i = 28, 28 * stride + 2
    return linalg_func(
        f"%x: tensor<8x{i}x{i}xf32>, %w: tensor<8x3x3xf32>", f"tensor<8x{o}x{o}xf32>", f"""
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x{o}x{o}xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<8x{o}x{o}xf32>) -> tensor<8x{o}x{o}xf32>
  %r = linalg.generic {{indexing_maps = [
      affine_map<(d0, d1, d2, d3, d4) -> (d2, d0 * {stride} + d3, d1 * {stride} + d4)>,
      affine_map<(d0, d1, d2, d3, d4) -> (d2, d3, d4)>,
      affine_map<(d0, d1, d2, d3, d4) -> (d2, d0, d1)>],
      iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}}
      ins(%x, %w : tensor<8x{i}x{i}xf32>, tensor<8x3x3xf32>) outs(%f : tensor<8x{o}x{o}xf32>) {{
    ^bb0(%a: f32, %b: f32, %c: f32):
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %c, %m : f32
      linalg.yield %s : f32
  }} -> tensor<8x{o}x{o}xf32>
  return %r : tensor<8x{o}x{o}xf32>""")


def test_strided_depthwise_keeps_unit_strided_tiles():
    """The fold path cannot vectorize d * 2 (no projected permutation): the strided output
    columns get a unit register tile; stride 1 leaves them free."""
    import random

    from mlir_ansor.sketch_passes.annotation import annotate
    from mlir_ansor.sketch_passes.loops import unit_loops
    from mlir_ansor.sketch_passes.rules import default_cpu_rules
    from mlir_ansor.sketch_passes.sketch import generate_sketches

    _, dw2 = ops_of(_depthwise_chw(2))
    assert A.conv_kind(dw2) == "fold"
    assert A.strided_window_loops(dw2) == {0, 1}
    assert {0, 1} <= unit_loops(dw2)
    _, dw1 = ops_of(_depthwise_chw(1))
    assert A.strided_window_loops(dw1) == set()
    assert 1 not in unit_loops(dw1)
    ops = ops_of(_depthwise_chw(2))
    rng = random.Random(0)
    for sk in generate_sketches(ops, default_cpu_rules()):
        for _ in range(20):
            prog = annotate(ops, sk, rng)
            assert prog.split(dw2.name, 0).lengths[-1] == 1
            assert prog.split(dw2.name, 1).lengths[-1] == 1


def test_divisors_and_footprints_match_their_definitions():
    """The fast forms the search uses (cached divisors, written-out footprint) agree with
    the plain definitions."""
    from mlir_ansor.dialect_helpers.linalg_info import OperandInfo
    from mlir_ansor.sketch_passes.loops import (divisors, footprint, footprint_shape,
                                                largest_divisor)
    for n in range(1, 400):
        assert divisors(n) == tuple(d for d in range(1, n + 1) if n % d == 0)
        assert largest_divisor(n, 17) == max(d for d in range(1, 18) if n % d == 0)
    assert largest_divisor(12, 0) == 1
    # A 3x3 window read of a 1x10x10x4 input: rows y + ky, a stride-2 column 2x + kx.
    o = OperandInfo(shape=(1, 10, 10, 4), map_results=(((0, 1),), ((1, 1), (3, 1)),
                                                       ((2, 2), (4, 1)), ((5, 1),)),
                    elem_bytes=4, is_output=False)
    tile = {1: 4, 2: 3, 3: 3, 4: 3, 5: 4}
    assert footprint_shape(o, tile) == (1, 6, 7, 4)
    assert footprint(o, tile) == 6 * 7 * 4
    assert footprint(o, {1: 20, 2: 20, 3: 3}) == 10 * 10 * 1


# A row "all" over i1 as IREE's dispatch holds it (i1 stored as i8: the combiner wrapped in
# casts), and an argmax's index (a select): neither is a reduction the vectorizer takes.
_ALL_MASKED = """
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @main(%arg0: tensor<64x128xf32>) -> tensor<64xi8> {
  %c1 = arith.constant 1 : i8
  %ninf = arith.constant 0xFF800000 : f32
  %0 = tensor.empty() : tensor<64xi8>
  %1 = linalg.fill ins(%c1 : i8) outs(%0 : tensor<64xi8>) -> tensor<64xi8>
  %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]}
      ins(%arg0 : tensor<64x128xf32>) outs(%1 : tensor<64xi8>) {
  ^bb0(%in: f32, %out: i8):
    %3 = arith.trunci %out : i8 to i1
    %4 = arith.cmpf oeq, %in, %ninf : f32
    %5 = arith.andi %4, %3 : i1
    %6 = arith.extui %5 : i1 to i8
    linalg.yield %6 : i8
  } -> tensor<64xi8>
  return %2 : tensor<64xi8>
}
"""

_ARGMAX = """
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @main(%arg0: tensor<64x128xf32>, %m: tensor<64xf32>, %i: tensor<64xi64>)
    -> (tensor<64xf32>, tensor<64xi64>) {
  %2:2 = linalg.generic {indexing_maps = [#map, #map1, #map1],
                         iterator_types = ["parallel", "reduction"]}
      ins(%arg0 : tensor<64x128xf32>) outs(%m, %i : tensor<64xf32>, tensor<64xi64>) {
  ^bb0(%in: f32, %out: f32, %idx: i64):
    %j = linalg.index 1 : index
    %k = arith.index_cast %j : index to i64
    %mx = arith.maximumf %in, %out : f32
    %gt = arith.cmpf ogt, %in, %out : f32
    %s = arith.select %gt, %k, %idx : i64
    linalg.yield %mx, %s : f32, i64
  } -> (tensor<64xf32>, tensor<64xi64>)
  return %2#0, %2#1 : tensor<64xf32>, tensor<64xi64>
}
"""


def test_reductions_the_vectorizer_rejects_are_left_scalar():
    fill, red = ops_of(_ALL_MASKED)
    assert red.reduction_dims == (1,) and red.scalar and not fill.scalar
    (argmax,) = ops_of(_ARGMAX)
    assert argmax.scalar
    # Combiners applied to the accumulator directly vectorize: sums, maxima, contractions.
    assert not any(o.scalar for o in ops_of(ROW_SUM) + ops_of(MATMUL))


def _conv(x_map: str, x_shape: str, out_map: str, out_shape: str):
    from tests.conftest import mul_add_generic

    return ops_of(mul_add_generic(
        x_shape, "3x3x3x8", out_shape, "n, h, w, f, kh, kw, c",
        (x_map, "kh, kw, c, f", out_map), "parallel, parallel, parallel, parallel, "
        "reduction, reduction, reduction"))[-1]


def test_a_conv_reading_channels_first_into_channels_last_is_no_named_conv():
    """A strided stem whose NCHW model input IREE fused into the conv (input channel
    first, filter loop last): no named conv has that layout and specialize failed on 16 of
    24 candidates; it takes the fold path. The NHWC form stays a named 2-D conv."""
    nhwc = _conv("n, 2 * h + kh, 2 * w + kw, c", "1x17x17x3", "n, h, w, f", "1x8x8x8")
    mixed = _conv("n, c, 2 * h + kh, 2 * w + kw", "1x3x17x17", "n, h, w, f", "1x8x8x8")
    assert A.conv_kind(nhwc) == "conv2d"
    assert A.conv_kind(mixed) == "fold"
