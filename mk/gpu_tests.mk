# Real-device test binaries (CUDA=1 only): the tests that compare the cuda backend with the
# cpu backend (tests/test_cuda_backend.cpp, _bf16, _gemm, _model), compiled once more with
# -DPPTRAIN_REAL_DEVICE against the CUDA toolkit instead of the emulator, and linked like
# build/pptrain (the cuda host objects, the nvcc kernels, cuBLAS/cuBLASLt/NCCL/cudart) into
# $(BUILD)/gpu-tests/. On a GPU they run every comparison on the device
# (scripts/gpu_check.sh). What only the emulator can check (fiber orders, launch and
# heuristic counters, the emulated cuBLASLt) is under #ifdef PPTRAIN_EMULATED in the tests.
# The kernel tests (tests/test_kernels_*.cpp) drive kernels through the emulator's own
# launch interface and stay emulated; on a device their kernels are covered through the
# cuda backend's ops by these binaries. Read after mk/cuda.mk (CUDA_OBJS, CUDA_LDLIBS).
# test_cuda_backend_llama trains the Llama family (Qwen2, Qwen3, scaled rotary, grouped-query
# attention on every core) against the cpu backend; test_staged_comm runs the parallel layouts with their ranks on the node's one GPU
# (parallel.comm: mpi), against the cpu backend.
GPU_TEST_NAMES := test_cuda_backend test_cuda_backend_bf16 test_cuda_backend_gemm test_cuda_backend_model test_cuda_backend_llama \
                  test_staged_comm
GPU_TEST_BINS := $(GPU_TEST_NAMES:%=$(BUILD)/gpu-tests/%)

ifeq ($(CUDA),1)
.PRECIOUS: $(BUILD)/obj-gpu/%.o
$(BUILD)/obj-gpu/tests/%.o: tests/%.cpp $(CODEGEN_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(TEST_INCLUDES) -DPPTRAIN_REAL_DEVICE -DPPTRAIN_WITH_CUDA -I$(CUDA_HOME)/include -c $< -o $@

# The cuda objects before $(LIB) (their definitions of the cuda entry points win), $(LIB)
# again after them.
$(BUILD)/gpu-tests/%: $(BUILD)/obj-gpu/tests/%.o $(TEST_SUPPORT_OBJS) $(CUDA_OBJS) $(KERNEL_NVCC_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(GTEST_LIBS) $(LIB) $(LDLIBS) $(CUDA_LDLIBS)

# The PTX layout test (tests/test_emu_ptx.cpp, emulated as build/tests/test_emu_ptx) compiled by
# nvcc for the GPU: mma.sync, ldmatrix and wgmma against the manual's layouts on the hardware,
# so a failing flash kernel can be told from a wrong reading of a layout.
$(BUILD)/obj-gpu/tests/test_ptx.o: tests/test_emu_ptx.cpp kernels/*.cuh $(CODEGEN_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(NVCC_GENCODE) -x cu -DPPTRAIN_REAL_DEVICE -Isrc -Ikernels -Itests -c $< -o $@
$(BUILD)/gpu-tests/test_ptx: $(BUILD)/obj-gpu/tests/test_ptx.o $(BUILD)/nvcc/kernels/tma.o $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(GTEST_LIBS) $(LIB) $(LDLIBS) $(CUDA_LDLIBS)
GPU_TEST_BINS += $(BUILD)/gpu-tests/test_ptx

.PHONY: gpu-tests
gpu-tests: $(GPU_TEST_BINS)
EXTRA_TARGETS += $(GPU_TEST_BINS)
-include $(shell find $(BUILD)/obj-gpu -name '*.d' 2>/dev/null)
else
.PHONY: gpu-tests
gpu-tests:
	@echo "gpu-tests: the real-device tests need the real CUDA build: make CUDA=1 gpu-tests" >&2; exit 1
endif
