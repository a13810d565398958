#!/usr/bin/env python3
"""tools/make_llama_goldens.py: transformers.LlamaForCausalLM goldens for nn::Llama (tests/goldens/llama_tiny.safetensors).

A tool, never a build or test dependency: the C++ tests only read the committed file.

  python tools/make_llama_goldens.py [--out tests/goldens/llama_tiny.safetensors]

Two small random configurations (prefix caseN.), each a LlamaForCausalLM built with attn_implementation="eager" from
torch.manual_seed(100 + N), its weights rounded to float32 (as stored) and the model then run in float64 on the CPU:
  case0  vocab 64, hidden 32, 2 layers, 4 heads, 2 kv heads (GQA), intermediate 64, untied lm_head
  case1  vocab 48, hidden 32, 1 layer, 4 heads, 1 kv head (MQA), intermediate 48, tie_word_embeddings
Both: max_position_embeddings 64, rope_theta 500 (a small theta makes every rotary frequency matter), rms_norm_eps
1e-5, no biases. Stored per case: every parameter under its state-dict name (F32; a tied case stores embed_tokens only,
as save_pretrained does), ids (I64 [2, 20], uniform from torch.Generator().manual_seed(200 + N)), logits (F64
[2, 20, vocab]) of the full sequences, and logits_tail (F64 [2, vocab]): the last position's logits when positions
0..13 run as a prompt and 14..19 one at a time through HF's KV cache (use_cache=True, the output's `cache` passed
back), which must equal logits[:, 19].
HF computes the rotary angles in float32 even in a float64 model (inv_freq and position ids are cast to float32), so
its logits carry float32 angle errors (~1e-7 relative): the checks below allow for that, and the C++ test compares
at FP32 tolerance.

__metadata__: "config" (JSON, sorted keys: each case's LlamaConfig fields used), "torch_version",
"transformers_version", "safetensors_version"; sorted by key (make_goldens.sort_metadata): reruns give the same bytes.

Checks (exit 1 on failure, nothing written if a check before writing fails):
  - logits_tail equals logits[:, -1] (<= 1e-7);
  - an independent float64 re-implementation here (RMSNorm, rotate_half RoPE with float64 angles, repeat_kv, causal
    softmax, SwiGLU) reproduces logits (<= 1e-6, the float32 angles);
  - computing everything again in-process gives the same bits; the file re-reads identically; size < MAX_BYTES.

The committed file was produced in a venv with torch 2.15.0+cu132 (CPU, 1 thread), transformers 5.24.0 and
safetensors 0.8.0 from pip:

  /tmp/torchvenv/bin/pip install torch==2.15.0 transformers==5.24.0 safetensors==0.8.0
  /tmp/torchvenv/bin/python tools/make_llama_goldens.py
"""
import argparse
import json
import os
import sys

import safetensors
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_goldens import write_goldens  # noqa: E402

MAX_BYTES = 512 * 1024
CASES = [
    dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
         intermediate_size=64, tie_word_embeddings=False),
    dict(vocab_size=48, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=1,
         intermediate_size=48, tie_word_embeddings=True),
]
COMMON = dict(max_position_embeddings=64, rope_theta=500.0, rms_norm_eps=1e-5, attention_bias=False, mlp_bias=False,
              hidden_act="silu", attention_dropout=0.0)
T, PROMPT = 20, 14


def reference_logits(sd, cfg, ids):
    """Float64 Llama from the formulas, independent of transformers' modules."""
    C, H, Hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D, eps, theta = C // H, COMMON["rms_norm_eps"], COMMON["rope_theta"]
    B, L = ids.shape

    def rms(x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w

    inv = theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.arange(L, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)

    def rope(x):  # (B, heads, L, D)
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    x = sd["model.embed_tokens.weight"][ids]
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, sd[p + "input_layernorm.weight"])
        q = (h @ sd[p + "self_attn.q_proj.weight"].T).view(B, L, H, D).transpose(1, 2)
        k = (h @ sd[p + "self_attn.k_proj.weight"].T).view(B, L, Hkv, D).transpose(1, 2)
        v = (h @ sd[p + "self_attn.v_proj.weight"].T).view(B, L, Hkv, D).transpose(1, 2)
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
        s = (q @ k.transpose(-1, -2)) / D ** 0.5
        a = torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v
        x = x + a.transpose(1, 2).reshape(B, L, C) @ sd[p + "self_attn.o_proj.weight"].T
        h = rms(x, sd[p + "post_attention_layernorm.weight"])
        g = h @ sd[p + "mlp.gate_proj.weight"].T
        u = h @ sd[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ sd[p + "mlp.down_proj.weight"].T
    x = rms(x, sd["model.norm.weight"])
    head = sd["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else sd["lm_head.weight"]
    return x @ head.T


def make_case(n):
    cfg = dict(CASES[n])
    torch.manual_seed(100 + n)
    model = LlamaForCausalLM(LlamaConfig(**cfg, **COMMON, attn_implementation="eager")).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.float())  # the stored precision
    model = model.double()
    ids = torch.randint(0, cfg["vocab_size"], (2, T), generator=torch.Generator().manual_seed(200 + n))
    with torch.no_grad():
        logits = model(ids).logits
        out = model(ids[:, :PROMPT], use_cache=True)
        cache, tail = out.cache, None
        for t in range(PROMPT, T):
            out = model(ids[:, t:t + 1], cache=cache, use_cache=True)
            cache, tail = out.cache, out.logits[:, -1]
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if cfg["tie_word_embeddings"]:
        sd.pop("lm_head.weight", None)
    failures = []
    if (tail - logits[:, -1]).abs().max().item() > 1e-7:
        failures.append(f"case{n}: the KV-cache tail differs from the full forward")
    ref = reference_logits(sd, cfg, ids)
    if (ref - logits).abs().max().item() > 1e-6:
        failures.append(f"case{n}: the float64 re-implementation differs by {(ref - logits).abs().max().item()}")
    arrays = {f"case{n}.{k}": v.float().numpy() for k, v in sd.items()}
    arrays[f"case{n}.ids"] = ids.numpy()
    arrays[f"case{n}.logits"] = logits.numpy()
    arrays[f"case{n}.logits_tail"] = tail.numpy()
    return arrays, dict(cfg, **COMMON), failures


def make_all():
    arrays, configs, failures = {}, {}, []
    for n in range(len(CASES)):
        a, c, f = make_case(n)
        arrays.update(a)
        configs[f"case{n}"] = c
        failures += f
    return arrays, configs, failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "goldens",
                                                  "llama_tiny.safetensors"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    arrays, configs, failures = make_all()
    again, _, _ = make_all()
    if any(arrays[k].tobytes() != again[k].tobytes() for k in arrays):
        failures.append("a second computation gives other bits")
    if failures:
        print("\n".join(failures), file=sys.stderr)
        return 1
    meta = {"config": json.dumps(configs, sort_keys=True), "torch_version": torch.__version__,
            "transformers_version": transformers.__version__, "safetensors_version": safetensors.__version__}
    size, failures = write_goldens(args.out, arrays, meta, MAX_BYTES)
    if failures:
        print("\n".join(failures), file=sys.stderr)
        return 1
    print(f"wrote {args.out}: {len(arrays)} tensors, {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
