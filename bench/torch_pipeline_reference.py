#!/usr/bin/env python3
"""PyTorch's own pipeline parallelism (torch.distributed.pipelining) on the GPT-2 pptrain trains,
for side-by-side benchmarks on the CPU (scripts/bench_pp_vs_torch.sh).

A benchmark peer, not a dependency: CI has no torch (then it prints a "skipped" JSON line and
exits 0). The model is bench/torch_reference.py's GPT-2 with an untied LM head (a head tied to
the embedding across two ranks is a gradient all-reduce torch.distributed.pipelining does not
do), cut into PP * V stages of equal block counts, the embedding on the first stage and ln_f +
head on the last, as torchtitan cuts a model. Each of the PP ranks is a process with its own
threads (gloo between them); a step is the schedule's own step (Schedule1F1B, or ScheduleZBVZeroBubble
with the V placement: rank r holds stages r and 2 PP - 1 - r), then what a training step also
does: the global gradient norm over every rank (all-reduce), clipping, and AdamW. One JSON line
last, from rank 0.

  python3 bench/torch_pipeline_reference.py --schedule 1f1b --pp 2 --n-layer 8 --n-head 8 \
      --d-model 256 --seq 128 --vocab 256 --micro-batch 2 --microbatches 8 --threads 1

Shapes: B micro-batch, T sequence, C d_model, V vocabulary.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleZBVZeroBubble
except ImportError as e:
    print(json.dumps({"bench": "torch_pipeline", "skipped": f"torch.distributed.pipelining is not importable: {e}"}))
    sys.exit(0)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import GPT2Block  # noqa: E402  (the same block as the single-process peer)


class Stage(nn.Module):
    """One pipeline stage: [embedding] + blocks + [ln_f, head]."""

    def __init__(self, a, n_blocks, first, last):
        super().__init__()
        c = a.d_model
        self.first, self.last = first, last
        if first:
            self.wte = nn.Embedding(a.vocab, c)     # [V, C]
            self.wpe = nn.Embedding(a.seq, c)       # [T, C]
        self.h = nn.ModuleList(GPT2Block(c, a.n_head) for _ in range(n_blocks))
        if last:
            self.ln_f = nn.LayerNorm(c, eps=1e-5)
            self.lm_head = nn.Linear(c, a.vocab, bias=False)  # [V, C], untied
        for name, p in self.named_parameters():  # the trainer's init (bench/torch_reference.py)
            if p.dim() == 1:
                (nn.init.zeros_ if name.endswith(".bias") else nn.init.ones_)(p)
            else:
                std = 0.02 / (2 * a.n_layer) ** 0.5 if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, 0.01 if name == "wpe.weight" else std)

    def forward(self, x):                           # first: idx [B, T] int64; else x [B, T, C]
        if self.first:
            pos = torch.arange(x.shape[1])          # [T]
            x = self.wte(x) + self.wpe(pos)         # [B, T, C]
        for block in self.h:
            x = block(x)                            # [B, T, C]
        if self.last:
            x = self.lm_head(self.ln_f(x))          # [B, T, V]
        return x


def loss_fn(logits, target):                        # logits [B, T, V], target [B, T]
    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(rank, a, port, out):
    torch.set_num_threads(a.threads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=a.pp)
    torch.manual_seed(1337)
    v = 2 if a.schedule == "zbv" else 1
    n_stages = a.pp * v
    if a.n_layer % n_stages:
        raise SystemExit(f"--n-layer {a.n_layer} does not split evenly over {n_stages} stages")
    per = a.n_layer // n_stages
    # V placement for ZB-V (rank r: stages r and 2 PP - 1 - r); one stage a rank otherwise.
    indices = [rank, 2 * a.pp - 1 - rank] if v == 2 else [rank]
    cpu = torch.device("cpu")
    mb = a.micro_batch
    stages, params = [], []
    for s in indices:
        module = Stage(a, per, s == 0, s == n_stages - 1)
        params += list(module.parameters())
        example = torch.zeros(mb, a.seq, dtype=torch.long) if s == 0 else torch.zeros(mb, a.seq, a.d_model)
        stages.append(PipelineStage(module, s, n_stages, cpu, input_args=(example,)))
    if v == 2:
        schedule = ScheduleZBVZeroBubble(stages, a.microbatches, loss_fn=loss_fn)
    else:
        schedule = Schedule1F1B(stages[0], a.microbatches, loss_fn=loss_fn)
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    holds_first = 0 in indices
    holds_last = n_stages - 1 in indices
    g = torch.Generator().manual_seed(42)
    times = []
    for step in range(a.warmup + a.steps):
        # Uniform random ids, as the pptrain side's shards (prepare-data --markov --order 0).
        idx = torch.randint(0, a.vocab, (mb * a.microbatches, a.seq), generator=g)   # [B m, T]
        tgt = torch.randint(0, a.vocab, (mb * a.microbatches, a.seq), generator=g)   # [B m, T]
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        losses = []
        args = (idx,) if holds_first else ()
        schedule.step(*args, target=tgt if holds_last else None, losses=losses if holds_last else None)
        # The global gradient norm over every rank's parameters, then clip and step.
        sq = torch.zeros(1)
        for p in params:
            if p.grad is not None:
                sq += p.grad.pow(2).sum()
        dist.all_reduce(sq)
        scale = min(1.0, 1.0 / (sq.sqrt().item() + 1e-6))
        if scale < 1.0:
            for p in params:
                if p.grad is not None:
                    p.grad.mul_(scale)
        opt.step()
        dist.barrier()
        if step >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    if rank == 0:
        out.put({"bench": "torch_pipeline", "schedule": a.schedule, "pp": a.pp, "stages_per_rank": v,
                 "n_layer": a.n_layer, "d_model": a.d_model, "n_head": a.n_head, "seq": a.seq,
                 "vocab": a.vocab, "micro_batch": mb, "microbatches": a.microbatches,
                 "threads_per_rank": a.threads, "steps": a.steps,
                 "step_ms_median": statistics.median(times), "step_ms_min": min(times),
                 "step_ms_max": max(times), "torch": torch.__version__})
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--schedule", choices=["1f1b", "zbv"], default="1f1b")
    p.add_argument("--pp", type=int, default=2)
    p.add_argument("--n-layer", type=int, default=8)
    p.add_argument("--n-head", type=int, default=8)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--threads", type=int, default=1, help="threads per rank")
    p.add_argument("--steps", type=int, default=5, help="timed steps")
    p.add_argument("--warmup", type=int, default=1)
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(run, args=(a, free_port(), out), nprocs=a.pp, join=True, start_method="spawn")
    print(json.dumps(out.get()))


if __name__ == "__main__":
    main()
