#!/usr/bin/env python3
"""tools/make_attention_goldens.py: PyTorch goldens for masked causal attention and cross-entropy with ignore_index
(tests/goldens/masked_attention.safetensors).

A tool, never a build or test dependency: the C++ tests only read the committed file.

  python tools/make_attention_goldens.py [--out tests/goldens/masked_attention.safetensors]

Everything is computed in float64 on the CPU with one thread, from seeded torch.Generators; every tensor is stored
as computed (F64, lengths I32, targets I64).

Masked causal attention, three cases (prefix caseN.):
  case0  B=3 H=2 T=70  D=8  lengths [70, 33, 1]   T crosses a 64-row block; length 1 is the edge case
  case1  B=2 H=2 T=130 D=4  lengths [64, 129]     three 64-row blocks; a length on a block boundary
  case2  B=2 H=1 T=5   D=4  lengths [5, 5]        no padding: must equal plain causal attention
Query i of sample b attends key j iff j <= i AND j < lengths[b]. Rows i >= lengths[b] (padding queries) still attend
every key j < lengths[b], so no row is fully masked (lengths >= 1). q = 1.5 * N(0,1), k, v, dout = N(0,1), all
(B,H,T,D), drawn in that order from torch.Generator().manual_seed(1000 + case index); scale = 1/sqrt(D). The
golden is torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale) (is_causal=False)
with the bool mask (B,1,T,T) = tril(ones(T,T)) & (arange(T)[None,:] < lengths[b]); stored: out (B,H,T,D),
lse (B,H,T) = torch.logsumexp over the allowed keys of scale * q.k (natural log; masked scores -inf), and dq, dk, dv =
the autograd gradients of sum(out * dout) through SDPA.

Cross-entropy (prefix ce.): logits = 2 * N(0,1) [37, 11] and targets uniform in [0, 11) from
torch.Generator().manual_seed(2000); then 12 rows (a random permutation's first 12) get target -100, and the first two
non-ignored rows get targets 0 and 10 (= V-1). loss_mean = F.cross_entropy(logits, targets, ignore_index=-100)
(mean over the 25 non-ignored rows), loss_sum = the same with reduction="sum", both 0-d tensors (shape []);
dlogits_mean / dlogits_sum = their gradients wrt logits [37, 11] (ignored rows exactly 0).

__metadata__: "config" (JSON, sorted keys: cases with shapes, lengths, scales, seeds; the cross-entropy settings),
"torch_version", "safetensors_version", and "caseN.scale" (repr of the float64 1/sqrt(D), round-trips exactly). The
metadata is sorted by key (make_goldens.sort_metadata), so rerunning gives the same bytes.

Checks (exit 1 on failure, nothing written if a check before writing fails):
  - SDPA's out vs a plain float64 softmax(masked scores) @ v: max |diff| <= 1e-12; its dq/dk/dv vs autograd through
    that plain implementation: <= 1e-12;
  - the flash-attention formulas from the stored lse: P = exp(scale*q.k - lse) on allowed keys, rows sum to 1,
    P @ v = out, dS = P * (dout @ v^T - rowsum(dout * out)), dq = scale * dS @ k, dk = scale * dS^T @ q,
    dv = P^T @ dout: all <= 1e-12 from the stored tensors;
  - keys j >= lengths[b] get dk = dv = 0 exactly; a length-1 sample has out = v[:, :, 0] for every row (<= 1e-15);
  - case2 (no padding) equals SDPA with is_causal=True, output and gradients, <= 1e-12; torch.autograd.gradcheck of
    the masked SDPA on case2's inputs;
  - cross-entropy vs a plain log_softmax implementation (loss and gradients <= 1e-12), loss_sum / 25 = loss_mean,
    dlogits_sum / 25 = dlogits_mean, ignored rows of both gradients exactly 0, targets 0 and V-1 present;
  - computing everything a second time in-process gives the same bits; the file re-reads identically; its size is
    under MAX_BYTES.

The committed file was produced by PyTorch from pip (torch 2.15.0+cu132, CPU, 1 thread), numpy 2.4.6 and
safetensors 0.8.0, in a venv:

  python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch==2.15.0 numpy safetensors==0.8.0
  /tmp/torchvenv/bin/python tools/make_attention_goldens.py

Another torch version may differ in the last float64 bits (reduction orders, SDPA backend); the C++ tests compare
with tolerances far above that.
"""
import argparse
import json
import math
import os
import sys

import safetensors
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_goldens import write_goldens  # noqa: E402  (the same deterministic writer and re-read check)

CASES = [  # name, B, H, T, D, lengths
    ("case0", 3, 2, 70, 8, [70, 33, 1]),
    ("case1", 2, 2, 130, 4, [64, 129]),
    ("case2", 2, 1, 5, 4, [5, 5]),
]
Q_SCALE = 1.5          # q = Q_SCALE * N(0,1): scale * q.k has std Q_SCALE (scores O(1..3), max |score| ~ 8)
CASE_SEED = 1000       # + case index
CE = {"N": 37, "V": 11, "n_ignored": 12, "ignore_index": -100, "logit_scale": 2.0, "seed": 2000}
TOL = 1e-12
# 8 (B,H,T,D) F64 tensors per case: case0 215,040 bytes, case1 133,120.
MAX_BYTES = 512 * 1024

DT = torch.float64


def config():
    cases = {}
    for i, (name, b, h, t, d, lengths) in enumerate(CASES):
        cases[name] = {"B": b, "H": h, "T": t, "D": d, "lengths": lengths, "scale": 1.0 / math.sqrt(d),
                       "q_scale": Q_SCALE, "seed": CASE_SEED + i}
    return {
        "attention": {
            "cases": cases,
            "semantics": "query i of sample b attends key j iff j <= i and j < lengths[b]; "
                         "out = SDPA(q, k, v, attn_mask=tril & (j < lengths[b]), scale=1/sqrt(D)); "
                         "lse = logsumexp_j allowed (scale * q_i.k_j); dq, dk, dv = grad of sum(out * dout)",
            "draw_order": ["q", "k", "v", "dout"],
        },
        "ce": dict(CE, loss="F.cross_entropy(logits, targets, ignore_index=-100), reduction mean and sum",
                   scalar_shape=[]),
        "dtype": "float64", "device": "cpu", "threads": 1,
    }


def make_mask(lengths, t):
    """bool (B,1,T,T): j <= i and j < lengths[b]."""
    causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
    keep = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]          # (B, T) over keys j
    return (causal[None, :, :] & keep[:, None, :])[:, None, :, :]


def reference_attention(q, k, v, mask, scale):
    """Plain float64 softmax(masked scores) @ v."""
    s = scale * (q @ k.transpose(-2, -1))
    p = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
    return p @ v


def attention_case(idx, name, b, h, t, d, lengths):
    g = torch.Generator().manual_seed(CASE_SEED + idx)
    q = torch.randn(b, h, t, d, generator=g, dtype=DT) * Q_SCALE
    k = torch.randn(b, h, t, d, generator=g, dtype=DT)
    v = torch.randn(b, h, t, d, generator=g, dtype=DT)
    dout = torch.randn(b, h, t, d, generator=g, dtype=DT)
    scale = 1.0 / math.sqrt(d)
    mask = make_mask(lengths, t)
    assert bool(mask.any(dim=-1).all()), "a fully masked row"

    qq, kk, vv = (x.clone().requires_grad_(True) for x in (q, k, v))
    out = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask, scale=scale)
    dq, dk, dv = torch.autograd.grad((out * dout).sum(), (qq, kk, vv))
    scores = scale * (q @ k.transpose(-2, -1))
    lse = torch.logsumexp(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return {"q": q, "k": k, "v": v, "dout": dout, "lengths": torch.tensor(lengths, dtype=torch.int32),
            "out": out.detach(), "lse": lse, "dq": dq, "dk": dk, "dv": dv}


def check_attention(name, c, lengths, failures, stats):
    q, k, v, dout, out, lse = c["q"], c["k"], c["v"], c["dout"], c["out"], c["lse"]
    t, d = q.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(d)
    mask = make_mask(lengths, t)

    def cmp(what, x, ref, tol=TOL):
        e = (x - ref).abs().max().item()
        stats.append((f"{name} {what}", e))
        if not e <= tol:
            failures.append(f"{name}: {what}: max |diff| = {e:.3e} > {tol:g}")

    # plain implementation, forward and autograd
    qq, kk, vv = (x.clone().requires_grad_(True) for x in (q, k, v))
    ref = reference_attention(qq, kk, vv, mask, scale)
    rdq, rdk, rdv = torch.autograd.grad((ref * dout).sum(), (qq, kk, vv))
    cmp("SDPA out vs plain softmax @ v", out, ref.detach())
    cmp("SDPA dq vs plain autograd", c["dq"], rdq)
    cmp("SDPA dk vs plain autograd", c["dk"], rdk)
    cmp("SDPA dv vs plain autograd", c["dv"], rdv)

    # flash-attention formulas from the stored lse
    s = scale * (q @ k.transpose(-2, -1))
    p = torch.exp(s - lse[..., None]).masked_fill(~mask, 0.0)
    cmp("rows of exp(s - lse) sum to 1", p.sum(-1), torch.ones_like(lse))
    cmp("exp(s - lse) @ v vs out", p @ v, out)
    delta = (dout * out).sum(-1, keepdim=True)
    ds = p * (dout @ v.transpose(-2, -1) - delta)
    cmp("dq from lse", scale * ds @ k, c["dq"])
    cmp("dk from lse", scale * ds.transpose(-2, -1) @ q, c["dk"])
    cmp("dv from lse", p.transpose(-2, -1) @ dout, c["dv"])

    for bi, n in enumerate(lengths):
        if n < t:
            e = max(c["dk"][bi, :, n:].abs().max().item(), c["dv"][bi, :, n:].abs().max().item())
            stats.append((f"{name} sample {bi}: max |dk|, |dv| of keys j >= {n}", e))
            if e != 0.0:
                failures.append(f"{name}: sample {bi}: dk/dv of keys j >= {n} not exactly 0 (max {e:.3e})")
        if n == 1:
            cmp(f"sample {bi} (length 1): out == v[:, :, 0]", out[bi], v[bi, :, :1].expand_as(out[bi]), 1e-15)
    if all(n == t for n in lengths):
        qq, kk, vv = (x.clone().requires_grad_(True) for x in (q, k, v))
        causal = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True, scale=scale)
        cdq, cdk, cdv = torch.autograd.grad((causal * dout).sum(), (qq, kk, vv))
        cmp("no padding: out vs is_causal=True", out, causal.detach())
        cmp("no padding: dq vs is_causal=True", c["dq"], cdq)
        cmp("no padding: dk vs is_causal=True", c["dk"], cdk)
        cmp("no padding: dv vs is_causal=True", c["dv"], cdv)
        ok = torch.autograd.gradcheck(
            lambda a, b_, c_: F.scaled_dot_product_attention(a, b_, c_, attn_mask=mask, scale=scale),
            tuple(x.clone().requires_grad_(True) for x in (q, k, v)), raise_exception=False)
        if not ok:
            failures.append(f"{name}: torch.autograd.gradcheck of the masked SDPA failed")
        stats.append((f"{name} gradcheck of masked SDPA passed", float(ok)))


def ce_goldens():
    n, vocab = CE["N"], CE["V"]
    g = torch.Generator().manual_seed(CE["seed"])
    logits = torch.randn(n, vocab, generator=g, dtype=DT) * CE["logit_scale"]
    targets = torch.randint(0, vocab, (n,), generator=g, dtype=torch.int64)
    ignored = torch.randperm(n, generator=g)[:CE["n_ignored"]]
    targets[ignored] = CE["ignore_index"]
    valid = (targets != CE["ignore_index"]).nonzero().flatten()
    targets[valid[0]] = 0
    targets[valid[1]] = vocab - 1
    res = {"logits": logits, "targets": targets}
    for red in ("mean", "sum"):
        x = logits.clone().requires_grad_(True)
        loss = F.cross_entropy(x, targets, ignore_index=CE["ignore_index"], reduction=red)
        (grad,) = torch.autograd.grad(loss, (x,))
        res["loss_" + red] = loss.detach()
        res["dlogits_" + red] = grad
    return res


def check_ce(c, failures, stats):
    logits, targets = c["logits"], c["targets"]
    vocab = logits.shape[1]
    keep = targets != CE["ignore_index"]
    n_valid = int(keep.sum())
    if n_valid != CE["N"] - CE["n_ignored"]:
        failures.append(f"ce: {n_valid} non-ignored rows, expected {CE['N'] - CE['n_ignored']}")
    if not (bool((targets == 0).any()) and bool((targets == vocab - 1).any())):
        failures.append("ce: targets 0 and V-1 not both present")
    logp = torch.log_softmax(logits, dim=-1)
    nll = -logp[keep.nonzero().flatten(), targets[keep]]
    onehot = torch.zeros_like(logits)
    onehot[keep.nonzero().flatten(), targets[keep]] = 1.0
    dsum = (torch.softmax(logits, dim=-1) - onehot) * keep[:, None]

    def cmp(what, x, ref, tol=TOL):
        e = (x - ref).abs().max().item()
        stats.append((f"ce {what}", e))
        if not e <= tol:
            failures.append(f"ce: {what}: max |diff| = {e:.3e} > {tol:g}")

    cmp("loss_sum vs plain", c["loss_sum"], nll.sum())
    cmp("loss_mean vs plain", c["loss_mean"], nll.mean())
    cmp("dlogits_sum vs softmax - onehot", c["dlogits_sum"], dsum)
    cmp("dlogits_mean vs (softmax - onehot) / n_valid", c["dlogits_mean"], dsum / n_valid)
    cmp("loss_sum / n_valid vs loss_mean", c["loss_sum"] / n_valid, c["loss_mean"], 1e-15)
    cmp("dlogits_sum / n_valid vs dlogits_mean", c["dlogits_sum"] / n_valid, c["dlogits_mean"], 1e-15)
    for k in ("dlogits_mean", "dlogits_sum"):
        if not bool((c[k][~keep] == 0).all()):
            failures.append(f"ce: {k}: ignored rows not exactly 0")
    for k in ("loss_mean", "loss_sum"):
        if c[k].shape != torch.Size([]):
            failures.append(f"ce: {k} has shape {list(c[k].shape)}, expected []")


def compute_all():
    tensors = {}
    for i, (name, b, h, t, d, lengths) in enumerate(CASES):
        for k, x in attention_case(i, name, b, h, t, d, lengths).items():
            tensors[f"{name}.{k}"] = x
    for k, x in ce_goldens().items():
        tensors[f"ce.{k}"] = x
    return tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out", default=os.path.join(repo, "tests", "goldens", "masked_attention.safetensors"))
    args = ap.parse_args()

    torch.set_num_threads(1)  # fixed reduction order: regenerating gives the same bits
    print(f"torch {torch.__version__}, safetensors {safetensors.__version__}")
    tensors = compute_all()
    failures, stats = [], []
    again = compute_all()
    for k, x in tensors.items():
        if x.dtype != again[k].dtype or not torch.equal(x, again[k]):
            failures.append(f"{k}: a second in-process computation gave different bits")

    for name, b, h, t, d, lengths in CASES:
        c = {k.split(".", 1)[1]: x for k, x in tensors.items() if k.startswith(name + ".")}
        check_attention(name, c, lengths, failures, stats)
        s = (1.0 / math.sqrt(d)) * (c["q"] @ c["k"].transpose(-2, -1))
        s = s.masked_select(make_mask(lengths, t).expand_as(s))
        print(f"{name}: B={b} H={h} T={t} D={d} lengths {lengths}: allowed scores std {s.std().item():.3f}, "
              f"max |score| {s.abs().max().item():.3f}; max |out| {c['out'].abs().max().item():.3f}")
    check_ce({k.split(".", 1)[1]: x for k, x in tensors.items() if k.startswith("ce.")}, failures, stats)
    print(f"ce: loss_mean {tensors['ce.loss_mean'].item():.12f}, loss_sum {tensors['ce.loss_sum'].item():.12f}, "
          f"targets {tensors['ce.targets'].tolist()}")
    print("\nchecks (max |diff|):")
    for what, e in stats:
        print(f"  {what:55s} {e:.3e}")

    if failures:
        print("\nFAILED (nothing written):\n  " + "\n  ".join(failures))
        return 1

    # ---- write
    cfg = config()
    meta = {"config": json.dumps(cfg, sort_keys=True, separators=(",", ":")), "torch_version": torch.__version__,
            "safetensors_version": safetensors.__version__}
    for name, _, _, _, d, _ in CASES:
        meta[f"{name}.scale"] = repr(1.0 / math.sqrt(d))
    arrays = {k: x.detach().contiguous().numpy().copy() for k, x in tensors.items()}
    size, written = write_goldens(args.out, arrays, meta, MAX_BYTES)
    print(f"\nwrote {args.out}: {size} bytes, {len(arrays)} tensors:")
    for k in sorted(arrays):
        print(f"  {k:20s} {str(arrays[k].dtype):8s} {list(arrays[k].shape)}")
    failures += written

    if failures:
        print("\nFAILED:\n  " + "\n  ".join(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
