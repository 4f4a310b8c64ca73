#!/usr/bin/env bash
# The cuda backend on a real GPU, in under 10 minutes, one JSON line per result (shipped in
# the GPU bundle: ./pptrain-gpu/run scripts/gpu_check.sh; also runs in a CUDA=1 checkout):
#   {"check": "device"}           the GPU, its driver, the bundle's pptrain
#   {"check": "device_tests"}     build/gpu-tests/*: every op of the cuda backend against the
#                                 cpu op on the device, the whole model fp32 (1e-5) and bf16
#                                 (its derived bound) against the cpu backend; test_staged_comm:
#                                 pp 2 (1F1B, ZB-H1, ZB-V, DualPipeV), pp 2 x tp 2 ZB-V, dp 2 ZeRO-1
#                                 and post-validation with every rank on this one GPU
#                                 (parallel.comm: mpi), each against the cpu backend
#   {"check": "attention"}        flash vs cudnn vs naive: build/bench/attention_check's lines
#                                 (the comparisons, then --time: each one's forward and backward
#                                 TFLOP/s at the training shapes), or that it is missing
#   {"check": "bf16_learning"}    real pptrain, bf16, learns a Markov source: validation loss
#                                 within 10% of the source entropy and within 2% of the cpu
#                                 fp32 run (the margins of tests/test_cuda_backend_train_bf16)
#   {"check": "trace"}            pp 2 ZB-V with logging.trace: every F/I/W on the ranks' action
#                                 tracks, every transfer on the transfer track (the file is kept
#                                 under GPU_CHECK_LOGS)
#   {"check": "outside_profiler"} pptrain started alone (an Open MPI singleton) with an outside
#                                 CUPTI tracer preloaded (build/bench/libcupti_preload.so):
#                                 its steps made, the kernels the tracer counted
#   {"check": "nccl"}             a run whose groups talk over real NCCL (log: "comm nccl"):
#                                 dp=2 on two GPUs; a job's groups of one use no NCCL, so on a
#                                 one-GPU node this check says it cannot run
#   {"check": "bench"}            scripts/bench_gpu.sh (kernel bandwidths, tokens/s, MFU; each
#                                 vs_torch shape with the performance model beside its op
#                                 profile: "model")
#   {"check": "model_vs_measured"} build/bench/gpu_model's prediction for the benchmark's
#                                 config beside the measured tokens/s and MFU
#   {"check": "device_tests_detail"} a line a device test printed: the measured difference of
#                                 a comparison against its bound
# Without a GPU (no nvidia-smi, or it lists none): one line saying why, exit 0. Otherwise
# exits 1 if any check failed. GPU_CHECK_LOGS=DIR keeps each device test's whole output there.
#
#   scripts/gpu_check.sh [BUILD]     (BUILD defaults to build)
set -uo pipefail
BUILD=${1:-build}

here=${BASH_SOURCE[0]%/*}; [ "$here" = "${BASH_SOURCE[0]}" ] && here=.
# shellcheck source=scripts/json_string.sh
. "$here/json_string.sh"
# Only shell builtins until nvidia-smi is found, so the skip works with any PATH.
command -v nvidia-smi >/dev/null 2>&1 ||
  { echo "{\"check\": \"gpu_check\", \"skipped\": $(json_string "nvidia-smi not found (no NVIDIA driver on this machine)")}"; exit 0; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "${gpus:-0}" -gt 0 ] || { echo "{\"check\": \"gpu_check\", \"skipped\": \"nvidia-smi -L lists no GPU\"}"; exit 0; }
cd "$(dirname "$0")/.." || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
status=0
fail() { status=1; }
# The number after "KEY": in the one-line JSON object $2 (empty when absent).
json_number() { sed -n "s/.*\"$1\": *\([-+0-9.eE]*\).*/\1/p" <<<"$2" | head -1; }

name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0 2>/dev/null | head -1)
version=$("$BUILD/pptrain" --version 2>&1 | tr '\n' ' ')
echo "{\"check\": \"device\", \"gpus\": $gpus, \"name\": $(json_string "$name"), \"driver\": $(json_string "$driver"), \"pptrain\": $(json_string "$version")}"
case "$version" in *cuda*) ;; *) echo "{\"check\": \"device\", \"ok\": false, \"error\": \"$BUILD/pptrain has no cuda backend\"}"; fail ;; esac
case "$name" in *H200*) model_device=h200 ;; *H100*) model_device=h100 ;; *A100*) model_device=a100 ;; *) model_device="" ;; esac

# ---- the real-device tests ------------------------------------------------------------------
found_tests=0
for t in "$BUILD"/gpu-tests/test_*; do
  [ -x "$t" ] || continue
  found_tests=1
  # test_staged_comm starts a job of 2 or 4 ranks on the one GPU per layout (parallel.comm: mpi).
  limit=90; [ "$(basename "$t")" = test_cuda_backend_llama ] && limit=180; [ "$(basename "$t")" = test_staged_comm ] && limit=300
  out=$(timeout $limit "$t" --gtest_color=no 2>&1)
  rc=$?
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' <<<"$out")
  failed=$(sed -n 's/^\[  FAILED  \] \([A-Za-z_][A-Za-z0-9_./]*\).*/\1/p' <<<"$out" | sort -u | tr '\n' ' ' | sed 's/ $//')
  first=$(grep -m1 -B2 -A6 'Failure$' <<<"$out" | tr '\n' ' ' | cut -c1-600)
  [ $rc -eq 124 ] && first="timed out after $limit s"
  ok=$([ $rc -eq 0 ] && echo true || echo false)
  # What the tests print besides GoogleTest's own lines: each comparison's measured difference
  # against its bound (test_staged_comm: "zbv: worst diff/bound 0.0116: ..."), one JSON line each.
  grep -v -e '^\[' -e '^Running main' -e '^$' -e 'Failure$' <<<"$out" | head -40 | while IFS= read -r line; do
    echo "{\"check\": \"device_tests_detail\", \"binary\": \"$(basename "$t")\", \"line\": $(json_string "$line")}"
  done
  [ -n "${GPU_CHECK_LOGS:-}" ] && mkdir -p "$GPU_CHECK_LOGS" && printf '%s\n' "$out" >"$GPU_CHECK_LOGS/$(basename "$t").log"
  echo "{\"check\": \"device_tests\", \"binary\": \"$(basename "$t")\", \"ok\": $ok, \"exit\": $rc, \"passed\": ${passed:-0}, \"failed\": $(json_string "$failed"), \"first_failure\": $(json_string "$first")}"
  [ $rc -eq 0 ] || fail
done
[ $found_tests = 1 ] || { echo "{\"check\": \"device_tests\", \"ok\": false, \"error\": \"no $BUILD/gpu-tests/test_* (make CUDA=1 gpu-tests)\"}"; fail; }

# ---- attention: flash vs cudnn vs naive ----------------------------------------------------
if [ -x "$BUILD/bench/attention_check" ]; then
  out=$(timeout 300 "$BUILD/bench/attention_check" --time 2>&1)
  rc=$?
  grep '^{' <<<"$out" | sed 's/^{/{"check": "attention", /'
  [ $rc -eq 0 ] || { echo "{\"check\": \"attention\", \"ok\": false, \"exit\": $rc, \"tail\": $(json_string "$(tail -3 <<<"$out")")}"; fail; }
else
  echo "{\"check\": \"attention\", \"missing\": \"$BUILD/bench/attention_check is not in this build\"}"
fi

# ---- bf16 learns a Markov source ----------------------------------------------------------
markov=$WORK/markov
if "$BUILD/pptrain" prepare-data --markov --order 1 --vocab 16 --tokens 100000 --seed 3 --out "$markov" >"$WORK/prepare.log" 2>&1; then
  entropy=$(cat "$markov/entropy.txt")
  cat >"$WORK/m.yaml" <<YAML
device: cuda
model: {n_layer: 1, n_head: 2, d_model: 32, seq_len: 16, vocab_size: 16}
parallel: {microbatches: 1}
training: {steps: 80, micro_batch_size: 8, lr: 1.0e-2, min_lr: 1.0e-3, warmup_steps: 5, eval_every: 80, eval_batches: 8, weight_decay: 0.0, precision: bf16}
data: {train: '$markov/train_*.bin', val: '$markov/val_*.bin'}
logging: {every: 20, sample_tokens: 0}
YAML
  val() {  # the last val_loss of a run: val NAME [overrides...]
    local name=$1
    shift
    timeout 120 "$BUILD/pptrain" train "$WORK/m.yaml" logging.metrics="$WORK/$name.jsonl" "$@" >"$WORK/$name.log" 2>&1 || return 1
    grep '"val_loss"' "$WORK/$name.jsonl" | tail -1 | sed -n 's/.*"val_loss": *\([-+0-9.eE]*\).*/\1/p'
  }
  bf16=$(val bf16) || bf16=""
  fp32=$(val cpu_fp32 device=cpu training.precision=fp32) || fp32=""
  if [ -n "$bf16" ] && [ -n "$fp32" ]; then
    ok=$(awk -v b="$bf16" -v f="$fp32" -v h="$entropy" 'BEGIN { print (b < 1.10 * h && (b - f < 0.02 * f && f - b < 0.02 * f)) ? "true" : "false" }')
    echo "{\"check\": \"bf16_learning\", \"ok\": $ok, \"val_loss_bf16_cuda\": $bf16, \"val_loss_fp32_cpu\": $fp32, \"entropy\": $entropy}"
    [ "$ok" = true ] || fail
  else
    echo "{\"check\": \"bf16_learning\", \"ok\": false, \"error\": $(json_string "$(tail -2 "$WORK/bf16.log" "$WORK/cpu_fp32.log" 2>/dev/null)")}"
    fail
  fi
else
  echo "{\"check\": \"bf16_learning\", \"ok\": false, \"error\": $(json_string "prepare-data: $(tail -1 "$WORK/prepare.log")")}"
  fail
fi

# ---- NCCL ------------------------------------------------------------------------------------
if [ "$gpus" -ge 2 ] && [ -f "$WORK/m.yaml" ]; then
  out=$(timeout 120 mpirun -np 2 --oversubscribe "$BUILD/pptrain" train "$WORK/m.yaml" parallel.dp=2 training.steps=5 \
        training.eval_every=0 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && grep -q 'comm nccl' <<<"$out"; then
    echo "{\"check\": \"nccl\", \"ok\": true, \"ranks\": 2, \"log\": $(json_string "$(grep -m1 'comm nccl' <<<"$out")")}"
  else
    echo "{\"check\": \"nccl\", \"ok\": false, \"exit\": $rc, \"tail\": $(json_string "$(tail -3 <<<"$out")")}"
    fail
  fi
else
  echo "{\"check\": \"nccl\", \"skipped\": \"one GPU: a job's groups of one use no NCCL communicator, and NCCL does not put two ranks on one device\"}"
fi

# ---- under an outside profiler --------------------------------------------------------------
# A CUPTI activity tracer preloaded into a single pptrain (no mpirun: MPI_Init then forks
# Open MPI's singleton daemon, which must not inherit the preload), as users run nsys-style
# tracers: the run makes its 10 steps within its timeout and the tracer sees kernels.
if [ -f "$WORK/m.yaml" ] && [ -f "$BUILD/bench/libcupti_preload.so" ]; then
  preload=$(realpath "$BUILD/bench/libcupti_preload.so")
  out=$(LD_PRELOAD=$preload timeout 120 "$BUILD/pptrain" train "$WORK/m.yaml" training.steps=10 training.eval_every=0 \
        logging.every=1 2>&1)
  rc=$?
  steps=$(grep -c '^step [0-9]*/10 ' <<<"$out")
  records=$(sed -n 's/^cupti_preload: \([0-9]*\) kernel records$/\1/p' <<<"$out" | tail -1)
  ok=$([ $rc -eq 0 ] && [ "$steps" -eq 10 ] && [ "${records:-0}" -gt 0 ] && echo true || echo false)
  echo "{\"check\": \"outside_profiler\", \"ok\": $ok, \"exit\": $rc, \"steps\": $steps, \"kernel_records\": ${records:-null}, \"tail\": $(json_string "$([ "$ok" = true ] || tail -3 <<<"$out")")}"
  [ "$ok" = true ] || fail
fi

# ---- a pipeline's trace: F/I/W and the transfers beside them -------------------------------
# pp 2 under ZB-V (4 stages, 4 microbatches, 3 steps) with logging.trace: every F, I and W
# (4 x 4 x 3 a step: 48) on each rank's action track, every transfer (each microbatch crosses
# ranks twice forward and twice back: a send slice and a receive slice each, 32 a step) on
# the transfer track from its posting to its completion; with one GPU the ranks share it
# (parallel.comm auto: MPI through pinned host buffers), with two each has its own (NCCL).
if [ -f "$WORK/m.yaml" ]; then
  trace=$WORK/pp2_zbv_trace.json
  out=$(timeout 120 mpirun -np 2 --oversubscribe "$BUILD/pptrain" train "$WORK/m.yaml" model.n_layer=4 parallel.pp=2 \
        parallel.schedule=zbv parallel.stages_per_rank=2 parallel.microbatches=4 training.steps=3 \
        training.eval_every=0 logging.trace="$trace" 2>&1)
  rc=$?
  actions=$(grep -o '"name": "[0-9]*[FIW][0-9]*", "cat": "compute", "ph": "X", "pid": [0-9]*, "tid": 0,' "$trace" 2>/dev/null | wc -l)
  transfers=$(grep -o '"name": "[0-9]*\(SEND\|RECV\)_[FB][0-9]*", "cat": "comm", "ph": "X", "pid": [0-9]*, "tid": 2,' \
              "$trace" 2>/dev/null | wc -l)
  comm=$(grep -m1 -o '| comm [^|]*' <<<"$out" | sed 's/^| //; s/ *$//')
  ok=$([ $rc -eq 0 ] && [ "$actions" -eq $((48 * 3)) ] && [ "$transfers" -eq $((32 * 3)) ] && echo true || echo false)
  [ -n "${GPU_CHECK_LOGS:-}" ] && mkdir -p "$GPU_CHECK_LOGS" && cp "$trace" "$GPU_CHECK_LOGS/" 2>/dev/null
  echo "{\"check\": \"trace\", \"ok\": $ok, \"exit\": $rc, \"layout\": \"pp 2 zbv, 3 steps\", \"action_slices\": $actions, \"transfer_slices\": $transfers, \"comm\": $(json_string "$comm"), \"tail\": $(json_string "$([ $rc -eq 0 ] || tail -2 <<<"$out")")}"
  [ "$ok" = true ] || fail
fi

# ---- benchmarks and the performance model beside them -----------------------------------
bench=$(BENCH_TRAIN_TIMEOUT=${BENCH_TRAIN_TIMEOUT:-120} timeout 300 scripts/bench_gpu.sh "$BUILD" 2>&1)
rc=$?
grep '^{' <<<"$bench" | sed 's/^{/{"check": "bench", /'
skipped=$(sed -n 's/^# gpu benchmarks skipped: //p' <<<"$bench")
[ -n "$skipped" ] && echo "{\"check\": \"bench\", \"skipped\": $(json_string "$skipped")}"
[ $rc -eq 0 ] || { echo "{\"check\": \"bench\", \"ok\": false, \"exit\": $rc, \"tail\": $(json_string "$(tail -2 <<<"$bench")")}"; fail; }
if [ -n "$model_device" ] && [ -x "$BUILD/bench/gpu_model" ]; then
  predicted=$("$BUILD/bench/gpu_model" configs/gpt2_124m_gpu.yaml --device "$model_device" 2>&1 | tail -1)
  train=$(grep '"bench": "train_gpt2_124m_gpu"' <<<"$bench")
  measured_tps=$(sed -n 's/.*"bf16": {"tokens_per_s": \([0-9.]*\).*/\1/p' <<<"$train")
  measured_mfu=$(sed -n 's/.*"bf16": {[^}]*"mfu": \([0-9.]*\).*/\1/p' <<<"$train")
  echo "{\"check\": \"model_vs_measured\", \"config\": \"configs/gpt2_124m_gpu.yaml\", \"precision\": \"bf16\", \"predicted_tokens_per_s\": $(json_number tokens_per_s "$predicted"), \"predicted_mfu\": $(json_number mfu "$predicted"), \"measured_tokens_per_s\": ${measured_tps:-null}, \"measured_mfu\": ${measured_mfu:-null}, \"prediction\": $predicted}"
else
  echo "{\"check\": \"model_vs_measured\", \"skipped\": $(json_string "no performance model for '$name' or $BUILD/bench/gpu_model missing")}"
fi
rm -rf "$WORK"
exit $status
