#!/usr/bin/env bash
# GPU training throughput of GPT-2 124M (configs/gpt2_124m_gpu.yaml: B = 16, T = 1024, one
# GPU): trains it once with training.precision=bf16 and once with fp32 on a synthetic
# corpus and prints one JSON line with, per precision, tokens/s and MFU, and the ratio
# bf16/fp32. A run that fails is reported as {"error": "..."} in that line (and the
# script exits 1); the other run is still measured.
#
#   bench/cuda/train_throughput.sh [BUILD] [--pptrain BIN] [--device-name NAME]
#                                  [--warmup K] [--workdir DIR] [section.key=value ...]
#
# tokens/s = tokens_per_step · (timed steps) / Σ ms over the steps after the first K
# (default 10: cuBLAS heuristics, allocator growth). MFU = tokens/s · FLOPs per token /
# peak dense bf16 FLOP/s of the device; the FLOPs per token come from build/bench/model_flops
# (the formula of bench/model_flops.h, shared with bench_model), the peak from the table
# of bench/cuda/bench_lib.sh keyed by the name nvidia-smi gives. Unknown device: "mfu": null and a note.
# The fp32 run's MFU is taken against the same bf16 peak (what the hardware could do).
# --pptrain and the overrides let the tests run the whole script on pptrain-emu with a
# tiny model.
set -uo pipefail
BUILD=build
[ $# -gt 0 ] && [[ "$1" != --* && "$1" != *=* ]] && { BUILD=$1; shift; }
PPTRAIN=$BUILD/pptrain
DEVICE_NAME=""
WARMUP=10
WORKDIR=""
CONFIG=configs/gpt2_124m_gpu.yaml
overrides=()
while [ $# -gt 0 ]; do
  case "$1" in
    --pptrain) PPTRAIN=$2; shift 2 ;;
    --device-name) DEVICE_NAME=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --workdir) WORKDIR=$2; shift 2 ;;
    *=*) overrides+=("$1"); shift ;;
    *) echo "train_throughput.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/../.." || exit 1
WORKDIR=${WORKDIR:-$BUILD/bench-gpu}
TRAIN_TIMEOUT=${BENCH_TRAIN_TIMEOUT:-900}

# shellcheck source=scripts/json_string.sh
. scripts/json_string.sh

# The number after "KEY": in the one-line JSON object $2 (empty when absent).
json_number() {
  sed -n "s/.*\"$1\": *\([-+0-9.eE]*\).*/\1/p" <<<"$2"
}

fail_line() {  # a JSON line naming what went wrong before any run could start
  printf '{"bench": "train_gpt2_124m_gpu", "error": %s}\n' "$(json_string "$1")"
  exit 1
}

[ -x "$PPTRAIN" ] || fail_line "$PPTRAIN is not built"
[ -x "$BUILD/bench/model_flops" ] || fail_line "$BUILD/bench/model_flops is not built"
# The FLOPs do not depend on the precision.
flops_json=$("$BUILD/bench/model_flops" "$CONFIG" "${overrides[@]}" 2>&1) ||
  fail_line "model_flops: $flops_json"
flops_per_token=$(json_number flops_per_token "$flops_json")
tokens_per_step=$(json_number tokens_per_step "$flops_json")
params=$(json_number params "$flops_json")

if [ -z "$DEVICE_NAME" ]; then
  DEVICE_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1)
  DEVICE_NAME=${DEVICE_NAME:-unknown}
fi
# Peak dense bf16 tensor-core FLOP/s (bench/cuda/device_peak.sh's table).
# shellcheck source=bench/cuda/bench_lib.sh
. bench/cuda/bench_lib.sh
peak=$(device_peak_bf16 "$DEVICE_NAME")
peak_note=""
[ -z "$peak" ] && peak_note="no peak bf16 FLOP/s known for device '$DEVICE_NAME': MFU not computed"

# Synthetic corpus: uniformly random ids over the model's vocabulary (an order-0 source of flat
# probabilities), as peers' benchmarks draw them (the token embedding's gradient costs what
# the ids' repeats make it cost); the data set wraps around, so a couple of million tokens
# cover any number of steps.
DATA_VOCAB=50304
for o in "${overrides[@]}"; do
  case "$o" in model.vocab_size=*) DATA_VOCAB=${o#model.vocab_size=} ;; esac
done
DATA=$WORKDIR/data_$DATA_VOCAB
mkdir -p "$WORKDIR"
if [ ! -f "$DATA/train_000.bin" ]; then
  "$PPTRAIN" prepare-data --markov --order 0 --concentration 1e6 --vocab "$DATA_VOCAB" --out "$DATA" \
    --tokens 2000000 >"$WORKDIR/prepare.log" 2>&1 ||
    fail_line "prepare-data: $(grep -m1 'error' "$WORKDIR/prepare.log" || tail -1 "$WORKDIR/prepare.log")"
fi

# Runs one precision; sets RESULT (a JSON object) and TOKENS_PER_S (empty on failure).
run_precision() {
  local precision=$1 metrics=$WORKDIR/metrics_$1.jsonl log=$WORKDIR/train_$1.log
  rm -f "$metrics"
  TOKENS_PER_S=""
  timeout "$TRAIN_TIMEOUT" "$PPTRAIN" train "$CONFIG" training.precision="$precision" \
    logging.metrics="$metrics" data.train="$DATA/train_*.bin" data.val="$DATA/val_*.bin" \
    "${overrides[@]}" >"$log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    local why
    why=$(grep -m1 'error: ' "$log" | awk '{ print substr($0, index($0, "error: ") + 7) }')
    [ -n "$why" ] || why=$(grep -v '^ *$' "$log" | tail -1)
    [ $rc -eq 124 ] && why="timed out after ${TRAIN_TIMEOUT}s (BENCH_TRAIN_TIMEOUT)"
    RESULT=$(printf '{"error": %s}' "$(json_string "pptrain train exited with $rc: $why")")
    return 1
  fi
  # The step lines after the warm-up.
  local stats
  stats=$(timed_steps "$metrics" "$WARMUP")
  if [ -z "$stats" ]; then
    RESULT=$(printf '{"error": %s}' "$(json_string "no step after the $WARMUP warm-up steps in $metrics")")
    return 1
  fi
  local n ms loss mfu
  read -r n ms loss <<<"$stats"
  TOKENS_PER_S=$(awk -v t="$tokens_per_step" -v n="$n" -v ms="$ms" 'BEGIN { printf "%.1f", t * n / (ms / 1000) }')
  mfu=null
  [ -n "$peak" ] && mfu=$(awk -v r="$TOKENS_PER_S" -v f="$flops_per_token" -v p="$peak" 'BEGIN { printf "%.4g", r * f / p }')
  RESULT=$(printf '{"tokens_per_s": %s, "mfu": %s, "step_ms_mean": %s, "steps_timed": %d, "loss": %s}' \
    "$TOKENS_PER_S" "$mfu" "$(awk -v ms="$ms" -v n="$n" 'BEGIN { printf "%.2f", ms / n }')" "$n" "$loss")
}

status=0
run_precision bf16 || status=1
bf16_result=$RESULT bf16_rate=$TOKENS_PER_S
run_precision fp32 || status=1
fp32_result=$RESULT fp32_rate=$TOKENS_PER_S
ratio=null
[ -n "$bf16_rate" ] && [ -n "$fp32_rate" ] &&
  ratio=$(awk -v a="$bf16_rate" -v b="$fp32_rate" 'BEGIN { printf "%.3f", a / b }')
printf '{"bench": "train_gpt2_124m_gpu", "device": %s, "peak_bf16_flops": %s, "params": %s, ' \
  "$(json_string "$DEVICE_NAME")" "${peak:-null}" "$params"
printf '"flops_per_token": %s, "tokens_per_step": %s, "warmup_steps": %s, ' "$flops_per_token" "$tokens_per_step" "$WARMUP"
printf '"bf16": %s, "fp32": %s, "bf16_over_fp32": %s' "$bf16_result" "$fp32_result" "$ratio"
[ -n "$peak_note" ] && printf ', "note": %s' "$(json_string "$peak_note")"
printf '}\n'
exit $status
