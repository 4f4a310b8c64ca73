#!/usr/bin/env bash
# `make run`: prepares a byte-level corpus from the fortune-mod package's text and
# trains configs/demo.yaml on this machine.
set -euo pipefail
BUILD=${1:-build}; shift || true
corpus=(/usr/share/games/fortunes/fortunes /usr/share/games/fortunes/literature /usr/share/games/fortunes/riddles)
for f in "${corpus[@]}"; do
  [ -f "$f" ] || { echo "demo: $f is missing (make deps installs fortunes-min)" >&2; exit 1; }
done
if [ ! -f data/fortunes/train_000.bin ]; then
  "$BUILD/pptrain" prepare-data --text "${corpus[@]}" --out data/fortunes
fi
mkdir -p runs/demo
rm -f runs/demo/metrics.jsonl
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
exec "$BUILD/pptrain" train configs/demo.yaml "$@"
