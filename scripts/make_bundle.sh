#!/usr/bin/env bash
# Packs a relocatable bundle of pptrain for a GPU node (`make gpu-bundle`, mk/bundle.mk):
#
#   scripts/make_bundle.sh --build DIR --out DIR [--tar FILE] [--cpu-only] [--no-cuda-libs] [--strip]
#
# OUT/pptrain-gpu/ mirrors the repository so the scripts run unchanged inside it:
#   build/pptrain, build/bench/*, build/gpu-tests/*   the binaries of DIR (the CUDA=1 build)
#   bin/                pptrain, gpu_model (links into build/), mpirun, orted, ompi_info
#   lib/                every shared library they need that is not the C library (glibc) or
#                       the C++ runtime (libstdc++, libgcc_s): Open MPI, PMIx, hwloc, libevent,
#                       HDF5, yaml-cpp, OpenBLAS, gfortran, quadmath, libgomp, ...
#   lib/cuda/           the CUDA libraries linked (cudart, cuBLAS, cuBLASLt, NCCL, cuDNN and
#                       the cuDNN parts it loads at run time): built against this toolkit's
#                       major version, which a node's own (e.g. PyTorch's wheels) need not
#                       match; --no-cuda-libs leaves them to the node. Never the driver
#                       (libcuda, libnvidia-*).
#   lib/openmpi/        Open MPI's MCA components (dlopen'ed: ldd does not show them),
#   share/openmpi/, etc/  its help files and default parameters; pmix/ PMIx's components
#                       and help files; lib/ucx/, lib/hwloc/ UCX's transports, hwloc's PCI plugin
#   configs/, scripts/gpu_check.sh, scripts/bench_gpu.sh, scripts/json_string.sh,
#   scripts/hf_parity.py (the Llama family against transformers: --device cuda),
#   scripts/bench_planner.sh (the planner's cpu benchmark, on a node's steadier cores:
#   `BENCH_THREADS=4 ./pptrain-gpu/run scripts/bench_planner.sh pptrain-gpu/build`),
#   bench/cuda/train_throughput.sh, vs_torch.sh, bench_lib.sh, bench/torch_reference.py
#   run                 the launcher: ./pptrain-gpu/run CMD ARGS (scripts/bundle/run)
# Assumes the node's glibc and libstdc++ are the build machine's or newer (Debian 12: glibc
# 2.36, GCC 12), which any node with a current PyTorch has.
# --cpu-only: DIR is a cpu build (the tests pack build/pptrain this way); the same packing,
# without the GPU binaries that build lacks. --strip: the project's binaries without their
# debug sections (a -g build's pptrain is 64 MB, 3.5 MB stripped; a backtrace then names
# functions only). Any failure: one line on stderr, exit 1.
set -euo pipefail
BUILD="" OUT="" TAR="" CPU_ONLY=0 CUDA_LIBS=1 STRIP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --tar) TAR=$2; shift 2 ;;
    --cpu-only) CPU_ONLY=1; shift ;;
    --no-cuda-libs) CUDA_LIBS=0; shift ;;
    --strip) STRIP=1; shift ;;
    *) echo "make_bundle: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
die() { echo "make_bundle: $*" >&2; exit 1; }
[ -n "$BUILD" ] && [ -n "$OUT" ] || die "usage: make_bundle.sh --build DIR --out DIR [--tar FILE] [--cpu-only] [--no-cuda-libs] [--strip]"
ROOT=$(cd "$(dirname "$0")/.." && pwd -P)
[ -x "$BUILD/pptrain" ] || die "$BUILD/pptrain is not built"
B=$OUT/pptrain-gpu
rm -rf "$B"
mkdir -p "$B"/{bin,build/bench,build/gpu-tests,lib/cuda,lib/openmpi,lib/ucx,lib/hwloc,share/openmpi,etc,pmix/lib/pmix,pmix/share,scripts,bench/cuda}

# ---- the project's binaries, scripts and configs -------------------------------------------
cp "$BUILD/pptrain" "$B/build/"
if [ "$CPU_ONLY" = 0 ]; then
  "$BUILD/pptrain" --version | grep -q 'backends:.* cuda' || die "$BUILD/pptrain has no cuda backend (build it with CUDA=1, or pass --cpu-only)"
  for need in bench/bench_kernels bench/gpu_model bench/model_flops gpu-tests/test_cuda_backend; do
    [ -x "$BUILD/$need" ] || die "$BUILD/$need is not built"
  done
fi
for f in "$BUILD"/bench/* "$BUILD"/gpu-tests/*; do
  [ -f "$f" ] && [ -x "$f" ] && cp "$f" "$B/build/${f#"$BUILD"/}"
done
if [ "$STRIP" = 1 ]; then
  find "$B/build" -type f -perm -u+x -exec strip --strip-debug {} + || die "strip failed"
fi
ln -s ../build/pptrain "$B/bin/pptrain"
[ -x "$B/build/bench/gpu_model" ] && ln -s ../build/bench/gpu_model "$B/bin/gpu_model"
cp -r "$ROOT/configs" "$B/"
cp "$ROOT/scripts/gpu_check.sh" "$ROOT/scripts/bench_gpu.sh" "$ROOT/scripts/json_string.sh" "$ROOT/scripts/bench_planner.sh" \
  "$ROOT/scripts/hf_parity.py" \
  "$B/scripts/"
cp "$ROOT/bench/cuda/train_throughput.sh" "$ROOT/bench/cuda/vs_torch.sh" "$ROOT/bench/cuda/bench_lib.sh" "$B/bench/cuda/"
cp "$ROOT/bench/torch_reference.py" "$B/bench/"
cp "$ROOT/scripts/bundle/run" "$B/run"
cp "$ROOT/README.md" "$B/"
cp -r "$ROOT/docs" "$B/"   # the pages README.md points to

# ---- Open MPI, PMIx, UCX, hwloc: what is loaded at run time ------------------------------
ompi_path() { ompi_info --path "$1" --parsable | sed -n "s/^path:$1:\(.*\)/\1/p"; }
command -v ompi_info >/dev/null || die "ompi_info not found: Open MPI is not installed"
MPIRUN=$(readlink -f "$(command -v mpirun)") || die "mpirun not found"
cp "$MPIRUN" "$B/bin/mpirun"
for tool in orted ompi_info; do
  t=$(command -v $tool) && cp "$(readlink -f "$t")" "$B/bin/$tool"
done
PKGLIBDIR=$(ompi_path pkglibdir)
[ -d "$PKGLIBDIR" ] || die "Open MPI's component directory '$PKGLIBDIR' does not exist"
cp "$PKGLIBDIR"/*.so "$B/lib/openmpi/"
cp -r "$(ompi_path pkgdatadir)"/. "$B/share/openmpi/"
SYSCONF=$(ompi_path sysconfdir)
[ -d "$SYSCONF" ] && cp -r "$SYSCONF"/. "$B/etc/"
# PMIx (external to Open MPI here): its library's directory holds pmix/ (components), and
# ../share/pmix its help files.
PMIX_LIB=$(ldd "$PKGLIBDIR"/*.so 2>/dev/null | awk '$1 ~ /^libpmix\.so/ && $3 ~ /^\// && !seen { print $3; seen = 1 }')
if [ -n "$PMIX_LIB" ]; then
  d=$(dirname "$(readlink -f "$PMIX_LIB")")
  [ -d "$d/pmix" ] && cp "$d"/pmix/*.so "$B/pmix/lib/pmix/"
  [ -d "$d/../share" ] && cp -r "$d/../share"/. "$B/pmix/share/"
fi
UCP_LIB=$(ldd "$PKGLIBDIR"/*.so 2>/dev/null | awk '$1 ~ /^libucp\.so/ && $3 ~ /^\// && !seen { print $3; seen = 1 }')
[ -n "$UCP_LIB" ] && [ -d "$(dirname "$UCP_LIB")/ucx" ] && cp -a "$(dirname "$UCP_LIB")"/ucx/. "$B/lib/ucx/"
HWLOC_LIB=$(ldd "$MPIRUN" | awk '$1 ~ /^libhwloc\.so/ && $3 ~ /^\// && !seen { print $3; seen = 1 }')
[ -n "$HWLOC_LIB" ] && [ -f "$(dirname "$HWLOC_LIB")/hwloc/hwloc_pci.so" ] && cp "$(dirname "$HWLOC_LIB")/hwloc/hwloc_pci.so" "$B/lib/hwloc/"

# ---- every shared library all of the above needs --------------------------------------------
# Left to the node: glibc's libraries, the C++ runtime, the NVIDIA driver.
is_system() {
  case "$1" in
    linux-vdso.so* | ld-linux*.so* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | \
      libutil.so.* | libresolv.so.* | libstdc++.so.* | libgcc_s.so.* | libcuda.so.* | libnvidia-*.so*) return 0 ;;
  esac
  return 1
}
is_cuda() {
  case "$1" in libcudart.so* | libcublas.so* | libcublasLt.so* | libnccl.so* | libcudnn*.so* | libnvrtc*.so* | libnvJitLink*.so*) return 0 ;; esac
  return 1
}
copy_lib() {  # copy_lib PATH: into lib/ or lib/cuda/ under its soname (the name ldd asked for)
  local name=$1 path=$2 dest=$B/lib
  if is_cuda "$name"; then
    [ "$CUDA_LIBS" = 1 ] || return 0
    dest=$B/lib/cuda
  fi
  [ -e "$dest/$name" ] || cp -L "$path" "$dest/$name"
}
elves=$(find "$B/build" "$B/bin" "$B/lib/openmpi" "$B/pmix/lib" "$B/lib/ucx" "$B/lib/hwloc" -type f)
libs=$(for f in $elves; do
         [ "$(head -c4 "$f" | tail -c3)" = ELF ] || continue
         ldd "$f" 2>/dev/null | awk -v f="$f" '$2 == "=>" { print $1, $3, f }'
       done | sort -u -k1,1)
while read -r name path from; do
  [ -n "$name" ] || continue
  is_system "$name" && continue
  [ "$path" = "not" ] && die "$from needs $name, which ldd does not find on this machine"
  copy_lib "$name" "$path"
done <<<"$libs"
# cuDNN 9 loads its engine and graph libraries at run time (dlopen): all of them with it.
if [ -e "$B/lib/cuda/libcudnn.so.9" ]; then
  cudnn_dir=$(dirname "$(awk '$1 == "libcudnn.so.9" { print $2 }' <<<"$libs")")
  for f in "$cudnn_dir"/libcudnn_*.so.9; do cp -L "$f" "$B/lib/cuda/"; done
fi
# CUPTI, which logging.kernel_profile opens at run time (dlopen): beside cudart when the
# bundle carries the CUDA libraries (its path from the toolkit cudart came from).
if [ "$CUDA_LIBS" = 1 ] && ls "$B"/lib/cuda/libcudart.so.* >/dev/null 2>&1; then
  cudart_dir=$(dirname "$(awk '$1 ~ /^libcudart\.so/ { print $2; exit }' <<<"$libs")")
  for f in "$cudart_dir"/libcupti.so.1[23] "$cudart_dir"/../extras/CUPTI/lib64/libcupti.so.1[23]; do
    [ -e "$f" ] && { cp -L "$f" "$B/lib/cuda/"; break; }
  done
fi
# The libraries' own dependencies (ldd above was transitive for the binaries; this covers
# what the copied cuDNN parts need).
for f in "$B"/lib/cuda/*; do
  [ -e "$f" ] || continue
  ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r name path; do
    is_system "$name" || copy_lib "$name" "$path"
  done
done
(cd "$B" && find . -type f -o -type l | sort) >"$B/MANIFEST"

if [ -n "$TAR" ]; then
  tar -C "$OUT" -czf "$TAR.tmp" pptrain-gpu && mv "$TAR.tmp" "$TAR"
fi
echo "make_bundle: $B ($(du -sh "$B" | cut -f1))${TAR:+, $TAR}"
