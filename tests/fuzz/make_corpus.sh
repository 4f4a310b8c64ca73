#!/usr/bin/env bash
# Writes the seed inputs of the fuzz targets under tests/fuzz/corpus/<name>/ (committed;
# run again after a format changes). Needs build/pptrain (for the schedules) and python3.
#   tests/fuzz/make_corpus.sh [BUILD]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
out=tests/fuzz/corpus
rm -rf "$out" && mkdir -p "$out"/{config,schedule_csv,token_shard,llmc,checkpoint,safetensors}

# config: the shipped configs, and YAML text + NUL + override lines.
for f in configs/*.yaml; do cp "$f" "$out/config/$(basename "$f")"; done
printf 'model: {n_layer: 2, n_head: 2, d_model: 16}\nparallel: {pp: 2}\n\0training.lr=3e-4\nparallel.schedule=zb-h1\n' \
  >"$out/config/with_overrides"

# schedule_csv: lowered and compute-only programs of the generators, and PyTorch dumps.
for s in gpipe 1f1b interleaved-1f1b zb-h1 zbv dualpipev; do
  "$BUILD/pptrain" schedule --schedule "$s" --pp 2 --microbatches 4 --format csv >"$out/schedule_csv/$s.csv"
done
cp tests/data/schedules/*.csv "$out/schedule_csv/"

# token_shard and llmc: small valid files in llm.c's formats.
python3 - "$out" <<'PY'
import struct, sys
out = sys.argv[1]
def shard(path, tokens):
    header = [20240520, 1, len(tokens)] + [0] * 253
    open(path, "wb").write(struct.pack("<256i", *header) + struct.pack("<%dH" % len(tokens), *tokens))
shard(out + "/token_shard/small.bin", [i % 256 for i in range(40)])
shard(out + "/token_shard/empty.bin", [])
def llmc(path, version, T=2, V=3, Vp=4, L=1, NH=1, C=2):
    n = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    header = [20240326, version, T, V, L, NH, C, Vp] + [0] * 248
    values = [((i * 37) % 17 - 8) / 8.0 for i in range(n)]
    body = struct.pack("<%df" % n, *values)
    if version == 5:  # bf16: the top half of each fp32
        body = b"".join(body[i + 2:i + 4] for i in range(0, len(body), 4))
    open(path, "wb").write(struct.pack("<256i", *header) + body)
llmc(out + "/llmc/fp32.bin", 3)
llmc(out + "/llmc/bf16.bin", 5)
PY
# safetensors: small files in the format's layout (F32, BF16, F16, a scalar, an empty
# tensor, metadata), as transformers writes them (compact JSON padded to 8 bytes).
python3 - "$out" <<'PY'
import json, struct, sys
out = sys.argv[1]
def safetensors(path, tensors, metadata={"format": "pt"}):
    header, data = {"__metadata__": metadata} if metadata else {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)
f32 = lambda *v: struct.pack("<%df" % len(v), *v)
safetensors(out + "/safetensors/gpt2_parts.safetensors", [
    ("transformer.wte.weight", "F32", [3, 2], f32(0.5, -1, 2, 0.25, 3, -4)),
    ("transformer.h.0.attn.c_attn.weight", "BF16", [2, 3], struct.pack("<6H", 0x3F80, 0xBF80, 0x4000, 0, 0x3F00, 0x7F7F)),
    ("transformer.h.0.ln_1.bias", "F16", [2], struct.pack("<2H", 0x3C00, 0x0001)),
    ("scalar", "F32", [], f32(1.5)),
    ("empty", "F32", [0, 4], b""),
    ("ids", "I64", [2], struct.pack("<2q", 1, 2))])
safetensors(out + "/safetensors/no_metadata.safetensors", [("x", "F32", [2, 2], f32(1, 2, 3, 4))], None)
PY
# checkpoint: one step of a 1-layer model (d_model 8, vocab 16) with its AdamW moments.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$BUILD/pptrain" prepare-data --markov --out "$tmp/data" --vocab 16 --tokens 20000 >/dev/null
cat >"$tmp/c.yaml" <<EOF
model: {n_layer: 1, n_head: 2, d_model: 8, seq_len: 8, vocab_size: 16}
parallel: {microbatches: 1}
training: {steps: 1, micro_batch_size: 1, eval_every: 0, warmup_steps: 0}
data: {train: "$tmp/data/train_*.bin", val: ""}
checkpoint: {dir: $tmp/ck, every: 1}
EOF
OMP_NUM_THREADS=1 "$BUILD/pptrain" train "$tmp/c.yaml" >/dev/null
cp "$tmp/ck/step_00000001.h5" "$out/checkpoint/tiny_with_moments.h5"

echo "seeds: $(find "$out" -type f | wc -l) files under $out"
