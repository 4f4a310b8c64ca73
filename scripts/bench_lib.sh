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

# Open MPI refuses to start as root without these (containers, CI machines).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
