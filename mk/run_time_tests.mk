# Tests that use what the build made at run time (not linked): building one of them alone
# builds that too (order-only).
$(BUILD)/tests/test_readme $(BUILD)/tests/test_output_dirs $(BUILD)/tests/test_run_control \
  $(BUILD)/tests/test_run_signals $(BUILD)/tests/test_planner: | $(BUILD)/pptrain
# test_cuda_build seeds its real CUDA build with this build's library objects.
$(BUILD)/tests/test_cuda_build: | $(BUILD)/pptrain $(LIB)
# test_profile_command runs `pptrain profile`, and pptrain-emu's for device: cuda.
$(BUILD)/tests/test_profile_command: | $(BUILD)/pptrain $(BUILD)/pptrain-emu
# test_post_validation runs pptrain, pptrain-emu and the MPI program
# tests/mpi/checkpoint_train.
$(BUILD)/tests/test_post_validation: | $(BUILD)/pptrain $(BUILD)/pptrain-emu $(BUILD)/mpi_tests/checkpoint_train
# test_op_profile and test_cpu_isa run pptrain (test_op_profile: pptrain-emu too, for the
# emulated cuda backend's events; test_cpu_isa: the avx512 objects beside it).
$(BUILD)/tests/test_op_profile: | $(BUILD)/pptrain $(BUILD)/pptrain-emu
$(BUILD)/tests/test_cpu_isa: | $(BUILD)/pptrain $(BUILD)/tests/test_cpu_ops $(BUILD)/tests/test_cpu_ops_adamw \
  $(BUILD)/tests/test_cpu_ops_llama $(BUILD)/tests/test_cpu_flash_attention
# test_gemm_library runs pptrain and the linear layers' op tests under each GEMM library.
$(BUILD)/tests/test_gemm_library: | $(BUILD)/pptrain $(BUILD)/tests/test_cpu_ops $(BUILD)/tests/test_cpu_ops_grad
# test_staged_comm runs pptrain (the cpu twin) and pptrain-emu (the staged transport).
$(BUILD)/tests/test_staged_comm: | $(BUILD)/pptrain $(BUILD)/pptrain-emu
# test_packed_weights trains with pptrain, packed and on OpenBLAS alone.
$(BUILD)/tests/test_packed_weights: | $(BUILD)/pptrain
