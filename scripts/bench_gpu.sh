#!/usr/bin/env bash
# GPU benchmarks of the cuda backend, each one JSON line:
#  - build/bench/bench_kernels: achieved memory bandwidth of every memory-bound kernel
#    (bf16 and fp32) on GPT-2 124M shapes, against the device's peak;
#  - bench/cuda/train_throughput.sh: GPT-2 124M training tokens/s and MFU, bf16 and fp32.
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
exit $status
