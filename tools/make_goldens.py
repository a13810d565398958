#!/usr/bin/env python3
"""tools/make_goldens.py: PyTorch reference goldens for a tiny GPT-2 (tests/goldens/tiny_gpt.safetensors).

A tool, never a build or test dependency: the C++ tests only read the committed file.

  python3 tools/make_goldens.py [--out tests/goldens/tiny_gpt.safetensors]

Model: GPT-2 (pre-LayerNorm blocks, causal self-attention, GELU-tanh MLP, tied LM head, no dropout) with
n_layer=2, n_head=4, n_embd=48, vocab=65, block_size=32, written out in plain torch below. Batch B=4, T=32.
Initial weights: GPT-2 init (N(0, 0.02); c_proj weights N(0, 0.02/sqrt(2*n_layer))), except that the tensors
GPT-2 sets to constants are perturbed so every gradient path is exercised (biases N(0, 0.02), LayerNorm weights
1 + N(0, 0.1), LayerNorm biases N(0, 0.02)); drawn from a seeded torch.Generator and rounded to float32 once.
Three torch.optim.AdamW steps (lr 1e-3, betas (0.9, 0.95), eps 1e-5, weight decay 0.1 on the four Linear weight
kinds, 0 elsewhere) on one fixed batch, run three times from the same float32 initial weights:
  (a) float64            the reference;
  (b) float32            the stored golden values;
  (c) bf16 mixed         float32 master weights + AdamW on them; each step's forward/backward runs on a bfloat16
                         copy of the masters, loss = F.cross_entropy(logits.float(), targets), master.grad =
                         bf16 grad cast to float32.
Stored (float32 unless noted): input.ids / input.targets (int64 [4,32]), init.<param>, logits [4,32,65] and loss []
of the first forward, grad.<param> of the first backward, loss.step{1,2,3} (the loss of the forward of step k, before
the k-th update), step{1,2,3}.<param> (weights after each update). __metadata__: "config" (JSON), "torch_version",
and for every stored float key K except init.*: "f64_err.fp32.K" and "f64_err.bf16.K" = max|x - ref| / max|ref| of
run (b) resp. run (c) against run (a), "%.3e" (4 significant digits); the metadata is sorted by key so that
regenerating gives the same bytes.

Checks (exit 1 on failure): logits, loss and gradients of run (b) within 1e-6 of float64; after-step weights
within 1e-5; loss decreasing; the file re-reads identically; < 2 MiB.
Why eps = 1e-5 and not torch's default 1e-8: AdamW's m / (sqrt(v) + eps) amplifies the rounding of gradient
elements near zero by up to 1 / eps (the key third of attn.c_attn.bias even has an exactly zero gradient: softmax
ignores a per-row constant, so float32 leaves ~1e-11 noise that AdamW turns into ~g / (|g| + eps) moves). With
eps = 1e-8, PyTorch's own float32 weights after one step are up to 7.2e-5 from float64 (6e-6 with 1e-6), so no
float32 implementation could be checked against them at 1e-5; with 1e-5 the worst is 2.8e-6. The after-step
tensors over 1e-6 are printed with their smallest gradients and the error of float32 AdamW arithmetic alone
(float64 AdamW replayed on run (b)'s gradients), which must stay under 1e-6.

The committed file was produced by torch 1.13.0a0 (Debian bookworm's python3-torch 1.13.1+dfsg-4, CPU, 1 thread)
with numpy 1.24.2 (python3-numpy) and safetensors 0.8.0 from PyPI:

  apt-get install python3-torch python3-numpy python3-venv
  /usr/bin/python3 -m venv --system-site-packages /tmp/goldens-venv
  /tmp/goldens-venv/bin/pip install safetensors
  /tmp/goldens-venv/bin/python tools/make_goldens.py

Another torch version gives values that differ in the last float32 bits (reduction orders, BLAS); the f64_err
metadata is what tells how close any of them is to the float64 reference.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from golden_io import sort_metadata  # noqa: F401 (tools that import it from here)
from safetensors import safe_open
from safetensors.numpy import save_file

CONFIG = {
    "model": {"arch": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 48, "vocab_size": 65, "block_size": 32,
              "dropout": 0.0, "layer_norm_eps": 1e-5, "gelu": "tanh", "tied_lm_head": True, "bias": True},
    "batch": {"B": 4, "T": 32},
    "optimizer": {"name": "AdamW", "lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-5, "steps": 3,
                  "weight_decay": {"decay": 0.1, "no_decay": 0.0,
                                   "decay_params": ["attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                                                    "mlp.c_proj.weight"]}},
    "init": {"seed": 1234, "linear_weight_std": 0.02, "embedding_std": 0.02,
             "c_proj_weight_std": "0.02/sqrt(2*n_layer)",
             "bias_std": 0.02, "ln_weight": "1 + N(0, 0.1)", "ln_bias_std": 0.02, "rounded_to": "float32"},
    "runs": {"golden": "float32", "reference": "float64",
             "bf16": "float32 masters + AdamW; forward/backward on a bfloat16 copy; "
                     "loss = cross_entropy(logits.float())"},
    "loss": "mean cross-entropy over B*T positions",
}
M = CONFIG["model"]
L, NH, C, V, BS = M["n_layer"], M["n_head"], M["n_embd"], M["vocab_size"], M["block_size"]
B, T = CONFIG["batch"]["B"], CONFIG["batch"]["T"]
HD = C // NH
EPS_LN = M["layer_norm_eps"]
DECAY_SUFFIXES = tuple(CONFIG["optimizer"]["weight_decay"]["decay_params"])

FP32_TOL = 1e-6
STEP_SANITY = 1e-5  # after-step weights (a real bug shows up as errors of order lr / max|w| ~ 1e-2 and more)


def param_shapes():
    """Parameter names and shapes, in a fixed order (Linear weights are (out, in))."""
    shapes = {"wte.weight": (V, C), "wpe.weight": (BS, C)}
    for i in range(L):
        p = f"h.{i}."
        shapes.update({
            p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
            p + "attn.c_attn.weight": (3 * C, C), p + "attn.c_attn.bias": (3 * C,),
            p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
            p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
            p + "mlp.c_fc.weight": (4 * C, C), p + "mlp.c_fc.bias": (4 * C,),
            p + "mlp.c_proj.weight": (C, 4 * C), p + "mlp.c_proj.bias": (C,),
        })
    shapes.update({"ln_f.weight": (C,), "ln_f.bias": (C,)})
    return shapes


def make_inputs_and_init():
    """ids, targets (int64 [B,T]) and the float32 initial weights, all from one seeded generator."""
    g = torch.Generator().manual_seed(CONFIG["init"]["seed"])
    ids = torch.randint(0, V, (B, T), generator=g, dtype=torch.int64)
    targets = torch.randint(0, V, (B, T), generator=g, dtype=torch.int64)
    init = {}
    for name, shape in param_shapes().items():
        def normal(std):
            return torch.randn(shape, generator=g, dtype=torch.float64) * std
        if name in ("wte.weight", "wpe.weight"):
            w = normal(0.02)
        elif name.endswith("c_proj.weight"):
            w = normal(0.02 / math.sqrt(2 * L))
        elif name.endswith(".weight") and ("ln_" in name):
            w = 1.0 + normal(0.1)
        elif name.endswith(".weight"):
            w = normal(0.02)
        else:  # every bias, LayerNorm biases included
            w = normal(0.02)
        init[name] = w.to(torch.float32)  # rounded to float32 once
    return ids, targets, init


def forward(p, ids):
    """logits [B,T,V] in the dtype of the parameters p (dict name -> tensor)."""
    b, t = ids.shape
    x = p["wte.weight"][ids] + p["wpe.weight"][torch.arange(t)]
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    for i in range(L):
        h = f"h.{i}."
        a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], EPS_LN)
        qkv = a @ p[h + "attn.c_attn.weight"].t() + p[h + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=-1)
        q = q.view(b, t, NH, HD).transpose(1, 2)  # [b, nh, t, hd]; head j = columns j*HD .. j*HD+HD-1
        k = k.view(b, t, NH, HD).transpose(1, 2)
        v = v.view(b, t, NH, HD).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HD))
        att = att.masked_fill(mask, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, C)
        x = x + (y @ p[h + "attn.c_proj.weight"].t() + p[h + "attn.c_proj.bias"])
        m = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], EPS_LN)
        m = F.gelu(m @ p[h + "mlp.c_fc.weight"].t() + p[h + "mlp.c_fc.bias"], approximate="tanh")
        x = x + (m @ p[h + "mlp.c_proj.weight"].t() + p[h + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], EPS_LN)
    return x @ p["wte.weight"].t()  # tied LM head, no bias


def make_optimizer(params):
    opt = CONFIG["optimizer"]
    decay = [t for n, t in params.items() if n.endswith(DECAY_SUFFIXES)]
    no_decay = [t for n, t in params.items() if not n.endswith(DECAY_SUFFIXES)]
    assert len(decay) == 4 * L and len(decay) + len(no_decay) == len(params)
    return torch.optim.AdamW([{"params": decay, "weight_decay": opt["weight_decay"]["decay"]},
                              {"params": no_decay, "weight_decay": opt["weight_decay"]["no_decay"]}],
                             lr=opt["lr"], betas=tuple(opt["betas"]), eps=opt["eps"])


def run(init, ids, targets, mode):
    """mode: 'f64', 'f32' or 'bf16'. Returns {key: float tensor (detached, in the run's dtype)}."""
    master_dtype = torch.float64 if mode == "f64" else torch.float32
    masters = {n: w.to(master_dtype).clone().requires_grad_(True) for n, w in init.items()}
    opt = make_optimizer(masters)
    out = {}
    for step in range(1, CONFIG["optimizer"]["steps"] + 1):
        opt.zero_grad(set_to_none=True)
        if mode == "bf16":
            work = {n: w.detach().to(torch.bfloat16).requires_grad_(True) for n, w in masters.items()}
            logits = forward(work, ids)
            loss = F.cross_entropy(logits.float().view(-1, V), targets.view(-1))
            loss.backward()
            for n, w in masters.items():
                w.grad = work[n].grad.float()
            grads = {n: work[n].grad for n in masters}
        else:
            logits = forward(masters, ids)
            loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))
            loss.backward()
            grads = {n: w.grad for n, w in masters.items()}
        for n, w in masters.items():  # not stored: every step's gradient as the optimizer saw it, for replay_adamw
            out[f"_grad{step}.{n}"] = w.grad.detach().clone()
        if step == 1:
            out["logits"] = logits.detach().clone()
            out["loss"] = loss.detach().clone()
            for n, gr in grads.items():
                out["grad." + n] = gr.detach().clone()
        out[f"loss.step{step}"] = loss.detach().clone()
        opt.step()
        for n, w in masters.items():
            out[f"step{step}.{n}"] = w.detach().clone()
    with torch.no_grad():  # not stored: the loss after the last update, printed only
        if mode == "bf16":
            lg = forward({n: w.to(torch.bfloat16) for n, w in masters.items()}, ids).float()
        else:
            lg = forward(masters, ids)
        out["_loss.after3"] = F.cross_entropy(lg.view(-1, V), targets.view(-1)).detach()
    return out


def replay_adamw(init, run_out):
    """float64 AdamW fed with the gradients a run's optimizer saw: {"stepS.<param>": float64 weights}.

    Compared with the float32 run it measures the error of float32 AdamW arithmetic alone; compared with the
    float64 run, the part of the float32 error that comes from the gradients (AdamW divides by sqrt(v) + eps, so
    an element whose first moment or gradient is near zero turns a tiny gradient difference into a large one)."""
    params = {n: w.double().clone().requires_grad_(True) for n, w in init.items()}
    opt = make_optimizer(params)
    out = {}
    for step in range(1, CONFIG["optimizer"]["steps"] + 1):
        opt.zero_grad(set_to_none=True)
        for n, w in params.items():
            w.grad = run_out[f"_grad{step}.{n}"].double()
        opt.step()
        for n, w in params.items():
            out[f"step{step}.{n}"] = w.detach().clone()
    return out


def write_goldens(path, arrays, meta, max_bytes):
    """Writes arrays (name -> numpy array) with metadata to path as safetensors, the metadata sorted (sort_metadata)
    and the file world-readable, then reads it back. Returns (size in bytes, failures: a list of what is wrong)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    save_file(arrays, path, metadata=meta)
    sort_metadata(path)
    os.chmod(path, 0o644)  # the reference writer creates it 0600
    size = os.path.getsize(path)
    failures = [] if size < max_bytes else [f"file is {size} bytes, not < {max_bytes}"]
    with safe_open(path, framework="np") as f:
        if f.metadata() != meta:
            failures.append("metadata differs on re-read")
        if set(f.keys()) != set(arrays):
            failures.append("tensor names differ on re-read")
        for k in f.keys():
            a = f.get_tensor(k)
            if a.dtype != arrays[k].dtype or a.shape != arrays[k].shape or a.tobytes() != arrays[k].tobytes():
                failures.append(f"{k} differs on re-read")
    return size, failures


def rel_err(x, ref):
    x, ref = x.double(), ref.double()
    den = ref.abs().max().item()
    num = (x - ref).abs().max().item()
    return num / den if den > 0 else num


def key_kind(k):
    if k.startswith("grad.") or k.startswith("step"):
        prefix, name = k.split(".", 1)
        return prefix + "." + (name.split(".", 2)[2] if name.startswith("h.") else name)
    return k


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out", default=os.path.join(repo, "tests", "goldens", "tiny_gpt.safetensors"))
    args = ap.parse_args()

    torch.set_num_threads(1)  # fixed reduction order: regenerating on another machine gives the same bits
    ids, targets, init = make_inputs_and_init()
    r64 = run(init, ids, targets, "f64")
    r32 = run(init, ids, targets, "f32")
    r16 = run(init, ids, targets, "bf16")

    failures = []
    float_keys = [k for k in r32 if not k.startswith("_")]
    errs = {}
    for k in float_keys:
        assert r32[k].dtype == torch.float32 and r64[k].dtype == torch.float64, k
        errs[k] = (rel_err(r32[k], r64[k]), rel_err(r16[k].float(), r64[k]))

    # ---- report
    print(f"torch {torch.__version__}, numpy {np.__version__}")
    print(f"{'key':44s} {'f64_err.fp32':>12s} {'f64_err.bf16':>12s}")
    for k in float_keys:
        print(f"{k:44s} {errs[k][0]:12.3e} {errs[k][1]:12.3e}")
    print("\nper kind (max over layers): fp32 / bf16")
    kinds = {}
    for k in float_keys:
        e = kinds.setdefault(key_kind(k), [0.0, 0.0])
        e[0], e[1] = max(e[0], errs[k][0]), max(e[1], errs[k][1])
    for kd, (a, b) in kinds.items():
        print(f"  {kd:40s} {a:10.3e} {b:10.3e}")
    print("\nloss by step (forward of step k, before the k-th update; 'after3' = after the last update):")
    for name, r in (("float64", r64), ("float32", r32), ("bf16", r16)):
        ls = [r[f"loss.step{s}"].item() for s in (1, 2, 3)] + [r["_loss.after3"].item()]
        print(f"  {name:8s} " + "  ".join(f"{x:.9f}" for x in ls))
        if not (ls[0] > ls[1] > ls[2] > ls[3]):
            failures.append(f"{name} loss does not decrease: {ls}")

    # ---- fp32 vs float64 check
    # logits, loss and gradients must be within FP32_TOL of float64. The weights after AdamW updates need not be:
    # m / (sqrt(v) + eps) amplifies the float32 rounding of gradients whose elements (or first moments) are near
    # zero or near eps -- e.g. the key third of attn.c_attn.bias has an exactly zero gradient (softmax ignores a
    # per-row constant), float32 gives it ~1e-11 noise and AdamW moves it by ~1e-6 a step. For those tensors the
    # script requires instead that float32 AdamW arithmetic itself is within FP32_TOL (float64 AdamW replayed on
    # the float32 run's gradients reproduces it) and that the error stays under STEP_SANITY; it prints them.
    replay = replay_adamw(init, r32)
    warnings = []
    for k in float_keys:
        if errs[k][0] < FP32_TOL:
            continue
        msg = f"f64_err.fp32.{k} = {errs[k][0]:.3e} >= {FP32_TOL:g}"
        if not k.startswith("step"):
            failures.append(msg)
            continue
        step, name = int(k[4]), k.split(".", 1)[1]
        arith = rel_err(r32[k], replay[k])
        from_grads = rel_err(replay[k], r64[k])
        gmin = min(r64[f"_grad{s}.{name}"].abs().min().item() for s in range(1, step + 1))
        d = (r32[k].double() - r64[k]).abs()
        idx = int(d.argmax())
        gw = ", ".join(f"{r64[f'_grad{s}.{name}'].flatten()[idx].item():.2e}" for s in range(1, step + 1))
        msg += (f"\n      smallest |grad| (f64, steps 1..{step}) {gmin:.3e}; worst element {idx}: f64 grads [{gw}], "
                f"weight f64 {r64[k].flatten()[idx].item():.6e} fp32 {r32[k].flatten()[idx].item():.6e}"
                f"\n      fp32 AdamW arithmetic error {arith:.3e}; "
                f"f64 AdamW on the fp32 gradients vs f64 {from_grads:.3e}")
        if arith >= FP32_TOL or errs[k][0] >= STEP_SANITY:
            failures.append(msg)
        else:
            warnings.append(msg)
    if warnings:
        print(f"\nafter-step weights over {FP32_TOL:g} because AdamW amplifies near-zero gradients (not failures):")
        print("  " + "\n  ".join(warnings))

    # ---- write
    tensors = {"input.ids": ids.numpy().copy(), "input.targets": targets.numpy().copy()}
    for n, w in init.items():
        tensors["init." + n] = w.numpy().copy()
    for k in float_keys:
        tensors[k] = r32[k].numpy().copy()
    meta = {"config": json.dumps(CONFIG, sort_keys=True, separators=(",", ":")), "torch_version": torch.__version__}
    for k in float_keys:
        meta["f64_err.fp32." + k] = f"{errs[k][0]:.3e}"
        meta["f64_err.bf16." + k] = f"{errs[k][1]:.3e}"
    size, written = write_goldens(args.out, tensors, meta, 2 * 1024 * 1024)
    print(f"\nwrote {args.out}: {size} bytes, {len(tensors)} tensors, {len(meta)} metadata entries")
    failures += written
    if not r32["loss.step1"].equal(r32["loss"]):
        failures.append("loss.step1 != loss")

    if failures:
        print("\nFAILED:\n  " + "\n  ".join(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
