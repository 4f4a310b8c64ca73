# MPI test programs: each tests/mpi/<name>.cpp has its own main() and is built to
# $(BUILD)/mpi_tests/<name>; GoogleTest wrappers (tests/test_mpi_comm.cpp,
# tests/test_grid.cpp) run them under mpirun with a timeout, tests/test_slurm.cpp
# under srun in a test Slurm cluster. Their shared main is tests/support/mpi_program.h;
# the wrappers find them with tests/support/mpi_programs.h.
MPI_TEST_SRCS := $(sort $(wildcard tests/mpi/*.cpp))
MPI_TEST_BINS := $(MPI_TEST_SRCS:tests/mpi/%.cpp=$(BUILD)/mpi_tests/%)

$(BUILD)/mpi_tests/%: $(BUILD)/obj/tests/mpi/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

# tests/mpi/nccl_*.cpp test NcclComm over the emulated NCCL: compiled with
# PPTRAIN_EMULATED (the $(BUILD)/obj-emu rule of mk/cuda.mk) and linked with the emulated
# cuda backend.
MPI_NCCL_TEST_BINS := $(filter $(BUILD)/mpi_tests/nccl_%,$(MPI_TEST_BINS))
$(MPI_NCCL_TEST_BINS): $(BUILD)/mpi_tests/%: $(BUILD)/obj-emu/tests/mpi/%.o $(CUDA_EMU_OBJS) \
                       $(KERNEL_EMU_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

# `make` builds them (binaries), and so does building a wrapper alone (order-only: the
# wrappers and test_slurm find the programs at run time, they do not link them).
EXTRA_TARGETS += $(MPI_TEST_BINS)
$(BUILD)/tests/test_mpi_comm $(BUILD)/tests/test_grid $(BUILD)/tests/test_slurm \
  $(BUILD)/tests/test_nccl_emu: | $(MPI_TEST_BINS)

.PHONY: mpi-tests
mpi-tests: $(MPI_TEST_BINS)

# test_preflight runs pptrain (the checks before the model exists) and memory_estimate
# (the prediction against the bytes a real job allocates); memory_estimate_emu is the same
# program linked with the emulated cuda backend (device: cuda, bf16), as pptrain-emu is.
$(BUILD)/mpi_tests/memory_estimate_emu: $(BUILD)/obj/tests/mpi/memory_estimate.o $(CUDA_EMU_OBJS) \
                                        $(KERNEL_EMU_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)
EXTRA_TARGETS += $(BUILD)/mpi_tests/memory_estimate_emu
$(BUILD)/tests/test_preflight: | $(BUILD)/pptrain $(BUILD)/mpi_tests/memory_estimate \
                                 $(BUILD)/mpi_tests/memory_estimate_emu

# test_memory_accounting runs memory_accounting (the backend's accounting against
# CountingOps) and pptrain / pptrain-emu (mem_peak against --dry-run).
$(BUILD)/tests/test_memory_accounting: | $(BUILD)/pptrain $(BUILD)/pptrain-emu $(BUILD)/mpi_tests/memory_accounting
