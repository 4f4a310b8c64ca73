#!/usr/bin/env bash
# Post-validation (training.post_validation) against synchronous steps, on this machine
# (2 ranks x 1 thread, pp=2 under mpirun): a GPT-2 shape where the pipeline dominates
# (8 blocks of d_model 256, vocabulary 256, seq 128, micro-batch 2, m = 8; tokens from a
# 256-symbol Markov source), BENCH_STEPS steps (default 40) each of zb-h1, zb-h2 and zbv
# synchronous and zb-h2 and zbv with post-validation. grad_clip is 0 (no clipping), so no
# step is rolled back and what differs is only the overlap of consecutive steps; the runs
# report their rollbacks anyway. The head is untied (tie_embeddings: false): a tied
# embedding's gradient all-reduce would synchronise the first and the last rank every
# step under loop placement (zb-h1, zb-h2), the very wait post-validation removes; under V
# placement (zbv) both ends are on rank 0 either way. Prints one JSON line: the median step ms after
# the first 5 steps of each run, and throughput ratios (the inverse ratio of the medians).
# Usage: scripts/bench_post_validation.sh [BUILD_DIR]   (needs BUILD_DIR/pptrain)
set -euo pipefail
BUILD=${1:-build}
PPTRAIN=$BUILD/pptrain
if [ ! -x "$PPTRAIN" ]; then
  echo "bench_post_validation: $PPTRAIN not found (build it first: make BUILD=$BUILD $PPTRAIN)" >&2
  exit 1
fi
work=$(mktemp -d /tmp/pptrain-bench-postval-XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
STEPS=${BENCH_STEPS:-40}
"$PPTRAIN" prepare-data --markov --order 1 --vocab 256 --tokens 400000 --out "$work/data" >/dev/null
cat > "$work/model.yaml" <<YAML
model: {n_layer: 8, n_head: 8, d_model: 256, seq_len: 128, vocab_size: 256, tie_embeddings: false}
parallel: {pp: 2, microbatches: 8}
training: {steps: $STEPS, micro_batch_size: 2, lr: 1.0e-3, warmup_steps: 2, grad_clip: 0, eval_every: 0}
data: {train: "$work/data/train_*.bin"}
logging: {every: 1, sample_tokens: 0}
YAML
MPI="mpirun --oversubscribe --bind-to core -np 2"
# "median_ms rollbacks bubble" of a metrics file, over the steps after the first 5.
summarise() {
  python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
steady = rows[5:] or rows
print(round(statistics.median(r["ms"] for r in steady), 2), rows[-1].get("rollbacks", 0),
      round(statistics.median(r["bubble"] for r in steady), 3))
PY
}
run() {  # name overrides...
  local name=$1; shift
  $MPI "$PPTRAIN" train "$work/model.yaml" logging.metrics="$work/$name.jsonl" "$@" >"$work/$name.log"
  summarise "$work/$name.jsonl"
}
entries=""
declare -A ms
for spec in "zbh1_sync zb-h1 false 1" "zbh2_sync zb-h2 false 1" "zbh2_pv zb-h2 true 1" \
            "zbv_sync zbv false 2" "zbv_pv zbv true 2"; do
  read -r name schedule pv v <<<"$spec"
  read -r median rollbacks bubble < <(run "$name" parallel.schedule="$schedule" parallel.stages_per_rank="$v" \
                                          training.post_validation="$pv")
  ms[$name]=$median
  entries="$entries${entries:+, }\"$name\": {\"step_ms\": $median, \"bubble\": $bubble, \"rollbacks\": $rollbacks}"
done
ratio() { python3 -c "print(round($1 / $2, 3))"; }  # throughput of B over A = ms A / ms B
json="{\"bench\": \"post_validation_cpu\", \"model\": \"gpt2 8x256 untied vocab 256 seq 128 mbs 2 m 8, pp 2\""
json="$json, \"steps\": $STEPS, \"runs\": {$entries}"
json="$json, \"throughput_zbh2_pv_over_zbh1\": $(ratio "${ms[zbh1_sync]}" "${ms[zbh2_pv]}")"
json="$json, \"throughput_zbh2_pv_over_zbh2\": $(ratio "${ms[zbh2_sync]}" "${ms[zbh2_pv]}")"
json="$json, \"throughput_zbh2_over_zbh1\": $(ratio "${ms[zbh1_sync]}" "${ms[zbh2_sync]}")"
json="$json, \"throughput_zbv_pv_over_zbv\": $(ratio "${ms[zbv_sync]}" "${ms[zbv_pv]}")"
json="$json, \"throughput_zbv_pv_over_zbh1\": $(ratio "${ms[zbh1_sync]}" "${ms[zbv_pv]}")}"
echo "$json"
