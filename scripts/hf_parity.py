#!/usr/bin/env python3
"""pptrain against transformers itself, on a random tiny model of each Llama-family class.

Not part of `make test` (no torch in CI): run by hand where torch and transformers are
installed (a scratch virtual environment is enough), after `make`:

    python3 scripts/hf_parity.py [--pptrain build/pptrain] [--family llama3|llama-linear|mistral|qwen2|qwen3|all]
                                 [--device cpu|cuda]

(--device cuda trains on the GPU, fp32, the 4 ranks of pp 2 x tp 2 sharing it over MPI where
the node has one; on a GPU node with the bundle: ./pptrain-gpu/run python3
pptrain-gpu/scripts/hf_parity.py --pptrain pptrain-gpu/build/pptrain --device cuda.)

For each family it
  1. builds a random tiny model with transformers (norm gains and biases randomised too, so
     every tensor matters), saves it with save_pretrained (fp32 safetensors);
  2. writes a token shard of random tokens and computes transformers' mean cross-entropy
     of the first global batch pptrain reads (4 sequences of T tokens: sequences 0..3 at
     stride T, no shuffle), in fp32 and in fp64;
  3. `pptrain import-hf`, then `pptrain train` 2 steps from the import on one process and
     under `mpirun -np 4` with pp 2 x tp 2: step 1's loss is the imported model's loss on
     that batch; step 2's shows the layouts train alike;
  4. `pptrain export-hf` of the import, loaded back with from_pretrained: every tensor
     bitwise equal to the original's.
It prints one line per family and exits 1 if a check fails: the step-1 loss within 1e-5
relative of transformers' fp64 loss (fp32 noise: ~1e-6), pp 2 x tp 2 within 1e-5 of one
process at both steps, the export bitwise.
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import torch
import transformers

T, VOCAB, SEQS_PER_STEP = 16, 64, 4


def family_config(name):
    common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=T, rms_norm_eps=1e-5)
    if name == "llama3":  # Llama 3.1's scaling with a band that the short context reaches
        return transformers.LlamaConfig(**common, rope_theta=10000.0, tie_word_embeddings=False,
                                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                      "high_freq_factor": 4.0,
                                                      "original_max_position_embeddings": 8})
    if name == "llama-linear":
        return transformers.LlamaConfig(**common, rope_theta=500000.0, tie_word_embeddings=True,
                                        rope_scaling={"rope_type": "linear", "factor": 4.0})
    if name == "mistral":  # heads 16 wide, not hidden_size / num_attention_heads = 8
        return transformers.MistralConfig(**common, head_dim=16, sliding_window=None, rope_theta=10000.0,
                                          tie_word_embeddings=False)
    if name == "qwen2":
        return transformers.Qwen2Config(**common, rope_theta=1000000.0, tie_word_embeddings=True,
                                        use_sliding_window=False)
    if name == "qwen3":  # per-head q and k norms; heads 16 wide over hidden 32
        return transformers.Qwen3Config(**common, head_dim=16, rope_theta=1000000.0, tie_word_embeddings=True,
                                        attention_bias=False, use_sliding_window=False)
    raise SystemExit(f"unknown family {name}")


def run(cmd, **kw):
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd}\n{r.stdout}{r.stderr}")
    return r.stdout + r.stderr


def step_losses(metrics):
    """The loss of each step, from the metrics file (JSON Lines; full precision)."""
    with open(metrics) as f:
        return [row["loss"] for row in map(json.loads, f) if "loss" in row and "step" in row]


def check(name, pptrain, work, device="cpu"):
    torch.manual_seed(1234)
    cfg = family_config(name)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif pname.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
    hf_dir = os.path.join(work, name, "hf")
    model.save_pretrained(hf_dir, safe_serialization=True)

    # Tokens, and transformers' loss on the first global batch pptrain reads.
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, VOCAB, (2 * SEQS_PER_STEP * T + 1,), generator=g)
    data = os.path.join(work, name, "data")
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(data, "train_000.bin"), "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, tokens.numel(), *([0] * 253)))
        f.write(tokens.to(torch.int32).numpy().astype("<u2").tobytes())
    rows = torch.stack([tokens[k * T:k * T + T + 1] for k in range(SEQS_PER_STEP)])
    def loss_of(m, dtype):
        with torch.no_grad():
            logits = m.to(dtype)(rows[:, :T]).logits
            return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB).double(), rows[:, 1:].reshape(-1)).item()
    hf32 = loss_of(model, torch.float32)
    hf64 = loss_of(model, torch.float64)
    model.to(torch.float32)

    ck = os.path.join(work, name, "import.h5")
    out = run(f"{pptrain} import-hf {hf_dir} {ck}")
    section = re.search(r"continue training with model: (\{.*\}) and checkpoint.resume", out).group(1)
    yaml = os.path.join(work, name, "c.yaml")
    with open(yaml, "w") as f:
        f.write(f"model: {section}\n"
                "parallel: {microbatches: 2}\n"
                "training: {steps: 2, micro_batch_size: 2, lr: 1.0e-3, warmup_steps: 0, eval_every: 0}\n"
                f"data: {{train: '{data}/train_*.bin', shuffle: false}}\n"
                f"checkpoint: {{resume: '{ck}'}}\n"
                "logging: {every: 1, sample_tokens: 0}\n")
    m1, m4 = os.path.join(work, name, "one.jsonl"), os.path.join(work, name, "four.jsonl")
    run(f"OMP_NUM_THREADS=1 {pptrain} train {yaml} device={device} logging.metrics={m1}")
    one = step_losses(m1)
    mpi = "mpirun --oversubscribe -np 4"
    if os.geteuid() == 0:
        mpi += " --allow-run-as-root"
    run(f"{mpi} {pptrain} train {yaml} device={device} parallel.pp=2 parallel.tp=2 logging.metrics={m4}",
        timeout=600)
    four = step_losses(m4)

    exported = os.path.join(work, name, "exported")
    run(f"{pptrain} export-hf {ck} {exported}")
    back = transformers.AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32)
    want, got = model.state_dict(), back.state_dict()
    bitwise = all(torch.equal(want[k], got[k]) for k in want) and set(want) <= set(got)

    rel = abs(one[0] - hf64) / hf64
    layouts = max(abs(a - b) / abs(a) for a, b in zip(one, four))
    ok = rel < 1e-5 and layouts < 1e-5 and bitwise and len(one) == 2 and len(four) == 2
    print(f"{name:13s} {type(model).__name__:19s} {device} | transformers fp64 {hf64:.8f} (fp32 {hf32:.8f}) | pptrain step 1 "
          f"{one[0]:.8f}, rel {rel:.1e} | pp2 x tp2 steps 1-2 rel {layouts:.1e} | export bitwise {bitwise} | "
          f"{'ok' if ok else 'FAILED'}", flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pptrain", default="build/pptrain")
    ap.add_argument("--family", default="all")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = ap.parse_args()
    pptrain = os.path.abspath(args.pptrain)
    families = ["llama3", "llama-linear", "mistral", "qwen2", "qwen3"] if args.family == "all" else [args.family]
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as work:
        results = [check(f, pptrain, work, args.device) for f in families]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
