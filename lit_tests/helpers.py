"""Shared by the lit tests: emit a program of a payload file with a fixed seed."""
import random
import sys

from iree.compiler import ir

from mlir_ansor.dialect_helpers.linalg_info import analyze_task
from mlir_ansor.sketch_passes.annotation import annotate
from mlir_ansor.sketch_passes.rules import default_cpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from mlir_ansor.transform_scripts.emitter import emit_standalone


def program_of(payload: str, sketch_index: int, seed: int):
    ops = analyze_task(payload)
    sketches = generate_sketches(ops, default_cpu_rules())
    return ops, annotate(ops, sketches[sketch_index], random.Random(seed))


def print_strategy(payload: str, sketch_index: int, seed: int) -> None:
    ops, prog = program_of(payload, sketch_index, seed)
    print("// sketch:", prog.sketch.name)
    for s in prog.steps:
        print("// step:", s)
    with ir.Context(), ir.Location.unknown():
        print(emit_standalone(ops, prog))
    sys.stdout.flush()
