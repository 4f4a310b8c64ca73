#!/usr/bin/env bash
# pptrain's cpu backend against plain PyTorch (bench/torch_reference.py) on the same GPT-2
# small shape (12 layers, 12 heads, d_model 768, vocab 50304), fp32, same threads, same
# batch and sequence length. Prints one JSON line per sequence length:
#   {"bench": "cpu_vs_torch", "seq", "batch", "threads", "pptrain_step_s", "torch_step_s",
#    "speedup" (torch / pptrain: > 1 means pptrain is faster), "blas_core", "gemm_library"
#    (OpenBLAS unless PPTRAIN_CPU_GEMM names another), "linear_weights" (bench_model's: packed
#    for oneDNN's matmul, or plain and why), "cpu_isa", "torch",
#    "gflop_per_step", "peak_gflops_estimate" (bench_model's), "peak_bound_step_s" (the step's
#    FLOPs at that peak), "peak_bound_speedup" (torch over it: the most any fp32 trainer doing
#    these FLOPs could beat PyTorch by here), "pptrain_peak_fraction", "sgemm_gflops" (bench_model's
#    large SGEMM in that run), "sgemm_bound_step_s" and "sgemm_bound_speedup" (the same at that
#    rate: the most a trainer on this BLAS could beat PyTorch by), ...}
# Without torch it prints one line saying so and exits 0 (CI has no torch).
#
# Usage: scripts/bench_cpu_vs_torch.sh [BUILD=build]     (from the repository root)
#   BENCH_SEQS="64 256"  sequence lengths           BENCH_BATCH=4   batch
#   BENCH_THREADS=cores  threads, both (default: the physical cores, each side's default)
#   BENCH_STEPS=3        timed steps per run
#   BENCH_ROUNDS=2       runs of each side per length, interleaved A B A B
set -uo pipefail
BUILD=${1:-build}
SEQS=${BENCH_SEQS:-64 256}
BATCH=${BENCH_BATCH:-4}
source "$(dirname "$0")/bench_lib.sh"
THREADS=${BENCH_THREADS:-$(bench_cores)}
STEPS=${BENCH_STEPS:-3}
ROUNDS=${BENCH_ROUNDS:-2}
HERE=$(cd "$(dirname "$0")/.." && pwd)
BENCH_MODEL="$BUILD/bench/bench_model"

if ! python3 -c 'import torch' 2>/dev/null; then
  echo '{"bench": "cpu_vs_torch", "skipped": "torch is not installed"}'
  exit 0
fi
bench_require bench_cpu_vs_torch "$BUILD" "$BENCH_MODEL"

# The fields KEYS... of the last JSON object line of stdin, tab-separated; status 1 if none.
# (Both benchmarks print their JSON line last; anything before it is commentary.)
json_fields() {
  python3 -c '
import json, sys
for line in reversed(sys.stdin.read().splitlines()):
    try:
        d = json.loads(line)
    except ValueError:
        continue
    if isinstance(d, dict):
        print("\t".join(str(d.get(k)) for k in sys.argv[1:]))
        sys.exit(0)
sys.exit(1)' "$@"
}

# Compared statistic: each run's BEST step (bench_model's step_s_best, torch_reference's
# step_ms_min), both the fastest of STEPS timed steps after one warm-up step: the same
# statistic on both sides (bench_model has no median, torch_reference no mean), and the one a
# shared machine's noise moves least. Over the rounds, each side's median of those.
status=0
for seq in $SEQS; do
  pp_s=() torch_s=() blas_core="" gemm_library="" linear_weights="" cpu_isa="" torch_version="" gflop=0 peak=0 sgemm=0
  for ((round = 1; round <= ROUNDS; round++)); do
    # A: pptrain (OpenMP threads; OpenBLAS follows OMP_NUM_THREADS in its OpenMP build).
    if out=$(OMP_NUM_THREADS=$THREADS "$BENCH_MODEL" "$STEPS" "$seq" "$BATCH") &&
       fields=$(json_fields step_s_best blas_core gemm_library linear_weights cpu_isa gflop_per_step peak_gflops_estimate sgemm_gflops <<<"$out"); then
      IFS=$'\t' read -r best blas_core gemm_library linear_weights cpu_isa gflop peak sgemm <<<"$fields"
      pp_s+=("$best")
    else
      echo "bench_cpu_vs_torch: bench_model failed (seq $seq, round $round)" >&2
      status=1
    fi
    # B: PyTorch, same shape and threads.
    if out=$(python3 "$HERE/bench/torch_reference.py" --arch gpt2 --n-layer 12 --n-head 12 --d-model 768 \
               --vocab 50304 --seq "$seq" --batch "$BATCH" --device cpu --threads "$THREADS" \
               --steps "$STEPS" --warmup 1 --json-only) &&
       fields=$(json_fields step_ms_min torch <<<"$out"); then
      IFS=$'\t' read -r best_ms torch_version <<<"$fields"
      torch_s+=("$(python3 -c 'import sys; print(float(sys.argv[1]) / 1e3)' "$best_ms")")
    else
      echo "bench_cpu_vs_torch: torch_reference failed (seq $seq, round $round)" >&2
      status=1
    fi
  done
  if [ ${#pp_s[@]} -eq 0 ] || [ ${#torch_s[@]} -eq 0 ]; then
    status=1
    continue
  fi
  python3 -c '
import json, statistics, sys
seq, batch, threads, steps, rounds, blas_core, gemm_library, linear_weights, cpu_isa, torch_version, gflop, peak, sgemm, pp, tr = sys.argv[1:]
pp_s = statistics.median(float(x) for x in pp.split())
torch_s = statistics.median(float(x) for x in tr.split())
gflop, peak = float(gflop), float(peak)
sgemm = float(sgemm) if sgemm not in ("", "None") else 0.0
# The model FLOPs of a step at the FMA peak of the CPU (the estimate of bench_model, clock
# measured): no trainer doing these FLOPs in fp32 is faster than that, so torch_s over
# peak_bound_s is the largest speedup over PyTorch this machine allows.
peak_bound_s = gflop / peak if peak > 0 else None
# The same FLOPs at the rate of the large SGEMM of bench_model, measured in that run with the BLAS
# it chose: a step whose every FLOP ran as fast as the BLAS of this machine runs a large square
# product, and nothing else took time. A trainer on this BLAS gets near it only if its products
# do; torch_s over it is the most such a trainer could beat PyTorch by.
sgemm_bound_s = gflop / sgemm if sgemm > 0 else None
print(json.dumps({
    "bench": "cpu_vs_torch", "seq": int(seq), "batch": int(batch), "threads": int(threads),
    "pptrain_step_s": round(pp_s, 4), "torch_step_s": round(torch_s, 4),
    "speedup": round(torch_s / pp_s, 3) if pp_s > 0 else None,
    "gflop_per_step": round(gflop, 1), "peak_gflops_estimate": round(peak, 1),
    "peak_bound_step_s": round(peak_bound_s, 4) if peak_bound_s else None,
    "peak_bound_speedup": round(torch_s / peak_bound_s, 3) if peak_bound_s else None,
    "pptrain_peak_fraction": round(peak_bound_s / pp_s, 3) if peak_bound_s and pp_s > 0 else None,
    "sgemm_gflops": round(sgemm, 1), "sgemm_bound_step_s": round(sgemm_bound_s, 4) if sgemm_bound_s else None,
    "sgemm_bound_speedup": round(torch_s / sgemm_bound_s, 3) if sgemm_bound_s else None,
    "blas_core": blas_core, "gemm_library": gemm_library, "linear_weights": linear_weights, "cpu_isa": cpu_isa, "torch": torch_version,
    "statistic": "median over rounds of each run best step", "steps": int(steps), "rounds": int(rounds)}))
' "$seq" "$BATCH" "$THREADS" "$STEPS" "$ROUNDS" "$blas_core" "$gemm_library" "$linear_weights" "$cpu_isa" "$torch_version" "$gflop" "$peak" "$sgemm" "${pp_s[*]}" "${torch_s[*]}" ||
    status=1
done
exit $status
