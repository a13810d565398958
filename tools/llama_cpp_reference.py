#!/usr/bin/env python3
"""tools/llama_cpp_reference.py: llama.cpp's own converter on a tiny HF Llama; llama.cpp's logits vs transformers'.

A tool, never a build or test dependency. It establishes, with files written by llama.cpp's convert_hf_to_gguf.py
and llama_model_quantize, what a Llama GGUF that llama.cpp loads looks like, and how closely llama.cpp
(tools/llama_cpp_check.py) reproduces transformers on it: the yardstick for mptrain's own GGUF export.

  llama_cpp_reference.py --out DIR [--llama-cpp-src SRC] [--data tinyshakespeare.txt] [--variants random,trained]

SRC is the llama.cpp tree vendored in the llama-cpp-python sdist (convert_hf_to_gguf.py, conversion/, gguf-py/);
default /tmp/llama-sdist/llama_cpp_python-<installed llama_cpp version>/vendor/llama.cpp. Steps, all in DIR:
  1. spm/tokenizer.model: sentencepiece BPE, vocab 320 (<unk>=0, <s>=1, </s>=2; no byte-fallback pieces: 256 of them
     would not fit in 320), trained on tinyshakespeare.txt (one thread, character_coverage 1.0).
  Then for each variant V (DIR/V/):
  2. hf/: LlamaForCausalLM(vocab 320, hidden 128, intermediate 256, 2 layers, 4 heads, 2 kv heads (GQA),
     max_position_embeddings 64, rms_norm_eps 1e-5, rope_theta 10000, untied lm_head, eager attention) from
     torch.manual_seed(0), its RMSNorm weights set to 1 + N(0, 0.1) from torch.Generator seed 1 (so that a misplaced
     norm shows). "random": initializer_range 0.2 (10x transformers' default, so that logits are not flat: std 2.3),
     no training; a chaotic model, small weight changes move its logits a lot. "trained": initializer_range 0.02,
     then 400 AdamW steps on the text (train() below; loss ~3.4, it continues the prompt with Shakespeare-like words),
     like what mptrain exports. save_pretrained (safetensors) + LlamaTokenizer(tokenizer.model, legacy=True)
     .save_pretrained (legacy: no protobuf needed).
  3. ids.safetensors: "ids" I64 [1, 16]: <s> then the first 15 pieces of "First Citizen:\\nBefore we proceed any
     further, hear me speak."; transformers' float32 and float64 logits and greedy 32-token continuations (argmax,
     full recompute each step, no EOS stop) -> hf_ref.safetensors.
  4. GGUF files: model-{f32,f16,q8_0}.gguf by the unmodified `convert_hf_to_gguf.py hf --outtype T` with its own
     vendored gguf-py (run through CONVERTER_SHIM below: the converter needs torch >= 2.1 dtype names that Debian's
     torch 1.13 lacks); the f32 conversion is tried again with NO_LOCAL_GGUF=1 (PyPI gguf 0.19.0; it fails: the
     converter needs gguf-py newer than any release). model-q4_0.gguf, model-q8_0-lq.gguf by llama.cpp's
     llama_model_quantize(model-f32.gguf, pure=True: every 2-D weight incl. token_embd and output in that type; the
     converter has no q4_0), model-q4_0-mix.gguf by its default mix (pure=False: output.weight -> Q6_K, which falls
     back to Q8_0 because 128 columns are not a multiple of 256). Checks: the f32 file's tensors are HF's weights bit
     for bit, attn_q/attn_k permuted by permute() below (an independent re-implementation of the converter's
     LlamaModel.permute), ne = the torch shape reversed; q8_0 bytes of the converter (gguf-py, numpy) vs
     llama_model_quantize (C), and gguf-py's Q4_0 quantizer vs llama.cpp's, tensor by tensor (reported; all equal).
  5. Each GGUF through tools/llama_cpp_check.py (--generate 32, KV cache f32; the f32 and q8_0 files also with
     llama.cpp's default f16 KV cache) in a subprocess, compared with (a) transformers float32 on the HF weights,
     (b) float64, (c) "deq": transformers float32 on the file's own weights, dequantized with gguf-py and
     un-permuted, i.e. what an exact implementation of that file gives. llama.cpp - deq is llama.cpp's runtime error
     alone (its CPU matmuls quantize activations to q8_0 for q8_0/q4_0 weights and round them to f16 for f16
     weights; f16 KV cache; summation order); deq - hf is the format's weight error. q4_0 is rerun: same bytes.
Writes DIR/report.json (all numbers, the f32 file's key/value list with GGUF types, every file's tensor types and
ne, llama.cpp's warnings) and prints a table. Exit 1 if a step or a layout check fails, or if the f32 file does not
match transformers float32 within 1e-3 (max abs) on all 32 greedy tokens; the other numbers are reported, not judged.
Runs ~4 minutes on 2 cores (mostly the 400 training steps).

Results with the versions below (max |logits diff| over [16, 320]; greedy = agreeing prefix of 32 tokens):
  trained (hf logits max |.| 13.8)   vs hf32   vs deq    deq-hf   greedy=hf  greedy=deq
    f32  kv f32                       4.8e-06   4.8e-06   0         32         32
    f16  kv f32                       3.0e-03   2.4e-03   1.8e-03   32         32
    q8_0 kv f32                       8.5e-02   6.2e-02   4.7e-02   32         32
    q4_0 kv f32 (pure)                1.1e+00   6.3e-02   1.07      9          32
    q4_0 default mix (output Q8_0)    8.6e-01   6.3e-02   0.86      32         32
    f32  kv f16                       1.9e-03   1.9e-03   0         32         32
    q8_0 kv f16                       7.5e-02   5.5e-02   4.7e-02   32         32
  random (max |.| 9.2): f32 2.9e-05 (32/32); f16 3.5e-02 (32/32); q8_0 1.07 vs hf, 0.47 vs deq (12/32, 13/32);
    q4_0 6.3 vs hf, 0.36 vs deq (0/32, 1/32): the chaotic model's top-2 margins (down to 0.003) are below the
    runtime error, so greedy agreement there says nothing about the file.

Environment (Debian 12, Python 3.11, CPU only; Debian's python3-torch 1.13.1 and python3-numpy 1.24.2):

  /usr/bin/python3 -m venv --system-site-packages /tmp/llama-venv
  CMAKE_ARGS="-DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL=2 /tmp/llama-venv/bin/pip install llama-cpp-python==0.3.36
  /tmp/llama-venv/bin/pip install transformers==4.49.0 safetensors==0.8.0 gguf==0.19.0 sentencepiece==0.2.3
  mkdir -p /tmp/llama-sdist && cd /tmp/llama-sdist && \\
      /tmp/llama-venv/bin/pip download llama-cpp-python==0.3.36 --no-binary :all: --no-deps -d . && \\
      tar xzf llama_cpp_python-0.3.36.tar.gz
  /tmp/llama-venv/bin/python tools/llama_cpp_reference.py --out /tmp/llama-ref

(llama-cpp-python 0.3.36 builds llama.cpp from its sdist: 12.5 minutes on 2 cores. transformers 4.49.0 is the
newest that imports with torch 1.13; tokenizers 0.21.4 and huggingface_hub 0.36.2 come with it.)
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
VOCAB, HIDDEN, INTER, LAYERS, HEADS, KV_HEADS, CTX = 320, 128, 256, 2, 4, 2, 64
EPS, THETA = 1e-5, 10000.0
PROMPT_TEXT = "First Citizen:\nBefore we proceed any further, hear me speak."
T, N_GEN = 16, 32
# name -> (initializer_range, training steps): "random" is transformers' init scaled 10x (logits not flat, but a
# chaotic model: tiny weight changes move its logits a lot); "trained" is the default init trained briefly on the
# text, closer to what mptrain exports (peaked, stable predictions).
VARIANTS = {"random": (0.2, 0), "trained": (0.02, 400)}

# convert_hf_to_gguf.py (llama.cpp of llama-cpp-python 0.3.36) pins torch 2.11 and names torch.float8_e4m3fn /
# float8_e5m2 at import (torch >= 2.1); Debian's torch 1.13 has neither. For a float32 Llama they are only dict keys
# and tuple members, so stand-ins let the unmodified converter run: python -c SHIM convert_hf_to_gguf.py ARGS...
CONVERTER_SHIM = """
import os, runpy, sys, torch
for n in ("float8_e4m3fn", "float8_e5m2"):
    if not hasattr(torch, n):
        setattr(torch, n, type(n, (), {"__repr__": lambda self, n=n: "<absent torch." + n + ">"})())
conv = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(conv)))
runpy.run_path(conv, run_name="__main__")
"""


def fail(msg):
    print(f"llama_cpp_reference: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def permute(w, n_head):
    """HF rotate_half layout -> llama.cpp (GGML_ROPE_TYPE_NORM, adjacent pairs) layout, on a [n_head*d, ...] weight:
    out[h*d + 2*i + j] = w[h*d + j*(d/2) + i] for i < d/2, j in {0, 1}."""
    rows = w.shape[0]
    d = rows // n_head
    return w.reshape(n_head, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head):
    rows = w.shape[0]
    d = rows // n_head
    return w.reshape(n_head, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_to_hf_name(name):
    top = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
    if name in top:
        return top[name]
    _, bid, rest = name.split(".", 2)
    sub = {"attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
           "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
           "attn_output.weight": "self_attn.o_proj.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
           "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
           "ffn_down.weight": "mlp.down_proj.weight"}[rest]
    return f"model.layers.{bid}.{sub}"


def read_gguf(path):
    """(kv: list of (key, type string, value)), tensors: {name: (ggml type name, GGUF ne list, raw array)})."""
    from gguf import GGUFReader
    r = GGUFReader(path)
    kv = []
    for field in r.fields.values():
        if field.name.startswith("GGUF."):
            continue
        types = [t.name for t in field.types]
        kind = types[0] if len(types) == 1 else f"{types[0]}[{types[-1]}]"
        value = field.contents()
        if isinstance(value, list) and len(value) > 8:
            value = value[:8] + [f"... ({len(value)} elements)"]
        kv.append((field.name, kind, value))
    tensors = {t.name: (t.tensor_type.name, [int(x) for x in t.shape], np.array(t.data)) for t in r.tensors}
    return kv, tensors


def dequant_state_dict(path):
    from gguf.quants import dequantize
    from gguf import GGUFReader
    import torch
    r = GGUFReader(path)
    sd = {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32)
        a = a.reshape([int(x) for x in reversed(t.shape)])  # GGUF ne is fastest-first: row-major is reversed
        if t.name.endswith("attn_q.weight"):
            a = unpermute(a, HEADS)
        elif t.name.endswith("attn_k.weight"):
            a = unpermute(a, KV_HEADS)
        sd[gguf_to_hf_name(t.name)] = torch.from_numpy(np.ascontiguousarray(a))
    return sd


def greedy(model, ids, n):
    import torch
    seq = ids.clone()
    with torch.no_grad():
        for _ in range(n):
            nxt = model(seq).logits[0, -1].argmax()
            seq = torch.cat([seq, nxt.view(1, 1)], 1)
    return seq[0, ids.shape[1]:].numpy().astype(np.int64)


def agree_prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def run(cmd, env=None, log=None):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if log:
        with open(log, "w") as f:
            f.write(p.stdout + p.stderr)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}:\n{(p.stdout + p.stderr)[-3000:]}")
    return p


def train(model, sp, data, steps, seed):
    """AdamW (lr 3e-3, betas (0.9, 0.95), no weight decay, grad-norm clip 1.0), batches of 16 windows of CTX + 1
    pieces of the encoded text at offsets from torch.Generator(seed); float32, one thread. Returns the last loss."""
    import torch
    toks = torch.tensor(sp.encode(open(data, encoding="utf-8").read()), dtype=torch.int64)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
    model.train()
    loss = float("nan")
    for _ in range(steps):
        off = torch.randint(0, len(toks) - CTX - 1, (16,), generator=g)
        batch = torch.stack([toks[o: o + CTX + 1] for o in off.tolist()])
        out = model(batch[:, :-1], labels=batch[:, :-1].clone())
        opt.zero_grad()
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss = out.loss.item()
    model.eval()
    return loss


def variant(out, name, init_range, train_steps, converter, data, spm_model, sp):
    """One HF model -> GGUF files -> llama.cpp runs; returns its report dict."""
    import torch
    from safetensors.numpy import save_file
    from safetensors import safe_open
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaTokenizer
    import llama_cpp
    from llama_cpp import _logger

    out = os.path.join(out, name)
    os.makedirs(out, exist_ok=True)
    rep = {"init_range": init_range, "train_steps": train_steps}

    # 2. model
    hf_dir = os.path.join(out, "hf")
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=CTX,
                      rms_norm_eps=EPS, rope_theta=THETA, tie_word_embeddings=False, initializer_range=init_range,
                      bos_token_id=1, eos_token_id=2, attention_bias=False, mlp_bias=False, hidden_act="silu")
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("layernorm.weight") or pname == "model.norm.weight":
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
    if train_steps:
        rep["final_train_loss"] = train(model, sp, data, train_steps, seed=2)
    model.save_pretrained(hf_dir, safe_serialization=True)
    LlamaTokenizer(spm_model, legacy=True).save_pretrained(hf_dir)
    gen_cfg = os.path.join(hf_dir, "generation_config.json")
    if os.path.exists(gen_cfg):
        os.remove(gen_cfg)
    hf_sd = {k: v.detach().clone() for k, v in model.state_dict().items()}

    # 3. prompt and transformers' reference
    ids = torch.tensor([[1] + sp.encode(PROMPT_TEXT)[: T - 1]], dtype=torch.int64)
    ids_path = os.path.join(out, "ids.safetensors")
    save_file({"ids": ids.numpy()}, ids_path)
    with torch.no_grad():
        hf32 = model(ids).logits[0].numpy()
        m64 = LlamaForCausalLM(cfg).double().eval()
        m64.load_state_dict({k: v.double() for k, v in hf_sd.items()})
        hf64 = m64(ids).logits[0].numpy()
    hf_gen = greedy(model, ids, N_GEN)
    hf64_gen = greedy(m64, ids, N_GEN)
    save_file({"ids": ids.numpy(), "logits": hf32, "logits_f64": hf64, "generated": hf_gen},
              os.path.join(out, "hf_ref.safetensors"))
    top2 = np.sort(hf32, -1)[:, -2:]
    rep["hf"] = {"ids": ids[0].tolist(), "generated": hf_gen.tolist(),
                 "generated_f64_agrees": agree_prefix(hf64_gen, hf_gen),
                 "logits_std": float(hf32.std()), "logits_max_abs": float(np.abs(hf32).max()),
                 "max_abs_f32_vs_f64": float(np.abs(hf32 - hf64).max()),
                 "min_top1_top2_margin_prompt": float((top2[:, 1] - top2[:, 0]).min()),
                 "ids_text": sp.decode(ids[0].tolist()), "generated_text": sp.decode(hf_gen.tolist())}

    # 4. GGUF files
    files = {}
    conv_cmd = [sys.executable, "-c", CONVERTER_SHIM, converter, hf_dir]
    for t in ["f32", "f16", "q8_0"]:
        files[t] = os.path.join(out, f"model-{t}.gguf")
        run(conv_cmd + ["--outtype", t, "--outfile", files[t]], log=os.path.join(out, f"convert-{t}.log"))
    pypi_f32 = os.path.join(out, "model-f32-pypi-gguf.gguf")
    p = subprocess.run(conv_cmd + ["--outtype", "f32", "--outfile", pypi_f32],
                       env=dict(os.environ, NO_LOCAL_GGUF="1"), capture_output=True, text=True)
    rep["converter_with_pypi_gguf"] = (
        ("same bytes" if sha256_file(pypi_f32) == sha256_file(files["f32"]) else "DIFFERENT bytes")
        if p.returncode == 0 else f"fails ({p.returncode}): " + (p.stdout + p.stderr).strip().splitlines()[-1])

    _logger.set_verbose(False)
    for qname, ftype, pure in [("q4_0", llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0, True),
                               ("q8_0-lq", llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0, True),
                               ("q4_0-mix", llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0, False)]:
        files[qname] = os.path.join(out, f"model-{qname}.gguf")
        qp = llama_cpp.llama_model_quantize_default_params()
        qp.ftype, qp.nthread, qp.pure = ftype, 1, pure
        rc = llama_cpp.llama_model_quantize(files["f32"].encode(), files[qname].encode(), qp)
        if rc != 0:
            fail(f"llama_model_quantize -> {qname} returned {rc}")

    # layout checks on the f32 file
    kv, tens = read_gguf(files["f32"])
    rep["f32_kv"] = [[k, kind, v] for k, kind, v in kv]
    rep["tensors"] = {}
    for fname, path in files.items():
        _, tt = read_gguf(path)
        rep["tensors"][fname] = {k: [v[0], v[1]] for k, v in sorted(tt.items())}
    if {gguf_to_hf_name(k) for k in tens} != set(hf_sd):
        fail(f"f32 tensors {sorted(tens)} do not map onto HF's {sorted(hf_sd)}")
    layout_errors = []
    for k, (ty, ne, arr) in tens.items():
        w = hf_sd[gguf_to_hf_name(k)].numpy()
        if k.endswith("attn_q.weight"):
            w = permute(w, HEADS)
        elif k.endswith("attn_k.weight"):
            w = permute(w, KV_HEADS)
        if ty != "F32" or ne != list(reversed(w.shape)) or arr.reshape(w.shape).tobytes() != w.tobytes():
            layout_errors.append(k)
    if layout_errors:
        fail(f"f32 tensors not HF's weights (permuted for q/k): {layout_errors}")
    rep["f32_layout_check"] = "every tensor == HF weight (attn_q/attn_k permuted), F32, ne = reversed torch shape"

    # quantized bytes: converter (gguf-py, numpy) vs llama_model_quantize (C)
    _, conv_q8 = read_gguf(files["q8_0"])
    _, lq_q8 = read_gguf(files["q8_0-lq"])
    _, lq_q4 = read_gguf(files["q4_0"])
    rep["q8_0_converter_vs_llama_quantize"] = {
        k: "same" if (conv_q8[k][0] == lq_q8[k][0] and conv_q8[k][2].tobytes() == lq_q8[k][2].tobytes())
        else f"differ ({conv_q8[k][0]} vs {lq_q8[k][0]})" for k in sorted(conv_q8)}
    from gguf.quants import quantize as gq
    from gguf import GGMLQuantizationType
    cmp4 = {}
    for k in sorted(lq_q4):
        ty, ne, raw = lq_q4[k]
        if ty != "Q4_0":
            cmp4[k] = f"llama.cpp kept {ty}"
            continue
        mine = gq(tens[k][2].reshape(list(reversed(ne))), GGMLQuantizationType.Q4_0)
        cmp4[k] = "same" if mine.tobytes() == raw.tobytes() else "differ"
    rep["q4_0_gguf_py_vs_llama_quantize"] = cmp4

    # 5. llama.cpp
    check = os.path.join(HERE, "llama_cpp_check.py")
    runs = [(n, "f32") for n in ["f32", "f16", "q8_0", "q8_0-lq", "q4_0", "q4_0-mix"]] + [("f32", "f16"),
                                                                                           ("q8_0", "f16")]
    rep["runs"] = {}
    for fname, kvt in runs:
        o = os.path.join(out, f"llama-{fname}-kv{kvt}.safetensors")
        run([sys.executable, check, files[fname], "--ids", ids_path, "--generate", str(N_GEN), "--out", o,
             "--kv-type", kvt])
        with safe_open(o, framework="np") as f:
            lg, gen, meta = f.get_tensor("logits"), f.get_tensor("generated"), f.metadata()
        deq = LlamaForCausalLM(cfg).eval()
        deq.load_state_dict(dequant_state_dict(files[fname]), strict=True)
        with torch.no_grad():
            deq32 = deq(ids).logits[0].numpy()
        deq_gen = greedy(deq, ids, N_GEN)
        rep["runs"][f"{fname} kv={kvt}"] = {
            "max_abs_vs_hf_f32": float(np.abs(lg - hf32).max()),
            "max_abs_vs_hf_f64": float(np.abs(lg - hf64).max()),
            "max_abs_vs_deq_f32": float(np.abs(lg - deq32).max()),
            "max_abs_deq_vs_hf_f32": float(np.abs(deq32 - hf32).max()),
            "greedy_agree_with_hf_f32": agree_prefix(gen, hf_gen),
            "greedy_agree_with_deq_f32": agree_prefix(gen, deq_gen),
            "generated": gen.tolist(), "gguf_sha256": meta["gguf_sha256"], "n_ctx": meta["n_ctx"],
            "llama_cpp_warnings": meta["llama_cpp_warnings"]}
        rep["system_info"] = meta["system_info"]
    o2 = os.path.join(out, "llama-q4_0-kvf32-rerun.safetensors")
    run([sys.executable, check, files["q4_0"], "--ids", ids_path, "--generate", str(N_GEN), "--out", o2])
    rep["rerun_same_bytes"] = sha256_file(o2) == sha256_file(os.path.join(out, "llama-q4_0-kvf32.safetensors"))
    run([sys.executable, check, files["f32"], "--ids", ids_path, "--generate", "1", "--out",
         os.path.join(out, "verbose.safetensors"), "--verbose"], log=os.path.join(out, "llama-f32-verbose.log"))
    rep["llama_cpp_warnings"] = {k: r["llama_cpp_warnings"] for k, r in rep["runs"].items()}
    return rep


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--llama-cpp-src", default=None)
    ap.add_argument("--data", default=None)
    ap.add_argument("--variants", default="random,trained", help="comma list of: random, trained")
    args = ap.parse_args()

    import torch
    import transformers
    import sentencepiece as spm
    import safetensors
    import llama_cpp
    from importlib.metadata import version as pkg_version

    torch.set_num_threads(1)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    src = args.llama_cpp_src or f"/tmp/llama-sdist/llama_cpp_python-{llama_cpp.__version__}/vendor/llama.cpp"
    converter = os.path.join(src, "convert_hf_to_gguf.py")
    if not os.path.isfile(converter):
        fail(f"no {converter}: unpack the llama-cpp-python sdist (see the docstring) or pass --llama-cpp-src")
    data = args.data or next((p for p in ["/work/shared/data/tinyshakespeare.txt",
                                          os.path.join(REPO, "examples/data/tinyshakespeare.txt")]
                              if os.path.isfile(p)), None)
    if not data:
        fail("no tinyshakespeare.txt: pass --data")
    report = {"versions": {"llama_cpp_python": llama_cpp.__version__, "transformers": transformers.__version__,
                           "torch": torch.__version__, "gguf_pypi": pkg_version("gguf"),
                           "sentencepiece": spm.__version__, "safetensors": safetensors.__version__,
                           "numpy": np.__version__},
              "llama_cpp_src": src, "variants": {}}

    # 1. tokenizer
    spm_dir = os.path.join(out, "spm")
    os.makedirs(spm_dir, exist_ok=True)
    spm.SentencePieceTrainer.train(input=data, model_prefix=os.path.join(spm_dir, "tokenizer"), model_type="bpe",
                                   vocab_size=VOCAB, character_coverage=1.0, num_threads=1, unk_id=0, bos_id=1,
                                   eos_id=2, pad_id=-1, byte_fallback=False, minloglevel=2)
    spm_model = os.path.join(spm_dir, "tokenizer.model")
    sp = spm.SentencePieceProcessor(model_file=spm_model)
    if sp.vocab_size() != VOCAB:
        fail(f"sentencepiece vocab {sp.vocab_size()} != {VOCAB}")

    for v in [x for x in args.variants.split(",") if x]:
        if v not in VARIANTS:
            fail(f"unknown variant {v}")
        init_range, steps = VARIANTS[v]
        report["variants"][v] = variant(out, v, init_range, steps, converter, data, spm_model, sp)

    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)

    bad = []
    for v, rep in report["variants"].items():
        h = rep["hf"]
        print(f"[{v}] init_range {rep['init_range']}, {rep['train_steps']} training steps"
              + (f" (loss {rep['final_train_loss']:.3f})" if "final_train_loss" in rep else "")
              + f"; hf logits std {h['logits_std']:.3f}, max|.| {h['logits_max_abs']:.3f}, f32 vs f64 "
              f"{h['max_abs_f32_vs_f64']:.2e}, min top1-top2 margin {h['min_top1_top2_margin_prompt']:.4f}")
        q8_same = all(x == "same" for x in rep["q8_0_converter_vs_llama_quantize"].values())
        q4_same = all(x in ("same", "llama.cpp kept F32") for x in rep["q4_0_gguf_py_vs_llama_quantize"].values())
        print(f"  converter with PyPI gguf: {rep['converter_with_pypi_gguf']}; rerun same bytes: "
              f"{rep['rerun_same_bytes']}; q8_0 converter == llama_model_quantize: {q8_same}; q4_0 gguf-py == "
              f"llama.cpp: {q4_same}")
        print(f"  {'file kv':<16} {'vs hf32':>10} {'vs hf64':>10} {'vs deq':>10} {'deq-hf':>10} {'greedy=hf':>9} "
              f"{'greedy=deq':>10}")
        for k, r in rep["runs"].items():
            print(f"  {k:<16} {r['max_abs_vs_hf_f32']:10.3e} {r['max_abs_vs_hf_f64']:10.3e} "
                  f"{r['max_abs_vs_deq_f32']:10.3e} {r['max_abs_deq_vs_hf_f32']:10.3e} "
                  f"{r['greedy_agree_with_hf_f32']:>6}/{N_GEN} {r['greedy_agree_with_deq_f32']:>7}/{N_GEN}")
        f32r = rep["runs"]["f32 kv=f32"]
        if f32r["max_abs_vs_hf_f32"] > 1e-3 or f32r["greedy_agree_with_hf_f32"] != N_GEN:
            bad.append(v)
    print(f"report: {os.path.join(out, 'report.json')}")
    if bad:
        fail(f"the f32 file does not reproduce transformers in: {bad}")


if __name__ == "__main__":
    main()
