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
