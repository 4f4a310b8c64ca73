#!/usr/bin/env bash
# `make run` (after its deps and build phases): prepares a byte-level corpus from the
# fortune-mod package's text and trains configs/demo.yaml on this machine, then prints a
# sample of the model's text.
set -euo pipefail
BUILD=${1:-build}; shift || true
corpus=(/usr/share/games/fortunes/fortunes /usr/share/games/fortunes/literature /usr/share/games/fortunes/riddles)
for f in "${corpus[@]}"; do
  [ -f "$f" ] || { echo "demo: $f is missing (make deps installs fortunes-min)" >&2; exit 1; }
done
if [ ! -f data/fortunes/train_000.bin ]; then
  echo "== make run [3/4] data: byte-level token shards from the fortune-mod corpus -> data/fortunes"
  "$BUILD/pptrain" prepare-data --text "${corpus[@]}" --out data/fortunes
else
  echo "== make run [3/4] data: data/fortunes is already prepared"
fi
rm -f runs/demo/metrics.jsonl
# Threads: pptrain's own choice (one per core; its start-up line says how many) unless
# OMP_NUM_THREADS is set.
echo "== make run [4/4] training: configs/demo.yaml (1 to 2 minutes on 2 cores), a sample every 100 steps"
exec "$BUILD/pptrain" train configs/demo.yaml "$@"
