#!/usr/bin/env python3
"""tools/bench_gpt_torch.py: the PyTorch baseline of benchmarks/bench_gpt (GPT-2 forward+backward, f32, CPU).

The same model as mptrain's nn::GPT (pre-LN blocks, GELU-tanh, tied LM head) with torch's fused
scaled_dot_product_attention when it exists (torch >= 2.0), else explicit causal attention. Prints the median step
time and tokens/s of a forward + backward (no optimizer step), like bench_gpt. Best settings for this CPU:

  OPENBLAS_CORETYPE=SkylakeX OMP_NUM_THREADS=2 python3 tools/bench_gpt_torch.py
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.h)
            mask = torch.ones(T, T, dtype=torch.bool).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, embd):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, embd), nn.Embedding(block, embd)
        self.h = nn.ModuleList(Block(embd, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(embd)

    def forward(self, ids, targets):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--embd", type=int, default=384)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=65)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = GPT(a.vocab, a.seq, a.layers, a.heads, a.embd)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
    x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    def step():
        model(x, y).backward()

    step()
    times = []
    for _ in range(a.reps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    s = sorted(times)[len(times) // 2]
    tokens = a.batch * a.seq
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"mkldnn {torch.backends.mkldnn.is_available()}: step {s * 1e3:.1f} ms, {tokens / s:.0f} tokens/s")
    print(json.dumps({"torch": torch.__version__, "step_ms": s * 1e3, "tokens_per_s": tokens / s}))


if __name__ == "__main__":
    main()
