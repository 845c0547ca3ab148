"""PyTorch model -> linalg-on-tensors MLIR text (torch-mlir's FX importer)."""
from __future__ import annotations

import importlib.util
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Callable

from mlir_ansor.dialect_helpers.bf16_constants import densify_small_bf16_constants
from mlir_ansor.dialect_helpers.sorts import sorts_to_topk
from mlir_ansor.dialect_helpers.transposed_conv import decompose_transposed_convs
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


def drop_identity_expands(program) -> int:
    """Remove `aten.expand` nodes whose output has their input's shape (symbolically) from a
    decomposed torch.export program; returns how many. torch's matmul broadcasting emits
    them before every batched matmul; with a dynamic size torch-mlir cannot prove the
    expand is a no-op and lowers it to a broadcast that checks each size against 1 per
    element, which IREE forms into gather dispatches (index arithmetic per element) that
    neither IREE nor we can tile well. Their result is their input, so uses take it."""
    import torch
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    graph, dropped = program.graph_module.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target != torch.ops.aten.expand.default:
            continue
        src, out = node.args[0].meta.get("val"), node.meta.get("val")
        if src is None or out is None or src.dim() != out.dim():
            continue
        if all(statically_known_true(a == b) for a, b in zip(src.shape, out.shape)):
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
            dropped += 1
    if dropped:
        program.graph_module.recompile()
    return dropped


def clone_listed_constants(program) -> int:
    """Give each lifted parameter, buffer or constant that sits inside a list argument
    (the indices of `index_put`, which `index_add` and `x[idx] = v` decompose to) a clone
    node of its own there; returns how many. torch-mlir's frozen import replaces those
    inputs by their tensors, and a tensor in a list is refused ("Heterogeneous lists are
    not supported"); a clone is a node, and IREE folds the copy of a constant away."""
    import torch

    sig = program.graph_signature
    lifted = {*sig.inputs_to_parameters, *sig.inputs_to_buffers,
              *sig.inputs_to_lifted_tensor_constants}
    graph, cloned = program.graph_module.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        args = list(node.args)
        for i, arg in enumerate(args):
            if not isinstance(arg, (list, tuple)):
                continue
            items = list(arg)
            for j, item in enumerate(items):
                if isinstance(item, torch.fx.Node) and item.op == "placeholder" \
                        and item.name in lifted:
                    with graph.inserting_before(node):
                        clone = graph.call_function(torch.ops.aten.clone.default, (item,))
                    clone.meta["val"] = item.meta.get("val")
                    items[j] = clone
                    cloned += 1
            args[i] = type(arg)(items)
        node.args = tuple(args)
    if cloned:
        program.graph_module.recompile()
    return cloned


def uneven_adaptive_max_pool2d(x, output_size):
    """aten.adaptive_max_pool2d where an output size does not divide the input's: torch-mlir
    lowers it to a module that stops at run time ("only support cases with fixed stride
    size"). Each output is the max over its window [floor(i*H/oh), ceil((i+1)*H/oh)) (and
    the same along W), with its flat index ih*W + iw, as torch computes them; sizes are
    static, so the windows are slices. Even sizes: NotImplemented (torch-mlir's own)."""
    import torch

    h, w = x.shape[-2], x.shape[-1]
    oh, ow = output_size
    if not all(isinstance(n, int) for n in (h, w)) or (h % oh == 0 and w % ow == 0):
        return NotImplemented
    vals, idxs = [], []
    for i in range(oh):
        hs, he = (i * h) // oh, -(-((i + 1) * h) // oh)
        row_v, row_i = [], []
        for j in range(ow):
            ws, we = (j * w) // ow, -(-((j + 1) * w) // ow)
            win = x[..., hs:he, ws:we].flatten(-2)
            v, r = torch.max(win, dim=-1)
            row_v.append(v)
            row_i.append((r // (we - ws) + hs) * w + r % (we - ws) + ws)
        vals.append(torch.stack(row_v, -1))
        idxs.append(torch.stack(row_i, -1))
    return torch.stack(vals, -2), torch.stack(idxs, -2)


def _capturing_stderr(step: Callable[[], Any]) -> tuple[Any, Exception | None, str]:
    """(step's result, the exception it raised, what it printed to fd 2). MLIR prints its
    diagnostics (which name the failing op) straight to fd 2."""
    with tempfile.TemporaryFile(mode="w+") as diag:
        saved = os.dup(2)
        os.dup2(diag.fileno(), 2)
        try:
            result, error = step(), None
        except Exception as e:  # torch / torch-mlir on the user's model: reported by name
            result, error = None, e
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        diag.seek(0)
        return result, error, diag.read()


def import_model(model, example_inputs: tuple, dynamic_shapes: dict | None = None) -> str:
    """linalg-on-tensors text of `model` (with `dynamic_shapes`, torch.export's, those
    dimensions dynamic: `?`); an import failure names the failing op."""
    import torch
    from torch_mlir import fx
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    # torch-mlir's own steps (export, decompose, import), with the no-op expands of the
    # decomposed graph dropped in between: outside the capture, so that a bug of ours
    # there is not reported as the model failing to import.
    # (Uneven adaptive max pooling as slices: torch-mlir's lowering fails at run time.)
    table = {**get_decomposition_table(),
             torch.ops.aten.adaptive_max_pool2d.default: uneven_adaptive_max_pool2d}
    program, error, diagnostics = _capturing_stderr(
        lambda: torch.export.export(model, tuple(example_inputs),
                                    dynamic_shapes=dynamic_shapes, strict=False
                                    ).run_decompositions(table))
    if error is None:
        drop_identity_expands(program)
        clone_listed_constants(program)
        module, error, diagnostics = _capturing_stderr(
            lambda: fx.export_and_import(program, output_type="linalg-on-tensors",
                                         func_name="main", decomposition_table={}))
    if error is not None:
        e = error
        msg = str(e) + "\n" + diagnostics
        fixed = re.findall(r"^\s*(\w+) = (\d+)$", msg, re.M)
        if "Constraints violated" in msg and fixed:
            raise FrontendError(
                "--dynamic: the model fixes " + ", ".join(f"{s} to {n}" for s, n in fixed) +
                " (torch.export: its code specialises that size), so it cannot be dynamic "
                "there") from e
        op = (re.search(r'name = "(torch\.aten\.[A-Za-z_.0-9]+)"', msg)
              or re.search(r"legalize operation '([^']+)'", msg)
              or re.search(r"(aten[._:][A-Za-z_.0-9]+)", msg))
        where = f" (failing op: {op.group(1)})" if op else ""
        first = msg.strip().splitlines()[0] if msg.strip() else type(e).__name__
        raise FrontendError(f"torch-mlir cannot import the model{where}: {first}") from e
    # Transposed convs without the multiplications by the zeros torch-mlir spreads in.
    text = decompose_transposed_convs(str(module))[0]
    # torch.topk as a top-k, not a whole sort (IREE's CPU sort is a bubble sort).
    text = sorts_to_topk(text)[0]
    return densify_small_bf16_constants(text)[0]
