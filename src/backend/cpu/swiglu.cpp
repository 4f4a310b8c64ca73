// SwiGLU, the gated unit of the Llama MLP: y = silu(gate) · up with silu(x) = x · sigmoid(x).
// Memory-bound loops, parallel over threads and vectorised (exp_approx keeps the sigmoid's
// exp in the vector unit).
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/vector_math.h"
#include "backend/cpu/isa_begin.h"  // last: see there

namespace pptrain::cpu::PPTRAIN_CPU_ISA {

namespace {

using Index = long long;  // signed loop index (OpenMP canonical loops)

#pragma omp declare simd notinbranch
inline float sigmoid(float x) { return 1.0f / (1.0f + exp_approx(-x)); }

}  // namespace

void CpuOps::swiglu_forward(View yv, ConstView gatev, ConstView upv, size_t n) {
  float* y;
  const float *gate, *up;
  std::tie(y, gate, up) = fp32("swiglu_forward", yv, gatev, upv);
  // y[n] = (gate · sigmoid(gate)) · up, the rounding order of Hugging Face's act_fn(gate) * up
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (Index i = 0; i < Index(n); ++i) y[i] = (gate[i] * sigmoid(gate[i])) * up[i];
}

void CpuOps::swiglu_backward_input(View dgatev, View dupv, ConstView dyv, ConstView gatev, ConstView upv, size_t n) {
  float *dgate, *dup;
  const float *dy, *gate, *up;
  std::tie(dgate, dup, dy, gate, up) = fp32("swiglu_backward_input", dgatev, dupv, dyv, gatev, upv);
  // silu'(x) = s (1 + x (1 - s)), s = sigmoid(x); dgate = dy · up · silu'(gate), dup = dy · silu(gate)
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (Index i = 0; i < Index(n); ++i) {
    const float x = gate[i], s = sigmoid(x);
    dgate[i] = dy[i] * up[i] * (s * (1.0f + x * (1.0f - s)));
    dup[i] = dy[i] * (x * s);
  }
}

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA
