#!/usr/bin/env bash
# pptrain's pipeline parallelism against PyTorch's own (torch.distributed.pipelining,
# bench/torch_pipeline_reference.py) on the CPU: the same GPT-2 (8 layers, d_model 256,
# 8 heads, seq 128, vocab 256, untied head), pp 2 ranks with 1 thread each, m = 8
# microbatches of 2 sequences (the defaults below), fp32, under 1F1B and ZB-V, uniformly
# random token ids on both sides. Each round runs pptrain then torch for each schedule
# (A B A B ...); a run's figure is its median step after the warm-up; over the rounds, each
# side's median of those. pptrain runs twice per round: with the blocks split evenly over
# the stages, as the torch side is (the like-for-like ratio), and with its default
# `layers_per_stage: auto` (what a user gets).
# Prints one JSON line per schedule and a table last:
#   {"bench": "pp_vs_torch", "schedule", "pptrain_even_ms", "pptrain_auto_ms", "torch_ms",
#    "speedup_even", "speedup_auto" (torch / pptrain: > 1 means pptrain is faster),
#    "peak_bound_ms" (the step's model FLOPs, BUILD/bench/model_flops, shared evenly by the ranks
#    and done at the peak estimate of pptrain's start-up line for a rank's threads: no
#    trainer doing these FLOPs on these ranks is faster), "peak_bound_speedup" (torch over
#    it), "cpu_isa", "blas", "linear_weights" (the fields of pptrain's start-up line: its
#    loops' instruction set, the BLAS and its core, whether the weights were packed), ...}
# Without torch it prints one line saying so and exits 0 (CI has no torch).
#
# Usage: scripts/bench_pp_vs_torch.sh [BUILD=build]     (from the repository root)
#   BENCH_SCHEDULES="1f1b zbv"   BENCH_ROUNDS=3   BENCH_STEPS=6 (timed steps)   BENCH_THREADS=1
#   BENCH_MICROBATCHES=8         BENCH_MB=2 (sequences per microbatch)   BENCH_VOCAB=256
set -uo pipefail
BUILD=${1:-build}
SCHEDULES=${BENCH_SCHEDULES:-1f1b zbv}
ROUNDS=${BENCH_ROUNDS:-3}
STEPS=${BENCH_STEPS:-6}
THREADS=${BENCH_THREADS:-1}
M=${BENCH_MICROBATCHES:-8}
MB=${BENCH_MB:-2}
VOCAB=${BENCH_VOCAB:-256}
PP=2 LAYERS=8 HEADS=8 DMODEL=256 SEQ=128
HERE=$(cd "$(dirname "$0")/.." && pwd)
PPTRAIN=$BUILD/pptrain

for sched in $SCHEDULES; do
  case $sched in 1f1b | zbv) ;; *) echo "bench_pp_vs_torch: unknown schedule '$sched' (1f1b or zbv)" >&2; exit 2 ;; esac
done
if ! python3 -c 'import torch.distributed.pipelining' 2>/dev/null; then
  echo '{"bench": "pp_vs_torch", "skipped": "torch (with torch.distributed.pipelining) is not installed"}'
  exit 0
fi
source "$(dirname "$0")/bench_lib.sh"
bench_require bench_pp_vs_torch "$BUILD" "$PPTRAIN"
bench_workdir bench-pp-torch
# Two ranks on one machine: shared memory, no probing of network transports (a user's own
# choice wins).
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
"$PPTRAIN" prepare-data --markov --order 0 --concentration 1e6 --vocab $VOCAB --tokens 400000 \
  --out "$work/data" >/dev/null || exit 1
cat >"$work/model.yaml" <<YAML
model: {n_layer: $LAYERS, n_head: $HEADS, d_model: $DMODEL, seq_len: $SEQ, vocab_size: $VOCAB, tie_embeddings: false}
parallel: {pp: $PP, microbatches: $M}
training: {steps: $((STEPS + 1)), micro_batch_size: $MB, lr: 1.0e-4, warmup_steps: 1, eval_every: 0}
data: {train: "$work/data/train_*.bin"}
logging: {every: 1, sample_tokens: 0}
YAML

median() { python3 -c 'import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
# pptrain's median step (ms) after the first (warm-up) step of a metrics file.
pptrain_ms() {
  python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][1:]
print(statistics.median(r["ms"] for r in rows))
PY
}
run_pptrain() {  # NAME OVERRIDES... -> median ms
  local metrics="$work/$1.jsonl"; shift
  rm -f "$metrics"
  OMP_NUM_THREADS=$THREADS timeout 900 mpirun --oversubscribe -np $PP "$PPTRAIN" train "$work/model.yaml" \
    logging.metrics="$metrics" "$@" >"$work/last.log" 2>&1 || { tail -5 "$work/last.log" >&2; return 1; }
  pptrain_ms "$metrics"
}
run_torch() {  # SCHEDULE -> median ms
  timeout 900 python3 "$HERE/bench/torch_pipeline_reference.py" --schedule "$1" --pp $PP --n-layer $LAYERS \
    --n-head $HEADS --d-model $DMODEL --seq $SEQ --vocab $VOCAB --micro-batch $MB --microbatches $M \
    --threads $THREADS --steps $STEPS --warmup 1 2>"$work/torch.err" |
    python3 -c 'import json, sys; print(json.loads(sys.stdin.read().splitlines()[-1])["step_ms_median"])' ||
    { tail -5 "$work/torch.err" >&2; return 1; }
}

# The model FLOPs of a step: per token (BUILD/bench/model_flops, the formula of every benchmark)
# times the tokens of a step; empty where that tool was not built.
flop_per_step=""
if [ -x "$BUILD/bench/model_flops" ]; then
  flop_per_step=$("$BUILD/bench/model_flops" "$work/model.yaml" |
    python3 -c 'import json, sys; d = json.loads(sys.stdin.read()); print(d["flops_per_token"] * d["tokens_per_step"])')
fi
# The start-up line's fields as JSON members: "cpu_isa" (after "loops"), "blas" (the field
# naming the BLAS and its core), "linear_weights" (after "weights"); null where one is missing.
startup_fields() {
  python3 - "$1" <<'PY'
import json, sys
line = next((l.strip() for l in open(sys.argv[1]) if l.startswith("cpu: ")), "")
fields = [f.strip() for f in line.split(" | ")]
def after(prefix):
    return next((f[len(prefix):] for f in fields if f.startswith(prefix)), None)
blas = next((f for f in fields if f.startswith(("OpenBLAS", "BLIS", "oneDNN"))), None)
print(json.dumps({"cpu_isa": after("loops "), "blas": blas, "linear_weights": after("weights ")})[1:-1])
PY
}
status=0 table="" peak="" startup=""
for sched in $SCHEDULES; do
  case $sched in
    1f1b) v=1 even="[4, 4]" tname=1f1b ;;
    zbv) v=2 even="[2, 2, 2, 2]" tname=zbv ;;
  esac
  even_ms=() auto_ms=() torch_ms=()
  for ((round = 1; round <= ROUNDS; round++)); do
    common=(parallel.schedule=$sched parallel.stages_per_rank=$v)
    t=$(run_pptrain "even_$sched" "${common[@]}" "parallel.layers_per_stage=$even") && even_ms+=("$t") || status=1
    # A rank's peak estimate (GFLOP/s) and the machine's fields, from the start-up line of the
    # run just made.
    p=$(grep -Eo 'of the peak estimate [0-9.]+' "$work/last.log" | head -1 | awk '{print $5}')
    [ -n "$p" ] && peak=$p
    [ -z "$startup" ] && startup=$(startup_fields "$work/last.log")
    t=$(run_pptrain "auto_$sched" "${common[@]}") && auto_ms+=("$t") || status=1
    t=$(run_torch "$tname") && torch_ms+=("$t") || status=1
  done
  if [ ${#even_ms[@]} = 0 ] || [ ${#auto_ms[@]} = 0 ] || [ ${#torch_ms[@]} = 0 ]; then
    echo "{\"bench\": \"pp_vs_torch\", \"schedule\": \"$sched\", \"error\": \"a run failed\"}"
    continue
  fi
  e=$(median "${even_ms[@]}") a=$(median "${auto_ms[@]}") t=$(median "${torch_ms[@]}")
  se=$(python3 -c "print(round($t / $e, 3))") sa=$(python3 -c "print(round($t / $a, 3))")
  bound=null bound_speedup=null
  if [ -n "$flop_per_step" ] && [ -n "$peak" ]; then
    bound=$(python3 -c "print(round($flop_per_step / $PP / ($peak * 1e9) * 1e3, 1))")
    bound_speedup=$(python3 -c "print(round($t / $bound, 3))")
  fi
  echo "{\"bench\": \"pp_vs_torch\", \"schedule\": \"$sched\", \"pp\": $PP, \"microbatches\": $M," \
    "\"micro_batch\": $MB, \"threads_per_rank\": $THREADS, \"rounds\": $ROUNDS," \
    "\"pptrain_even_ms\": $(printf %.1f "$e"), \"pptrain_auto_ms\": $(printf %.1f "$a")," \
    "\"torch_ms\": $(printf %.1f "$t"), \"speedup_even\": $se, \"speedup_auto\": $sa," \
    "\"peak_bound_ms\": $bound, \"peak_bound_speedup\": $bound_speedup, ${startup:-\"cpu_isa\": null}," \
    "\"pptrain_even_runs\": [$(IFS=,; echo "${even_ms[*]}")], \"torch_runs\": [$(IFS=,; echo "${torch_ms[*]}")]}"
  table+=$(printf '%-5s %10.1f %10.1f %10.1f %7.2fx %7.2fx %10s %8s' "$sched" "$e" "$a" "$t" "$se" "$sa" \
    "$bound" "$bound_speedup")$'\n'
done
printf '%-5s %10s %10s %10s %8s %8s %10s %8s\n' sched even_ms auto_ms torch_ms even auto bound_ms bound
printf '%s' "$table"
exit $status
