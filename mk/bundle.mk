# `make gpu-bundle`: a relocatable bundle for a GPU node (scripts/make_bundle.sh says what
# goes in it): $(BUILD)/gpu-bundle/pptrain-gpu/ and $(BUILD)/pptrain-gpu.tar.gz. Copy the
# tarball to the node, unpack, `./pptrain-gpu/run scripts/gpu_check.sh`.
#  - default: the real CUDA build in its own folder, $(BUNDLE_CUDA_BUILD) (CUDA=1, so the
#    cpu build in $(BUILD) is not disturbed): pptrain, the GPU benchmarks, the real-device
#    tests (mk/gpu_tests.mk), the performance model. CUDA_ARCH picks the GPUs (default
#    "80 90": A100, H100/H200). BUNDLE_CUDA_LIBS=0 leaves cudart/cuBLAS/NCCL/cuDNN to the node;
#    BUNDLE_STRIP=1 strips the debug sections of the project's binaries.
#  - BUNDLE_CPU_ONLY=1: the same packing of this cpu build (what tests/test_gpu_bundle runs).
# Read last: the binaries to pack are the bench and gpu-tests entries of EXTRA_TARGETS.
BUNDLE_CUDA_BUILD ?= build-cuda
BUNDLE_OUT := $(BUILD)/gpu-bundle
BUNDLE_TAR := $(BUILD)/pptrain-gpu.tar.gz
BUNDLE_FLAGS := $(if $(filter 0,$(BUNDLE_CUDA_LIBS)),--no-cuda-libs) $(if $(filter 1,$(BUNDLE_STRIP)),--strip)

# Every binary the bundle takes from a build folder (used by the sub-make of gpu-bundle).
.PHONY: bundle-binaries
bundle-binaries: $(BUILD)/pptrain $(BUILD)/bench/gpu_model $(BUILD)/bench/model_flops \
                 $(filter $(BUILD)/bench/% $(BUILD)/gpu-tests/%,$(EXTRA_TARGETS))

.PHONY: gpu-bundle
ifeq ($(BUNDLE_CPU_ONLY),1)
gpu-bundle: bundle-binaries
	scripts/make_bundle.sh --build $(BUILD) --out $(BUNDLE_OUT) --tar $(BUNDLE_TAR) --cpu-only $(BUNDLE_FLAGS)
else
gpu-bundle:
	$(MAKE) --no-print-directory CUDA=1 BUILD=$(BUNDLE_CUDA_BUILD) bundle-binaries
	scripts/make_bundle.sh --build $(BUNDLE_CUDA_BUILD) --out $(BUNDLE_OUT) --tar $(BUNDLE_TAR) $(BUNDLE_FLAGS)
endif

# The bundle test packs this build's pptrain and benchmarks, and runs gpu_check.sh on
# pptrain-emu (run time, not linked).
$(BUILD)/tests/test_gpu_bundle: | $(BUILD)/pptrain $(BUILD)/pptrain-emu $(BUILD)/bench/gpu_model $(BUILD)/bench/model_flops
