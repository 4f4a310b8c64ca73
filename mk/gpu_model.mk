# The GPU performance model (bench/gpu_model.cpp, bench/perf_model/): host-only, always
# built. $(BUILD)/bench/gpu_model and tests/test_gpu_model{,_plan} link the model's objects; the
# explicit recipe here takes precedence over the Makefile's $(BUILD)/bench/% pattern (which
# would put $(LIB) before these objects).
PERF_MODEL_OBJS := $(patsubst %.cpp,$(BUILD)/obj/%.o,$(sort $(wildcard bench/perf_model/*.cpp)))

$(BUILD)/bench/gpu_model: $(BUILD)/obj/bench/gpu_model.o $(PERF_MODEL_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/test_gpu_model: $(PERF_MODEL_OBJS)
$(BUILD)/tests/test_gpu_model: LDLIBS := $(LIB) $(LDLIBS)
# The test runs the program too.
$(BUILD)/tests/test_gpu_model: | $(BUILD)/bench/gpu_model

$(BUILD)/tests/test_gpu_model_plan: $(PERF_MODEL_OBJS)
$(BUILD)/tests/test_gpu_model_plan: LDLIBS := $(LIB) $(LDLIBS)
$(BUILD)/tests/test_gpu_model_plan: | $(BUILD)/bench/gpu_model $(BUILD)/pptrain
