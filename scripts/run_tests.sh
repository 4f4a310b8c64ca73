#!/usr/bin/env bash
# Runs every test binary under BUILD/tests, each under a timeout so a hang fails,
# and ends with one line "N passed, M failed" summed over all binaries.
# A binary that crashes or times out counts its unfinished tests as one failure.
set -u
BUILD=${1:-build}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export PPTRAIN_BIN=$BUILD/pptrain
LOGDIR=$BUILD/test-logs; mkdir -p "$LOGDIR"
passed=0; failed=0; failed_names=()
start_all=$(date +%s)
for bin in "$BUILD"/tests/test_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin"); log=$LOGDIR/$name.log
  t0=$(date +%s)
  timeout -k 10 ${TEST_TIMEOUT:-600} "$bin" --gtest_color=no >"$log" 2>&1
  rc=$?
  p=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0)
  f=$(grep -Eo '^\[  FAILED  \] [0-9]+ test' "$log" | grep -Eo '[0-9]+' || echo 0)
  [ -z "$p" ] && p=0; [ -z "$f" ] && f=0
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi   # crash, timeout or abort
  passed=$((passed + p)); failed=$((failed + f))
  printf '%-36s %4d passed %3d failed  %4ds%s\n' "$name" "$p" "$f" $(( $(date +%s) - t0 )) \
    "$([ $rc -eq 124 ] && echo '  (timed out)')"
  if [ "$f" -gt 0 ]; then
    failed_names+=("$name")
    grep -E '^\[  FAILED  \]|Failure|error:' "$log" | head -20 | sed 's/^/    /'
  fi
done
echo "total time $(( $(date +%s) - start_all ))s; logs in $LOGDIR"
[ ${#failed_names[@]} -gt 0 ] && echo "failing binaries: ${failed_names[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
