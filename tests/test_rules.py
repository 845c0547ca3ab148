"""Each derivation rule on its own: the states where it applies and where it does not."""
import pytest

from mlir_ansor.sketch_passes.rules import (AddCacheWrite, AddCrossThreadReduction,
                                            AddRfactor, AlwaysInline, CacheWrite,
                                            CrossThreadReduction, FuseConsumer,
                                            MultiLevelTile, MultiLevelTileGPU, MultiLevelTiling,
                                            MultiLevelTilingGPU,
                                            MultiLevelTilingWithFusion, Rfactor, Skip)
from mlir_ansor.sketch_passes.sketch import Decision, Sketch, State
from tests.conftest import DATA, ELEMENTWISE, MATMUL, ROW_SUM, linalg_func, ops_of

MM_RELU = (DATA / "mm_relu_512.mlir").read_text()


def _decide(rule, text, index, **sketch):
    ops = ops_of(text)
    i = index % len(ops)
    state = State(Sketch(anchor=ops[-1].name, **sketch), i)
    return rule.condition(ops, state), ops, state


# (rule, payload, op index, expected decision); -1 = the output op.
CASES = [
    (Skip(), MATMUL, -1, Decision.APPLY_AND_SKIP_REST),  # always applies, last in the list
    (AlwaysInline(), ELEMENTWISE, 0, Decision.APPLY_AND_SKIP_REST),  # elementwise producer
    (AlwaysInline(), ELEMENTWISE, -1, Decision.SKIP),  # the output is not inlined
    (AlwaysInline(), MATMUL, -1, Decision.SKIP),  # a reduction is not inlined
    (MultiLevelTiling(), MATMUL, -1, Decision.APPLY_AND_SKIP_REST),  # data reuse
    (MultiLevelTiling(), ROW_SUM, -1, Decision.SKIP),  # no reuse
    (MultiLevelTiling(), ELEMENTWISE, -1, Decision.SKIP),
    (MultiLevelTilingWithFusion(), MM_RELU, -2, Decision.APPLY_AND_SKIP_REST),  # relu fusible
    (MultiLevelTilingWithFusion(), MATMUL, -1, Decision.SKIP),  # no consumer
    (AddCacheWrite(), MATMUL, -1, Decision.APPLY),  # reuse, no fusible consumer
    (AddCacheWrite(), MM_RELU, -2, Decision.SKIP),  # the consumer is fused instead
    (AddCacheWrite(), ROW_SUM, -1, Decision.SKIP),
    (AddRfactor(), ROW_SUM, -1, Decision.APPLY),  # 8 outputs, 4096-long rows
    (AddRfactor(), MATMUL, -1, Decision.SKIP),  # 3072 outputs
    (AddRfactor(), ELEMENTWISE, -1, Decision.SKIP),  # no reduction
    (MultiLevelTilingGPU(), MATMUL, -1, Decision.APPLY_AND_SKIP_REST),
    (MultiLevelTilingGPU(), ROW_SUM, -1, Decision.SKIP),
]


@pytest.mark.parametrize("rule,text,index,want", CASES,
                         ids=[f"{c[0].name}-{i}" for i, c in enumerate(CASES)])
def test_condition(rule, text, index, want):
    got, _, _ = _decide(rule, text, index)
    assert got == want


def test_no_second_root():
    """Tiling rules and rfactor never apply once a root was chosen."""
    for rule, text in ((MultiLevelTiling(), MATMUL), (AddCacheWrite(), MATMUL),
                       (AddRfactor(), ROW_SUM), (MultiLevelTilingGPU(), MATMUL)):
        got, _, _ = _decide(rule, text, -1, structure=(MultiLevelTile("opX"),))
        assert got == Decision.SKIP, rule.name


def test_apply_results():
    _, ops, st = _decide(AddCacheWrite(), MATMUL, -1)
    (nxt,) = AddCacheWrite().apply(ops, st)
    assert nxt.index == st.index - 1 and nxt.sketch.has(CacheWrite)
    assert nxt.sketch.root == ops[-1].name
    _, ops, st = _decide(AddRfactor(), ROW_SUM, -1)
    (nxt,) = AddRfactor().apply(ops, st)
    assert nxt.sketch.has(Rfactor) and nxt.sketch.rules == ("AddRfactor",)
    _, ops, st = _decide(MultiLevelTilingWithFusion(), MM_RELU, -2)
    (nxt,) = MultiLevelTilingWithFusion().apply(ops, st)
    assert nxt.sketch.has(FuseConsumer) and nxt.sketch.root == ops[-2].name
    _, ops, st = _decide(AlwaysInline(), ELEMENTWISE, 0)
    (nxt,) = AlwaysInline().apply(ops, st)
    assert nxt.sketch.inlined == (ops[0].name,)


COLUMN_SUM = linalg_func("%a: tensor<8x4096xf32>", "tensor<4096xf32>", """
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4096xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<4096xf32>) -> tensor<4096xf32>
  %r = linalg.reduce ins(%a : tensor<8x4096xf32>) outs(%f : tensor<4096xf32>) dimensions = [0]
    (%x: f32, %acc: f32) { %s = arith.addf %x, %acc : f32
      linalg.yield %s : f32 }
  return %r : tensor<4096xf32>""")


def test_cross_thread_reduction_condition():
    """GPU only; long rows over few outputs, no data reuse, no root chosen yet."""
    rule = AddCrossThreadReduction()
    assert _decide(rule, ROW_SUM, -1, gpu=True)[0] == Decision.APPLY  # 8 rows of 4096
    assert _decide(rule, ROW_SUM, -1)[0] == Decision.SKIP  # CPU sketch: AddRfactor's job
    assert _decide(rule, COLUMN_SUM, -1, gpu=True)[0] == Decision.SKIP  # 4096 rows of 8
    assert _decide(rule, MATMUL, -1, gpu=True)[0] == Decision.SKIP  # data reuse: tiling
    assert _decide(rule, ELEMENTWISE, -1, gpu=True)[0] == Decision.SKIP  # no reduction
    assert _decide(rule, ROW_SUM, -1, gpu=True,
                   structure=(MultiLevelTileGPU("opX"),))[0] == Decision.SKIP
    _, ops, st = _decide(rule, ROW_SUM, -1, gpu=True)
    (nxt,) = rule.apply(ops, st)
    assert nxt.sketch.has(CrossThreadReduction) and nxt.sketch.gpu
    assert nxt.sketch.root == ops[-1].name
    assert nxt.sketch.rules == ("AddCrossThreadReduction",)
