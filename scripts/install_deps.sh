#!/usr/bin/env bash
# Installs pptrain's build and test dependencies from Debian packages.
#   install_deps.sh                    install (apt-get as root, sudo otherwise)
#   install_deps.sh --check-or-install install only if a package is missing
set -euo pipefail
PACKAGES=(
  build-essential pkg-config
  openmpi-bin libopenmpi-dev          # MPI bootstrap, CPU collectives, mpirun
  libhdf5-openmpi-dev hdf5-tools      # parallel HDF5 checkpoints, h5dump
  libyaml-cpp-dev                     # experiment configs
  libopenblas-openmp-dev              # sgemm; the OpenMP build so it shares our thread pool
  libgtest-dev                        # tests
  fortunes-min fortune-mod            # a small text corpus for the demo
  munge slurmctld slurmd slurm-client # a throwaway local Slurm cluster for the sbatch tests
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${1:-}" = "--check-or-install" ] && [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if [ ${#missing[@]} -eq 0 ]; then echo "deps: all ${#PACKAGES[@]} packages present"; exit 0; fi
echo "deps: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
echo "deps: done"
