#!/usr/bin/env bash
# pptrain against PyTorch on the same GPU, the same model and shape, in one call: for each
# shape one JSON line
#   {"bench": "gpu_vs_torch", "shape", "device", "tokens_per_step",
#    "pptrain": {"tokens_per_s", "step_ms", "mfu", "busy_fraction"},
#    "torch_eager": {"tokens_per_s", "step_ms", "mfu"} | null, "torch_compile": ... | null,
#    "vs_eager", "vs_compile",           (vs_*: pptrain's tokens/s over torch's; > 1: faster)
#    "model": {"device", "calibrated_from", "vs_profile": {...}} | null,
#    "memory": {"predicted_mib", "workspace_mib", "pending_mib", "mem_peak_mib", "outside_mib", "ok"} | null}
# "memory" is `pptrain train --dry-run`'s prediction for the shape (what the preflight
# checks: total, its workspace and pending sends) beside the run's first logged step: mem_peak
# (the allocator's peak, the step's allocations included: cuDNN's workspace among them) and
# what the backend held outside its allocator (the log's memory report). ok: the peak within
# [total - workspace - pending, 1.25 x (total - workspace) + 1 MiB] (the caching allocator
# rounds a request up by at most a quarter, 512 bytes at least: test_memory_accounting) and
# the scratch outside at most the workspace.
# "model" is build/bench/gpu_model's prediction of the shape beside pptrain's op profile of
# it (op by op: each op of >= 1% of the step within 15%, the step within 10%, the same calls
# with the same FLOPs and bytes; the whole table in WORKDIR/SHAPE.model.txt). The first shape
# is predicted from the model's stated fractions and then calibrated on (an efficiency per
# op, WORKDIR/calibration.json); every later shape is predicted with that calibration: a
# measurement the calibration did not see. Null where the GPU is not one the model knows
# (H100, H200, A100; BENCH_MODEL_DEVICE=h100|h200|a100 names it) or gpu_model is not built.
# Shapes (BENCH_SHAPES, default "gpt2_b16 gpt2_b32 llama1b_t8192"):
#   gpt2_b16       configs/gpt2_124m_gpu.yaml: GPT-2 124M, B 16, T 1024, bf16
#   gpt2_b32       the same at B 32
#   llama1b_t8192  configs/llama3_1b_gpu.yaml on one GPU: Llama 3.2 1B shape, B 1, T 8192, bf16
#   tiny           a 2-layer GPT-2 (T 16), for the tests on the emulated backend
# The PyTorch side is bench/torch_reference.py (the same model written in plain PyTorch:
# SDPA attention, fused AdamW, bf16 autocast with fp32 masters, as nanoGPT), eager and
# torch.compile; where torch is not installed its columns are null. pptrain's timed steps
# follow its warm-up ones (cuBLAS heuristics, allocator growth); its GPU-busy fraction comes
# from logging.op_profile (3 steps right after the first, so before the timed window:
# profiling records two events per op). MFU = tokens/s x FLOPs per token (build/bench/
# model_flops, pptrain's count, for both) / the device's peak dense bf16 FLOP/s.
#
#   bench/cuda/vs_torch.sh [BUILD] [--pptrain BIN] [--torch-device cuda|cpu] [--steps N]
#                          [--warmup K] [--workdir DIR] [--no-compile]
# (BENCH_COMPILE=0 is --no-compile: torch.compile takes most of the minutes this script runs;
# BENCH_TORCH=0 leaves PyTorch out; BENCH_OVERRIDES="key=value ..." are added to pptrain's
# overrides, e.g. model.attention=flash to time the handwritten kernels; BENCH_KERNEL_PROFILE=1
# adds logging.kernel_profile to the op profile's steps (CUPTI, off before the timed ones:
# each op's kernels in SHAPE.op_profile.json; where CUPTI cannot start, the run is made
# again without it and SHAPE.log says why).)
set -uo pipefail
BUILD=build
[ $# -gt 0 ] && [[ "$1" != --* ]] && { BUILD=$1; shift; }
PPTRAIN=$BUILD/pptrain
TORCH_DEVICE=cuda
STEPS=${BENCH_STEPS:-20}
WARMUP=${BENCH_WARMUP:-10}
WORKDIR=""
COMPILE=${BENCH_COMPILE:-1}
while [ $# -gt 0 ]; do
  case "$1" in
    --pptrain) PPTRAIN=$2; shift 2 ;;
    --torch-device) TORCH_DEVICE=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --workdir) WORKDIR=$2; shift 2 ;;
    --no-compile) COMPILE=0; shift ;;
    *) echo "vs_torch.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/../.." || exit 1
WORKDIR=${WORKDIR:-$BUILD/bench-vs-torch}
TIMEOUT=${BENCH_TRAIN_TIMEOUT:-900}
mkdir -p "$WORKDIR"
# shellcheck source=scripts/json_string.sh
. scripts/json_string.sh
# shellcheck source=bench/cuda/bench_lib.sh
. bench/cuda/bench_lib.sh

json_number() { sed -n "s/.*\"$1\": *\([-+0-9.eE]*\).*/\1/p" <<<"$2" | head -1; }

DEVICE_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1)
DEVICE_NAME=${DEVICE_NAME:-unknown}
peak=$(device_peak_bf16 "$DEVICE_NAME")
case "$DEVICE_NAME" in *H200*) MODEL_DEVICE=h200 ;; *H100*) MODEL_DEVICE=h100 ;; *A100*) MODEL_DEVICE=a100 ;; *) MODEL_DEVICE="" ;; esac
MODEL_DEVICE=${BENCH_MODEL_DEVICE:-$MODEL_DEVICE}
CALIBRATION=$WORKDIR/calibration.json
rm -f "$CALIBRATION"

# A shape: pptrain's config and overrides, and the same model's torch_reference arguments.
shape() {
  case "$1" in
    gpt2_b16 | gpt2_b32)
      CONFIG=configs/gpt2_124m_gpu.yaml
      local b=16; [ "$1" = gpt2_b32 ] && b=32
      OVERRIDES=(training.micro_batch_size=$b)
      DATA_VOCAB=50304
      TORCH_ARGS=(--arch gpt2 --n-layer 12 --n-head 12 --d-model 768 --vocab 50304 --seq 1024 --batch $b) ;;
    llama1b_t8192)
      CONFIG=configs/llama3_1b_gpu.yaml
      OVERRIDES=(parallel.dp=1 parallel.microbatches=1)
      DATA_VOCAB=65536  # uint16 token shards: ids below 65536 of the 128256
      TORCH_ARGS=(--arch llama --n-layer 16 --n-head 32 --n-kv-head 8 --d-model 2048 --ffn 8192 --vocab 128256
                  --seq 8192 --batch 1 --rope-theta 500000 --norm-eps 1e-5 --tie-embeddings) ;;
    tiny)
      CONFIG=configs/gpt2_124m_gpu.yaml
      OVERRIDES=(model.n_layer=2 model.n_head=2 model.d_model=32 model.seq_len=16 model.vocab_size=64
                 training.micro_batch_size=2 training.precision=fp32)
      DATA_VOCAB=64
      TORCH_ARGS=(--arch gpt2 --n-layer 2 --n-head 2 --d-model 32 --vocab 64 --seq 16 --batch 2) ;;
    *) return 1 ;;
  esac
}

# The memory prediction against the run (see the top): sets MEM (a JSON object, null where
# either side is missing). $1: the run's log, $2: its metrics.
memory_vs_prediction() {
  local log=$1 metrics=$2 dry total workspace pending peak outside
  MEM=null
  dry=$("$PPTRAIN" train "$CONFIG" "${OVERRIDES[@]}" training.eval_every=0 checkpoint.dir= data.val= \
    data.train="$WORKDIR/none_*.bin" --dry-run 2>&1) || return 0
  local line
  line=$(grep -m1 '^  pp 0 tp 0: ' <<<"$dry")
  total=$(sed -n 's/.*| total \([0-9.]*\) MiB.*/\1/p' <<<"$line")
  workspace=$(sed -n 's/.*| workspace \([0-9.]*\) MiB.*/\1/p' <<<"$line")
  pending=$(sed -n 's/.*(pending sends \([0-9.]*\) MiB).*/\1/p' <<<"$line")
  peak=$(json_number mem_peak_mb "$(grep -m1 '"mem_peak_mb"' "$metrics" 2>/dev/null)")
  outside=$(sed -n 's/.*; outside it \([0-9.]*\) MiB.*/\1/p' "$log" | head -1)
  [ -n "$total" ] && [ -n "$workspace" ] && [ -n "$pending" ] && [ -n "$peak" ] && [ -n "$outside" ] || return 0
  # 0.002 MiB: the report and metrics print MiB with three decimals (each within 0.0005). 1 MiB:
  # the caching allocator's 512-byte least rounding over up to 2,048 live buffers.
  local ok
  ok=$(awk -v t="$total" -v w="$workspace" -v s="$pending" -v p="$peak" -v o="$outside" 'BEGIN {
    c = t - w; print (p >= c - s - 0.002 && p <= 1.25 * c + 1 && o <= w + 0.002) ? "true" : "false" }')
  MEM=$(printf '{"predicted_mib": %s, "workspace_mib": %s, "pending_mib": %s, "mem_peak_mib": %s, "outside_mib": %s, "ok": %s}' \
    "$total" "$workspace" "$pending" "$peak" "$outside" "$ok")
}

# pptrain: sets PP (a JSON object) and PP_RATE (tokens/s; empty on failure).
run_pptrain() {
  local name=$1 log=$WORKDIR/$1.log metrics=$WORKDIR/$1.metrics.jsonl profile=$WORKDIR/$1.op_profile.json
  local data=$WORKDIR/data_$DATA_VOCAB
  PP_RATE=""
  # Uniformly random token ids (an order-0 source of flat probabilities), as the PyTorch side
  # draws them: the token embedding's gradient costs what the ids' repeats make it cost, so
  # both sides must see the same distribution.
  if [ ! -f "$data/train_000.bin" ]; then
    "$PPTRAIN" prepare-data --markov --order 0 --concentration 1e6 --vocab "$DATA_VOCAB" --out "$data" \
      --tokens 2000000 >"$WORKDIR/prepare.log" 2>&1 ||
      { PP=$(printf '{"error": %s}' "$(json_string "prepare-data failed: $(tail -1 "$WORKDIR/prepare.log")")"); return 1; }
  fi
  rm -f "$metrics" "$profile"
  train_once() {  # train_once [OVERRIDE...]: the shape's run, its log in $log
    timeout "$TIMEOUT" "$PPTRAIN" train "$CONFIG" "${OVERRIDES[@]}" training.steps=$((WARMUP + STEPS)) \
      training.eval_every=0 checkpoint.dir= logging.every=1 logging.metrics="$metrics" logging.sample_tokens=0 \
      logging.op_profile=3 logging.op_profile_file="$profile" "$@" data.train="$data/train_*.bin" data.val= \
      >"$log" 2>&1
  }
  local rc
  if [ "${BENCH_KERNEL_PROFILE:-0}" = 1 ]; then
    train_once logging.kernel_profile=true
    rc=$?
    if [ $rc -ne 0 ] && grep -q 'logging.kernel_profile' "$log"; then
      mv "$log" "$log.kernel_profile_failed"
      rm -f "$metrics" "$profile"
      train_once
      rc=$?
    fi
  else
    train_once
    rc=$?
  fi
  if [ $rc -ne 0 ]; then
    PP=$(printf '{"error": %s}' "$(json_string "pptrain train exited with $rc: $(grep -m1 'error' "$log" || tail -1 "$log")")")
    return 1
  fi
  local stats n sum
  read -r n sum _ <<<"$(timed_steps "$metrics" "$WARMUP")"
  [ -n "${n:-}" ] || { PP='{"error": "no timed step in the metrics"}'; return 1; }
  stats=$(awk -v s="$sum" -v n="$n" 'BEGIN { printf "%.6f", s / n }')
  PP_RATE=$(awk -v t="$TOKENS_PER_STEP" -v ms="$stats" 'BEGIN { printf "%.1f", t / (ms / 1000) }')
  local busy mfu=null
  busy=$(json_number busy_fraction "$(cat "$profile" 2>/dev/null)")
  [ -n "$peak" ] && mfu=$(awk -v r="$PP_RATE" -v f="$FLOPS_PER_TOKEN" -v p="$peak" 'BEGIN { printf "%.4g", r * f / p }')
  PP=$(printf '{"tokens_per_s": %s, "step_ms": %.3f, "mfu": %s, "busy_fraction": %s}' "$PP_RATE" "$stats" "$mfu" \
    "${busy:-null}")
  memory_vs_prediction "$log" "$metrics"
}

# torch_reference: prints its JSON object (null where torch is missing or the run failed).
run_torch() {
  local out
  out=$(timeout "$TIMEOUT" python3 bench/torch_reference.py "${TORCH_ARGS[@]}" --device "$TORCH_DEVICE" \
    --dtype "$([ "$TORCH_DEVICE" = cuda ] && echo bf16 || echo fp32)" --steps "$STEPS" --warmup "$WARMUP" \
    --json-only "$@" 2>"$WORKDIR/torch.err" | tail -1)
  if [ -z "$out" ] || grep -q '"skipped"' <<<"$out" || ! grep -q '"tokens_per_s"' <<<"$out"; then
    echo null
    return
  fi
  local rate ms mfu=null
  rate=$(json_number tokens_per_s "$out")
  ms=$(json_number step_ms_median "$out")
  [ -n "$peak" ] && mfu=$(awk -v r="$rate" -v f="$FLOPS_PER_TOKEN" -v p="$peak" 'BEGIN { printf "%.4g", r * f / p }')
  printf '{"tokens_per_s": %s, "step_ms": %s, "mfu": %s, "torch": %s}' "$rate" "$ms" "$mfu" \
    "$(json_string "$(sed -n 's/.*"torch": "\([^"]*\)".*/\1/p' <<<"$out")")"
}

# The performance model against this shape's op profile: sets MODEL (a JSON object or null);
# the first shape measured also writes the calibration the later ones are predicted with.
model_vs_profile() {
  local name=$1 profile=$WORKDIR/$1.op_profile.json out vs from=null
  MODEL=null
  [ -n "$MODEL_DEVICE" ] && [ -x "$BUILD/bench/gpu_model" ] && [ -f "$profile" ] || return 0
  local cal=()
  if [ -f "$CALIBRATION" ]; then
    cal=(--calibration "$CALIBRATION")
    from=$(json_string "$(cat "$WORKDIR/calibration.from")")
  fi
  out=$("$BUILD/bench/gpu_model" "$CONFIG" "${OVERRIDES[@]}" --device "$MODEL_DEVICE" "${cal[@]}" \
        --measured "$profile" 2>&1)
  printf '%s\n' "$out" >"$WORKDIR/$name.model.txt"
  vs=$(tail -1 <<<"$out" | sed -n 's/.*"vs_profile": \(.*\)}$/\1/p' | sed 's/, "ops": \[.*\]}$/}/')
  [ -n "$vs" ] || { MODEL=$(printf '{"error": %s}' "$(json_string "gpu_model: $(tail -1 <<<"$out")")"); return 0; }
  MODEL=$(printf '{"device": "%s", "calibrated_from": %s, "vs_profile": %s}' "$MODEL_DEVICE" "$from" "$vs")
  if [ ! -f "$CALIBRATION" ]; then
    "$BUILD/bench/gpu_model" "$CONFIG" "${OVERRIDES[@]}" --device "$MODEL_DEVICE" --fit "$profile" \
      --write-calibration "$CALIBRATION" >/dev/null 2>&1 && echo "$name" >"$WORKDIR/calibration.from"
  fi
}

ratio() {  # pptrain's rate over the torch object's, or null
  local t
  t=$(json_number tokens_per_s "$2")
  [ -n "$1" ] && [ -n "$t" ] && awk -v a="$1" -v b="$t" 'BEGIN { printf "%.3f", a / b }' || echo null
}

status=0
for name in ${BENCH_SHAPES:-gpt2_b16 gpt2_b32 llama1b_t8192}; do
  shape "$name" || { echo "vs_torch.sh: unknown shape '$name'" >&2; exit 2; }
  flops=$("$BUILD/bench/model_flops" "$CONFIG" "${OVERRIDES[@]}" 2>&1) || {
    printf '{"bench": "gpu_vs_torch", "shape": "%s", "error": %s}\n' "$name" "$(json_string "model_flops: $flops")"
    status=1
    continue
  }
  FLOPS_PER_TOKEN=$(json_number flops_per_token "$flops")
  TOKENS_PER_STEP=$(json_number tokens_per_step "$flops")
  # shellcheck disable=SC2206  # BENCH_OVERRIDES is a list of words
  OVERRIDES+=(${BENCH_OVERRIDES:-})
  MEM=null
  run_pptrain "$name" || status=1
  model_vs_profile "$name"
  eager=null
  [ "${BENCH_TORCH:-1}" = 1 ] && eager=$(run_torch)
  compiled=null
  [ $COMPILE = 1 ] && [ "$eager" != null ] && compiled=$(run_torch --compile)
  printf '{"bench": "gpu_vs_torch", "shape": "%s", "device": %s, "tokens_per_step": %s, "pptrain": %s, ' \
    "$name" "$(json_string "$DEVICE_NAME")" "$TOKENS_PER_STEP" "$PP"
  printf '"torch_eager": %s, "torch_compile": %s, "vs_eager": %s, "vs_compile": %s, "model": %s, "memory": %s}\n' \
    "$eager" "$compiled" "$(ratio "$PP_RATE" "$eager")" "$(ratio "$PP_RATE" "$compiled")" "$MODEL" "$MEM"
  [ "$MEM" = null ] || grep -q '"ok": true' <<<"$MEM" || status=1
done
exit $status
