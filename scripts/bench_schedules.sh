#!/usr/bin/env bash
# Bubble ratio and peak activation memory of every pipeline schedule, simulated by
# `pptrain schedule`, at (p, m) = (4, 8), (8, 24), (16, 48), with T_F = T_I = T_W and with
# T_W = T_I / 2, next to the closed forms (DESIGN.md) and the zero-bubble paper's figures.
# Usage: scripts/bench_schedules.sh [BUILD_DIR]   (needs BUILD_DIR/pptrain)
set -euo pipefail
BUILD=${1:-build}
PPTRAIN=$BUILD/pptrain
source "$(dirname "$0")/bench_lib.sh"
bench_require bench_schedules "$BUILD" "$PPTRAIN"
export OMP_NUM_THREADS=1

# json KEY: the number after "KEY": ; list_first / list_max KEY: of the list after "KEY": [
json() { grep -o "\"$1\": [-0-9.e+]*" <<<"$out" | head -1 | sed 's/.*: //'; }
list() { grep -o "\"$1\": \[[^]]*\]" <<<"$out" | sed 's/.*\[//; s/\]//' | tr ',' '\n' | tr -d ' '; }
list_first() { list "$1" | head -1; }
list_max() { list "$1" | sort -g | tail -1; }

# Bubble time per rank from DESIGN.md's table (T_F = 1, T_I = 1, T_W = $w), or "-".
formula() {
  local name=$1 p=$2 v=$3 w=$4
  case $name in
    gpipe|1f1b) awk -v p="$p" -v w="$w" 'BEGIN { print (p - 1) * (2 + w) }' ;;
    interleaved-1f1b|looped-bfs) awk -v p="$p" -v v="$v" -v w="$w" 'BEGIN { print (p - 1) * (2 + w) / v }' ;;
    zb-h1) awk -v p="$p" -v w="$w" 'BEGIN { print (p - 1) * (2 - w) }' ;;
    zb-h2) awk -v p="$p" -v w="$w" 'BEGIN { x = (p - 1) * (2 - 2 * w); print (x > 0 ? x : 0) }' ;;
    zbv) [ "$w" = 1 ] && echo 0 || echo - ;;  # zero only when T_F = T_I = T_W
    *) echo - ;;
  esac
}

printf '%-17s %2s %3s %3s %5s  %8s %8s  %9s %9s %5s  %10s\n' \
  schedule v p m T_W bubble in-span "bubble-t" formula match peak-act
mismatches=0
for shape in "4 8" "8 24" "16 48"; do
  read -r p m <<<"$shape"
  for w in 1 0.5; do
    for name in gpipe 1f1b interleaved-1f1b looped-bfs zb-h1 zb-h2 zbv dualpipev; do
      v=1
      case $name in interleaved-1f1b|looped-bfs|zbv|dualpipev) v=2 ;; esac
      out=$("$PPTRAIN" schedule --schedule "$name" --pp "$p" --microbatches "$m" \
              --stages-per-rank "$v" --cost "f=1,i=1,w=$w" --format json)
      # ZB-H2 and ZB-V count their bubble inside each rank's span (no optimizer sync);
      # the others from step start to step end. Either way the first rank's.
      case $name in
        zb-h2|zbv) measured=$(list_first span_idle) ;;
        *) measured=$(list_first idle) ;;
      esac
      expect=$(formula "$name" "$p" "$v" "$w")
      match=-
      if [ "$expect" != - ]; then
        match=$(awk -v a="$measured" -v b="$expect" 'BEGIN { d = a - b; print (d < 1e-9 && d > -1e-9) ? "yes" : "NO" }')
        [ "$match" = NO ] && mismatches=$((mismatches + 1))
      fi
      printf '%-17s %2s %3s %3s %5s  %8.4f %8.4f  %9s %9s %5s  %10s\n' "$name" "$v" "$p" "$m" "$w" \
        "$(json bubble_ratio)" "$(json span_bubble_ratio)" "$measured" "$expect" "$match" \
        "$(list_max peak_activations)"
    done
  done
  echo
done
echo "bubble: 1 - sum(busy)/(p*makespan); in-span: the same inside each rank's first..last action;"
echo "bubble-t: bubble time of the first rank (in-span for zb-h2, zbv); formula: DESIGN.md's table;"
echo "peak-act: peak activations over ranks, in microbatches of one rank's share (act_i=1, act_w=0)."
echo
echo "Zero-bubble paper (Qi et al. 2024), Table 5: bubble rates computed from profiled T_F, T_B, T_W,"
echo "T_comm of real models (so not the unit-cost values above; 1F1B's unit-cost rate at p=8, m=24 is"
echo "7/31 = 0.2258):"
printf '  %-22s %8s %8s %8s %8s\n' "model p m" 1F1B 1F1B-I ZB-H1 ZB-H2
printf '  %-22s %8s %8s %8s %8s\n' "1.5B  p=8  m=24" 0.2431 0.1055 0.1585 0.1083
printf '  %-22s %8s %8s %8s %8s\n' "6.2B  p=8  m=24" 0.2347 0.0808 0.1323 0.0698
printf '  %-22s %8s %8s %8s %8s\n' "14.6B p=16 m=48" 0.2552 0.1104 0.1397 0.0672
echo "closed forms: 1F1B (p-1)(T_F+T_B+T_W), ZB-H1 (p-1)(T_F+T_B-T_W), ZB-H2 (p-1)(T_F+T_B-2T_W)"
echo "(paper's B = I here); interleaved divides 1F1B's by v."
if [ "$mismatches" -gt 0 ]; then
  echo "bench_schedules: $mismatches simulated bubbles differ from their closed form" >&2
  exit 1
fi
