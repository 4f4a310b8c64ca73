#!/usr/bin/env bash
# Installs pptrain's dependencies from Debian packages (apt-get as root, sudo otherwise).
#   install_deps.sh [--check-or-install] [run|test]
#     run    what `make run` needs: the compiler, MPI, parallel HDF5, yaml-cpp, OpenBLAS, oneDNN,
#            GLPK and the demo's text corpus
#     test   (default) all of it, plus what the tests need: GoogleTest, the HDF5 tools, clang
#            with libFuzzer (the fuzz targets) and a throwaway local Slurm cluster
#   --check-or-install: print nothing when nothing is missing
# `make run` installs only the run set, so a newcomer's first run waits for fewer packages.
#
# Where nvcc is found (the real CUDA build can be wanted) and cuDNN 9 is installed, both sets
# also fetch the cuDNN frontend headers that model.attention: cudnn is built with: the
# pinned wheel of mk/cudnn_frontend.pin (PyPI, `pip download`, sha256 checked), its include/
# unpacked into $CUDNN_FRONTEND_DIR (default ~/.cache/pptrain/cudnn-frontend-VERSION, the
# folder mk/cuda.mk looks in). cuDNN itself is not installed here: it comes with the CUDA
# toolkit's installer or, on Debian/Ubuntu, NVIDIA's `cudnn9-cuda-<CUDA major>` package (e.g.
# `cudnn9-cuda-12`) from the CUDA apt repository; without it the CUDA build goes on without
# cuDNN (mk/cuda.mk). A machine without nvcc never contacts PyPI. A failed download is a warning (the build then goes
# without cuDNN); a wheel whose sha256 differs from the pin is an error.
set -euo pipefail
RUN_PACKAGES=(
  build-essential pkg-config
  openmpi-bin libopenmpi-dev          # MPI bootstrap, CPU collectives, mpirun
  libhdf5-openmpi-dev                 # parallel HDF5 checkpoints
  libyaml-cpp-dev                     # experiment configs
  libglpk-dev                         # the stage partitioner's integer programs
  libopenblas-openmp-dev              # sgemm; the OpenMP build so it shares our thread pool
  libdnnl-dev                         # oneDNN's header: the linear layers' weights packed for its matmul
  fortunes-min fortune-mod            # a small text corpus for the demo
)
TEST_PACKAGES=(
  libgtest-dev                        # tests
  hdf5-tools                          # h5dump, to read checkpoints independently
  gdb                                 # where each rank was when a test's command hung
  clang-14 libclang-rt-14-dev         # the libFuzzer targets (mk/fuzz.mk): clang, its sanitizers
  munge slurmctld slurmd slurm-client # a throwaway local Slurm cluster for the sbatch tests
  qemu-user                           # an older CPU (test_cpu_guard: the binaries refuse it in one line)
  libdnnl2 libblis4-openmp            # the other GEMM libraries (PPTRAIN_CPU_GEMM; test_gemm_library)
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
install_packages() {
  if [ ${#missing[@]} -eq 0 ]; then
    [ $check_only -eq 1 ] || echo "deps: all ${#PACKAGES[@]} packages present"
    return 0
  fi
  echo "deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q >/dev/null
  # apt's progress is noise for a newcomer; its errors still show (debconf's note is no error).
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2> >(grep -v '^debconf: delaying' >&2)
  echo "deps: done"
}

# ---- cuDNN frontend headers (real CUDA build only; see the top of this file) -------------------
# shellcheck source=mk/cudnn_frontend.pin
. "$(dirname "$0")/../mk/cudnn_frontend.pin"
# The same default as mk/cuda.mk's CUDNN_FRONTEND_DIR; export CUDNN_FRONTEND_DIR to move both.
CUDNN_FRONTEND_DIR=${CUDNN_FRONTEND_DIR:-${XDG_CACHE_HOME:-${HOME:-}/.cache}/pptrain/cudnn-frontend-$CUDNN_FRONTEND_VERSION}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

nvcc_found() { command -v nvcc >/dev/null 2>&1 || [ -x "$CUDA_HOME/bin/nvcc" ]; }
# cudnn.h where mk/cuda.mk looks for it: the toolkit's include/, or NVIDIA's Debian packages.
cudnn_found() {
  local d
  for d in "$CUDA_HOME/include" /usr/include /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu; do
    [ -e "$d/cudnn.h" ] && return 0
  done
  return 1
}

fetch_cudnn_frontend() {
  nvcc_found || return 0
  [ -e "$CUDNN_FRONTEND_DIR/include/cudnn_frontend.h" ] && return 0
  if ! cudnn_found; then
    [ $check_only -eq 1 ] || echo "deps: cuDNN 9 not found under $CUDA_HOME/include or /usr/include: the CUDA build goes without" \
      "cuDNN (model.attention: cudnn unavailable); NVIDIA's cudnn9-cuda-<CUDA major> package provides it"
    return 0
  fi
  echo "deps: fetching the cuDNN frontend headers $CUDNN_FRONTEND_VERSION (PyPI) into $CUDNN_FRONTEND_DIR"
  local tmp
  tmp=$(mktemp -d) || return 1
  # Exactly the pinned file, whatever this host's Python: the tags select that one wheel.
  if ! python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
    --abi cp311 --platform manylinux_2_28_x86_64 -d "$tmp" "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION" \
    >"$tmp/pip.log" 2>&1 || [ ! -e "$tmp/$CUDNN_FRONTEND_WHEEL" ]; then
    echo "deps: warning: could not download nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION" \
      "($(tail -n 1 "$tmp/pip.log")): the CUDA build goes without cuDNN" >&2
    rm -rf "$tmp"
    return 0
  fi
  local sum
  sum=$(sha256sum "$tmp/$CUDNN_FRONTEND_WHEEL" | cut -d' ' -f1)
  if [ "$sum" != "$CUDNN_FRONTEND_SHA256" ]; then
    echo "deps: error: $CUDNN_FRONTEND_WHEEL has sha256 $sum, mk/cudnn_frontend.pin pins $CUDNN_FRONTEND_SHA256" >&2
    rm -rf "$tmp"
    return 1
  fi
  # A wheel is a zip: take its include/ folder, then move it into place in one rename.
  mkdir -p "$(dirname "$CUDNN_FRONTEND_DIR")" && rm -rf "$CUDNN_FRONTEND_DIR.tmp" &&
    python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])' \
      "$tmp/$CUDNN_FRONTEND_WHEEL" "$CUDNN_FRONTEND_DIR.tmp" &&
    rm -rf "$CUDNN_FRONTEND_DIR" && mv "$CUDNN_FRONTEND_DIR.tmp" "$CUDNN_FRONTEND_DIR" || {
    echo "deps: error: unpacking $CUDNN_FRONTEND_WHEEL into $CUDNN_FRONTEND_DIR failed" >&2
    rm -rf "$tmp"
    return 1
  }
  rm -rf "$tmp"
  echo "deps: cuDNN frontend headers in $CUDNN_FRONTEND_DIR/include"
}

install_packages
fetch_cudnn_frontend
