"""Python API: tune a model, or build the tuned module of a model from earlier records.

    from mlir_ansor import api
    tuned = api.tune(model, (x,), trials=200, out="runs/m")   # tunes, returns a TunedModule
    y = tuned(x)                                              # runs on IREE
    again = api.load(model, (x,), out="runs/m")               # re-applies runs/m's library

Both compile with stock `iree-compile` and the exported transform library, and check in the
configuration dump that the tuned dispatches took our strategies.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np
from iree.compiler import ir

from mlir_ansor.errors import CompileError
from mlir_ansor.tuner.driver import TuneOptions, run
from mlir_ansor.tuner.e2e import compile_model
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.layouts import load_layout
from mlir_ansor.tuner.measure import MeasureConfig
from mlir_ansor.tuner.toolchain import Toolchain


def strategy_symbols(library_text: str) -> list[str]:
    """The codegen strategies a transform library defines."""
    with ir.Context():
        module = ir.Module.parse(library_text)
        return [ir.StringAttr(op.attributes["sym_name"]).value for op in module.body.operations
                if op.operation.name == "transform.named_sequence" and
                ir.StringAttr(op.attributes["sym_name"]).value.startswith("strategy_")]


class TunedModule:
    """A compiled model (IREE VM flatbuffer) callable on torch tensors or numpy arrays."""

    def __init__(self, vmfb: Path, applied: Sequence[str] = ()):
        import iree.runtime as rt

        self.vmfb = Path(vmfb)
        self.applied = tuple(applied)  # strategy symbols IREE confirmed for this module
        self._module = rt.load_vm_flatbuffer_file(str(self.vmfb), driver="local-task")

    def __call__(self, *inputs):
        arrays = [x.detach().numpy() if hasattr(x, "detach") else np.asarray(x) for x in inputs]
        out = self._module.main(*arrays)
        if isinstance(out, (tuple, list)):
            return tuple(o.to_host() for o in out)
        return out.to_host()


def tune(model, inputs: tuple, *, trials: int = 96, out: str | Path = "ansor_out",
         **options) -> TunedModule:
    """Tune `model` on `inputs` (resuming from `out`'s records) and return the tuned module.
    `options` are TuneOptions fields (target, seed, batch, policy, scheduler, hints)."""
    opts = replace(TuneOptions(model=type(model).__name__, trials=trials, out=Path(out)),
                   **options)
    result = run(opts, factory=lambda: (model, inputs))
    print(result.report)
    return TunedModule(result.tuned_vmfb)


def load(model, inputs: tuple, out: str | Path, target: str = "llvm-cpu") -> TunedModule:
    """The tuned module of `model` from an earlier run's exported library in `out` (no
    tuning; IREE's default where the run exported nothing)."""
    out = Path(out)
    tools = Toolchain.find()
    cfg = MeasureConfig(target=target)
    build = out / "api"
    build.mkdir(parents=True, exist_ok=True)
    src = build / "model.mlir"
    # The run's layout again (channels-last, packed weights): its library matches those
    # dispatches.
    src.write_text(load_layout(out / "layout.json").apply(import_model(model, inputs)))
    library = out / "tuned_library.mlir"
    vmfb = build / "tuned.vmfb"
    applied = compile_model(tools, src, vmfb, cfg, library if library.exists() else None)
    if library.exists():
        expected = set(strategy_symbols(library.read_text()))
        if not expected <= applied:
            raise CompileError(f"tuned strategies not applied: {sorted(expected - applied)}")
    return TunedModule(vmfb, sorted(applied))
