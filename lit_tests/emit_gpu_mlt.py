# RUN: %PYTHON %s | FileCheck %s
# GPU "SSSRRSRS" on a 256^3 matmul for cuda: a block forall (blockIdx), a thread forall
# (threadIdx) with the fill fused into the thread tile, the reduction tiled, the per-thread
# tile vectorized, GPU bufferization, thread mapping with the block's thread counts, and
# the same counts as the kernel's workgroup size. What a thread's tile allocates (the fill's
# destination: its accumulator) is bufferized to private memory first: IREE's GPU
# bufferization would put it in workgroup memory, shared by the block's threads (a race).
import sys
sys.path.insert(0, __file__.rsplit("/", 1)[0])

from mlir_ansor.dialect_helpers.linalg_info import analyze_task
from mlir_ansor.sketch_passes.rules import default_gpu_rules
from mlir_ansor.sketch_passes.sketch import generate_sketches
from helpers import print_gpu_strategy

MM = """func.func @main(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>) -> tensor<256x256xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x256xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<256x256xf32>) -> tensor<256x256xf32>
  %r = linalg.matmul ins(%a, %b : tensor<256x256xf32>, tensor<256x256xf32>)
                     outs(%f : tensor<256x256xf32>) -> tensor<256x256xf32>
  return %r : tensor<256x256xf32>
}"""
ops = analyze_task(MM)
sketches = generate_sketches(ops, default_gpu_rules(), gpu=True)


print_gpu_strategy(ops, sketches[1], seed=1)
# CHECK: // sketch: MultiLevelTilingGPU
# CHECK: // step: SplitStep(op='op1_matmul', loop=0, lengths=([[WY:[0-9]+]], {{[0-9]+}}, {{[0-9]+}})
# CHECK: // step: SplitStep(op='op1_matmul', loop=1, lengths=([[WX:[0-9]+]], {{[0-9]+}}, {{[0-9]+}})
# CHECK: #iree_codegen.translation_info<pipeline = #iree_codegen.no_pipeline workgroup_size = [[[WX]], [[WY]], 1] subgroup_size = 32>
# CHECK: transform.structured.tile_using_forall {{.*}}(mapping = [#gpu.block<y>, #gpu.block<x>])
# CHECK: transform.iree.populate_workgroup_count_region_using_num_threads_slice
# CHECK: transform.structured.fuse_into_containing_op
# CHECK: transform.structured.tile_using_forall {{.*}}(mapping = [#gpu.thread<y>, #gpu.thread<x>])
# CHECK: %{{.*}}, %[[TF:.*]] = transform.structured.fuse_into_containing_op
# CHECK: %[[E:.*]] = transform.structured.match ops{["tensor.empty"]} in %[[TF]]
# CHECK: %[[U:.*]] = transform.get_consumers_of_result %[[E]][0]
# CHECK: transform.structured.bufferize_to_allocation %[[U]] <memory_space = #gpu.address_space<private>, {{.*}}alloc_op = "memref.alloca", bufferize_destination_only>
# CHECK: transform.structured.tile_using_for {{.*}} tile_sizes [0, 0, {{[0-9]+}}]
# CHECK: transform.structured.vectorize
# CHECK: transform.iree.bufferize <target_gpu>
# CHECK: transform.iree.forall_to_workgroup
# CHECK: transform.iree.map_nested_forall_to_gpu_threads %{{.*}} workgroup_dims = [[[WX]], [[WY]], 1]
# CHECK: transform.annotate %{{.*}} "translation_info"

# With the shared-memory cache read: the reduction is tiled at block level, both inputs'
# tiles are copied (linalg.copy into fresh tensors: workgroup buffers) by threads spread
# over the block, each writing its piece in place, then the thread tiles compute from them;
# the fill gets its own thread forall.
print_gpu_strategy(ops, sketches[0], seed=1)
# CHECK: // sketch: AddCacheReadShared+MultiLevelTilingGPU
# CHECK: transform.structured.tile_using_forall {{.*}}#gpu.block
# CHECK: transform.structured.tile_using_for {{.*}} tile_sizes [0, 0, {{[0-9]+}}]
# CHECK-NOT: transform.structured.pad
# CHECK: %[[A:.*]] = transform.iree.copy_tensor_operand %{{.*}}[0]
# CHECK: transform.structured.tile_using_forall %[[A]] {{.*}}#gpu.thread
# CHECK: %[[B:.*]] = transform.iree.copy_tensor_operand %{{.*}}[1]
# CHECK: transform.structured.tile_using_forall %[[B]] {{.*}}#gpu.thread
# CHECK: transform.structured.tile_using_forall {{.*}}#gpu.thread
# CHECK: transform.iree.bufferize <target_gpu>
# CHECK: transform.iree.map_nested_forall_to_gpu_threads
