#!/usr/bin/env bash
# Post-validation (training.post_validation) against synchronous steps, on this machine
# (2 ranks x 1 thread, pp=2 under mpirun): a GPT-2 shape where the pipeline dominates
# (8 blocks of d_model 256, vocabulary 256, seq 128, micro-batch 2, m = 8; tokens from a
# 256-symbol Markov source): zb-h1, zb-h2 and zbv synchronous and zb-h2 and zbv with
# post-validation, BENCH_ROUNDS interleaved rounds (default 3) of BENCH_STEPS steps (default 15). grad_clip is 0 (no clipping), so no
# step is rolled back and what differs is only the overlap of consecutive steps; the runs
# report their rollbacks anyway. The head is untied (tie_embeddings: false): a tied
# embedding's gradient all-reduce would synchronise the first and the last rank every
# step under loop placement (zb-h1, zb-h2), the very wait post-validation removes; under V
# placement (zbv) both ends are on rank 0 either way. Prints one JSON line: the median step ms of
# each configuration (see below), and throughput ratios (the inverse ratio of the medians).
# Usage: scripts/bench_post_validation.sh [BUILD_DIR]   (needs BUILD_DIR/pptrain)
set -euo pipefail
BUILD=${1:-build}
PPTRAIN=$BUILD/pptrain
source "$(dirname "$0")/bench_lib.sh"
bench_require bench_post_validation "$BUILD" "$PPTRAIN"
bench_workdir bench-postval
export OMP_NUM_THREADS=1
STEPS=${BENCH_STEPS:-15}
"$PPTRAIN" prepare-data --markov --order 1 --vocab 256 --tokens 400000 --out "$work/data" >/dev/null
cat > "$work/model.yaml" <<YAML
model: {n_layer: 8, n_head: 8, d_model: 256, seq_len: 128, vocab_size: 256, tie_embeddings: false}
parallel: {pp: 2, microbatches: 8}
training: {steps: $STEPS, micro_batch_size: 2, lr: 1.0e-3, warmup_steps: 2, grad_clip: 0, eval_every: 0}
data: {train: "$work/data/train_*.bin"}
logging: {every: 1, sample_tokens: 0}
YAML
# This machine's speed drifts by several percent within minutes, more than the effect
# measured, so the runs are interleaved: ROUNDS rounds (default 3), each running every
# configuration for STEPS steps in an order rotated by one per round; a configuration's
# figure is the median of its steps after the first 3 of each run, over all its rounds.
ROUNDS=${BENCH_ROUNDS:-3}
MPI="mpirun --oversubscribe --bind-to core -np 2"
specs=("zbh1_sync zb-h1 false 1" "zbh2_sync zb-h2 false 1" "zbh2_pv zb-h2 true 1" "zbv_sync zbv false 2"
       "zbv_pv zbv true 2")
for ((round = 0; round < ROUNDS; ++round)); do
  for ((k = 0; k < ${#specs[@]}; ++k)); do
    read -r name schedule pv v <<<"${specs[$(((k + round) % ${#specs[@]}))]}"
    $MPI "$PPTRAIN" train "$work/model.yaml" logging.metrics="$work/$name.$round.jsonl" \
      parallel.schedule="$schedule" parallel.stages_per_rank="$v" training.post_validation="$pv" \
      >"$work/$name.$round.log"
  done
done
# "median_ms rollbacks bubble" of a configuration over its rounds.
summarise() {
  python3 - "$work" "$1" "$ROUNDS" <<'PY'
import json, statistics, sys
work, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
steady, rollbacks = [], 0
for r in range(rounds):
    rows = [json.loads(l) for l in open(f"{work}/{name}.{r}.jsonl") if '"loss"' in l]
    steady += rows[3:] or rows
    rollbacks += rows[-1].get("rollbacks", 0)
print(round(statistics.median(r["ms"] for r in steady), 2), rollbacks,
      round(statistics.median(r["bubble"] for r in steady), 3))
PY
}
entries=""
declare -A ms
for spec in "${specs[@]}"; do
  read -r name _ <<<"$spec"
  read -r median rollbacks bubble < <(summarise "$name")
  ms[$name]=$median
  entries="$entries${entries:+, }\"$name\": {\"step_ms\": $median, \"bubble\": $bubble, \"rollbacks\": $rollbacks}"
done
ratio() { python3 -c "print(round($1 / $2, 3))"; }  # throughput of B over A = ms A / ms B
json="{\"bench\": \"post_validation_cpu\", \"model\": \"gpt2 8x256 untied vocab 256 seq 128 mbs 2 m 8, pp 2\""
json="$json, \"steps\": $STEPS, \"rounds\": $ROUNDS, \"runs\": {$entries}"
json="$json, \"throughput_zbh2_pv_over_zbh1\": $(ratio "${ms[zbh1_sync]}" "${ms[zbh2_pv]}")"
json="$json, \"throughput_zbh2_pv_over_zbh2\": $(ratio "${ms[zbh2_sync]}" "${ms[zbh2_pv]}")"
json="$json, \"throughput_zbh2_over_zbh1\": $(ratio "${ms[zbh1_sync]}" "${ms[zbh2_sync]}")"
json="$json, \"throughput_zbv_pv_over_zbv\": $(ratio "${ms[zbv_sync]}" "${ms[zbv_pv]}")"
json="$json, \"throughput_zbv_pv_over_zbh1\": $(ratio "${ms[zbh1_sync]}" "${ms[zbv_pv]}")}"
echo "$json"
