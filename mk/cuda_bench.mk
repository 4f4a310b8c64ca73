# GPU benchmarks (scripts/bench_gpu.sh, run by `make bench`):
#  - $(BUILD)/bench/model_flops (bench/cuda/model_flops.cpp): training FLOPs per token of a
#    config; host-only, always built (the training benchmark and tests/test_bench_gpu use it).
#  - $(BUILD)/bench/bench_kernels (bench/cuda/bench_kernels.cpp): memory bandwidth of the
#    kernels; only with the real CUDA build (CUDA=1), linked like build/pptrain from the
#    nvcc kernel objects, the cuda backend's host objects and the CUDA libraries.
#  - $(BUILD)/bench/attention_check (bench/cuda/attention_check.cpp, its fp64 reference in
#    attention_reference.cpp): naive, flash and cudnn
#    attention through CudaOps on a GPU against an fp64 reference, one JSON line per
#    comparison (scripts/gpu_check.sh); only with CUDA=1, linked the same way. Its emulated
#    twin $(BUILD)/bench/attention_check-emu is built everywhere (see below).
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

$(BUILD)/obj/bench/cuda/attention_check.o: CXXFLAGS += -DPPTRAIN_WITH_CUDA -I$(CUDA_HOME)/include
$(BUILD)/bench/attention_check: $(BUILD)/obj/bench/cuda/attention_check.o $(BUILD)/obj/bench/cuda/attention_reference.o \
                                $(CUDA_OBJS) $(KERNEL_NVCC_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LIB) $(LDLIBS) $(CUDA_LDLIBS)
EXTRA_TARGETS += $(BUILD)/bench/attention_check

# An outside CUPTI tracer to preload into pptrain (bench/cuda/cupti_preload.cpp;
# gpu_check.sh's outside_profiler check): CUPTI's headers only, the library opened at run time.
$(BUILD)/bench/libcupti_preload.so: bench/cuda/cupti_preload.cpp
	@mkdir -p $(dir $@)
	$(CXX) -O2 -std=c++20 -shared -fPIC -I$(CUDA_HOME)/include \
	  $(addprefix -I,$(wildcard $(CUDA_HOME)/extras/CUPTI/include)) $< -o $@ -ldl
EXTRA_TARGETS += $(BUILD)/bench/libcupti_preload.so
endif

EXTRA_TARGETS += $(BUILD)/bench/model_flops

# attention_check on the emulated cuda backend (every build): the naive path under the SIMT
# emulator against the check's fp64 reference and bounds, and the one-line errors of what
# the emulated build lacks (cuDNN); run by tests/test_cuda_backend_train.
$(BUILD)/bench/attention_check-emu: $(BUILD)/obj-emu/bench/cuda/attention_check.o \
                                    $(BUILD)/obj/bench/cuda/attention_reference.o $(CUDA_EMU_OBJS) $(KERNEL_EMU_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/tests/test_cuda_backend_train: | $(BUILD)/bench/attention_check-emu
EXTRA_TARGETS += $(BUILD)/bench/attention_check-emu
