# shellcheck shell=bash
# Sourced by the scripts that print JSON lines (scripts/gpu_check.sh,
# bench/cuda/train_throughput.sh). Shell builtins only, so it works with any PATH.

# A JSON string literal of $1 (backslash and quote escaped; tabs and newlines as spaces,
# carriage returns dropped).
json_string() {
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\t'/ }
  s=${s//$'\r'/}
  s=${s//$'\n'/ }
  printf '"%s"' "$s"
}
