# pptrain build. `make` builds build/pptrain and the test binaries; `make test` runs them;
# `make run` trains the demo; `make bench` runs the benchmarks; `make deps` installs packages.
SHELL := /bin/bash
BUILD ?= build
CXX := mpicxx
PKGS := hdf5-openmpi yaml-cpp openblas
CXXFLAGS ?= -O3 -march=native -g
CXXFLAGS += -std=c++20 -fopenmp -Wall -Wextra -Wno-unused-parameter -MMD -MP -DOMPI_SKIP_MPICXX \
            -Isrc -Ikernels -Itests $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -fopenmp -lpthread
GTEST_LIBS := -lgtest_main -lgtest -lpthread

# Every .cpp under src/ except the CLI entry goes into one static library; a linked
# binary only pulls the objects it references.
# src/backend/cuda is built by mk/cuda.mk (only with nvcc, or emulated for tests).
LIB_SRCS := $(filter-out src/main.cpp src/backend/cuda/%,$(shell find src -name '*.cpp' | sort))
LIB_OBJS := $(LIB_SRCS:%.cpp=$(BUILD)/obj/%.o)
LIB := $(BUILD)/libpptrain.a

# One GoogleTest binary per tests/test_*.cpp; tests/support/*.cpp is shared test code.
TEST_SRCS := $(sort $(wildcard tests/test_*.cpp))
TEST_BINS := $(TEST_SRCS:tests/%.cpp=$(BUILD)/tests/%)
TEST_SUPPORT_OBJS := $(patsubst %.cpp,$(BUILD)/obj/%.o,$(wildcard tests/support/*.cpp))

# Benchmark programs: one per bench/*.cpp (run by `make bench`).
BENCH_SRCS := $(sort $(wildcard bench/*.cpp))
BENCH_BINS := $(BENCH_SRCS:bench/%.cpp=$(BUILD)/bench/%)

.DEFAULT_GOAL := all

# The CUDA part (kernels/, src/backend/cuda) is added by mk/cuda.mk when present.
-include mk/*.mk

.PHONY: all deps test run bench clean
.PRECIOUS: $(BUILD)/obj/%.o
all: deps-check $(BUILD)/pptrain $(TEST_BINS) $(BENCH_BINS) $(EXTRA_TARGETS)

$(BUILD)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/pptrain: $(BUILD)/obj/src/main.o $(LIB)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_SUPPORT_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(GTEST_LIBS) $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

# deps: installs the Debian packages the build and tests need (root: apt-get; else sudo).
deps:
	@scripts/install_deps.sh

# deps-check: cheap test run before every build; installs only when something is missing.
.PHONY: deps-check
deps-check:
	@scripts/install_deps.sh --check-or-install

test: all
	@scripts/run_tests.sh $(BUILD)

run: all
	@scripts/demo.sh $(BUILD)

bench: all
	@scripts/bench.sh $(BUILD)

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
