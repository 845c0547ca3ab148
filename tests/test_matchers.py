"""A task's matcher takes the dispatches of that task only: its pattern's arguments are
wildcards to IREE's DAG matcher, so without the leaf check a batch norm + ReLU task took a
conv + batch norm + ReLU dispatch of the same shape (ResNet-50's Winograd form: 'could not
find a unique topLevel scf.forall')."""
import random
import re

import torch

from mlir_ansor.sketch_passes.annotation import annotate
from mlir_ansor.transform_scripts.library import TunedEntry, library_text, strategy_name
from mlir_ansor.tuner.e2e import compile_model
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.measure import MeasureConfig
from mlir_ansor.tuner.tasks import extract_tasks, flow_source


class ScaleConvScale(torch.nn.Module):
    """The same scale + shift + ReLU twice: alone on the input (a dispatch of its own) and
    after a 1x1 conv (fused into the conv's dispatch, reading the conv's result)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 16, 1, bias=False)
        self.s = torch.nn.Parameter(torch.rand(16, 1, 1))
        self.b = torch.nn.Parameter(torch.rand(16, 1, 1))

    def forward(self, x):
        y = torch.relu(x * self.s + self.b)
        return torch.relu(self.conv(y) * self.s + self.b)


def test_an_elementwise_task_does_not_take_a_dispatch_that_computes_its_input(tools, tmp_path):
    torch.manual_seed(0)
    src = tmp_path / "m.mlir"
    src.write_text(import_model(ScaleConvScale().eval(), (torch.rand(1, 16, 32, 32),)))
    tasks = [t for t in extract_tasks(flow_source(src, "llvm-cpu", tools, 300)) if t.tunable]
    alone = tasks[0]
    assert [s.name for s in alone.sketches] == ["Plain"] and len(tasks) == 2
    lib = tmp_path / "lib.mlir"
    lib.write_text(library_text([TunedEntry(alone.task_id, alone.task_mlir, alone.ops, annotate(
        alone.ops, alone.sketches[0], random.Random(0)))]))
    applied = compile_model(tools, src, tmp_path / "m.vmfb", MeasureConfig(), lib)
    assert applied == {strategy_name(alone.task_id)}
    took = {f.name: re.findall(r"codegen_spec = @(\w+)", f.read_text())
            for f in (tmp_path / "m_configs").glob("*.mlir")}
    assert sorted(took.values()) == [[], [strategy_name(alone.task_id)]], took


RESHAPED = """
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
module {
  func.func @main(%a: tensor<8x16xf32>, %b: tensor<2x4x16xf32>) -> tensor<2x4x16xf32> {
    %e0 = tensor.empty() : tensor<8x16xf32>
    %x = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<8x16xf32>) outs(%e0 : tensor<8x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %s = arith.mulf %in, %in : f32
      linalg.yield %s : f32
    } -> tensor<8x16xf32>
    %r = tensor.expand_shape %x [[0, 1], [2]] output_shape [2, 4, 16] : tensor<8x16xf32> into tensor<2x4x16xf32>
    %e1 = tensor.empty() : tensor<2x4x16xf32>
    %y = linalg.generic {indexing_maps = [#id3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
        ins(%r, %b : tensor<2x4x16xf32>, tensor<2x4x16xf32>) outs(%e1 : tensor<2x4x16xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %s = arith.addf %in, %in_1 : f32
      linalg.yield %s : f32
    } -> tensor<2x4x16xf32>
    return %y : tensor<2x4x16xf32>
  }
}
"""


def test_a_leaf_behind_a_reshape_is_left_to_the_dag_matcher():
    """An op that reaches the root only through a reshape has no operand path of tileable
    ops: its leaves are not checked (the matcher still builds; it raised for every
    candidate of such a task, each an internal error). The root's own leaf is checked."""
    from iree.compiler import ir

    from mlir_ansor.transform_scripts import library as lib

    with ir.Context(), ir.Location.unknown():
        module = ir.Module.create()
        module.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
        with ir.InsertionPoint(module.body):
            lib._build_matcher("match_r", RESHAPED)
        assert module.operation.verify()
        text = str(module)
    assert text.count("transform.get_producer_of_operand") == 1
    assert "transform.get_producer_of_operand %arg0[1]" in text
