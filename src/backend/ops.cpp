// The default bf16 overloads of Ops: a backend that stores only fp32 (cpu) rejects them.
// Config validation already refuses `training.precision: bf16` with `device: cpu`; this is
// the backstop for code that reaches a backend directly.
#include "backend/ops.h"

#include "core/error.h"

namespace pptrain {

void Ops::no_bf16(const char* op) const {
  fail("backend '", name(), "' has no bf16 ", op, " (training.precision: bf16 needs device: cuda)");
}

void Ops::cast(bfloat16*, const float*, size_t) { no_bf16("cast"); }
void Ops::cast(float*, const bfloat16*, size_t) { no_bf16("cast"); }
void Ops::linear_forward(bfloat16*, const bfloat16*, const bfloat16*, const bfloat16*, int, int, int) {
  no_bf16("linear_forward");
}
void Ops::linear_backward_input(bfloat16*, const bfloat16*, const bfloat16*, int, int, int, bool) {
  no_bf16("linear_backward_input");
}
void Ops::linear_backward_weight(float*, float*, const bfloat16*, const bfloat16*, int, int, int) {
  no_bf16("linear_backward_weight");
}
void Ops::layernorm_forward(bfloat16*, float*, float*, const bfloat16*, const bfloat16*, const bfloat16*,
                            int, int) {
  no_bf16("layernorm_forward");
}
void Ops::layernorm_backward_input(bfloat16*, const bfloat16*, const bfloat16*, const float*, const float*,
                                   const bfloat16*, int, int, bool) {
  no_bf16("layernorm_backward_input");
}
void Ops::layernorm_backward_weight(float*, float*, const bfloat16*, const bfloat16*, const float*,
                                    const float*, int, int) {
  no_bf16("layernorm_backward_weight");
}
void Ops::gelu_forward(bfloat16*, const bfloat16*, size_t) { no_bf16("gelu_forward"); }
void Ops::gelu_backward(bfloat16*, const bfloat16*, const bfloat16*, size_t) { no_bf16("gelu_backward"); }
void Ops::add(bfloat16*, const bfloat16*, const bfloat16*, size_t) { no_bf16("add"); }
void Ops::add_bias(bfloat16*, const bfloat16*, int, int) { no_bf16("add_bias"); }
void Ops::embedding_forward(bfloat16*, const int32_t*, const bfloat16*, const bfloat16*, int, int, int, int,
                            int) {
  no_bf16("embedding_forward");
}
void Ops::embedding_backward_weight(float*, float*, const bfloat16*, const int32_t*, int, int, int, int, int) {
  no_bf16("embedding_backward_weight");
}
void Ops::attention_forward(bfloat16*, bfloat16*, const bfloat16*, int, int, int, int) {
  no_bf16("attention_forward");
}
void Ops::attention_backward_input(bfloat16*, const bfloat16*, const bfloat16*, const bfloat16*, int, int,
                                   int, int) {
  no_bf16("attention_backward_input");
}
void Ops::ce_row_max(float*, const bfloat16*, int, int, int) { no_bf16("ce_row_max"); }
void Ops::ce_sumexp_target(float*, float*, const bfloat16*, const float*, const int32_t*, int, int, int,
                           int) {
  no_bf16("ce_sumexp_target");
}
void Ops::ce_backward(bfloat16*, const bfloat16*, const float*, const float*, const int32_t*, int, int, int,
                      int, float) {
  no_bf16("ce_backward");
}

}  // namespace pptrain
