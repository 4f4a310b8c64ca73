#!/usr/bin/env bash
# One short, complete visit to a GPU node: unpack the bundle, check, time, keep the logs.
# For a node reached for minutes at a time (a lent or interactive GPU): it builds nothing
# there, runs what is asked in one go, writes every log under OUTDIR and prints a short
# table last.
#
#   scripts/gpu_session.sh TARBALL OUTDIR [PART...]
#
# TARBALL is `make gpu-bundle`'s build/pptrain-gpu.tar.gz. Where the bundle carries no CUDA
# libraries (BUNDLE_CUDA_LIBS=0) and the node has PyTorch's pip wheels, their lib folders
# (cuBLAS, cuDNN, NCCL, cudart of nvidia-*-cu13) go on LD_LIBRARY_PATH. PARTs (default:
# check):
#   check        scripts/gpu_check.sh (device tests, attention check and timing, bf16
#                learning, the benchmarks with PyTorch eager; BENCH_COMPILE=1 adds
#                torch.compile; each shape's op profile with its kernels, CUPTI's records:
#                BENCH_KERNEL_PROFILE=0 leaves them out) -> OUTDIR/gpu_check.jsonl, the
#                benchmarks' logs and op profiles -> OUTDIR/bench_logs.tar.gz
#   llama_flash  the Llama 1B shape (T 8192) with model.attention=flash, pptrain alone: the
#                handwritten kernels beside the default core
#   compare      vs_torch.sh's three shapes with torch.compile (the figures for a closing note)
#   parity       scripts/hf_parity.py --device cuda: each Llama-family class against
#                transformers on this GPU (needs torch and transformers on the node)
#   attention    the flash kernels alone: gpu-tests/test_ptx (the PTX layouts on this GPU) and
#                attention_check --time (flash-mma, flash-wgmma, cudnn side by side)
#   ncu          where ncu is on the node, profiles of each flash kernel set's forward and
#                backward at GPT-2's shape (speed of light, occupancy, warp stalls; clocks
#                left alone) -> OUTDIR/ncu_*.csv. A part of its own: ncu replays each kernel
#                many times, up to 4 x 240 s, more than a short visit may hold; run it last.
# GPU_SESSION_BUDGET_S=N: parts that would start after N seconds are listed, not started.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 TARBALL OUTDIR [check|llama_flash|compare|parity|attention|ncu ...]" >&2; exit 2; }
tarball=$(realpath "$1") out=$(realpath -m "$2")
shift 2
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(check)
# GPU_SESSION_BUDGET_S: the seconds this call may take (a lent GPU's time left, less the
# machine's start): a part still to come when they are spent is listed as not started, so
# that the logs and the table come back instead of a call cut off in its middle.
budget=${GPU_SESSION_BUDGET_S:-}
[ -z "$budget" ] || [[ "$budget" =~ ^[0-9]+$ ]] || { echo "gpu_session: GPU_SESSION_BUDGET_S=$budget: expected seconds" >&2; exit 2; }
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$out"
start=$SECONDS
stamp() { echo "# $(date -u +%H:%M:%S) +$((SECONDS - start)) s: $*"; }

node=$(mktemp -d "${TMPDIR:-/tmp}/gpu_session.XXXXXX")
tar xzf "$tarball" -C "$node" || { echo "gpu_session: cannot unpack $tarball" >&2; exit 1; }
B=$node/pptrain-gpu
if [ ! -d "$B/lib/cuda" ] && command -v python3 >/dev/null; then
  wheels=$(python3 - <<'PY' 2>/dev/null
import glob, site
dirs = sorted({d for s in site.getsitepackages() for d in glob.glob(s + "/nvidia/**/lib", recursive=True)})
print(":".join(dirs))
PY
)
  [ -n "$wheels" ] && export LD_LIBRARY_PATH="$wheels${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
stamp "bundle in $B; $(nvidia-smi -L 2>/dev/null | head -1)"
# From the bundle's parent, `run` finds scripts/ and bench/ inside the bundle (not this checkout).
cd "$node" || exit 1
"$B/run" pptrain --version 2>&1 | head -3

table=()
for part in "${parts[@]}"; do
  if [ -n "$budget" ] && [ $((SECONDS - start)) -ge "$budget" ]; then
    table+=("$part: not started (GPU_SESSION_BUDGET_S=$budget spent at +$((SECONDS - start)) s)")
    continue
  fi
  case "$part" in
    check)
      stamp "gpu_check.sh"
      BENCH_COMPILE=${BENCH_COMPILE:-0} BENCH_KERNEL_PROFILE=${BENCH_KERNEL_PROFILE:-1} \
        GPU_CHECK_LOGS=$B/build/device-tests "$B/run" scripts/gpu_check.sh 2>&1 |
        tee "$out/gpu_check.jsonl"
      (cd "$B/build" && tar czf "$out/bench_logs.tar.gz" --exclude='*.bin' bench-vs-torch bench-gpu device-tests \
        2>/dev/null)
      table+=("$(grep -c '"ok": true' "$out/gpu_check.jsonl") ok, $(grep -c '"ok": false\|"pass": false' "$out/gpu_check.jsonl") failed lines in gpu_check.jsonl")
      ;;
    llama_flash)
      stamp "llama1b_t8192 with model.attention=flash"
      BENCH_SHAPES=llama1b_t8192 BENCH_TORCH=0 BENCH_OVERRIDES=model.attention=flash \
        "$B/run" bench/cuda/vs_torch.sh build --workdir build/bench-flash 2>&1 | tee "$out/llama_flash.jsonl"
      (cd "$B/build" && tar czf "$out/flash_logs.tar.gz" --exclude='*.bin' bench-flash 2>/dev/null)
      ;;
    compare)
      stamp "vs_torch.sh with torch.compile"
      BENCH_COMPILE=1 "$B/run" bench/cuda/vs_torch.sh build --workdir build/bench-compare 2>&1 |
        tee "$out/compare.jsonl"
      ;;
    parity)
      stamp "hf_parity.py --device cuda"
      (cd "$B" && ./run python3 scripts/hf_parity.py --pptrain build/pptrain --device cuda) 2>&1 |
        tee "$out/parity.txt"
      ;;
    attention)
      stamp "attention: test_ptx, attention_check --time"
      timeout 120 "$B/run" "$B/build/gpu-tests/test_ptx" --gtest_color=no >"$out/test_ptx.txt" 2>&1
      table+=("test_ptx: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/test_ptx.txt" | tr '\n' ' ')")
      timeout 300 "$B/run" "$B/build/bench/attention_check" --time 2>&1 | tee "$out/attention.jsonl"
      ;;
    ncu)
      stamp "ncu: each flash kernel set's forward and backward"
      if command -v ncu >/dev/null; then
        for impl in flash-wgmma flash-mma; do
          for pass in "forward forward_kernel" "backward (kv|q)_kernel"; do
            set -- $pass
            # The timed calls only (--time-only), past the warm-up, matched by their demangled
            # names (pptrain::kernels::flash::{sm90,bf16_tc}::...). ncu replays the profiled
            # kernels many times: a longer deadline than attention_check's 60 s, inside timeout's.
            timeout 240 ncu --clock-control none --kernel-name-base demangled \
              --kernel-name "regex:kernels::flash::.*::$2" --launch-skip 8 --launch-count 4 \
              --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats --csv \
              "$B/run" "$B/build/bench/attention_check" --impls "$impl" --time-only --shape 16,12,12,1024,64 --deadline 200 \
              >"$out/ncu_${impl}_$1.csv" 2>"$out/ncu_${impl}_$1.err"
            table+=("ncu $impl $1: $(grep -c '"' "$out/ncu_${impl}_$1.csv") csv lines; $(tail -1 "$out/ncu_${impl}_$1.err" | cut -c1-100)")
          done
        done
      else
        table+=("ncu: not on this node")
      fi
      ;;
    *) echo "gpu_session: unknown part '$part'" >&2 ;;
  esac
done
stamp "done"

# The short table: pass/fail per check, then each benchmark's headline.
echo "---- summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))"
for f in "$out"/gpu_check.jsonl "$out"/attention.jsonl; do
  [ -f "$f" ] || continue
  grep '"device_tests"' "$f" | sed -n 's/.*"binary": "\([^"]*\)", "ok": \([a-z]*\).*"passed": \([0-9]*\).*/tests \1 ok=\2 passed=\3/p'
  grep '"device_tests_detail"' "$f" | sed -n 's/.*"line": "\(.*\)"}$/  \1/p' | cut -c1-160
  grep -c '"check": "attention".*"pass": true' "$f" | sed 's/^/attention comparisons passed: /'
  grep '"check": "attention".*"pass": false' "$f" | cut -c1-200
  grep '"bench": "attention"' "$f" | sed -n 's/.*"impl": "\([a-z-]*\)".*"NH": \([0-9]*\), "NKV": \([0-9]*\), "T": \([0-9]*\), "HD": \([0-9]*\).*"fwd_tflops": \([0-9.]*\), "bwd_tflops": \([0-9.]*\).*/attn \1 NH\2 NKV\3 T\4 HD\5 fwd \6 bwd \7 TFLOP\/s/p'
  grep '"bench": "attention".*error' "$f" | cut -c1-220
  grep '"bf16_learning"' "$f" | cut -c1-200
  grep '"check": "trace"' "$f" | cut -c1-220
done
for f in "$out"/gpu_check.jsonl "$out"/llama_flash.jsonl "$out"/compare.jsonl; do
  [ -f "$f" ] || continue
  grep '"gpu_vs_torch"' "$f" | sed -e 's/"device": "[^"]*", //; s/, "model": .*/}/' | cut -c1-400
  # the performance model beside each shape's op profile (per-op tables: SHAPE.model.txt)
  grep '"gpu_vs_torch"' "$f" | sed -n 's/.*"shape": "\([^"]*\)".*"calibrated_from": \([^,]*\), "vs_profile": {[^,]*, "predicted_step_ms": \([0-9.e+-]*\), "measured_step_ms": \([0-9.e+-]*\), "step_within": \([a-z]*\), "ops_within": \([a-z]*\), "calls_agree": \([a-z]*\), "work_agrees": \([a-z]*\)}.*/model \1 (calibrated from \2): step predicted \3 ms, measured \4 ms, step within 10%: \5, ops within 15%: \6, same calls: \7, same work: \8/p'
done
# GPT-2 B16's longest kernels (logging.kernel_profile: op, kernel, calls and ms a step)
if [ -f "$out/bench_logs.tar.gz" ]; then
  tar xzf "$out/bench_logs.tar.gz" -O bench-vs-torch/gpt2_b16.op_profile.json 2>/dev/null |
    grep -o '{"op": "[^"]*", "kernel": "[^"]*", "calls_per_step": [^,]*, "ms_per_step": [^,]*' | head -12 |
    sed 's/{"op": "\([^"]*\)", "kernel": "\([^"]*\)", "calls_per_step": \([^,]*\), "ms_per_step": \(.*\)/kernel \1: \2 x\3, \4 ms/' |
    cut -c1-160
fi
[ -f "$out/parity.txt" ] && grep -E 'ok$|FAILED|Error' "$out/parity.txt" | cut -c1-250
printf '%s\n' "${table[@]}"
rm -rf "$node"
