# RUN: %PYTHON %s %DATA/mm_relu_512.mlir | FileCheck %s
# MultiLevelTilingWithFusion: the forall tiles the relu; matmul and fill are fused in; the
# relu is tiled at S1 with `structured.fuse`, which pulls the matmul into its tile.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from helpers import print_strategy

print_strategy(open(sys.argv[1]).read(), 0, seed=1)
# CHECK: // sketch: MultiLevelTilingWithFusion
# CHECK: %[[H:.*]]:3 = transform.split_handle
# CHECK: transform.structured.tile_using_forall %[[H]]#2
# CHECK: transform.structured.fuse_into_containing_op %[[H]]#1
# CHECK: transform.structured.fuse_into_containing_op %[[H]]#0
# CHECK: transform.structured.fuse
# CHECK: transform.split_handle
# CHECK: transform.structured.vectorize
