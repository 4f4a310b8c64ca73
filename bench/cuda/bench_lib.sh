# Sourced by the GPU benchmarks (train_throughput.sh, vs_torch.sh).

# device_peak_bf16 NAME: the peak dense bf16 tensor-core FLOP/s of the GPU nvidia-smi calls
# NAME (NVIDIA data sheets, without sparsity), or nothing for a device not in the table
# (MFU then null).
device_peak_bf16() {
  case "$1" in
    *H100*PCIe*) echo 756e12 ;;
    *H100*NVL*) ;;                         # a different clock and power envelope: not in the table
    *H100*|*H200*) echo 989.4e12 ;;        # H100 SXM, H200 (SXM and GH200 alike)
    *A100*) echo 312e12 ;;
  esac
}

# timed_steps METRICS SKIP: "N MS_SUM LAST_LOSS" over the step lines of a metrics file (they
# carry tokens_per_s; evaluation lines do not) after the first SKIP steps; nothing if none.
timed_steps() {
  awk -v skip="$2" '
    function field(key,   s) {
      if (!match($0, "\"" key "\": *[-+0-9.eE]+")) return ""
      s = substr($0, RSTART, RLENGTH); sub(/^[^:]*: */, "", s); return s
    }
    /"tokens_per_s"/ && field("step") + 0 > skip { n++; ms += field("ms"); loss = field("loss") }
    END { if (n > 0) printf "%d %.6f %s\n", n, ms, loss }' "$1" 2>/dev/null
}
