# Checkpoint tests run the pptrain executable (prepare-data, inspect, import-llmc) and
# the MPI program tests/mpi/checkpoint_train; building a test binary alone builds them
# too (order-only: they are found at run time, not linked).
$(BUILD)/tests/test_checkpoint: | $(BUILD)/pptrain
$(BUILD)/tests/test_checkpoint_integrity: | $(BUILD)/pptrain
$(BUILD)/tests/test_checkpoint_train: | $(BUILD)/pptrain $(BUILD)/mpi_tests/checkpoint_train
$(BUILD)/tests/test_llmc_import: | $(BUILD)/pptrain
