# RUN: %PYTHON %s %DATA/mm_relu_512.mlir %t | FileCheck %s
# The exported selector library applied by stock iree-compile: the matmul+relu dispatch is
# configured with our strategy (codegen_spec), and a library whose matcher does not fit
# the payload leaves it to IREE's default.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from pathlib import Path

from helpers import compile_with, library_for

payload_path, work = Path(sys.argv[1]), Path(sys.argv[2])
lib, tools = library_for(payload_path, work, "t7", seed=3)
print(lib.read_text())
sys.stdout.flush()
# CHECK: transform.named_sequence @strategy_t7
# CHECK: transform.named_sequence @match_t7
# CHECK: transform.iree.match.cast_compatible_dag_from_root
# The pattern's arguments are wildcards to the DAG matcher: each must be loaded (or a
# constant) in the payload too, not computed by an op the strategy was not made for.
# CHECK: %[[MM:.+]] = transform.get_producer_of_operand %arg0[0]
# CHECK-NEXT: %[[A:.+]] = transform.get_producer_of_operand %[[MM]][0]
# CHECK-NEXT: transform.match.operation_name %[[A]] ["iree_codegen.load_from_buffer", "iree_tensor_ext.dispatch.tensor.load", "arith.constant"
# CHECK-NEXT: %[[B:.+]] = transform.get_producer_of_operand %[[MM]][1]
# CHECK-NEXT: transform.match.operation_name %[[B]] [
# CHECK: transform.named_sequence @__kernel_config
# CHECK: transform.foreach_match in
# CHECK-NEXT: @match_t7 -> @apply_t7

compile_with(tools, payload_path, lib, work, "same")
# CHECK: same rc 0 applied ['strategy_t7']

other = work / "other.mlir"  # same ops, other shapes: must not match
other.write_text(payload_path.read_text().replace("512x512", "256x256"))
compile_with(tools, other, lib, work, "other")
# CHECK: other rc 0 applied []
