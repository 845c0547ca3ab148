# RUN: %PYTHON %s %t | FileCheck %s
# A batch contraction with a reduction tile of one (what a prime reduction extent allows:
# ViT's attention times V over 197 tokens): folding the tile's unit dims leaves the left
# operand's tile as a strided 1-D read (a column). Lowered as IREE would, that read is a
# loop of scalar loads inserted into a vector, taken apart again by the outer products
# (0.33 against 0.15 ms for the same ViT program). Our strategy unrolls it into one scalar
# read per row, which LLVM turns into a broadcast from memory: no load loop is left.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])

from helpers import lowered_bmm_tile

# Two column reads (k tile 1) and a control whose left tile is 8 contiguous rows of 8.
for rows, cols, k in ((8, 16, 1), (2, 24, 1), (8, 16, 8)):
    lines = lowered_bmm_tile(sys.argv[1], rows, cols, k).splitlines()
    loads = sum(line.count("memref.load") for line in lines)
    scalar_reads = sum("vector.transfer_read" in line and "vector<f32>" in line
                       for line in lines)
    print(f"{rows}x{cols}_k{k}: loop loads {loads} scalar reads {scalar_reads}")
    sys.stdout.flush()
# CHECK: 8x16_k1 rc 0 applied ['strategy_t0']
# CHECK-NEXT: 8x16_k1: loop loads 0 scalar reads 8
# CHECK: 2x24_k1 rc 0 applied ['strategy_t0']
# CHECK-NEXT: 2x24_k1: loop loads 0 scalar reads 2
# CHECK: 8x16_k8 rc 0 applied ['strategy_t0']
# CHECK-NEXT: 8x16_k8: loop loads 0 scalar reads 0
