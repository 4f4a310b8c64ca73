#!/usr/bin/env bash
# Pipeline scaling on this machine: 2 ranks x 1 thread is real parallel hardware on 2
# cores. Trains one model with pp=1 (1 rank, 1 thread) and pp=2 (2 ranks, 1 thread each)
# under 1f1b, zb-h1 and zbv with m = 8 and prints, as one JSON line, the mean step time
# (steps after the first), the measured bubble and the scaling efficiency
# t(pp=1) / (2 t(pp=2)), all measured in this run. It also runs two independent pp=1
# jobs at once: t(pp=1) / t(two at once) is what two cores give two processes here
# (shared caches, memory bandwidth, a virtual machine's cores), the ceiling for any
# two-rank schedule.
set -euo pipefail
BUILD=${1:-build}
PPTRAIN=$BUILD/pptrain
source "$(dirname "$0")/bench_lib.sh"
bench_require bench_pipeline "$BUILD" "$PPTRAIN"
bench_workdir bench-pipeline
"$PPTRAIN" prepare-data --markov --order 1 --vocab 256 --tokens 400000 --out "$work/data" >/dev/null
STEPS=${BENCH_STEPS:-10}
cat > "$work/model.yaml" <<YAML
model: {n_layer: 8, n_head: 8, d_model: 256, seq_len: 128, vocab_size: 256}
parallel: {microbatches: 8}
training: {steps: $STEPS, micro_batch_size: 2, lr: 1.0e-3, warmup_steps: 2, eval_every: 0}
data: {train: "$work/data/train_*.bin"}
logging: {every: 1, sample_tokens: 0}
YAML
# mean ms and bubble over the steps after the first (warm-up)
summarise() {
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][1:]
print(sum(r["ms"] for r in rows) / len(rows), sum(r["bubble"] for r in rows) / len(rows))
PY
}
run() {  # name ranks overrides...
  local name=$1 ranks=$2; shift 2
  local metrics="$work/$name.jsonl"
  if [ "$ranks" = 1 ]; then
    OMP_NUM_THREADS=1 "$PPTRAIN" train "$work/model.yaml" logging.metrics="$metrics" "$@" >/dev/null
  else
    OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to core -np "$ranks" "$PPTRAIN" train "$work/model.yaml" \
      logging.metrics="$metrics" "$@" >/dev/null
  fi
  summarise "$metrics"
}
read t1 b1 < <(run pp1 1)
run twin_a 1 >"$work/twin_a.out" & run twin_b 1 >"$work/twin_b.out"; wait
read ta _ <"$work/twin_a.out"; read tb _ <"$work/twin_b.out"
ceiling=$(python3 -c "print(round($t1 / (($ta + $tb) / 2), 3))")
json="{\"bench\": \"pipeline_pp2_cpu\", \"steps\": $STEPS, \"microbatches\": 8, \"pp1_ms\": $(printf %.1f "$t1"), \"two_pp1_at_once_efficiency\": $ceiling"
for sched in 1f1b zb-h1 zbv; do
  v=1; [ "$sched" = zbv ] && v=2
  read t b < <(run "$sched" 2 parallel.pp=2 parallel.schedule=$sched parallel.stages_per_rank=$v)
  eff=$(python3 -c "print(round($t1 / (2 * $t), 3))")
  json="$json, \"${sched}_ms\": $(printf %.1f "$t"), \"${sched}_bubble\": $(printf %.3f "$b"), \"${sched}_efficiency\": $eff"
done
echo "$json}"
