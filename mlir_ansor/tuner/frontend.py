"""PyTorch model -> linalg-on-tensors MLIR text (torch-mlir's FX importer)."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Callable

from mlir_ansor.errors import FrontendError


def load_factory(spec: str) -> Callable:
    """`path/to/file.py:factory` or the name of a bundled example."""
    from mlir_ansor import examples

    if spec in examples.EXAMPLES:
        return examples.EXAMPLES[spec]
    if ":" not in spec:
        raise FrontendError(f"unknown model '{spec}': give a bundled example "
                            f"({', '.join(examples.EXAMPLES)}) or path/to/file.py:factory")
    path, name = spec.rsplit(":", 1)
    if not Path(path).is_file():
        raise FrontendError(f"model file not found: {path}")
    mod_spec = importlib.util.spec_from_file_location("user_model", path)
    module = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(module)
    except Exception as e:  # user code: report, do not crash with a traceback
        raise FrontendError(f"cannot load {path}: {type(e).__name__}: {e}") from e
    factory = getattr(module, name, None)
    if not callable(factory):
        raise FrontendError(f"{path} has no callable factory '{name}'")
    return factory


def import_model(model, example_inputs: tuple) -> str:
    """linalg-on-tensors text of `model`; an import failure names the failing op."""
    from torch_mlir import fx

    try:
        module = fx.export_and_import(model, *example_inputs, output_type="linalg-on-tensors",
                                      func_name="main")
    except Exception as e:
        msg = str(e)
        op = re.search(r"(torch\.[a-z_.0-9]+|aten[._:][a-z_.0-9]+)", msg)
        where = f" (failing op: {op.group(1)})" if op else ""
        first = msg.strip().splitlines()[0] if msg.strip() else type(e).__name__
        raise FrontendError(f"torch-mlir cannot import the model{where}: {first}") from e
    return str(module)
