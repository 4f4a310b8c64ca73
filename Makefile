# pptrain build. What a user types (each installs missing packages first, see below):
#   make          build build/pptrain, the tests and the benchmarks
#   make run      build build/pptrain only, train the demo (configs/demo.yaml), print a sample
#   make test     build every test binary and run them all; ends with "N passed, M failed"
#   make bench    build, then run the benchmarks
#   make deps     install every package (scripts/install_deps.sh)
#   make fuzz     run every fuzz target (tests/fuzz) for FUZZ_SECONDS (default 300) each
#   make check-layering   check the includes of src/, kernels/, emu/ against DESIGN.md's dependency table
# Options: ARCH=native (default x86-64-v3), CUDA=0|1, CUDA_ARCH="80 90", BUILD=dir.
SHELL := /bin/bash
BUILD ?= build
CXX := mpicxx
PKGS := hdf5-openmpi yaml-cpp openblas

# Code generation for a baseline ISA that every x86-64-v3 CPU runs (AVX2 and FMA: Intel
# Haswell, AMD Zen and later), so a binary built on a login node runs on any compute node
# and the numbers the tests compare do not change with the build host. ARCH=native opts in
# to the build host's full ISA. OpenBLAS picks its kernels at run time either way.
ARCH ?= x86-64-v3
# -fno-var-tracking-assignments: full debug information (types, scopes, the qualified names
# of inlined frames that a hang's or a crash's backtrace shows) without GCC's tracking of
# where each local lives through the optimised code, which made -O3 -g compiles 1.25x as
# long (six of the library's larger files: 35.0 s against 28.0, 2-core Emerald Rapids VM;
# -g1 took 25.3 but names an inlined pptrain::MpiRequest::wait "wait"). A debugger then shows
# more locals as optimised out; for them: make CXXFLAGS='-O3 -march=x86-64-v3 -g -gz'.
# -gz: debug sections compressed (objects and linked binaries; gdb and perf read them as
# they are). Uncompressed they were 95% of each binary and 3.5 GB of a full build folder,
# enough to fill a nearly full disk on the way.
CXXFLAGS ?= -O3 -march=$(ARCH) -g -gz -fno-var-tracking-assignments
# Floating-point code may be evaluated speculatively: without this GCC keeps every branch of
# a loop whose arms hold float operations that could raise an FP exception flag, and so
# vectorises none of the cpu backend's branch-free exp/GELU/softmax loops (the select of
# exp_approx's clamps: GELU ran at 7 ns an element, one at a time). Results are the same
# bits; pptrain reads no FP exception flags. Likewise math functions need not set errno:
# with errno, std::sqrt is a scalar square root with a call to sqrtf for negative inputs,
# and the AdamW loop around it ran one element at a time (7 cycles a parameter, compute-
# bound at a third of the memory bandwidth). The same IEEE results; pptrain reads no errno
# of a math function.
FP_FLAGS := -fno-trapping-math -fno-math-errno
CODEGEN_FLAGS := $(CXXFLAGS) $(FP_FLAGS)

# The packages' flags come from pkg-config when make reads this file, so they must be read
# after the packages are installed: the entry targets (end of this file) install first,
# then re-enter make for the build.
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
# Include roots: src/ and kernels/ by their folders' names ("core/error.h", "launch.cuh"),
# the emulator from the repository root ("emu/emu.h"). tests/ is on the path of the test
# objects only (-Itests below, for "support/..."), so no shipped source (src/, kernels/,
# emu/) includes test code; the root would reach "tests/...", which test_layering forbids.
CXXFLAGS += $(FP_FLAGS) -std=c++20 -fopenmp -Wall -Wextra -Wno-unused-parameter -MMD -MP -DOMPI_SKIP_MPICXX \
            -Isrc -Ikernels -I. $(PKG_CFLAGS)
TEST_INCLUDES := -Itests
# GLPK (the stage partitioner's integer programs) ships no pkg-config file.
LDLIBS += $(PKG_LIBS) -lglpk -fopenmp -lpthread
# Every binary takes the CPU check of src/core/cpu_guard.cpp: a constructor nothing refers to,
# which the linker would otherwise leave in the archive. It names the build's -march.
LDLIBS += -Wl,--undefined=pptrain_cpu_guard
$(BUILD)/obj/src/core/cpu_guard.o: CXXFLAGS += -DPPTRAIN_BUILD_ARCH='"-march=$(ARCH)"'
# Link with gold where binutils has it (Debian's does): a test binary links in 0.33 s
# instead of BFD ld's 0.90, and a full build has about 200 links. Elsewhere the default
# linker. (Looked up on the PATH, not by asking the compiler: nothing may run the compiler
# before the packages are installed, tests/test_fresh_build.cpp.)
GOLD_LINK := $(if $(shell command -v ld.gold 2>/dev/null),-fuse-ld=gold)
LDLIBS += $(GOLD_LINK)
GTEST_LIBS := -lgtest_main -lgtest -lpthread

# Goals that need no package flags; any other goal is a build step, which would compile
# without the packages' headers and link without their libraries if they are missing.
ENTRY_GOALS := all run test bench deps clean
ifneq ($(filter-out $(ENTRY_GOALS),$(or $(MAKECMDGOALS),all)),)
ifeq ($(PKG_LIBS),)
$(error pkg-config finds none of: $(PKGS). Run `make deps` first, or plain `make`, which installs what is missing and then builds)
endif
endif

# Switching ARCH (or CXXFLAGS) rewrites this stamp, which every object depends on, so the
# objects are rebuilt rather than mixed.
CODEGEN_STAMP := $(BUILD)/codegen.stamp
ifneq ($(file <$(CODEGEN_STAMP)),$(CODEGEN_FLAGS))
$(shell mkdir -p $(BUILD))
$(file >$(CODEGEN_STAMP),$(CODEGEN_FLAGS))
endif

# The host sources that need the CUDA runtime, cuBLAS or NCCL (the cuda backend and
# NcclComm): built by mk/cuda.mk, for real with the toolkit or emulated for the tests.
# Builds without them link backend/no_cuda.cpp and parallel/no_nccl.cpp, which say so.
CUDA_HOST_SRCS := $(sort $(wildcard src/backend/cuda/*.cpp)) src/parallel/nccl_comm.cpp src/parallel/staged_comm.cpp

# Every other .cpp under src/ except the CLI entry goes into one static library; a linked
# binary only pulls the objects it references.
LIB_SRCS := $(filter-out src/main.cpp src/backend/cuda/% $(CUDA_HOST_SRCS),$(shell find src -name '*.cpp' | sort))
LIB_OBJS := $(LIB_SRCS:%.cpp=$(BUILD)/obj/%.o)

# The cpu backend's op files are compiled a second time for AVX-512 on x86-64
# (src/backend/cpu/isa.h): objects *.avx512.o beside the baseline ones, code in
# cpu::avx512; cpu_isa.cpp (compiled once) picks a copy at run time, so one portable binary
# runs the CPU's widest vectors. The files compiled once: cpu_isa.cpp, blas_setup.cpp,
# cpu_clock.cpp, cpu_topology.cpp and host_arena.cpp.
CPU_ONCE_SRCS := src/backend/cpu/cpu_isa.cpp src/backend/cpu/blas_setup.cpp src/backend/cpu/cpu_clock.cpp \
  src/backend/cpu/cpu_topology.cpp src/backend/cpu/host_arena.cpp src/backend/cpu/gemm_library.cpp \
  src/backend/cpu/packed_weights.cpp
CPU_ISA_SRCS := $(filter-out $(CPU_ONCE_SRCS),$(sort $(wildcard src/backend/cpu/*.cpp)))
# (The machine's, not the compiler's: make reads this before `make deps` installed mpicxx.)
ifeq ($(shell uname -m),x86_64)
CPU_AVX512_OBJS := $(CPU_ISA_SRCS:%.cpp=$(BUILD)/obj/%.avx512.o)
LIB_OBJS += $(CPU_AVX512_OBJS)
$(BUILD)/obj/src/backend/cpu/cpu_isa.o: CXXFLAGS += -DPPTRAIN_WITH_AVX512_COPY
endif
LIB := $(BUILD)/libpptrain.a

# One GoogleTest binary per tests/test_*.cpp; tests/support holds the helpers the tests share
# (headers, and *.cpp linked into every test binary).
TEST_SRCS := $(sort $(wildcard tests/test_*.cpp))
TEST_BINS := $(TEST_SRCS:tests/%.cpp=$(BUILD)/tests/%)
TEST_SUPPORT_OBJS := $(patsubst %.cpp,$(BUILD)/obj/%.o,$(wildcard tests/support/*.cpp))

# Benchmark programs: one per bench/*.cpp (run by `make bench`).
BENCH_SRCS := $(sort $(wildcard bench/*.cpp))
BENCH_BINS := $(BENCH_SRCS:bench/%.cpp=$(BUILD)/bench/%)

.DEFAULT_GOAL := all

# The parts, in the order their variables are needed (each object list is defined once):
#   kernels.mk        the kernels, emulated and nvcc (KERNEL_EMU_OBJS, KERNEL_NVCC_OBJS)
#   cuda.mk           the cuda backend, emulated (pptrain-emu) and real; uses the above
#   cuda_bench.mk     GPU benchmarks; uses CUDA and the object lists of cuda.mk
#   gpu_model.mk      the GPU performance model (build/bench/gpu_model), host-only
#   gpu_tests.mk      real-device test binaries (CUDA=1); uses the object lists of cuda.mk
#   mpi_tests.mk      MPI test programs (the NCCL ones link the emulated cuda backend)
#   checkpoint.mk, run_time_tests.mk   what tests find at run time (order-only)
#   fuzz.mk           libFuzzer targets (tests/fuzz) built with clang; `make fuzz`
#   bundle.mk         `make gpu-bundle`; last: it packs the binaries listed above
include mk/kernels.mk mk/cuda.mk mk/cuda_bench.mk mk/gpu_model.mk mk/gpu_tests.mk mk/mpi_tests.mk mk/checkpoint.mk \
        mk/run_time_tests.mk mk/fuzz.mk mk/bundle.mk

.PHONY: binaries clean
.PRECIOUS: $(BUILD)/obj/%.o
# Every binary; the entry targets build it (or part of it) after installing packages.
binaries: $(BUILD)/pptrain $(TEST_BINS) $(BENCH_BINS) $(EXTRA_TARGETS)

$(BUILD)/obj/%.o: %.cpp $(CODEGEN_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@
# Test code adds tests/ to the path (so do the object trees of mk/cuda.mk and mk/gpu_tests.mk).
# Its debug information is line tables only (-g1, after -g, wins): a
# failure's file and line and a debugger's backtrace stay, the test's local variables go.
# The tests' objects are a third of the build and compile about 30% faster so (a checkpoint
# test: 13.6 s -> 9.3 s).
# -O1 (after -O3, wins): test code is assertions and small references; what it tests, the
# library, keeps -O3. Another 31% off the tests' objects (all 109: 418 -> 286 s of CPU time,
# a minute of a 2-core build), and the suite takes no longer (336 s against 349).
TEST_OBJ_FLAGS := $(TEST_INCLUDES) -g1 -O1
# Every test object starts from a precompiled GoogleTest and standard library
# (tests/support/test_pch.h): 0.8 s less a test object, 90 of the tests' 290 CPU-seconds.
# GCC takes $(TEST_PCH).gch for `-include $(TEST_PCH)` when it was built with the same flags,
# and otherwise (-Winvalid-pch says so) reads the copied header itself: only slower.
# The MPI test programs (tests/mpi) do not use GoogleTest and have a `testing` namespace of
# their own, so they go without.
TEST_PCH := $(BUILD)/pch/test_pch.h
TEST_PCH_INCLUDE = -Winvalid-pch -include $(TEST_PCH)
$(BUILD)/obj/tests/%.o: CXXFLAGS += $(TEST_OBJ_FLAGS) $(TEST_PCH_INCLUDE)
$(BUILD)/obj/tests/mpi/%.o: TEST_PCH_INCLUDE =
# (A prerequisite of the objects by name: a pattern line without a recipe would be a rule
# of its own, not an addition to the one that compiles them.)
$(patsubst %.cpp,$(BUILD)/obj/%.o,$(wildcard tests/*.cpp tests/support/*.cpp)): $(TEST_PCH).gch
# Its flags are the test objects' without the -include (which it inherits when built for one).
$(TEST_PCH).gch: tests/support/test_pch.h
	@mkdir -p $(dir $@)
	cp $< $(TEST_PCH)
	$(CXX) $(filter-out $(TEST_PCH_INCLUDE) $(TEST_OBJ_FLAGS),$(CXXFLAGS)) $(TEST_OBJ_FLAGS) \
	  -c -x c++-header $(TEST_PCH) -o $@

$(BUILD)/obj/%.avx512.o: %.cpp $(CODEGEN_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -DPPTRAIN_CPU_AVX512 -c $< -o $@

$(LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/pptrain: $(BUILD)/obj/src/main.o $(LIB)
	$(CXX) $(CXXFLAGS) $(filter %.o %.a,$^) -o $@ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_SUPPORT_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(GTEST_LIBS) $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

clean:
	rm -rf $(BUILD)

# The dependency direction of DESIGN.md on its own (`make test` runs it too): every
# `#include "..."` under src/, kernels/ and emu/ against the table of tests/test_layering.cpp
# (none of them may include tests/), one line per offending include.
.PHONY: check-layering
check-layering: $(BUILD)/tests/test_layering
	@$< --gtest_color=no --gtest_filter='Layering.EveryShippedIncludeFollowsTheDependencyTable' \
	  | grep -E '^(src|kernels|emu)/|FAILED  \]|PASSED  \]'; exit $${PIPESTATUS[0]}

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# ---- Entry points ------------------------------------------------------------------------
# Each installs the missing packages (scripts/install_deps.sh: the `run` set for `make run`,
# all of them otherwise), then re-enters make, which reads the packages' flags anew and
# builds on every core (unless -j was given). One line per phase says where the time goes.
.PHONY: all run test bench deps
# nproc honours OMP_NUM_THREADS, which MPI scripts often export as 1: the cores the build may
# use are what nproc says without it (the affinity mask, as before).
NPROC := $(shell env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 2)
JOBS := $(if $(filter -j%,$(MAKEFLAGS)),,-j$(NPROC))
ON_CORES := $(if $(JOBS),$(NPROC) jobs in parallel,with the -j given)

all:
	@echo "== make [1/2] deps: packages of the build and the tests (first time: a minute or so)"
	@scripts/install_deps.sh test
	@echo "== make [2/2] build: every binary, $(ON_CORES)"
	@$(MAKE) --no-print-directory $(JOBS) binaries

run:
	@echo "== make run [1/4] deps: compiler, MPI, HDF5, yaml-cpp, OpenBLAS, oneDNN, GLPK and a text corpus (first time: a minute or so)"
	@scripts/install_deps.sh run
	@echo "== make run [2/4] build: $(BUILD)/pptrain, $(ON_CORES) (first time: 2 to 5 minutes on 2 cores)"
	@$(MAKE) --no-print-directory $(JOBS) $(BUILD)/pptrain
	@scripts/demo.sh $(BUILD)

# -k: a test that fails to compile costs only its own binary. A test binary the failed
# build left out of date is removed, so it counts as failed instead of running stale
# (scripts/run_tests.sh counts each missing binary of tests/test_*.cpp as one failure, and
# a failed build of anything else as one more).
BUILD_FAILED_MARK := $(BUILD)/build-failed
test:
	@echo "== make test [1/3] deps: packages of the build and the tests (first time: a minute or so)"
	@scripts/install_deps.sh test || echo "deps: failed; building and testing what can be"
	@echo "== make test [2/3] build: every binary, $(ON_CORES) (first time: 5 to 13 minutes on 2 cores)"
	@rm -f $(BUILD_FAILED_MARK); $(MAKE) --no-print-directory -k $(JOBS) binaries || { \
	  echo "build: failed (errors above); what it could not build counts as failed"; \
	  mkdir -p $(BUILD) && touch $(BUILD_FAILED_MARK); \
	  for b in $(TEST_BINS); do $(MAKE) --no-print-directory -q $$b 2>/dev/null || rm -f $$b; done; }
	@echo "== make test [3/3] tests: each $(BUILD)/tests/test_* under a timeout, several at once (scripts/run_tests.sh)"
	@BUILD_FAILED=$$(test -e $(BUILD_FAILED_MARK) && echo 1) scripts/run_tests.sh $(BUILD) $(notdir $(TEST_BINS))

bench:
	@echo "== make bench [1/3] deps"
	@scripts/install_deps.sh test
	@echo "== make bench [2/3] build: every binary, $(ON_CORES)"
	@$(MAKE) --no-print-directory $(JOBS) binaries
	@echo "== make bench [3/3] benchmarks"
	@scripts/bench.sh $(BUILD)

deps:
	@scripts/install_deps.sh test
