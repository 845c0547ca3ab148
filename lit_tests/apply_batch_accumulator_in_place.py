# RUN: %PYTHON %s %t | FileCheck %s
# A batch contraction with a fused consumer (attention's scores / sqrt(d)): the register
# tile's unit batch dim is folded, and hoisting its accumulator out of the reduction loop
# leaves the slice and its rank-reduced view as two loop-carried tensors. Unless they are
# folded before bufferizing, the register tile is copied element by element into a stack
# buffer and back around every reduction loop (BERT's attention batch matmul ran 1.5-2.8x
# slower). After our strategy no linalg op (such a copy) and no register-tile buffer remain:
# only the fused consumer's local tile.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])

from helpers import lowered_bmm_tile

# Register tiles (1, rows, cols) under a local tile of one batch's 64 x 48; without the fold
# the first two were copied (the third was not: kept as a control).
for rows, cols, k in ((2, 24, 1), (8, 24, 4), (8, 16, 8)):
    lowered = lowered_bmm_tile(sys.argv[1], rows, cols, k)
    buffers = [line.split("memref<")[1].split(">")[0] for line in lowered.splitlines()
               if "memref.alloca" in line]
    print(f"{rows}x{cols}_k{k}: linalg ops {lowered.count('linalg.')} buffers {buffers}")
    sys.stdout.flush()
# CHECK: 2x24_k1 rc 0 applied ['strategy_t0']
# CHECK-NEXT: 2x24_k1: linalg ops 0 buffers ['1x64x48xf32']
# CHECK: 8x24_k4 rc 0 applied ['strategy_t0']
# CHECK-NEXT: 8x24_k4: linalg ops 0 buffers ['1x64x48xf32']
# CHECK: 8x16_k8 rc 0 applied ['strategy_t0']
# CHECK-NEXT: 8x16_k8: linalg ops 0 buffers ['1x64x48xf32']
