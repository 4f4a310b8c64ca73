# Tests that run build/pptrain (found at run time, not linked): building one of them alone
# builds it too (order-only).
$(BUILD)/tests/test_readme $(BUILD)/tests/test_output_dirs: | $(BUILD)/pptrain
