# RUN: %PYTHON %s %t | FileCheck %s
# A contraction that reads its broadcast operand by columns (A[k][m]: a 1x1 conv from a
# channels-first input into a channels-last output). Unless the register tile's unit dims
# are folded away, the vector contraction keeps them around the column, is no matmul the
# outer-product lowering takes, and lowers element by element (ShuffleNet's conv: 0.91
# against 0.063 ms): multiplies of one or two lanes. Folded, every multiply is a vector
# (16 lanes, 8 in the peeled partial tile of the 40).
import re
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])

from helpers import lowered_program


def program(rows, lanes, k):
    def steps(ops):
        root = next(o.name for o in ops if o.reduction_dims)
        split = lambda loop, lengths: {"op": root, "loop": loop, "lengths": lengths,
                                       "kind": "split"}
        sketch = {"anchor": root, "root": root, "fuse_consumer": False,
                  "cache_write": False, "rfactor": False, "inlined": [],
                  "rules": ["MultiLevelTiling"]}
        # h x w x co x ci = 4 x 12 x 40 x 16 (kept apart by the padded store): rows along
        # w (the column), 40 lanes cut into whole vectors and a peeled partial one.
        return {"sketch": sketch, "steps": [
            split(0, [1, 1, 1]), split(1, [1, 12 // rows, rows]), split(2, [1, 1, lanes]),
            {"op": root, "loop": 2, "kind": "peel"}, split(3, [16, k]),
            {"op": root, "loops": [0], "kind": "parallel"},
            {"op": root, "factor": 1, "kind": "unroll"}, {"op": root, "kind": "vectorize"}]}
    return steps


def lanes_of(line):
    """Lanes of an arithmetic op's result type (1 for a scalar)."""
    ty = line.rsplit(":", 1)[-1].strip()
    m = re.match(r"vector<(?:\d+x)*(\d+)xf32>", ty)
    return int(m.group(1)) if m else 1


for rows, lanes, k in ((6, 16, 1), (4, 16, 2)):
    name = f"{rows}x{lanes}_k{k}"
    lines = lowered_program(sys.argv[1], "conv1x1_cf_to_cl_16x4x12x40", name,
                            program(rows, lanes, k)).splitlines()
    arith = [l for l in lines if "arith.mulf" in l or "vector.fma" in l]
    narrow = sum(lanes_of(l) < 4 for l in arith)
    folds = "fold_unit_extent_dims" in open(f"{sys.argv[1]}/lib_{name}.mlir").read()
    print(f"{name}: folds {'yes' if folds else 'no'}, multiplies {'yes' if arith else 'no'},"
          f" of under 4 lanes {narrow}")
    sys.stdout.flush()
# CHECK: 6x16_k1 rc 0 applied ['strategy_t0']
# CHECK-NEXT: 6x16_k1: folds yes, multiplies yes, of under 4 lanes 0
# CHECK: 4x16_k2 rc 0 applied ['strategy_t0']
# CHECK-NEXT: 4x16_k2: folds yes, multiplies yes, of under 4 lanes 0
