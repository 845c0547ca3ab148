# RUN: %PYTHON %s | FileCheck %s
# An output written through an iree_linalg_ext.map_store (a channels-last conv feeding the
# next conv's padded input): the map_store is the fourth tileable op and the workgroup
# forall's root; the anchor (bias + ReLU) is fused into it first, then the conv and its
# init. Before, the strategy split the payload into three handles and failed on all four.
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from helpers import payload, print_strategy

print_strategy(payload("conv_nhwc_map_store"), 0, seed=0)
# CHECK: // sketch: MultiLevelTilingWithFusion
# CHECK: %[[OPS:.*]]:4 = transform.split_handle
# CHECK: %{{.*}}, %[[WG:.*]] = transform.structured.tile_using_forall %[[OPS]]#3
# CHECK: transform.iree.populate_workgroup_count_region_using_num_threads_slice %[[WG]]
# CHECK: %{{.*}}, %[[F1:.*]] = transform.structured.fuse_into_containing_op %[[OPS]]#2 into %[[WG]]
# CHECK: %{{.*}}, %[[F2:.*]] = transform.structured.fuse_into_containing_op %[[OPS]]#1 into %[[F1]]
# CHECK: transform.structured.fuse_into_containing_op %[[OPS]]#0 into %[[F2]]
# CHECK: transform.iree.bufferize
