# RUN: %PYTHON %s %DATA/scale_rows.mlir %t | FileCheck %s
# An op body that captures a constant no DAG op takes as an operand (IREE's DAG matcher
# never matches those): the library falls back to the loop-structure matcher, which
# applies to this dispatch and not to one with other extents or another operand count.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from pathlib import Path

from helpers import compile_with, library_for

payload_path, work = Path(sys.argv[1]), Path(sys.argv[2])
lib, tools = library_for(payload_path, work, "t1", seed=0)
print(lib.read_text())
sys.stdout.flush()
# CHECK: transform.named_sequence @match_t1
# CHECK-NOT: cast_compatible_dag_from_root
# CHECK: transform.match.operation_name %{{.*}} ["linalg.generic"]
# CHECK: transform.match.structured
# CHECK: transform.match.structured.dim %{{.*}}[all]
# CHECK: transform.match.structured.dim %{{.*}}[0] parallel
# CHECK: transform.match.structured.num_inputs
# CHECK: transform.match.structured.num_inits
# CHECK: transform.iree.match.dims_equal %{{.*}}, [16384]

compile_with(tools, payload_path, lib, work, "same")
# CHECK: same rc 0 applied ['strategy_t1']
other = work / "other.mlir"
other.write_text(payload_path.read_text().replace("64x256", "32x256"))
compile_with(tools, other, lib, work, "other")
# CHECK: other rc 0 applied []
two = work / "two_inputs.mlir"
two.write_text(payload_path.read_text()
               .replace("(%a: tensor<64x256xf32>)", "(%a: tensor<64x256xf32>, %b: tensor<64x256xf32>)")
               .replace("affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>]",
                        "affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>, "
                        "affine_map<(i, j) -> (i, j)>]")
               .replace("ins(%a : tensor<64x256xf32>)",
                        "ins(%a, %b : tensor<64x256xf32>, tensor<64x256xf32>)")
               .replace("^bb0(%x: f32, %o: f32):", "^bb0(%x: f32, %w: f32, %o: f32):")
               .replace("linalg.yield %y : f32", "%z = arith.addf %y, %w : f32\n    linalg.yield %z : f32"))
compile_with(tools, two, lib, work, "two")
# CHECK: two rc 0 applied []
