# Kernels (kernels/*.cu). Two builds of the same sources:
#  - emulated: g++ compiles each .cu against the SIMT emulator (emu/emu.h, fiber.h) into
#    $(BUILD)/obj/kernels/*.emu.o; linked into the kernel tests, the emulated cuda backend's
#    binaries (pptrain-emu, mk/cuda.mk), never into libpptrain.a or pptrain.
#  - nvcc: `make kernels-nvcc` compiles each .cu for every arch in CUDA_ARCH into
#    $(BUILD)/nvcc/kernels/*.o (needs nvcc; the cuda backend links these).
KERNEL_SRCS := $(sort $(wildcard kernels/*.cu))
KERNEL_EMU_OBJS := $(KERNEL_SRCS:%.cu=$(BUILD)/obj/%.emu.o) \
  $(addprefix $(BUILD)/obj/emu/,emu.o block_runner.o block_async.o fiber.o)

$(BUILD)/obj/kernels/%.emu.o: kernels/%.cu $(CODEGEN_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -x c++ -include emu/emu.h -c $< -o $@

# The emulator and kernel tests link the emulated kernels (the tests' pattern rule links $^).
KERNEL_EMU_TESTS := $(filter-out %/test_kernels_nvcc, \
                      $(filter $(BUILD)/tests/test_emu% $(BUILD)/tests/test_kernels%, $(TEST_BINS)))
$(KERNEL_EMU_TESTS): $(KERNEL_EMU_OBJS)

NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
CUDA_ARCH ?= 80 90
NVCC_FLAGS ?= -O3 -std=c++20 -lineinfo
# Hopper (90) is built as sm_90a: the wgmma flash attention forward needs its
# architecture-specific instructions (the cubin runs on every compute capability 9.0 GPU);
# the launcher takes that kernel where the loaded cubin is 9.0 (flash_attention.cu).
NVCC_ARCH = $(if $(filter 90,$(1)),90a,$(1))
NVCC_GENCODE := $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(call NVCC_ARCH,$(a)),code=sm_$(call NVCC_ARCH,$(a)))
KERNEL_NVCC_OBJS := $(KERNEL_SRCS:%.cu=$(BUILD)/nvcc/%.o)

$(BUILD)/nvcc/kernels/%.o: kernels/%.cu kernels/*.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(NVCC_GENCODE) -Isrc -Ikernels -c $< -o $@

.PHONY: kernels-nvcc
kernels-nvcc: $(KERNEL_NVCC_OBJS)
