#!/usr/bin/env bash
# Runs the test binaries BUILD/tests/NAME, each under a timeout so a hang fails, several at
# once, and ends with one line "N passed, M failed" summed over all binaries.
#   run_tests.sh [BUILD [NAME...]]
# NAMEs are the binaries expected (default: one per tests/test_*.cpp). One that is missing
# (it failed to build) counts as one failure, and so does one that crashes, aborts or
# times out before finishing its tests, printed or not. BUILD_FAILED=1 (set by `make test`)
# says the build failed: one failure more when no test binary is missing for it.
#
# Side by side: TEST_JOBS binaries run at once (default: 1.5 x the cores this process may
# use, whatever OMP_NUM_THREADS says). Many binaries spend much of their time waiting
# (mpirun's start-up, processes started and stopped, compilers writing files, deadlines):
# with as many at once as cores the cores were busy only about two thirds of the time
# (user + system time over wall time, 2 cores), so half as many again fill them. The
# longest start first, so the last one to finish is a short one: by the times of the
# previous run (BUILD/test-logs/durations), else by tests/test_durations (seconds from a
# reference run, side by side: the order and the sharding below depend on it). A binary
# that would still end last (longer than 3/4 of each slot's share of the whole, see below,
# and than TEST_SHARD_SECONDS, default 60) runs as several GoogleTest shards
# (GTEST_TOTAL_SHARDS, GTEST_SHARD_INDEX: each test in exactly one shard), up to 4. A binary
# whose test measures time against a bound derived for an idle machine is listed in SOLO
# and runs alone, with nothing beside it, in one piece. Each binary's line gives its wall
# and CPU seconds (the CPU time of everything it ran); the CPU-heaviest are listed at the
# end, all of them in BUILD/test-logs/cpu-seconds.
set -u
BUILD=${1:-build}; shift || true
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for src in tests/test_*.cpp; do [ -f "$src" ] && names+=("$(basename "$src" .cpp)"); done
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Every test's ranks run on this one machine: Open MPI's shared-memory transport is all they
# need, and without these each mpirun first probes for network transports (UCX, verbs): a
# 2-rank training of one step took 502 ms instead of 278 on a 2-core VM, and the tests start
# a few hundred such jobs. A user's own choice is kept.
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
# Nor do they need the PCI devices that hwloc (Open MPI's topology) reads in every process:
# in a VM each read of a device's config space traps to the hypervisor, and that was 14% of
# the CPU time of an 8-rank test training (0.75 -> 0.58 CPU-s a launch without it).
export HWLOC_COMPONENTS=${HWLOC_COMPONENTS:--pci,-linuxio}
export PPTRAIN_BIN=$BUILD/pptrain
# Each binary's Open MPI session directories under a folder of its own (removed at the end):
# in the shared one (/tmp/ompi.HOST.UID) two processes of binaries side by side that both
# find it missing race to create it, and the loser's MPI start fails ("mkdir ... File
# exists", orte_init failed): seen once in a run of all the tests on a 2-core VM. A user's
# own choice is kept.
# Short paths: Open MPI puts unix sockets in them (at most 107 characters).
mpi_tmp_root=$(mktemp -d "${TMPDIR:-/tmp}/ompi-XXXXXX") || { echo "run_tests: mktemp failed"; exit 2; }
trap 'rm -rf "$mpi_tmp_root"' EXIT
job_no=0  # each job's folder: $mpi_tmp_root/$job_no
LOGDIR=$BUILD/test-logs; mkdir -p "$LOGDIR"
cores=$(env -u OMP_NUM_THREADS nproc)
jobs_max=${TEST_JOBS:-$(( (3 * cores + 1) / 2 ))}
[[ "$jobs_max" =~ ^[1-9][0-9]*$ ]] || { echo "run_tests: TEST_JOBS=$jobs_max: expected a count >= 1"; exit 2; }
SOLO=" ${TEST_SOLO-test_run_control test_run_signals} "
# Side by side, more OpenMP threads run than there are cores. OpenMP's default wait spins
# at every barrier for a while, and a spinning thread holds the core the thread it waits
# for needs: two demo trainings at once took 3 to 6 times as long per step as one alone
# (2 threads each on 2 cores), and with passive waiting twice as long (the fair share).
# A user's own OMP_WAIT_POLICY is kept.
if [ "$jobs_max" -gt 1 ]; then export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}; fi

# Longest first (unknown ones first of all: they may be long), then by name.
declare -A seconds=()
for f in tests/test_durations "$LOGDIR/durations"; do
  [ -f "$f" ] || continue
  while read -r n s; do [[ "$s" =~ ^[0-9]+$ ]] && seconds[$n]=$s; done <"$f"
done
mapfile -t names < <(for n in "${names[@]}"; do echo "${seconds[$n]:-100000} $n"; done | sort -k1,1nr -k2 | cut -d' ' -f2)

shard_seconds=${TEST_SHARD_SECONDS:-60}
[[ "$shard_seconds" =~ ^[1-9][0-9]*$ ]] || { echo "run_tests: TEST_SHARD_SECONDS=$shard_seconds: expected seconds >= 1"; exit 2; }
# A shard repeats its binary's set-up (a test suite's reference runs, a bundle packed), and
# shards side by side slow each other: cut in 4, the equivalence suite took 139 CPU-seconds
# against 77 alone, and all binaries 997 against 859 uncut (2-core VM). So a binary is cut
# only where it would otherwise end last: when it takes longer than 3/4 of what each of the
# TEST_JOBS slots has to run (the sum of the binaries' times over TEST_JOBS), and longer
# than TEST_SHARD_SECONDS.
known_total=0
for n in "${names[@]}"; do known_total=$(( known_total + ${seconds[$n]:-0} )); done
piece_seconds=$(( 3 * known_total / (4 * jobs_max) ))
[ "$piece_seconds" -lt "$shard_seconds" ] && piece_seconds=$shard_seconds

passed=0; failed=0; failed_names=(); missing=0
# A job is a binary, or one shard of it: "NAME" or "NAME K/N" (its log NAME.K.log).
declare -A running=() start_of=()  # running: job -> the file its exit status goes to
declare -A took_of=() cpu_of=()    # binary -> wall and CPU seconds, its shards' summed
start_all=$(date +%s)

# "1m2.500s 0m0.750s" (the children's line of bash's `times`) -> 63, user + system rounded.
cpu_seconds() {
  awk '{ t = 0; for (i = 1; i <= 2; ++i) { split($i, a, "m"); t += a[1] * 60 + a[2] } printf "%d\n", t + 0.5 }' <<<"$1"
}

log_of() { local k=${1#* }; [ "$k" = "$1" ] && echo "$LOGDIR/$1.log" || echo "$LOGDIR/${1%% *}.${k%/*}.log"; }

# One job's result, from its log and exit status: its line, counts and failures.
finish() {
  local name=$1 rc=$2 took=$3 log p f status="" cpu
  log=$(log_of "$name")
  cpu=$(cat "${log%.log}.cpu" 2>/dev/null); rm -f "${log%.log}.cpu"; [[ "$cpu" =~ ^[0-9]+$ ]] || cpu=0
  p=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0)
  f=$(grep -Eo '^\[  FAILED  \] [0-9]+ test' "$log" | grep -Eo '[0-9]+' || echo 0)
  [ -z "$p" ] && p=0; [ -z "$f" ] && f=0
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi   # crash, timeout or abort
  passed=$((passed + p)); failed=$((failed + f))
  # A binary past its deadline: name the test it was in (each test's own commands carry
  # shorter deadlines and report where their ranks were).
  [ "$rc" -eq 124 ] && status="  (timed out in $(grep -E '^\[ RUN      \]' "$log" | tail -1 | sed 's/^\[ RUN      \] //'))"
  [ "$rc" -eq 137 ] && status="  (killed: timed out, or out of memory)"
  [ "$rc" -gt 128 ] && [ "$rc" -ne 137 ] && status="  (died of signal $((rc - 128)))"
  printf '%-36s %4d passed %3d failed  %4ds  cpu %4ds%s\n' "$name" "$p" "$f" "$took" "$cpu" "$status"
  took_of[${name%% *}]=$(( ${took_of[${name%% *}]:-0} + took ))
  cpu_of[${name%% *}]=$(( ${cpu_of[${name%% *}]:-0} + cpu ))
  if [ "$f" -gt 0 ]; then
    failed_names+=("$name")
    grep -E '^\[  FAILED  \]|Failure|error:' "$log" | head -20 | sed 's/^/    /'
  fi
}

# Waits for one running binary to end and reports it. Each writes its exit status to a
# file of its own when it ends (bash's `wait -n` loses a job the shell already reaped).
reap() {
  local name
  while :; do
    for name in "${!running[@]}"; do
      if [ -s "${running[$name]}" ]; then
        local rc; rc=$(cat "${running[$name]}"); rm -f "${running[$name]}"
        unset "running[$name]"
        finish "$name" "$rc" $(( $(date +%s) - ${start_of[$name]} ))
        return
      fi
    done
    sleep 0.2
  done
}

for name in "${names[@]}"; do
  bin=$BUILD/tests/$name
  rm -f "$LOGDIR/$name.log" "$LOGDIR/$name".[0-9]*.log  # a shard count of an earlier run
  if [ ! -x "$bin" ]; then
    echo "$name: not built" >"$LOGDIR/$name.log"
    failed=$((failed + 1)); failed_names+=("$name"); missing=$((missing + 1))
    printf '%-36s %4d passed %3d failed  %4s  (not built)\n' "$name" 0 1 -
    continue
  fi
  solo=0; [[ "$SOLO" == *" $name "* ]] && solo=1
  shards=1
  if [ $solo = 0 ] && [ "$jobs_max" -gt 1 ] && [ -n "${seconds[$name]:-}" ]; then
    shards=$(( (seconds[$name] + piece_seconds - 1) / piece_seconds ))
    [ $shards -gt 4 ] && shards=4; [ $shards -lt 1 ] && shards=1
  fi
  for (( k = 0; k < shards; ++k )); do
    job=$name; [ $shards -gt 1 ] && job="$name $((k + 1))/$shards"
    job_no=$((job_no + 1))
    log=$(log_of "$job")
    # A solo binary starts when nothing runs; while it runs nothing starts.
    limit=$jobs_max; [ $solo = 1 ] && limit=1
    while [ ${#running[@]} -ge "$limit" ]; do reap; done
    start_of[$job]=$(date +%s)
    running[$job]=${log%.log}.status
    rm -f "${running[$job]}"
    # The shell's own line for a binary that died of a signal goes to its log, not here.
    { if [ $shards -gt 1 ]; then export GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$k; fi
      if [ -z "${OMPI_MCA_orte_tmpdir_base:-}" ]; then
        export OMPI_MCA_orte_tmpdir_base="$mpi_tmp_root/$job_no"; mkdir -p "$OMPI_MCA_orte_tmpdir_base"
      fi
      # TEST_TIMEOUT (default 900 s) only turns a hang into a failure: the longest binary,
      # test_parallel_equivalence, took 406 s beside two others on a 2-vCPU Zen 3 VM, 0.68
      # of the 600 s this was; its own mpirun jobs carry their own, shorter limits.
      timeout -k 10 "${TEST_TIMEOUT:-900}" "$bin" --gtest_color=no >"$log" 2>&1
      rc=$?
      # The CPU time of everything the binary started and waited for (ranks, compilers,
      # trainings): what it costs the suite, whatever ran beside it.
      # (`times` itself in this shell: in a pipe or $(...) it would report a subshell's.)
      times >"${running[$job]%.status}.times"
      cpu_seconds "$(tail -1 "${running[$job]%.status}.times")" >"${running[$job]%.status}.cpu"
      rm -f "${running[$job]%.status}.times"
      echo $rc >"${running[$job]}.tmp" && mv "${running[$job]}.tmp" "${running[$job]}"; } 2>>"$log" &
    if [ $solo = 1 ]; then reap; fi
  done
done
while [ ${#running[@]} -gt 0 ]; do reap; done

if [ "${BUILD_FAILED:-}" = 1 ] && [ $missing -eq 0 ]; then
  failed=$((failed + 1)); failed_names+=("(the build)")
  echo "the build failed (its errors are above the tests)"
fi
if [ ${#took_of[@]} -gt 0 ]; then
  # This run's times replace those it has; the others are kept for the next full run.
  for n in "${!took_of[@]}"; do seconds[$n]=${took_of[$n]}; done
  for n in "${!seconds[@]}"; do echo "$n ${seconds[$n]}"; done | sort -k2,2nr -k1 >"$LOGDIR/durations"
  echo "slowest: $(for n in "${!took_of[@]}"; do echo "$n ${took_of[$n]}"; done | sort -k2,2nr | head -8 |
                   awk '{printf "%s%s %ss", (NR > 1 ? ", " : ""), $1, $2}')"
  for n in "${!cpu_of[@]}"; do echo "$n ${cpu_of[$n]}"; done | sort -k2,2nr -k1 >"$LOGDIR/cpu-seconds"
  echo "most CPU: $(head -8 "$LOGDIR/cpu-seconds" | awk '{printf "%s%s %ss", (NR > 1 ? ", " : ""), $1, $2}');" \
       "all binaries $(awk '{ t += $2 } END { print t + 0 }' "$LOGDIR/cpu-seconds") CPU-s"
fi
echo "total time $(( $(date +%s) - start_all ))s, $jobs_max at once; logs in $LOGDIR"
[ ${#failed_names[@]} -gt 0 ] && echo "failing binaries: ${failed_names[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
