"""Stage 1: load each model from its factory and import it with torch-mlir (model.mlir);
the --dynamic dimensions are checked against each model's inputs and imported as `?`; with
--io-layout channels-last the model is wrapped to exchange its images NHWC (io_layout.py)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from mlir_ansor.dynamic import (parse_dynamic, read_shape_weights, resolve, sample_weights,
                                tune_samples)
from mlir_ansor.errors import FrontendError
from mlir_ansor.tuner.frontend import import_model, load_factory
from mlir_ansor.tuner.io_dtypes import bf16_boundary, wrap_f32_boundary
from mlir_ansor.tuner.io_layout import map_dynamic, wrap_channels_last
from mlir_ansor.tuner.stages.state import ModelIn, RunState
from mlir_ansor.tuner.tasks import SizeSample


def safe_dir_name(name: str) -> str:
    """A directory name for a model spec (e.g. path/to/m.py:make)."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def call_factory(name: str, factory: Callable) -> tuple:
    """(model, inputs) from a user's factory, or a FrontendError saying what is wrong."""
    import torch

    try:
        made = factory()
    except Exception as e:  # user code: its error is the message, not our traceback
        raise FrontendError(f"model factory {name} failed: {type(e).__name__}: {e}") from e
    if not (isinstance(made, tuple) and len(made) == 2):
        raise FrontendError(f"model factory {name} must return (model, example_inputs), "
                            f"got {type(made).__name__}")
    model, inputs = made
    if not callable(model):
        raise FrontendError(f"model factory {name}: the model is a {type(model).__name__}, "
                            "not a callable torch module")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not (isinstance(inputs, (tuple, list)) and inputs and
            all(isinstance(x, torch.Tensor) for x in inputs)):
        raise FrontendError(f"model factory {name}: example_inputs must be a tuple of tensors")
    return model, tuple(inputs)


def load_models(state: RunState, factory: Callable | None = None) -> RunState:
    names = list(state.opts.models or (state.opts.model,))
    single = len(names) == 1
    models = []
    observed = read_shape_weights(state.opts.shape_weights) if state.opts.shape_weights \
        else None
    for name in names:
        fac = factory if (factory and single) else load_factory(name)
        model, inputs = call_factory(name, fac)
        d = state.out if single else state.out / safe_dir_name(name)
        dims = [parse_dynamic(s) for s in state.opts.dynamic]
        resolved = resolve(model, inputs, dims) if dims else None
        as_f32 = tuple(bf16_boundary(model, inputs))
        if as_f32:  # (shapes unchanged: `resolved` holds)
            model, inputs = wrap_f32_boundary(model, inputs)
        if state.opts.io_layout == "channels-last":
            wrapped, cl_inputs = wrap_channels_last(name, model, inputs)
            if resolved is not None:
                resolved = map_dynamic(resolved, inputs)
            model, inputs = wrapped, cl_inputs
        samples: tuple[SizeSample, ...] = ()
        if resolved is not None:
            points = tune_samples(resolved, state.opts.size_samples)
            # (Observed sizes outside the ranges end here, before any work.)
            weights = (sample_weights(resolved, points, observed) if observed
                       else [1.0] * len(points))
            samples = tuple(SizeSample(p, w) for p, w in zip(points, weights))
        models.append(ModelIn(name, model, inputs, Path(d), resolved, samples, as_f32))
    return replace(state, models=tuple(models))


def import_models(state: RunState) -> RunState:
    for m in state.models:
        m.dir.mkdir(parents=True, exist_ok=True)
        shapes = m.dynamic.export_shapes() if m.dynamic else None
        (m.dir / "model.mlir").write_text(import_model(m.model, m.inputs, shapes))
    return state
