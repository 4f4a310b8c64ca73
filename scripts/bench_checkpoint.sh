#!/usr/bin/env bash
# Checkpoint bandwidth: write and read of a GPT-2-124M-shaped checkpoint (~1.5 GB with
# the AdamW moments) on 1 rank and on 4 ranks (pp=2 x tp=2), beside the raw sequential
# bandwidth of the same disk (dd, and the bench's own raw measurement in the same run).
# Target: checkpoint bandwidth >= 0.5 of raw. One JSON line per rank count. Then ZeRO-1's
# sharded save: 2 ranks as dp = 2 replicas, the optimizer state whole on each (zero 0:
# replica 0 writes everything) against sharded (zero 1: each writes its half of every
# dataset), one JSON line each.
#
#   scripts/bench_checkpoint.sh [BUILD]     (BUILD defaults to build)
#
# Environment: BENCH_DIR (default BUILD/bench-checkpoint, on the disk to measure),
# BENCH_REPS (default 2).
set -euo pipefail
BUILD=${1:-build}
cd "$(dirname "$0")/.."
make -s BUILD="$BUILD" "$BUILD/bench/bench_checkpoint"
DIR=${BENCH_DIR:-$BUILD/bench-checkpoint}
REPS=${BENCH_REPS:-2}
mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "disk of $DIR: $(df -h "$DIR" | awk 'NR==2 {print $1, $2}'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
dd if=/dev/zero of="$DIR/dd.bin" bs=8M count=192 conv=fdatasync 2>&1 | tail -1 | sed 's/^/dd write (1.6 GB, fdatasync): /'
rm -f "$DIR/dd.bin"
status=0
for ranks in 1 4; do
  mpirun --oversubscribe --bind-to none -np "$ranks" "$BUILD/bench/bench_checkpoint" --dir "$DIR/ck" \
    --reps "$REPS" || status=1
done
for zero in 0 1; do
  mpirun --oversubscribe --bind-to none -np 2 "$BUILD/bench/bench_checkpoint" --dir "$DIR/ck" \
    --reps "$REPS" --dp 2 --zero "$zero" || status=1
done
exit $status
