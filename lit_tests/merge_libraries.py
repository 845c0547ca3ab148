# RUN: %PYTHON %s %DATA %t | FileCheck %s
# Two one-task libraries that both call their task t0, merged: the second library's symbols
# are renamed (the strategy_ prefix kept, codegen_spec following), one @__kernel_config lists
# both pairs, and stock iree-compile applies each strategy to its own dispatch.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from pathlib import Path

from helpers import compile_with, library_for
from mlir_ansor.transform_scripts.merge import merge_libraries
from mlir_ansor.tuner.toolchain import Toolchain

data, work = Path(sys.argv[1]), Path(sys.argv[2])
payloads = [data / "mm_relu_512.mlir", data / "mm_128x256x64.mlir"]
libs = [library_for(p, work / name, "t0", seed=3)[0] for p, name in zip(payloads, "ab")]
merged = merge_libraries([lib.read_text() for lib in libs], ["a.mlir", "b.mlir"])
for note in merged.notes:
    print("// note:", note)
print(merged.text)
lib = work / "merged.mlir"
lib.write_text(merged.text)
sys.stdout.flush()
# CHECK: // note: b.mlir: 3 symbols renamed (prefix l1_), e.g. @strategy_t0 -> @strategy_l1_t0
# CHECK: codegen_spec = @strategy_t0>
# CHECK: codegen_spec = @strategy_l1_t0>
# CHECK: module attributes {mlir_ansor.iree_version = "{{[0-9.]+}} ({{[0-9a-f]+}})",
# CHECK: transform.named_sequence @strategy_t0(
# CHECK: transform.named_sequence @match_t0(
# CHECK: transform.named_sequence @apply_t0(
# CHECK: transform.named_sequence @strategy_l1_t0(
# CHECK: transform.named_sequence @match_l1_t0(
# CHECK: transform.named_sequence @apply_l1_t0(
# CHECK: transform.named_sequence @__kernel_config(
# CHECK-NEXT: transform.foreach_match in
# CHECK-NEXT: @match_t0 -> @apply_t0,
# CHECK-NEXT: @match_l1_t0 -> @apply_l1_t0 :
# CHECK-NOT: named_sequence

for p, name in zip(payloads, ("mm_relu", "mm")):
    compile_with(Toolchain.find(), p, lib, work, name)
# CHECK: mm_relu rc 0 applied ['strategy_t0']
# CHECK: mm rc 0 applied ['strategy_l1_t0']
