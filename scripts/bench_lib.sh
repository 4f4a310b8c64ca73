# Sourced by the scripts/bench_*.sh benchmarks: the checks and set-up each of them needs.
# (Not a benchmark itself: no shebang, not executable, not in bench.sh's list.)

# bench_require NAME BUILD PROGRAM: PROGRAM (built under BUILD) must be there, else one line
# naming the benchmark and the make command that builds it, and exit 1.
bench_require() {
  if [ ! -x "$3" ]; then
    echo "$1: $3 not found (build it first: make BUILD=$2 $3)" >&2
    exit 1
  fi
}

# bench_workdir NAME: a fresh temporary folder in $work, removed when the script exits.
bench_workdir() {
  work=$(mktemp -d "/tmp/pptrain-$1-XXXXXX")
  trap 'rm -rf "$work"' EXIT
}

# bench_cores: the physical cores under the CPUs this shell may run on, SMT siblings counted
# once (as pptrain counts them for its threads, src/backend/cpu/cpu_topology.h, and PyTorch
# for its default); the CPUs where sysfs or python3 is missing.
bench_cores() {
  python3 - <<'PY' 2>/dev/null || nproc
import os
cores = set()
for cpu in os.sched_getaffinity(0):
    topology = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
    siblings = f"cpu{cpu}"  # unreadable: a core of its own
    for name in ("core_cpus_list", "thread_siblings_list"):
        try:
            siblings = open(topology + name).read().strip()
            break
        except OSError:
            pass
    cores.add(siblings)
print(len(cores))
PY
}

# Open MPI refuses to start as root without these (containers, CI machines).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
