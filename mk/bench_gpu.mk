# GPU benchmarks (scripts/bench_gpu.sh, run by `make bench`):
#  - $(BUILD)/bench/model_flops (bench/cuda/model_flops.cpp): training FLOPs per token of a
#    config; host-only, always built (the training benchmark and tests/test_bench_gpu use it).
#  - $(BUILD)/bench/bench_kernels (bench/cuda/bench_kernels.cpp): memory bandwidth of the
#    kernels; only with the real CUDA build (CUDA=1), linked like build/pptrain from the
#    nvcc kernel objects, the cuda backend's host objects and the CUDA libraries.
# bench/cuda/ is outside the bench/*.cpp glob of the Makefile, whose link rule has no CUDA;
# the explicit rules here take precedence over its $(BUILD)/bench/% pattern.
#
# This file is read before mk/cuda.mk (mk/*.mk in name order), so CUDA, CUDA_OBJS,
# CUDA_KERNEL_NVCC_OBJS and CUDA_LDLIBS are not set yet while it is parsed: they are used
# only where make expands late (recipes, and EXTRA_TARGETS, which `+=` leaves recursive
# because nothing defines it before this file). The objects of the real cuda backend are
# reached through $(BUILD)/pptrain, whose prerequisites they are under CUDA=1.

$(BUILD)/bench/model_flops: $(BUILD)/obj/bench/cuda/model_flops.o $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

# The test runs model_flops, the scripts and pptrain-emu at run time (not linked).
$(BUILD)/tests/test_bench_gpu: | $(BUILD)/bench/model_flops $(BUILD)/pptrain-emu

# Objects before $(LIB) so the archive resolves what they use; $(LIB) again after them.
$(BUILD)/bench/bench_kernels: $(BUILD)/obj/bench/cuda/bench_kernels.o $(BUILD)/pptrain $(LIB)
	@test '$(CUDA)' = 1 || { echo "bench_kernels needs the real CUDA build (CUDA=1)" >&2; exit 1; }
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $< $(CUDA_OBJS) $(CUDA_KERNEL_NVCC_OBJS) $(LIB) -o $@ $(LIB) $(LDLIBS) $(CUDA_LDLIBS)

EXTRA_TARGETS += $(BUILD)/bench/model_flops $(if $(filter 1,$(CUDA)),$(BUILD)/bench/bench_kernels)
