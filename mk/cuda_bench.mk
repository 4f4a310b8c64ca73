# GPU benchmarks (scripts/bench_gpu.sh, run by `make bench`):
#  - $(BUILD)/bench/model_flops (bench/cuda/model_flops.cpp): training FLOPs per token of a
#    config; host-only, always built (the training benchmark and tests/test_bench_gpu use it).
#  - $(BUILD)/bench/bench_kernels (bench/cuda/bench_kernels.cpp): memory bandwidth of the
#    kernels; only with the real CUDA build (CUDA=1), linked like build/pptrain from the
#    nvcc kernel objects, the cuda backend's host objects and the CUDA libraries.
# bench/cuda/ is outside the bench/*.cpp glob of the Makefile, whose link rule has no CUDA;
# the explicit rules here take precedence over its $(BUILD)/bench/% pattern. This file is
# read after mk/cuda.mk (the Makefile's include order), which sets CUDA and the object lists.

$(BUILD)/bench/model_flops: $(BUILD)/obj/bench/cuda/model_flops.o $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

# The test runs model_flops, the scripts and pptrain-emu at run time (not linked).
$(BUILD)/tests/test_bench_gpu: | $(BUILD)/bench/model_flops $(BUILD)/pptrain-emu

ifeq ($(CUDA),1)
# Objects before $(LIB) so the archive resolves what they use; $(LIB) again after them.
$(BUILD)/bench/bench_kernels: $(BUILD)/obj/bench/cuda/bench_kernels.o $(CUDA_OBJS) $(KERNEL_NVCC_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LIB) $(LDLIBS) $(CUDA_LDLIBS)
EXTRA_TARGETS += $(BUILD)/bench/bench_kernels
endif

EXTRA_TARGETS += $(BUILD)/bench/model_flops
