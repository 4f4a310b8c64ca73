#!/usr/bin/env bash
# The portable default build against one built for this machine alone (`make ARCH=native`),
# on the same training: what portability costs here. The default build compiles the cpu
# backend's loops twice (AVX2 and AVX-512) and picks one at start-up; ARCH=native compiles
# everything for this CPU; OpenBLAS chooses its kernels at run time in both. One thread (the
# loops weigh most there), GPT-2 with 8 layers, d_model 256, 8 heads, seq 128, vocab 256,
# 8 microbatches of 2, whole processes alternated A B A B ... (A: default, B: native).
# Prints one JSON line:
#   {"bench": "native_vs_default", "default_s", "native_s" (medians of whole-process wall
#    seconds), "ratio" (default / native, pair by pair, median: 1.0 means portability costs
#    nothing), "ratio_min", "ratio_max", "loops_default", "loops_native" (the start-up
#    line's instruction set of each), "pairs", "steps"}
#
# Usage: scripts/bench_native.sh [BUILD=build]     (from the repository root)
#   BENCH_PAIRS=5   BENCH_STEPS=6
#   BENCH_NATIVE_BUILD=DIR   where the native build goes (kept, so a second call reuses it);
#                            default: a temporary folder, removed at the end. It must not be
#                            BUILD: an ARCH change rebuilds every object of its folder.
set -uo pipefail
BUILD=${1:-build}
PAIRS=${BENCH_PAIRS:-5}
STEPS=${BENCH_STEPS:-6}
fail() { echo "bench_native: $*" >&2; exit 1; }
[[ "$PAIRS" =~ ^[1-9][0-9]*$ ]] || fail "BENCH_PAIRS=$PAIRS: expected a positive integer"
[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || fail "BENCH_STEPS=$STEPS: expected a positive integer"
source "$(dirname "$0")/bench_lib.sh"
bench_require bench_native "$BUILD" "$BUILD/pptrain"
bench_workdir bench-native
NATIVE=${BENCH_NATIVE_BUILD:-$work/build-native}
mkdir -p "$NATIVE" || fail "cannot create $NATIVE"
[ "$(realpath "$NATIVE")" != "$(realpath "$BUILD")" ] ||
  fail "BENCH_NATIVE_BUILD is BUILD ($BUILD): ARCH=native would rebuild it; name another folder"

# The native build, from this checkout (incremental where BENCH_NATIVE_BUILD was used before).
make --no-print-directory -j"$(nproc)" BUILD="$NATIVE" ARCH=native "$NATIVE/pptrain" >"$work/build.log" 2>&1 ||
  { tail -20 "$work/build.log" >&2; fail "the ARCH=native build failed (its log's end is above)"; }

"$BUILD/pptrain" prepare-data --markov --order 0 --concentration 1e6 --vocab 256 --tokens 400000 \
  --out "$work/data" >/dev/null || fail "prepare-data failed"
cat >"$work/model.yaml" <<YAML
model: {n_layer: 8, n_head: 8, d_model: 256, seq_len: 128, vocab_size: 256, tie_embeddings: false}
parallel: {microbatches: 8}
training: {steps: $STEPS, micro_batch_size: 2, lr: 1.0e-4, warmup_steps: 1, eval_every: 0}
data: {train: "$work/data/train_*.bin"}
logging: {every: 1, sample_tokens: 0}
YAML

run() {  # BINARY LOG -> wall seconds of the whole process
  local t0 t1
  t0=$(date +%s.%N)
  OMP_NUM_THREADS=1 timeout 900 "$1" train "$work/model.yaml" >"$2" 2>&1 || { tail -5 "$2" >&2; return 1; }
  t1=$(date +%s.%N)
  python3 -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' "$t0" "$t1"
}
loops() { grep -Eo '\| loops [a-z0-9]+' "$1" | head -1 | cut -d' ' -f3; }

run "$BUILD/pptrain" "$work/warmup.log" >/dev/null || fail "the default build's run failed"
a=() b=()
for ((i = 1; i <= PAIRS; i++)); do
  t=$(run "$BUILD/pptrain" "$work/a.log") || fail "the default build's run failed"
  a+=("$t")
  t=$(run "$NATIVE/pptrain" "$work/b.log") || fail "the native build's run failed"
  b+=("$t")
done
python3 - "$(loops "$work/a.log")" "$(loops "$work/b.log")" "$STEPS" "${a[*]}" "${b[*]}" <<'PY'
import json, statistics, sys
loops_a, loops_b, steps, a, b = sys.argv[1:]
a = [float(x) for x in a.split()]
b = [float(x) for x in b.split()]
ratios = [x / y for x, y in zip(a, b)]
print(json.dumps({
    "bench": "native_vs_default", "default_s": round(statistics.median(a), 3),
    "native_s": round(statistics.median(b), 3), "ratio": round(statistics.median(ratios), 4),
    "ratio_min": round(min(ratios), 4), "ratio_max": round(max(ratios), 4),
    "loops_default": loops_a, "loops_native": loops_b, "pairs": len(ratios), "steps": int(steps)}))
PY
