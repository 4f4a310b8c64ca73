#!/usr/bin/env bash
# The planner's predictions against measurements on this machine (2 cores: 2 ranks x 1
# thread). A model whose head dominates (GPT-2 shape, 8 blocks of d_model 256, vocabulary
# 50257, seq 128, micro-batch 2, m = 8; tokens from a 256-symbol Markov source), trained
# under several layouts, each with parallel.profile: measure: the run times its layers at
# start-up (every rank at once, tp = 2 as well on two ranks), plans or predicts its step
# from them, prints the prediction and then trains; so prediction and measurement are
# minutes apart at most, on a machine whose speed drifts by more than the target. Prints
# one JSON line: per layout predicted and measured ms (median of the steps after the first
# two) and their ratio; and the split table: uniform vs closed-form (FLOP balance) vs
# profiled (exact partition) under 1f1b, and the best layout of `pptrain plan` (planned
# from a profile taken once under mpirun -np 2).
set -euo pipefail
BUILD=${1:-build}
PPTRAIN=$BUILD/pptrain
work=$(mktemp -d /tmp/pptrain-bench-planner-XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
STEPS=${BENCH_STEPS:-6}
"$PPTRAIN" prepare-data --markov --order 1 --vocab 256 --tokens 400000 --out "$work/data" >/dev/null
cat > "$work/model.yaml" <<YAML
model: {n_layer: 8, n_head: 8, d_model: 256, seq_len: 128, vocab_size: 50257}
parallel: {microbatches: 8}
training: {steps: $STEPS, micro_batch_size: 2, lr: 1.0e-3, warmup_steps: 2, eval_every: 0}
data: {train: "$work/data/train_*.bin"}
logging: {every: 1, sample_tokens: 0}
YAML
MPI="mpirun --oversubscribe --bind-to core -np"
$MPI 2 "$PPTRAIN" profile "$work/model.yaml" --repeats 5 --out "$work/profile.json" >/dev/null
# "measured predicted" of a metrics file: medians over the steps after the first two.
summarise() {
  python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][2:]
print(statistics.median(r["ms"] for r in rows), rows[-1].get("predicted_ms", 0))
PY
}
run() {  # name ranks overrides...
  local name=$1 ranks=$2; shift 2
  local metrics="$work/$name.jsonl" log="$work/$name.log"
  if [ "$ranks" = 1 ]; then
    "$PPTRAIN" train "${CONFIG:-$work/model.yaml}" parallel.profile=measure logging.metrics="$metrics" "$@" >"$log"
  else
    $MPI "$ranks" "$PPTRAIN" train "${CONFIG:-$work/model.yaml}" parallel.profile=measure \
      logging.metrics="$metrics" "$@" >"$log"
  fi
  summarise "$metrics"
}
json="{\"bench\": \"planner_cpu\", \"model\": \"gpt2 8x256 vocab 50257 seq 128 mbs 2 m 8\", \"steps\": $STEPS"
entries=""
within=0
total=0
add() {  # name measured predicted
  local ratio
  ratio=$(python3 -c "print(round($3 / $2, 3))")
  entries="$entries${entries:+, }\"$1\": {\"predicted_ms\": $(printf %.1f "$3"), \"measured_ms\": $(printf %.1f "$2"), \"ratio\": $ratio}"
  total=$((total + 1))
  python3 -c "import sys; sys.exit(0 if abs($3 / $2 - 1) <= 0.10 else 1)" && within=$((within + 1)) || true
}
read m p < <(run pp1 1);                                                         add pp1 "$m" "$p"
read m p < <(run dp2 2 parallel.dp=2 parallel.microbatches=4);                   add dp2 "$m" "$p"
read m p < <(run uniform 2 parallel.pp=2 "parallel.layers_per_stage=[4,4]");     add pp2_1f1b_uniform "$m" "$p"; uniform=$m
read m p < <(run flops 2 parallel.pp=2 "parallel.layers_per_stage=[7,1]");       add pp2_1f1b_closed_form "$m" "$p"; flops=$m
read m p < <(run profiled 2 parallel.pp=2);                                      add pp2_1f1b_profiled "$m" "$p"; profiled=$m
split=$(grep -o 'layers_per_stage \[[0-9,]*\]' "$work/profiled.log" | head -1 | grep -o '\[.*\]')
read m p < <(run zbh1 2 parallel.pp=2 parallel.schedule=zb-h1);                  add pp2_zbh1_profiled "$m" "$p"
read m p < <(run zbv 2 parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2); add pp2_zbv_profiled "$m" "$p"
read m p < <(run auto 2 parallel.pp=2 parallel.schedule=auto);                   add pp2_auto "$m" "$p"
"$PPTRAIN" plan "$work/model.yaml" --ranks 2 --profile "$work/profile.json" --out "$work/best.yaml" >"$work/plan.txt"
best=$(sed -n '3p' "$work/plan.txt" | awk '{print "pp"$2"_tp"$3"_dp"$4"_v"$5"_mbs"$6"_m"$7"_"$8}')
read m p < <(CONFIG="$work/best.yaml" run plan_best 2);                        add plan_best "$m" "$p"
json="$json, \"layouts\": {$entries}, \"within_10pct\": \"$within/$total\""
json="$json, \"split_table_1f1b_ms\": {\"uniform_4_4\": $(printf %.1f "$uniform"), \"closed_form_7_1\": $(printf %.1f "$flops"), \"profiled_$split\": $(printf %.1f "$profiled")}"
json="$json, \"profiled_vs_best_fixed_split\": $(python3 -c "print(round(min($uniform, $flops) / $profiled, 3))"), \"plan_best\": \"$best\"}"
echo "$json"
