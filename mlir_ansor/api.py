"""Python API: tune a model, or build the tuned module of a model from earlier records.

    from mlir_ansor import api
    tuned = api.tune(model, (x,), trials=200, out="runs/m")   # tunes, returns a TunedModule
    y = tuned(x)                                              # runs on IREE
    again = api.load(model, (x,), out="runs/m")               # re-applies runs/m's library

With `io_layout="channels-last"` the module takes and returns the 4-D/5-D tensors NHWC:
call it with `x.permute(0, 2, 3, 1)` (a view of a channels_last tensor; tuner/io_layout.py).

Both compile with stock `iree-compile` and the exported transform library, and check in the
configuration dump that the tuned dispatches took our strategies.
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np
from iree.compiler import ir

from mlir_ansor.errors import AnsorError, CompileError
from mlir_ansor.tuner.driver import TuneOptions, run
from mlir_ansor.tuner.e2e import compile_model
from mlir_ansor.tuner import idle_caller as idle
from mlir_ansor.tuner.frontend import import_model
from mlir_ansor.tuner.io_layout import wrap_channels_last
from mlir_ansor.tuner.layouts import load_layout
from mlir_ansor.tuner.measure import MeasureConfig
from mlir_ansor.tuner.stages.importing import safe_dir_name
from mlir_ansor.tuner.toolchain import Toolchain


def strategy_symbols(library_text: str) -> list[str]:
    """The codegen strategies a transform library defines."""
    with ir.Context():
        module = ir.Module.parse(library_text)
        return [ir.StringAttr(op.attributes["sym_name"]).value for op in module.body.operations
                if op.operation.name == "transform.named_sequence" and
                ir.StringAttr(op.attributes["sym_name"]).value.startswith("strategy_")]


class TunedModule:
    """A compiled model (IREE VM flatbuffer) callable on torch tensors or numpy arrays.

    On IREE's local-task device a call is made from a thread of its own at idle priority
    (`idle_caller=True`): IREE's caller waits for the workers in a loop that can take a
    core from them (tuner/idle_caller.py; the tuner times modules that way too). The
    caller's own thread then blocks on the result without spinning."""

    def __init__(self, vmfb: Path, applied: Sequence[str] = (), device: str = "",
                 idle_caller: bool = True):
        import iree.runtime as rt

        self.vmfb = Path(vmfb)
        self.applied = tuple(applied)  # strategy symbols IREE confirmed for this module
        # The IREE runtime device the run measured it fastest on ("": local-task).
        self.device = device or "local-task"
        self._module = rt.load_vm_flatbuffer_file(str(self.vmfb), driver=self.device)
        self._caller = None
        if idle_caller and self.device == "local-task" and idle.supported():
            self._caller = ThreadPoolExecutor(1, thread_name_prefix="tuned-module-caller",
                                              initializer=idle.lower_this_thread)

    def _call(self, arrays):
        out = self._module.main(*arrays)
        if isinstance(out, (tuple, list)):
            return tuple(o.to_host() for o in out)
        return out.to_host()

    def __call__(self, *inputs):
        # (A permuted view, e.g. x.permute(0, 2, 3, 1) of a channels_last tensor for a run
        # with --io-layout channels-last, is contiguous already: no copy then.)
        arrays = [np.ascontiguousarray(x.detach().numpy() if hasattr(x, "detach") else x)
                  for x in inputs]
        if self._caller is None:
            return self._call(arrays)
        return self._caller.submit(self._call, arrays).result()


def tune(model, inputs: tuple, *, trials: int = 96, out: str | Path = "ansor_out",
         **options) -> TunedModule:
    """Tune `model` on `inputs` (resuming from `out`'s records) and return the tuned module.
    `options` are TuneOptions fields (target, seed, batch, policy, scheduler, hints,
    cost_model, dynamic=("x:0=1..1024",) ...). The console reporter prints the result."""
    opts = replace(TuneOptions(model=type(model).__name__, trials=trials, out=Path(out)),
                   **options)
    result = run(opts, factory=lambda: (model, inputs))
    return TunedModule(result.tuned_vmfb, device=result.device)


def handed_back(out: Path, model_name: str | None = None) -> tuple[str, Path]:
    """("tuned" or "default", the model's folder): which module an earlier run in `out`
    handed back for the model (its report.json); `model_name` picks one of several models
    tuned together, each in its own folder with its own library and layout."""
    report = Path(out) / "report.json"
    if not report.exists():
        raise AnsorError(f"{report} not found: no finished tuning run in {out}")
    e2e = json.loads(report.read_text())["e2e"]
    if model_name is None:
        if len(e2e) != 1:
            raise AnsorError(f"{out} holds several models ({sorted(e2e)}): name one")
        model_name = next(iter(e2e))
    if model_name not in e2e:
        raise AnsorError(f"{out} has no model {model_name!r} ({sorted(e2e)})")
    folder = Path(out) if len(e2e) == 1 else Path(out) / safe_dir_name(model_name)
    return e2e[model_name]["handed_back"], folder


def load(model, inputs: tuple, out: str | Path, target: str = "llvm-cpu",
         model_name: str | None = None) -> TunedModule:
    """The module an earlier run in `out` handed back for `model`, built again: with its
    library and layout where the tuned module won end to end, IREE's default where the
    run handed that back (no tuning)."""
    out = Path(out)
    tools = Toolchain.find()
    cfg = MeasureConfig(target=target)
    build = out / "api"
    build.mkdir(parents=True, exist_ok=True)
    src = build / "model.mlir"
    which, folder = handed_back(out, model_name)
    # A dynamic run is rebuilt from its own import (its --dynamic dimensions: `inputs`
    # have one size of them); a static one from `model` itself.
    e2e = json.loads((Path(out) / "report.json").read_text())["e2e"]
    entry = e2e[model_name] if model_name else next(iter(e2e.values()))
    dynamic = bool(entry.get("by_size"))  # (a report from before by_size: a static run)
    if entry.get("io_layout") == "channels-last":  # imported as the run imported it
        model, inputs = wrap_channels_last(model_name or "model", model, inputs)
    text = ((folder / "model.mlir").read_text() if dynamic
            else import_model(model, inputs))
    library: Path | None = folder / "tuned_library.mlir"
    if which == "tuned":
        # The run's layout again (channels-last, packed weights, data tiling, small-size
        # branches): its library matches those dispatches.
        layout = load_layout(folder / "layout.json")
        text, flags = layout.apply(text), layout.flags
    else:
        library, flags = None, ()
    src.write_text(text)
    vmfb = build / "tuned.vmfb"
    use = library if library is not None and library.exists() else None
    applied = compile_model(tools, src, vmfb, cfg, use, flags)
    if use is not None:
        expected = set(strategy_symbols(use.read_text()))
        if not expected <= applied:
            raise CompileError(f"tuned strategies not applied: {sorted(expected - applied)}")
    return TunedModule(vmfb, sorted(applied), device=entry.get("device", ""))
