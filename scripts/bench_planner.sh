#!/usr/bin/env bash
# The planner's predictions against measurements on this machine (2 cores: 2 ranks x 1
# thread). A model whose head dominates (GPT-2 shape, 8 blocks of d_model 256, vocabulary
# 50257, seq 128, micro-batch 2, m = 8; tokens from a 256-symbol Markov source), trained
# under several layouts, each with parallel.profile: measure: the run times its layers at
# start-up (every rank at once, tp = 2 as well on two ranks), plans or predicts its step
# from them, prints the prediction and then trains. Prints one JSON line: per layout the
# predicted and measured ms (medians over BENCH_ROUNDS interleaved rounds, see below) and
# their ratio; and the split table: uniform vs closed-form (FLOP balance) vs profiled
# (exact partition) under 1f1b, and the best layout of `pptrain plan` (planned from a
# profile taken once under mpirun -np 2).
# Usage: scripts/bench_planner.sh [BUILD_DIR]
#   (BENCH_STEPS, default 10; BENCH_ROUNDS, 2; BENCH_PROFILE_REPEATS, 60; BENCH_THREADS, the
#   OpenMP threads of each rank, 1, each rank bound to that many cores; BENCH_WORK, a folder
#   to keep every run's log and metrics in, default a temporary one removed at the end)
set -euo pipefail
BUILD=${1:-build}
PPTRAIN=$BUILD/pptrain
THREADS=${BENCH_THREADS:-1}
if [ -n "${BENCH_WORK:-}" ]; then
  work=$BENCH_WORK
  mkdir -p "$work"
else
  work=$(mktemp -d /tmp/pptrain-bench-planner-XXXXXX)
  trap 'rm -rf "$work"' EXIT
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=$THREADS
# This machine's speed drifts by up to a third between stretches of seconds to tens of
# seconds (one run of 30 steps: the medians of 4 consecutive steps 1.19x apart, of 8 steps
# 1.02x), so both sides of a ratio span several stretches: the measured time is the median
# of the steps after the first two (8 by default, about 40 s), and the start-up profile
# times each layer kind on PROFILE_REPEATS microbatches (60: about 35 s; the default of
# parallel.profile_repeats, 10, spans a few seconds).
STEPS=${BENCH_STEPS:-10}
REPEATS=${BENCH_PROFILE_REPEATS:-60}
"$PPTRAIN" prepare-data --markov --order 1 --vocab 256 --tokens 400000 --out "$work/data" >/dev/null
cat > "$work/model.yaml" <<YAML
model: {n_layer: 8, n_head: 8, d_model: 256, seq_len: 128, vocab_size: 50257}
parallel: {microbatches: 8, profile_repeats: $REPEATS}
training: {steps: $STEPS, micro_batch_size: 2, lr: 1.0e-3, warmup_steps: 2, eval_every: 0}
data: {train: "$work/data/train_*.bin"}
logging: {every: 1, sample_tokens: 0}
YAML
MPI="mpirun --oversubscribe --map-by slot:PE=$THREADS --bind-to core -np"
$MPI 2 "$PPTRAIN" profile "$work/model.yaml" --out "$work/profile.json" >/dev/null
"$PPTRAIN" plan "$work/model.yaml" --ranks 2 --profile "$work/profile.json" --out "$work/best.yaml" >"$work/plan.txt"
best=$(sed -n '3p' "$work/plan.txt" | awk '{print "pp"$2"_tp"$3"_dp"$4"_v"$5"_mbs"$6"_m"$7"_"$8}')
# The layouts: "name ranks config overrides...", config model.yaml or the plan's best.yaml.
specs=("pp1 1 model"
       "dp2 2 model parallel.dp=2 parallel.microbatches=4"
       "pp2_1f1b_uniform 2 model parallel.pp=2 parallel.layers_per_stage=[4,4]"
       "pp2_1f1b_closed_form 2 model parallel.pp=2 parallel.layers_per_stage=[7,1]"
       "pp2_1f1b_profiled 2 model parallel.pp=2"
       "pp2_zbh1_profiled 2 model parallel.pp=2 parallel.schedule=zb-h1"
       "pp2_zbv_profiled 2 model parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2"
       "pp2_auto 2 model parallel.pp=2 parallel.schedule=auto"
       "plan_best 2 best")
# Drift over minutes is larger still (the same profile run twice a minute apart has
# differed by 50% in a block's F), so the layouts run in ROUNDS
# interleaved rounds (default 2), in an order rotated by one per round; a layout's
# predicted and measured figures are the medians over its rounds (measured: the median of
# each run's steps after the first two), and the per-run figures are printed; a layout
# whose split and schedule are fixed (pp1, dp2, the two fixed splits) is predicted anew
# each round, so the largest max/min of its predictions is the machine's drift between
# profiles (fixed_layout_prediction_spread), the noise the ratios are read against.
ROUNDS=${BENCH_ROUNDS:-2}
for ((round = 0; round < ROUNDS; ++round)); do
  for ((k = 0; k < ${#specs[@]}; ++k)); do
    read -r name ranks config overrides <<<"${specs[$(((k + round) % ${#specs[@]}))]}"
    launch=("$PPTRAIN")
    [ "$ranks" = 1 ] || launch=($MPI "$ranks" "$PPTRAIN")
    # shellcheck disable=SC2086  # the overrides are words
    "${launch[@]}" train "$work/$config.yaml" parallel.profile=measure \
      logging.metrics="$work/$name.$round.jsonl" $overrides >"$work/$name.$round.log"
  done
done
python3 - "$work" "$ROUNDS" "$STEPS" "$best" "$REPEATS" "$THREADS" "${specs[@]}" <<'PY'
import json, re, statistics, sys
work, rounds, steps, best = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
names = [spec.split()[0] for spec in sys.argv[7:]]
layouts, measured, within, drift = {}, {}, 0, 1.0
for name in names:
    pred, meas = [], []
    for r in range(rounds):
        rows = [json.loads(l) for l in open(f"{work}/{name}.{r}.jsonl") if '"loss"' in l][2:]
        meas.append(statistics.median(row["ms"] for row in rows))
        pred.append(rows[-1].get("predicted_ms", 0.0))
    p, m = statistics.median(pred), statistics.median(meas)
    ratios = [a / b for a, b in zip(pred, meas)]
    within += abs(p / m - 1) <= 0.10
    measured[name] = m
    layouts[name] = {"predicted_ms": round(p, 1), "measured_ms": round(m, 1), "ratio": round(p / m, 3),
                     "run_predicted_ms": [round(x) for x in pred], "run_measured_ms": [round(x) for x in meas],
                     "run_ratios": [round(x, 3) for x in ratios]}
    # The same layout predicted from profiles taken minutes apart: the machine's own drift.
    if name in ("pp1", "dp2", "pp2_1f1b_uniform", "pp2_1f1b_closed_form"):
        drift = max(drift, max(pred) / min(pred))
splits = sorted({re.search(r"layers_per_stage (\[[0-9,]*\])", open(f"{work}/pp2_1f1b_profiled.{r}.log").read()).group(1)
                 for r in range(rounds)})
uniform, closed, profiled = (measured[k] for k in ("pp2_1f1b_uniform", "pp2_1f1b_closed_form", "pp2_1f1b_profiled"))
print(json.dumps({
    "bench": "planner_cpu", "model": "gpt2 8x256 vocab 50257 seq 128 mbs 2 m 8", "steps": steps, "rounds": rounds,
    "profile_repeats": int(sys.argv[5]), "threads_per_rank": int(sys.argv[6]),
    "layouts": layouts, "within_10pct": f"{within}/{len(names)}",
    "fixed_layout_prediction_spread": round(drift, 3),
    "split_table_1f1b_ms": {"uniform_4_4": round(uniform, 1), "closed_form_7_1": round(closed, 1),
                            "profiled_" + "|".join(splits): round(profiled, 1)},
    "profiled_vs_best_fixed_split": round(min(uniform, closed) / profiled, 3), "plan_best": best}))
PY
