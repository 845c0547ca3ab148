#translation = #iree_codegen.translation_info<pipeline = #iree_codegen.no_pipeline>
#translation1 = #iree_codegen.translation_info<pipeline = #iree_codegen.transform_dialect_codegen codegen_spec = @strategy_t0>
module attributes {transform.with_named_sequence} {
  transform.named_sequence @strategy_t0(%arg0: !transform.any_op {transform.readonly}) {
    %0 = transform.structured.match ops{["func.func"]} in %arg0 : (!transform.any_op) -> !transform.any_op
    %1 = transform.apply_registered_pass "iree-eliminate-empty-tensors" to %0 : (!transform.any_op) -> !transform.any_op
    %2 = transform.structured.match interface{TilingInterface} in %1 : (!transform.any_op) -> !transform.any_op
    %3:2 = transform.split_handle %2 : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %tiled_op, %forall_op = transform.structured.tile_using_forall %3#1 tile_sizes [64, 0, 0](mapping = [#gpu.block<x>]) : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.iree.populate_workgroup_count_region_using_num_threads_slice %forall_op : (!transform.any_op) -> ()
    %fused_op, %new_containing_op = transform.structured.fuse_into_containing_op %3#0 into %forall_op : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.apply_patterns to %1 {
      transform.apply_patterns.linalg.tiling_canonicalization
      transform.apply_patterns.scf.for_loop_canonicalization
      transform.apply_patterns.tensor.fold_tensor_empty
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.apply_cse to %1 : !transform.any_op
    %transformed, %loops:2 = transform.structured.fuse %tiled_op tile_sizes [32, 32, 0] : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
    %4 = transform.structured.match interface{TilingInterface} in %loops#1 : (!transform.any_op) -> !transform.any_op
    %5:2 = transform.split_handle %4 : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.apply_patterns to %1 {
      transform.apply_patterns.linalg.tiling_canonicalization
      transform.apply_patterns.scf.for_loop_canonicalization
      transform.apply_patterns.tensor.fold_tensor_empty
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    %tiled_linalg_op, %loops_0 = transform.structured.tile_using_for %5#1 tile_sizes [0, 0, 256] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %tiled_linalg_op_1, %loops_2:2 = transform.structured.tile_using_for %tiled_linalg_op tile_sizes [8, 32, 0] : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
    %tiled_linalg_op_3, %loops_4 = transform.structured.tile_using_for %tiled_linalg_op_1 tile_sizes [0, 0, 1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %tiled_linalg_op_5, %loops_6 = transform.structured.tile_using_for %5#0 tile_sizes [1, 0] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.structured.vectorize %tiled_linalg_op_3 : !transform.any_op
    transform.structured.vectorize %tiled_linalg_op_5 : !transform.any_op
    transform.apply_patterns to %1 {
      transform.apply_patterns.vector.reduction_to_contract
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.vector.cast_away_vector_leading_one_dim
      transform.apply_patterns.linalg.tiling_canonicalization
      transform.apply_patterns.scf.for_loop_canonicalization
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.apply_cse to %1 : !transform.any_op
    transform.loop.hoist_loop_invariant_subsets %loops_4 : !transform.any_op
    %6 = transform.apply_registered_pass "iree-eliminate-empty-tensors" to %1 : (!transform.any_op) -> !transform.any_op
    %7 = transform.iree.bufferize %6 : (!transform.any_op) -> !transform.any_op
    transform.iree.forall_to_workgroup %7 : (!transform.any_op) -> ()
    transform.apply_patterns to %7 {
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.apply_cse to %7 : !transform.any_op
    transform.apply_patterns to %7 {
      transform.apply_patterns.vector.lower_contraction
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.vector.split_transfer_full_partial
      transform.apply_patterns.vector.transfer_to_scf full_unroll = true
      transform.apply_patterns.vector.lower_transfer
      transform.apply_patterns.vector.lower_shape_cast
      transform.apply_patterns.vector.lower_transpose lowering_strategy = shuffle_1d
      transform.apply_patterns.vector.lower_outerproduct
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.apply_cse to %7 : !transform.any_op
    %8 = transform.param.constant #translation -> !transform.any_param
    transform.annotate %7 "translation_info" = %8 : !transform.any_op, !transform.any_param
    transform.yield 
  }
  transform.named_sequence @match_t0(%arg0: !transform.any_op {transform.readonly}) -> !transform.any_op {
    transform.match.operation_name %arg0 ["linalg.matmul"] : !transform.any_op
    %inputs, %outputs = transform.iree.match.cast_compatible_dag_from_root %arg0 {
    ^bb0(%arg1: tensor<1024x1024xf32>, %arg2: tensor<1024x1024xf32>):
      %cst = arith.constant 0.000000e+00 : f32
      %0 = tensor.empty() : tensor<1024x1024xf32>
      %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
      %2 = linalg.matmul ins(%arg1, %arg2 : tensor<1024x1024xf32>, tensor<1024x1024xf32>) outs(%1 : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
    } : (!transform.any_op) -> (!transform.any_value, !transform.any_value)
    transform.yield %arg0 : !transform.any_op
  }
  transform.named_sequence @apply_t0(%arg0: !transform.any_op {transform.readonly}) {
    %0 = transform.get_parent_op %arg0 <op_name = "func.func"> : (!transform.any_op) -> !transform.any_op
    %1 = transform.param.constant #translation1 -> !transform.any_param
    transform.annotate %0 "translation_info" = %1 : !transform.any_op, !transform.any_param
    transform.yield 
  }
  transform.named_sequence @__kernel_config(%arg0: !transform.any_op {transform.consumed}) -> !transform.any_op {
    %updated_root = transform.foreach_match in %arg0 
        @match_t0 -> @apply_t0 : (!transform.any_op) -> !transform.any_op
    transform.yield %updated_root : !transform.any_op
  }
}
