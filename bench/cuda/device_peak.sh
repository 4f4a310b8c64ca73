# Sourced by the GPU benchmarks: device_peak_bf16 NAME prints the peak dense bf16
# tensor-core FLOP/s of the GPU nvidia-smi calls NAME (NVIDIA data sheets, without
# sparsity), or nothing for a device not in the table (MFU then null).
device_peak_bf16() {
  case "$1" in
    *H100*PCIe*) echo 756e12 ;;
    *H100*NVL*) ;;                         # a different clock and power envelope: not in the table
    *H100*|*H200*) echo 989.4e12 ;;        # H100 SXM, H200 (SXM and GH200 alike)
    *A100*) echo 312e12 ;;
  esac
}
