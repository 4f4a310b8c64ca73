# Fuzz targets (libFuzzer): each tests/fuzz/fuzz_<name>.cpp defines LLVMFuzzerTestOneInput
# and is built to $(BUILD)/fuzz/fuzz_<name> with clang (-fsanitize=fuzzer,address,undefined),
# so adding a target is adding that one file, its seeds under tests/fuzz/corpus/<name>/ and,
# once something was found, the inputs that crashed under tests/fuzz/regressions/<name>/.
#   make test   tests/test_fuzz.cpp runs every target for a few seconds and replays its
#               regressions (FUZZ_TEST_SECONDS, default 5 per target)
#   make fuzz   runs every target for FUZZ_SECONDS (default 300) each, keeping what it
#               learns in $(BUILD)/fuzz-corpus/<name>/ and crashes in $(BUILD)/fuzz-crashes/<name>/
# The targets link the src/ files below, compiled by clang into their own object tree
# ($(BUILD)/obj-fuzz, instrumented for coverage and the sanitizers) and archived. Only the
# files some target's link takes are compiled: the readers and what they call. Whole
# folders were 64 files, and the 25 no target took (the checkpoint writer and manager, the
# importers, the planner's schedules) were 59 of the 153 CPU-seconds of the clang compiles,
# a fifth of a minute of a 2-core build. A target that reads more of src/ adds the file
# here: its link fails until then, naming the symbol.
FUZZ_CXX ?= clang++-14
FUZZ_LIB_SRCS := $(addprefix src/core/,communicator.cpp config.cpp config_validate.cpp input_file.cpp json.cpp log.cpp) \
  $(addprefix src/data/,read_only_file.cpp token_shard.cpp) \
  src/parallel/mpi_comm.cpp \
  $(addprefix src/pipeline/,csv.cpp dualpipev.cpp gpipe.cpp interleaved_1f1b.cpp ir.cpp looped_bfs.cpp lower.cpp \
    one_f_one_b.cpp registry.cpp transform.cpp validate.cpp zb_h1.cpp zb_h2.cpp zbv.cpp) \
  $(addprefix src/checkpoint/,checkpoint_checks.cpp checkpoint_format.cpp checkpoint_reader.cpp checksum.cpp \
    hdf5_io.cpp hf_arch.cpp hf_gpt2.cpp hf_llama.cpp hf_mistral.cpp hf_qwen2.cpp hf_qwen3.cpp io_group.cpp \
    llmc_model.cpp safetensors.cpp tensor_table.cpp verify.cpp)
FUZZ_SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=all
# The same system headers and libraries as the gcc build: the packages', and MPI's (the
# MPI compiler wrapper is gcc's, so its flags are asked for directly). Expanded when a
# fuzz rule runs, not when make reads this file: on a fresh machine MPI's wrapper exists
# only after `make deps`. The include roots are the gcc build's; the targets add tests/
# (fuzz/temp_file.h) as the tests do. Line tables are all a sanitizer's report needs for
# file:line in its stack (full -g: 10% longer compiles, e.g. checkpoint_manager 9.5 -> 8.6 s).
FUZZ_CXXFLAGS = -std=c++20 -O1 -gline-tables-only -Wall -Wextra -Wno-unused-parameter -MMD -MP -DOMPI_SKIP_MPICXX \
                 -Isrc -Ikernels -I. $(PKG_CFLAGS) $(shell $(CXX) --showme:compile 2>/dev/null) $(FUZZ_SANITIZE)
FUZZ_LDLIBS = $(PKG_LIBS) $(shell $(CXX) --showme:link 2>/dev/null) -lpthread

FUZZ_SRCS := $(sort $(wildcard tests/fuzz/fuzz_*.cpp))
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.cpp=$(BUILD)/fuzz/%)
FUZZ_LIB := $(BUILD)/libpptrain-fuzz.a

# Library objects: coverage instrumentation without libFuzzer's main.
$(BUILD)/obj-fuzz/src/%.o: src/%.cpp $(CODEGEN_STAMP)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(BUILD)/obj-fuzz/tests/fuzz/%.o: tests/fuzz/%.cpp $(CODEGEN_STAMP)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) $(TEST_INCLUDES) -fsanitize=fuzzer -c $< -o $@

$(FUZZ_LIB): $(FUZZ_LIB_SRCS:%.cpp=$(BUILD)/obj-fuzz/%.o)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/fuzz/%: $(BUILD)/obj-fuzz/tests/fuzz/%.o $(FUZZ_LIB)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_SANITIZE) -fsanitize=fuzzer $^ -o $@ $(FUZZ_LDLIBS)

.SECONDARY: $(FUZZ_SRCS:tests/fuzz/%.cpp=$(BUILD)/obj-fuzz/tests/fuzz/%.o)
-include $(shell find $(BUILD)/obj-fuzz -name '*.d' 2>/dev/null)

# `make` builds the targets where clang is installed (scripts/install_deps.sh installs it);
# test_fuzz counts a target that is not built as a failure.
ifneq ($(shell command -v $(FUZZ_CXX) 2>/dev/null),)
EXTRA_TARGETS += $(FUZZ_BINS)
$(BUILD)/tests/test_fuzz: | $(FUZZ_BINS)
endif

# Long runs: each target for FUZZ_SECONDS on the seeds and what earlier runs kept; fails
# when any target found an input that fails (listed at the end).
FUZZ_SECONDS ?= 300
.PHONY: fuzz
fuzz: $(FUZZ_BINS)
	@found=0; for bin in $(FUZZ_BINS); do \
	  name=$${bin##*/fuzz_}; corpus=$(BUILD)/fuzz-corpus/$$name; crashes=$(BUILD)/fuzz-crashes/$$name/; \
	  mkdir -p $$corpus $$crashes; \
	  echo "== fuzz $$name: $(FUZZ_SECONDS) s (corpus $$corpus)"; \
	  $$bin -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
	    -artifact_prefix=$$crashes $$corpus tests/fuzz/corpus/$$name >$(BUILD)/fuzz-$$name.log 2>&1 || found=1; \
	  grep -E '^(stat::number_of_executed_units|stat::new_units_added|SUMMARY|artifact_prefix)' $(BUILD)/fuzz-$$name.log; \
	done; \
	if [ $$found = 1 ]; then \
	  echo "== fuzz: inputs that fail (logs $(BUILD)/fuzz-<name>.log); fix, then add them to tests/fuzz/regressions/<name>/:"; \
	  find $(BUILD)/fuzz-crashes -type f; exit 1; fi; \
	echo "== fuzz: nothing found"
