#!/usr/bin/env bash
# GPU benchmarks of the cuda backend, each one JSON line:
#  - build/bench/bench_kernels: achieved memory bandwidth of every memory-bound kernel
#    (bf16 and fp32) on GPT-2 124M shapes, against the device's peak;
#  - bench/cuda/train_throughput.sh: GPT-2 124M training tokens/s and MFU, bf16 and fp32;
#  - bench/cuda/vs_torch.sh: GPT-2 124M at B 16 and 32 (T 1024) and the Llama 3.2 1B shape
#    (T 8192), bf16: pptrain's tokens/s, MFU and GPU-busy fraction beside the same model in
#    PyTorch (eager and torch.compile, where torch is installed), with the ratios
#    (BENCH_VS_TORCH=0 leaves it out: a few minutes, most of it torch.compile).
# On a machine without an NVIDIA GPU, or a build without CUDA, prints one line
# `# gpu benchmarks skipped: <reason>` and exits 0.
#
#   scripts/bench_gpu.sh [BUILD]     (BUILD defaults to build)
set -uo pipefail
BUILD=${1:-build}

# Only shell builtins until nvidia-smi is found, so the skip works with any PATH.
skip() {
  echo "# gpu benchmarks skipped: $1"
  exit 0
}
command -v nvidia-smi >/dev/null 2>&1 || skip "nvidia-smi not found (no NVIDIA driver on this machine)"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "${gpus:-0}" -gt 0 ] || skip "nvidia-smi -L lists no GPU"
cd "$(dirname "$0")/.."
[ -x "$BUILD/bench/bench_kernels" ] ||
  skip "$BUILD/bench/bench_kernels is not built (it needs the real CUDA build: make CUDA=1)"

echo "# gpu: $(nvidia-smi -L | head -1)"
status=0
echo "# kernel memory bandwidth (GPT-2 124M shapes)"
"$BUILD/bench/bench_kernels" || status=1
echo "# GPT-2 124M training throughput and MFU, bf16 and fp32 (B=16, T=1024)"
bench/cuda/train_throughput.sh "$BUILD" || status=1
if [ "${BENCH_VS_TORCH:-1}" = 1 ]; then
  echo "# pptrain against PyTorch (eager, torch.compile) on this GPU: GPT-2 124M B 16/32, Llama 1B shape T 8192"
  bench/cuda/vs_torch.sh "$BUILD" || status=1
fi
exit $status
