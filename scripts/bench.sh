#!/usr/bin/env bash
# `make bench`: every benchmark, each printing one JSON line (figures and the ratios
# that compare across commits, measured in the same run).
set -uo pipefail
BUILD=${1:-build}
status=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source "$(dirname "$0")/bench_lib.sh"
cores=$(bench_cores)  # "all threads": one per core, as pptrain and PyTorch take by default
echo "# cpu training throughput vs sgemm (GPT-2 small shape)"
OMP_NUM_THREADS=$cores "$BUILD/bench/bench_model" 3 || status=1
echo "# cpu attention core, 1 thread and all (naive and flash, forward and backward)"
OMP_NUM_THREADS=1 "$BUILD/bench/bench_attention" || status=1
OMP_NUM_THREADS=$cores "$BUILD/bench/bench_attention" || status=1
echo "# GEMM libraries on the linear layers' products (OpenBLAS; oneDNN and BLIS where installed)"
OMP_NUM_THREADS=$cores "$BUILD/bench/bench_blas" 5 || status=1
OMP_NUM_THREADS=1 "$BUILD/bench/bench_blas" 10 256,256,256 || status=1
echo "# pipeline scaling, 2 ranks x 1 thread"
scripts/bench_pipeline.sh "$BUILD" || status=1
for extra in scripts/bench_cpu_vs_torch.sh scripts/bench_pp_vs_torch.sh scripts/bench_schedules.sh scripts/bench_planner.sh scripts/bench_post_validation.sh scripts/bench_memory.sh scripts/bench_checkpoint.sh \
             scripts/bench_native.sh scripts/bench_gpu.sh; do
  [ -x "$extra" ] || continue
  echo "# $(basename "$extra" .sh)"
  "$extra" "$BUILD" || status=1
done
exit $status
