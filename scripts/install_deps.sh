#!/usr/bin/env bash
# Installs pptrain's dependencies from Debian packages (apt-get as root, sudo otherwise).
#   install_deps.sh [--check-or-install] [run|test]
#     run    what `make run` needs: the compiler, MPI, parallel HDF5, yaml-cpp, OpenBLAS and
#            the demo's text corpus
#     test   (default) all of it, plus what the tests need: GoogleTest, the HDF5 tools and a
#            throwaway local Slurm cluster
#   --check-or-install: print nothing when nothing is missing
# `make run` installs only the run set, so a newcomer's first run waits for fewer packages.
set -euo pipefail
RUN_PACKAGES=(
  build-essential pkg-config
  openmpi-bin libopenmpi-dev          # MPI bootstrap, CPU collectives, mpirun
  libhdf5-openmpi-dev                 # parallel HDF5 checkpoints
  libyaml-cpp-dev                     # experiment configs
  libopenblas-openmp-dev              # sgemm; the OpenMP build so it shares our thread pool
  fortunes-min fortune-mod            # a small text corpus for the demo
)
TEST_PACKAGES=(
  libgtest-dev                        # tests
  hdf5-tools                          # h5dump, to read checkpoints independently
  gdb                                 # where each rank was when a test's command hung
  munge slurmctld slurmd slurm-client # a throwaway local Slurm cluster for the sbatch tests
)
check_only=0
if [ "${1:-}" = "--check-or-install" ]; then check_only=1; shift; fi
case "${1:-test}" in
  run) PACKAGES=("${RUN_PACKAGES[@]}") ;;
  test) PACKAGES=("${RUN_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  *) echo "usage: $0 [--check-or-install] [run|test]" >&2; exit 2 ;;
esac
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  [ $check_only -eq 1 ] || echo "deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "deps: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null
# apt's progress is noise for a newcomer; its errors still show (debconf's note is no error).
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2> >(grep -v '^debconf: delaying' >&2)
echo "deps: done"
