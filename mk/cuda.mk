# The cuda backend (src/backend/cuda) and NcclComm: $(CUDA_HOST_SRCS), set in the Makefile.
# Two builds of the same host sources:
#  - emulated (always): g++ compiles them with PPTRAIN_EMULATED against
#    the CUDA runtime/cuBLAS/NCCL shims of emu/ (cuBLAS -> OpenBLAS, NCCL ->
#    MPI, device memory = host memory) into $(BUILD)/obj-emu/, and links them with the
#    emulated kernels ($(KERNEL_EMU_OBJS), mk/kernels.mk) into the tests/test_cuda_backend*
#    binaries, the NCCL test program (mk/mpi_tests.mk) and $(BUILD)/pptrain-emu: the whole
#    trainer with `device: cuda` running on the CPU, its groups on NcclComm over the
#    emulated NCCL.
#  - real (CUDA=1): mpicxx compiles them against the CUDA toolkit, and
#    build/pptrain links them with the nvcc kernels ($(KERNEL_NVCC_OBJS)), cuBLAS and NCCL.
#    On by default where nvcc is found and a GPU is visible; elsewhere (a login node that
#    builds for GPU compute nodes) `make CUDA=1`. The nvcc compile of every kernel for
#    CUDA_ARCH costs minutes on a small machine, which a CPU-only `make run` should not pay.

# The kernel object lists (KERNEL_EMU_OBJS, KERNEL_NVCC_OBJS) come from mk/kernels.mk,
# which the Makefile reads before this file.

# ---- emulated ------------------------------------------------------------------------------
# The shims are emu/*_emu.cpp; emu/emu.cpp, block_runner.cpp, block_async.cpp and fiber.cpp
# (the SIMT emulator) are in $(KERNEL_EMU_OBJS).
CUDA_EMU_SRCS := $(CUDA_HOST_SRCS) $(sort $(wildcard emu/*_emu.cpp))
CUDA_EMU_OBJS := $(CUDA_EMU_SRCS:%.cpp=$(BUILD)/obj-emu/%.o)

$(BUILD)/obj-emu/%.o: %.cpp $(CODEGEN_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -DPPTRAIN_EMULATED -DPPTRAIN_WITH_CUDA -c $< -o $@
# The test programs compiled here (mk/mpi_tests.mk, tests/mpi/nccl_*.cpp) see tests/ too.
$(BUILD)/obj-emu/tests/%.o: CXXFLAGS += $(TEST_INCLUDES)

# The cuda objects come before $(LIB), so their definitions of the cuda entry points are
# the ones linked (the library's backend/no_cuda.o and parallel/no_nccl.o are not pulled).
$(BUILD)/pptrain-emu: $(BUILD)/obj/src/main.o $(CUDA_EMU_OBJS) $(KERNEL_EMU_OBJS) $(LIB)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

CUDA_EMU_TESTS := $(filter $(BUILD)/tests/test_cuda_backend%, $(TEST_BINS))
$(CUDA_EMU_TESTS): $(CUDA_EMU_OBJS) $(KERNEL_EMU_OBJS)
$(CUDA_EMU_TESTS): LDLIBS := $(LIB) $(LDLIBS)
# The end-to-end test runs pptrain-emu (and pptrain) at run time.
$(CUDA_EMU_TESTS): | $(BUILD)/pptrain-emu $(BUILD)/pptrain

EXTRA_TARGETS += $(BUILD)/pptrain-emu

.PHONY: pptrain-emu
pptrain-emu: $(BUILD)/pptrain-emu

-include $(shell find $(BUILD)/obj-emu -name '*.d' 2>/dev/null)

# ---- real CUDA build -------------------------------------------------------------------------
CUDA_HOME ?= /usr/local/cuda
# NCCL ships with the toolkit here; elsewhere set NCCL_HOME (include/ and lib/ below it).
NCCL_HOME ?= $(firstword $(patsubst %/include/nccl.h,%,$(wildcard $(CUDA_HOME)/include/nccl.h \
               /usr/local/include/nccl.h /usr/include/nccl.h)))
NCCL_LIBDIR ?= $(firstword $(dir $(wildcard $(NCCL_HOME)/lib64/libnccl.so $(NCCL_HOME)/lib/libnccl.so \
                 $(CUDA_HOME)/lib/libnccl.so $(CUDA_HOME)/lib64/libnccl.so /usr/lib/x86_64-linux-gnu/libnccl.so)))

# The real build is on when nvcc is found and an NVIDIA GPU is visible (CUDA=1 forces it,
# CUDA=0 turns it off). Only the cuda objects see the toolkit; switching relinks
# build/pptrain (a stamp of the mode is one of its prerequisites, not linked).
CUDA_NVCC_FOUND := $(if $(shell command -v nvcc 2>/dev/null)$(wildcard $(CUDA_HOME)/bin/nvcc),1)
CUDA_GPU_VISIBLE := $(if $(wildcard /dev/nvidia[0-9]*),1)
CUDA ?= $(if $(CUDA_NVCC_FOUND),$(if $(CUDA_GPU_VISIBLE),1,0),0)
CUDA_MODE_STAMP := $(BUILD)/cuda-mode.stamp
$(shell mkdir -p $(BUILD) && (echo '$(CUDA)' | cmp -s - $(CUDA_MODE_STAMP) || echo '$(CUDA)' > $(CUDA_MODE_STAMP)))
$(BUILD)/pptrain: $(CUDA_MODE_STAMP)

ifeq ($(CUDA),1)
comma := ,
CUDA_OBJS := $(CUDA_HOST_SRCS:%.cpp=$(BUILD)/obj/%.o)
$(CUDA_OBJS): CXXFLAGS += -DPPTRAIN_WITH_CUDA -I$(CUDA_HOME)/include \
                         $(if $(filter-out $(CUDA_HOME),$(NCCL_HOME)),-I$(NCCL_HOME)/include)
# CUPTI's headers (kernel_recorder.cpp: logging.kernel_profile), in include/ or, in older
# toolkits, extras/CUPTI/include; the library is opened at run time (dlopen), not linked.
$(BUILD)/obj/src/backend/cuda/kernel_recorder.o: CXXFLAGS += $(addprefix -I,$(wildcard $(CUDA_HOME)/extras/CUPTI/include))
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 $(if $(NCCL_LIBDIR),-L$(NCCL_LIBDIR) -Wl$(comma)-rpath$(comma)$(NCCL_LIBDIR)) \
                -Wl,-rpath,$(CUDA_HOME)/lib64 -lnccl -lcublasLt -lcublas -lcudart

# cuDNN, for `model.attention: cudnn` (src/backend/cuda/cudnn_attention.cpp, the only object
# that sees it). cuDNN 9 (cudnn.h, libcudnn.so) comes with the CUDA toolkit's installer or
# NVIDIA's Debian package cudnn9-cuda-<CUDA major>; its header-only C++ frontend is the pinned wheel of
# mk/cudnn_frontend.pin, which scripts/install_deps.sh (make, make deps, make test, make run)
# unpacks into CUDNN_FRONTEND_DIR where nvcc is found. Decision: a real CUDA build without
# them is still a working build, only without cuDNN (PPTRAIN_WITH_CUDNN undefined, no
# -lcudnn); choosing `model.attention: cudnn` then fails at backend construction with one
# line saying how to get it. CUDNN=1 insists (one-line error here when something is
# missing), CUDNN=0 leaves cuDNN out; the default is on when all three are found.
include mk/cudnn_frontend.pin
# The same default as scripts/install_deps.sh (export CUDNN_FRONTEND_DIR to move both).
CUDNN_FRONTEND_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/pptrain/cudnn-frontend-$(CUDNN_FRONTEND_VERSION)
CUDNN_INCLUDE ?= $(firstword $(patsubst %/cudnn.h,%,$(wildcard $(CUDA_HOME)/include/cudnn.h /usr/include/cudnn.h \
                   /usr/include/x86_64-linux-gnu/cudnn.h /usr/include/aarch64-linux-gnu/cudnn.h)))
CUDNN_LIBDIR ?= $(firstword $(patsubst %/libcudnn.so,%,$(wildcard $(CUDA_HOME)/lib64/libcudnn.so \
                  /usr/lib/x86_64-linux-gnu/libcudnn.so /usr/lib/aarch64-linux-gnu/libcudnn.so)))
CUDNN_MISSING := $(strip $(if $(CUDNN_INCLUDE),,cudnn.h) $(if $(CUDNN_LIBDIR),,libcudnn.so) \
                   $(if $(wildcard $(CUDNN_FRONTEND_DIR)/include/cudnn_frontend.h),,$(CUDNN_FRONTEND_DIR)/include/cudnn_frontend.h))
CUDNN ?= $(if $(CUDNN_MISSING),0,1)
ifeq ($(CUDNN),1)
ifneq ($(CUDNN_MISSING),)
$(error CUDNN=1: not found: $(CUDNN_MISSING) (cuDNN 9: NVIDIA's cudnn9-cuda-<CUDA major> package; the frontend headers: scripts/install_deps.sh))
endif
CUDNN_OBJ := $(BUILD)/obj/src/backend/cuda/cudnn_attention.o
# -isystem: the frontend's headers are not held to this project's warnings. -O1 -g0: its
# templates (and the JSON library it carries) take minutes to compile at -O3 -g, for host code
# that plans a graph once per problem and then only passes pointers.
$(CUDNN_OBJ): CXXFLAGS += -O1 -g0 -DPPTRAIN_WITH_CUDNN -isystem $(CUDNN_FRONTEND_DIR)/include \
                         $(if $(filter-out $(CUDA_HOME)/include,$(CUDNN_INCLUDE)),-isystem $(CUDNN_INCLUDE))
# libnvrtc (the toolkit's): the frontend's runtime-compiled engines call NVRTC
# (cudnn_frontend/experimental/nvrtc_shim.h), so its header-only code links against it.
CUDA_LDLIBS += $(if $(filter-out $(CUDA_HOME)/lib64,$(CUDNN_LIBDIR)),-L$(CUDNN_LIBDIR) -Wl$(comma)-rpath$(comma)$(CUDNN_LIBDIR)) \
               -lcudnn -lnvrtc
endif
# Switching CUDNN recompiles the object that depends on it.
CUDNN_MODE_STAMP := $(BUILD)/cudnn-mode.stamp
$(shell mkdir -p $(BUILD) && (echo '$(CUDNN)' | cmp -s - $(CUDNN_MODE_STAMP) || echo '$(CUDNN)' > $(CUDNN_MODE_STAMP)))
$(BUILD)/obj/src/backend/cuda/cudnn_attention.o: $(CUDNN_MODE_STAMP)

# The cuda objects before $(LIB) (see pptrain-emu above).
$(BUILD)/pptrain: $(CUDA_OBJS) $(KERNEL_NVCC_OBJS)
$(BUILD)/pptrain: LDLIBS := $(LIB) $(LDLIBS) $(CUDA_LDLIBS)
endif
