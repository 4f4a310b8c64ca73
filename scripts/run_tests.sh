#!/usr/bin/env bash
# Runs the test binaries BUILD/tests/NAME, each under a timeout so a hang fails, and ends
# with one line "N passed, M failed" summed over all binaries.
#   run_tests.sh [BUILD [NAME...]]
# NAMEs are the binaries expected (default: one per tests/test_*.cpp). One that is missing
# (it failed to build) counts as one failure, and so does one that crashes, aborts or
# times out before finishing its tests, printed or not. BUILD_FAILED=1 (set by `make test`)
# says the build failed: one failure more when no test binary is missing for it.
set -u
BUILD=${1:-build}; shift || true
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for src in tests/test_*.cpp; do [ -f "$src" ] && names+=("$(basename "$src" .cpp)"); done
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export PPTRAIN_BIN=$BUILD/pptrain
LOGDIR=$BUILD/test-logs; mkdir -p "$LOGDIR"
passed=0; failed=0; failed_names=(); missing=0
start_all=$(date +%s)
for name in "${names[@]}"; do
  bin=$BUILD/tests/$name; log=$LOGDIR/$name.log
  if [ ! -x "$bin" ]; then
    echo "$name: not built" >"$log"
    failed=$((failed + 1)); failed_names+=("$name"); missing=$((missing + 1))
    printf '%-36s %4d passed %3d failed  %4s  (not built)\n' "$name" 0 1 -
    continue
  fi
  t0=$(date +%s)
  timeout -k 10 "${TEST_TIMEOUT:-600}" "$bin" --gtest_color=no >"$log" 2>&1
  rc=$?
  p=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0)
  f=$(grep -Eo '^\[  FAILED  \] [0-9]+ test' "$log" | grep -Eo '[0-9]+' || echo 0)
  [ -z "$p" ] && p=0; [ -z "$f" ] && f=0
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi   # crash, timeout or abort
  passed=$((passed + p)); failed=$((failed + f))
  status=""
  # A binary past its deadline: name the test it was in (each test's own commands carry
  # shorter deadlines and report where their ranks were).
  [ $rc -eq 124 ] && status="  (timed out in $(grep -E '^\[ RUN      \]' "$log" | tail -1 | sed 's/^\[ RUN      \] //'))"
  [ $rc -eq 137 ] && status="  (killed: timed out, or out of memory)"
  [ $rc -gt 128 ] && [ $rc -ne 137 ] && status="  (died of signal $((rc - 128)))"
  printf '%-36s %4d passed %3d failed  %4ds%s\n' "$name" "$p" "$f" $(( $(date +%s) - t0 )) "$status"
  if [ "$f" -gt 0 ]; then
    failed_names+=("$name")
    grep -E '^\[  FAILED  \]|Failure|error:' "$log" | head -20 | sed 's/^/    /'
  fi
done
if [ "${BUILD_FAILED:-}" = 1 ] && [ $missing -eq 0 ]; then
  failed=$((failed + 1)); failed_names+=("(the build)")
  echo "the build failed (its errors are above the tests)"
fi
echo "total time $(( $(date +%s) - start_all ))s; logs in $LOGDIR"
[ ${#failed_names[@]} -gt 0 ] && echo "failing binaries: ${failed_names[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
