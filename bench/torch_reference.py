#!/usr/bin/env python3
"""PyTorch reference of the GPT-2 / Llama models pptrain trains, for side-by-side benchmarks.

A benchmark peer, not a dependency: the trainer never imports it and CI has no torch (then it
prints a "skipped" JSON line and exits 0, so callers skip cleanly). Plain PyTorch as nanoGPT
writes it: what an ordinary PyTorch loop reaches on the same shapes. One JSON line last.

  python3 bench/torch_reference.py --arch gpt2 --n-layer 12 --n-head 12 --d-model 768 \
      --seq 256 --batch 4 --device cpu --threads 8

Shapes in comments: B batch, T sequence, C d_model, NH heads, NKV key/value heads,
HD = C/NH head size, F MLP width, V vocabulary.
"""
import argparse
import functools
import json
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    # No torch (CI): say so in the same one-line JSON form and succeed, so callers skip.
    print(json.dumps({"bench": "torch_reference", "skipped": "torch is not installed"}))
    sys.exit(0)


def llama_ffn_hidden(d_model):
    # Llama's rule, as the trainer's llama_ffn_hidden (src/core/config.cpp): 8/3 * C rounded up to 256.
    return (2 * 4 * d_model // 3 + 255) // 256 * 256


# GPT-2 (the trainer's model/block.h, embedding.h, head.h)

class GPT2Attention(nn.Module):
    def __init__(self, c, n_head):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(c, 3 * c, bias=True)   # weight [3C, C]: q, k, v stacked, as the trainer's attn.qkv
        self.proj = nn.Linear(c, c, bias=True)      # weight [C, C]

    def forward(self, x):                           # x [B, T, C]
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)       # each [B, T, C]
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))  # [B, NH, T, HD]
        # Fused causal attention (scale 1/sqrt(HD)): the fastest core the installed torch has.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, NH, T, HD]
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))  # [B, T, C]


class GPT2Block(nn.Module):
    def __init__(self, c, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c, eps=1e-5)  # eps of the cpu backend's layernorm
        self.attn = GPT2Attention(c, n_head)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5)
        self.fc = nn.Linear(c, 4 * c, bias=True)    # weight [4C, C]
        self.proj = nn.Linear(4 * c, c, bias=True)  # weight [C, 4C]

    def forward(self, x):                           # x [B, T, C], pre-LN residual stream
        x = x + self.attn(self.ln_1(x))             # [B, T, C]
        h = F.gelu(self.fc(self.ln_2(x)), approximate="tanh")  # [B, T, 4C], GPT-2's tanh GELU
        return x + self.proj(h)                     # [B, T, C]


class GPT2(nn.Module):
    def __init__(self, a):
        super().__init__()
        c = a.d_model
        self.wte = nn.Embedding(a.vocab, c)         # [V, C]
        self.wpe = nn.Embedding(a.seq, c)           # [T, C]
        self.h = nn.ModuleList(GPT2Block(c, a.n_head) for _ in range(a.n_layer))
        self.ln_f = nn.LayerNorm(c, eps=1e-5)
        self.lm_head = nn.Linear(c, a.vocab, bias=False)  # [V, C]
        self.lm_head.weight = self.wte.weight       # tied, as the trainer's gpt2 default
        # Init as the trainer (model/block.cpp, embedding.cpp): N(0, 0.02), the residual
        # projections scaled by 1/sqrt(2 n_layer) (GPT-2), wpe N(0, 0.01), biases 0, LN gains 1.
        for name, p in self.named_parameters():  # named_parameters() gives the tied weight once, as wte
            if p.dim() == 1:
                (nn.init.zeros_ if name.endswith(".bias") else nn.init.ones_)(p)
            else:
                std = 0.02 / math.sqrt(2 * a.n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, 0.01 if name == "wpe.weight" else std)

    def forward(self, idx):                         # idx [B, T] int64
        pos = torch.arange(idx.shape[1], device=idx.device)  # [T]
        x = self.wte(idx) + self.wpe(pos)           # [B, T, C]
        for block in self.h:
            x = block(x)                            # [B, T, C]
        return self.lm_head(self.ln_f(x))           # [B, T, V]


# Llama (Hugging Face LlamaForCausalLM; the trainer's model/llama_block.h)

class RMSNorm(nn.Module):
    def __init__(self, c, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(c))  # [C]

    def forward(self, x):                           # x [B, T, C]
        # In fp32 whatever autocast does (as HF LlamaRMSNorm), eps inside the square root.
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)  # [B, T, C]
        return self.weight * h.to(x.dtype)


def rotate_half(x):                                 # x [B, H, T, HD]
    x1, x2 = x.chunk(2, dim=-1)                     # each [B, H, T, HD/2]
    return torch.cat((-x2, x1), dim=-1)             # [B, H, T, HD]


@functools.cache
def sdpa_has_gqa():
    # enable_gqa came in torch 2.5; probe once instead of parsing versions (builds differ).
    q, kv = torch.zeros(1, 2, 2, 4), torch.zeros(1, 1, 2, 4)  # [B, NH, T, HD], [B, NKV, T, HD]
    try:
        return F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True) is not None
    except (TypeError, RuntimeError):
        return False


class LlamaAttention(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.nh, self.nkv, self.hd = a.n_head, a.n_kv_head, a.d_model // a.n_head
        # q, k, v fused as the trainer's attn.qkv (HF's q/k/v_proj stacked): same FLOPs, one GEMM.
        self.qkv = nn.Linear(a.d_model, (self.nh + 2 * self.nkv) * self.hd, bias=False)  # [(NH + 2 NKV) HD, C]
        self.proj = nn.Linear(self.nh * self.hd, a.d_model, bias=False)  # o_proj [C, C]
        self.gqa_native = self.nkv != self.nh and sdpa_has_gqa()

    def forward(self, x, cos, sin):                 # x [B, T, C]; cos, sin [T, HD]
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split([self.nh * self.hd, self.nkv * self.hd, self.nkv * self.hd], dim=2)
        q = q.view(b, t, self.nh, self.hd).transpose(1, 2)   # [B, NH, T, HD]
        k = k.view(b, t, self.nkv, self.hd).transpose(1, 2)  # [B, NKV, T, HD]
        v = v.view(b, t, self.nkv, self.hd).transpose(1, 2)  # [B, NKV, T, HD]
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)  # keep q, k in autocast's dtype (as HF)
        q = q * cos + rotate_half(q) * sin           # [B, NH, T, HD]
        k = k * cos + rotate_half(k) * sin           # [B, NKV, T, HD]
        if self.nkv != self.nh and not self.gqa_native:  # older torch: materialise the shared heads
            k, v = (z.repeat_interleave(self.nh // self.nkv, dim=1) for z in (k, v))  # [B, NH, T, HD]
        gqa = {"enable_gqa": True} if self.gqa_native else {}  # else SDPA broadcasts each k/v head itself
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)  # [B, NH, T, HD]
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, self.nh * self.hd))  # [B, T, C]


class LlamaBlock(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.ln_1 = RMSNorm(a.d_model, a.norm_eps)
        self.attn = LlamaAttention(a)
        self.ln_2 = RMSNorm(a.d_model, a.norm_eps)
        self.gate = nn.Linear(a.d_model, a.ffn, bias=False)  # [F, C]
        self.up = nn.Linear(a.d_model, a.ffn, bias=False)    # [F, C]
        self.down = nn.Linear(a.ffn, a.d_model, bias=False)  # [C, F]

    def forward(self, x, cos, sin):                 # x [B, T, C]
        x = x + self.attn(self.ln_1(x), cos, sin)   # [B, T, C]
        h = self.ln_2(x)                            # [B, T, C]
        return x + self.down(F.silu(self.gate(h)) * self.up(h))  # SwiGLU: [B, T, F] -> [B, T, C]


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        hd = a.d_model // a.n_head
        self.wte = nn.Embedding(a.vocab, a.d_model)  # [V, C], no position embedding (rotary instead)
        self.h = nn.ModuleList(LlamaBlock(a) for _ in range(a.n_layer))
        self.ln_f = RMSNorm(a.d_model, a.norm_eps)
        self.lm_head = nn.Linear(a.d_model, a.vocab, bias=False)  # [V, C], untied (Llama's default)
        if a.tie_embeddings:                        # Llama 3.2 1B/3B tie it (model.tie_embeddings: true)
            self.lm_head.weight = self.wte.weight
        # Rotary tables (rotate-half): angle(t, i) = t / theta^(2i/HD), the halves repeated.
        inv_freq = 1.0 / (a.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))  # [HD/2]
        ang = torch.outer(torch.arange(a.seq, dtype=torch.float32), inv_freq)  # [T, HD/2]
        emb = torch.cat((ang, ang), dim=-1)          # [T, HD]
        self.register_buffer("cos", emb.cos(), persistent=False)  # [T, HD]
        self.register_buffer("sin", emb.sin(), persistent=False)  # [T, HD]
        # Init as HF LlamaPreTrainedModel and the trainer: every matrix N(0, 0.02), norms 1.
        for p in self.parameters():
            nn.init.normal_(p, 0.0, 0.02) if p.dim() == 2 else nn.init.ones_(p)

    def forward(self, idx):                         # idx [B, T] int64
        x, t = self.wte(idx), idx.shape[1]          # x [B, T, C]
        for block in self.h:
            x = block(x, self.cos[:t], self.sin[:t])  # [B, T, C]
        return self.lm_head(self.ln_f(x))           # [B, T, V]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2")
    p.add_argument("--n-layer", type=int, default=12)
    p.add_argument("--n-head", type=int, default=12)
    p.add_argument("--n-kv-head", type=int, default=0, help="llama: key/value heads (default n_head)")
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--ffn", type=int, default=0, help="llama: SwiGLU width (default round_up(8/3 d, 256))")
    p.add_argument("--rope-theta", type=float, default=10000.0, help="llama: rotary base (pptrain's default)")
    p.add_argument("--norm-eps", type=float, default=1e-6, help="llama: RMSNorm epsilon (pptrain's default)")
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (allocator, autotuning, compile)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--threads", type=int, default=0, help="cpu: torch.set_num_threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--tie-embeddings", action="store_true", help="llama: the head shares the token embedding")
    p.add_argument("--json-only", action="store_true", help="print only the JSON line")
    a = p.parse_args()
    a.n_kv_head = a.n_kv_head or a.n_head
    a.ffn = a.ffn or llama_ffn_hidden(a.d_model)
    if min(a.n_layer, a.n_head, a.n_kv_head, a.d_model, a.vocab, a.seq, a.batch, a.steps) < 1 or a.warmup < 0:
        p.error("sizes and --steps must be >= 1, --warmup >= 0")
    if a.d_model % a.n_head or a.n_head % a.n_kv_head or (a.arch == "llama" and (a.d_model // a.n_head) % 2):
        p.error("d_model must divide by n_head, n_head by n_kv_head, and llama's head size be even")
    if a.arch == "gpt2" and a.n_kv_head != a.n_head:
        p.error("gpt2 has no grouped-query attention (--n-kv-head is llama only)")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but torch.cuda.is_available() is False")
    if a.device == "cpu" and a.dtype != "fp32":
        # CPU bf16 autocast is a different code path from the trainer's cpu backend (fp32 only).
        p.error("--dtype bf16 needs --device cuda (the cpu comparison is fp32)")
    return a


def main():
    a = parse_args()
    torch.manual_seed(a.seed)
    if a.device == "cpu" and a.threads > 0:
        torch.set_num_threads(a.threads)
    dev = a.device
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 GEMMs on tensor cores, as nanoGPT
        torch.backends.cudnn.allow_tf32 = True

    # Master weights fp32 in both dtypes; bf16 is autocast around forward + loss (nanoGPT).
    model = (GPT2(a) if a.arch == "gpt2" else Llama(a)).to(dev)
    n_params = sum(p.numel() for p in model.parameters())  # parameters() counts a tied weight once
    step_model = torch.compile(model) if a.compile else model

    # Decay matrices and embeddings, not biases and gains (the trainer's ParamSpec decay flag).
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if a.device == "cuda" else {}))

    # One fixed seeded batch: the data path is not what is measured, and a loss that falls on
    # a repeated batch shows the backward pass and the update do their job.
    g = torch.Generator().manual_seed(a.seed + 1)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(dev)  # [B, T]
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(dev)  # [B, T]
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.dtype == "bf16")

    def train_step():
        with autocast:
            logits = step_model(idx)                 # [B, T, V]
            loss = F.cross_entropy(logits.view(-1, a.vocab), tgt.view(-1))  # mean over B*T; fp32 under autocast
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    if a.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        loss = train_step()
        if a.device == "cuda":
            torch.cuda.synchronize()                 # the kernels are queued: wait before reading the clock
        dt = time.perf_counter() - t0                # this step's seconds
        losses.append(loss.item())                   # after the clock: .item() syncs, keep it out of the time
        if step >= a.warmup:
            times.append(dt)

    med = statistics.median(times)
    out = {
        "bench": "torch_reference", "arch": a.arch, "device": a.device, "dtype": a.dtype, "compile": a.compile,
        "torch": torch.__version__, "threads": torch.get_num_threads(), "n_layer": a.n_layer,
        "d_model": a.d_model, "n_head": a.n_head, "seq": a.seq, "batch": a.batch, "params": n_params,
        "steps": a.steps, "step_ms_median": round(med * 1e3, 3), "step_ms_min": round(min(times) * 1e3, 3),
        "step_ms_max": round(max(times) * 1e3, 3), "tokens_per_s": round(a.batch * a.seq / med, 1),
        "loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4),
        "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3) if a.device == "cuda" else None,
    }
    out.update({"n_kv_head": a.n_kv_head, "ffn": a.ffn} if a.arch == "llama" else {})
    if not a.json_only:
        print(f"# {a.arch} {n_params / 1e6:.2f}M params on {a.device} {a.dtype}, torch {torch.__version__}, "
              f"{len(times)} timed steps after {a.warmup} warm-up", flush=True)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
