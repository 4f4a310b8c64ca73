#!/usr/bin/env bash
# Memory at scale on this machine (2 ranks x 1 thread under mpirun): per-rank peak memory
# and step time of one GPT-2 shape (8 blocks of d_model 256, 8 heads, seq 256, vocabulary
# 256, micro-batch 2; naive attention, so its [B,NH,T,T] probabilities are part of what a
# microbatch keeps) for
#   dp = 2, m = 4:   parallel.zero 0 | 1  x  training.recompute none | attention | full
#   pp = 2, m = 8:   schedules 1f1b, zb-h2, zbv (recompute none, zero 0)
# Each run's measured peak is the max over its logged steps of the metrics'
# mem_peak_mb_ranks (the backend's own count, model and first step included), beside the
# prediction `pptrain train --dry-run` prints for the same rank (its total less the
# workspace, which the backend does not allocate: the figure the peak is compared with).
# Step time: the median of the steps after the first 2, over BENCH_ROUNDS interleaved
# rounds. Prints one JSON line with the table and the ratios the design predicts: ZeRO-1's
# AdamW bytes per rank (expected 1/dp), its peak saving, and recompute's time overhead
# (full: about one more forward per block, 1.33x of a block's F+I+W at F = I = W) and
# activation saving.
# Usage: scripts/bench_memory.sh [BUILD_DIR]   (BENCH_STEPS, default 6; BENCH_ROUNDS, 3)
set -euo pipefail
BUILD=${1:-build}
PPTRAIN=$BUILD/pptrain
source "$(dirname "$0")/bench_lib.sh"
bench_require bench_memory "$BUILD" "$PPTRAIN"
bench_workdir bench-memory
export OMP_NUM_THREADS=1
STEPS=${BENCH_STEPS:-6}
"$PPTRAIN" prepare-data --markov --order 1 --vocab 256 --tokens 400000 --out "$work/data" >/dev/null
cat > "$work/model.yaml" <<YAML
model: {n_layer: 8, n_head: 8, d_model: 256, seq_len: 256, vocab_size: 256, attention: naive}
parallel: {microbatches: 4}
training: {steps: $STEPS, micro_batch_size: 2, lr: 1.0e-3, warmup_steps: 2, eval_every: 0}
data: {train: "$work/data/train_*.bin"}
logging: {every: 1, sample_tokens: 0}
YAML
MPI="mpirun --oversubscribe --bind-to core -np 2"

# The runs: "name overrides...".
specs=()
for zero in 0 1; do
  for recompute in none attention full; do
    specs+=("dp2_zero${zero}_${recompute} parallel.dp=2 parallel.zero=$zero training.recompute=$recompute")
  done
done
specs+=("pp2_1f1b parallel.pp=2 parallel.microbatches=8 parallel.schedule=1f1b"
        "pp2_zbh2 parallel.pp=2 parallel.microbatches=8 parallel.schedule=zb-h2"
        "pp2_zbv parallel.pp=2 parallel.microbatches=8 parallel.schedule=zbv parallel.stages_per_rank=2")
# This machine's speed drifts by more than recompute's overhead within minutes, so the
# runs are interleaved: ROUNDS rounds (default 3), every run once per round in an order
# rotated by one per round; a run's step time is the median of its steps after the first
# 2 over all rounds. Peaks are the same every round (the allocator's count, not a timing):
# the largest is kept.
ROUNDS=${BENCH_ROUNDS:-3}
for spec in "${specs[@]}"; do
  read -r name overrides <<<"$spec"
  # shellcheck disable=SC2086  # the overrides are words
  "$PPTRAIN" train "$work/model.yaml" $overrides --dry-run >"$work/$name.dry" 2>&1
done
for ((round = 0; round < ROUNDS; ++round)); do
  for ((k = 0; k < ${#specs[@]}; ++k)); do
    read -r name overrides <<<"${specs[$(((k + round) % ${#specs[@]}))]}"
    # shellcheck disable=SC2086
    $MPI "$PPTRAIN" train "$work/model.yaml" logging.metrics="$work/$name.$round.jsonl" $overrides \
      >"$work/$name.$round.log" 2>&1 ||
      { echo "bench_memory: run $name failed:" >&2; tail -5 "$work/$name.$round.log" >&2; exit 1; }
  done
done

# A run's JSON entry: per world rank the measured peak and the predicted MiB, the step
# time, and the predicted AdamW MiB of rank 0.
summarise() {  # name overrides
  python3 - "$work" "$1" "$2" "$ROUNDS" <<'PY'
import json, re, statistics, sys
work, name, overrides, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def mib(text, key):
    return float(re.search(key + r" ([0-9.]+) MiB", text).group(1))
# Dry-run lines "  pp P tp T: parameters ... | workspace W MiB | total X MiB".
predicted, optimizer = {}, {}
for line in open(f"{work}/{name}.dry"):
    m = re.match(r"\s*pp (\d+) tp (\d+): ", line)
    if m:
        key = (int(m.group(1)), int(m.group(2)))
        predicted[key] = mib(line, "total") - mib(line, "workspace")
        optimizer[key] = mib(line, "optimizer")
runs = [[json.loads(l) for l in open(f"{work}/{name}.{r}.jsonl") if '"loss"' in l] for r in range(rounds)]
ranks = len(runs[0][0]["mem_peak_mb_ranks"])
peaks = [max(row["mem_peak_mb_ranks"][k] for rows in runs for row in rows) for k in range(ranks)]
pp = 2 if "parallel.pp=2" in overrides else 1
# world rank = (dp_rank * pp + pp_rank) * tp + tp_rank, tp = 1 here
pred = [predicted[(k % pp, 0)] for k in range(ranks)]
steady = [row["ms"] for rows in runs for row in (rows[2:] or rows)]
entry = {"step_ms": round(statistics.median(steady), 1),
         "peak_mb": [round(p, 2) for p in peaks], "predicted_mb": [round(p, 2) for p in pred],
         "peak_over_predicted": [round(a / b, 4) for a, b in zip(peaks, pred)],
         "adamw_mb": optimizer[(0, 0)]}
print(json.dumps({name: entry})[1:-1])
PY
}
entries=()
for spec in "${specs[@]}"; do
  read -r name overrides <<<"$spec"
  entries+=("$(summarise "$name" "$overrides")")
done

python3 - "$ROUNDS" "${entries[@]}" <<'PY'
import json, sys
runs = json.loads("{" + ", ".join(sys.argv[2:]) + "}")
def r(a, b): return round(a / b, 3)
z0, z1 = runs["dp2_zero0_none"], runs["dp2_zero1_none"]
out = {"bench": "memory_cpu",
       "model": "gpt2 8x256 naive attention, seq 256, vocab 256, mbs 2; dp2 m 4, pp2 m 8; 2 ranks x 1 thread",
       "rounds": int(sys.argv[1]), "runs": runs,
       "adamw_bytes_zero1_over_zero0": r(z1["adamw_mb"], z0["adamw_mb"]),
       "peak_zero1_over_zero0": r(max(z1["peak_mb"]), max(z0["peak_mb"])),
       "step_ms_zero1_over_zero0": r(z1["step_ms"], z0["step_ms"])}
for mode in ("attention", "full"):
    for zero in (0, 1):
        a, b = runs[f"dp2_zero{zero}_{mode}"], runs[f"dp2_zero{zero}_none"]
        out[f"step_ms_{mode}_over_none_zero{zero}"] = r(a["step_ms"], b["step_ms"])
        out[f"peak_{mode}_over_none_zero{zero}"] = r(max(a["peak_mb"]), max(b["peak_mb"]))
ratios = [x for run in runs.values() for x in run["peak_over_predicted"]]
out["peak_over_predicted_min"], out["peak_over_predicted_max"] = min(ratios), max(ratios)
print(json.dumps(out))
PY
