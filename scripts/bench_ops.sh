#!/usr/bin/env bash
# Benchmarks the cpu backend on GPT-2-small shapes (C=768, 12 layers, 12 heads, T=256,
# B=4, V=50304): per-op time of one microbatch forward + backward, the optimizer, and the
# model's matmul FLOP rate against the raw cblas_sgemm rate on the same threads.
# Fails when that ratio is below BENCH_MIN_RATIO (default 0.70).
#
#   scripts/bench_ops.sh [BUILD]            (BUILD defaults to build)
#
# Environment: OMP_NUM_THREADS (default 2), BENCH_REPS (default 3), BENCH_MIN_RATIO.
# OpenBLAS 0.3.21 does not recognise AMD Zen 4/5 and falls back to its AVX2 (Haswell)
# kernels; on a CPU with AVX-512, OPENBLAS_CORETYPE=SKYLAKEX about doubles the sgemm rate.
set -euo pipefail
BUILD=${1:-build}
cd "$(dirname "$0")/.."
make -s BUILD="$BUILD" "$BUILD/tests/test_cpu_ops_bench"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export BENCH_REPS=${BENCH_REPS:-3}
export BENCH_MIN_RATIO=${BENCH_MIN_RATIO:-0.70}
echo "OMP_NUM_THREADS=$OMP_NUM_THREADS OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto} load: $(cut -d' ' -f1-3 /proc/loadavg)"
log=$(mktemp); trap 'rm -f "$log"' EXIT
status=0
"$BUILD/tests/test_cpu_ops_bench" --gtest_also_run_disabled_tests --gtest_filter='CpuOpsBench.*' \
  --gtest_color=no >"$log" 2>&1 || status=$?
grep -vE '^(\[|Running main|$)' "$log" || true   # the report without gtest's banner
if [ $status -eq 0 ]; then echo "ratio >= $BENCH_MIN_RATIO: ok"; else echo "ratio below $BENCH_MIN_RATIO (or the bench failed)"; fi
exit $status
