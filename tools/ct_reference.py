#!/usr/bin/env python3
"""tools/ct_reference.py: compressed-tensors checkpoints (INT8, packed INT4, FP8) written by the library itself.

A tool, never a build or test dependency: it shows, with compressed-tensors' own code, the exact layout that an
mptrain quantized export must have so that transformers (and vLLM) load it, and gives exports to test
tools/ct_check.py on.

  python3 tools/ct_reference.py --out DIR [--scheme NAME ...]
  python3 tools/ct_reference.py --out DIR --probe-gpt2

Default mode: a tiny LlamaForCausalLM (GPT-2 cannot be used, see --probe-gpt2)
  LlamaConfig(vocab_size=67, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
  num_key_value_heads=2, max_position_embeddings=32, rms_norm_eps=1e-5, tie_word_embeddings=False), eager attention;
  torch.manual_seed(0); LlamaForCausalLM(config), float32, eval mode; the RMSNorm weights (init 1) are then set to
  1 + N(0, 0.1) from torch.Generator seed 1 so that they matter. For each scheme, on a deep copy:
    1. compressed_tensors.quantization.apply_quantization_config(model, QuantizationConfig(config_groups={"group_0":
       QuantizationScheme(targets=["Linear"], weights=..., input_activations=...)}, ignore=["lm_head"])): every
       nn.Linear but lm_head gets weight_scale (+ weight_zero_point) parameters and a fake-quantizing forward.
    2. Weight calibration as llm-compressor's "minmax" observer does it: min/max of the weight per tensor, per output
       row (channel) or per output row and group of group_size input columns (group), then compressed-tensors'
       calculate_qparams(min, max, args) -> scale (the weight's dtype, F32 here), zero point (0 when symmetric).
       Status set to "frozen". Its logits (the fake-quantized model: weights q*scale, dynamic activations fake-
       quantized per token) are the reference.
    3. ModelCompressor.from_pretrained_model(model, quantization_format=FORMAT).compress(model) -> the compressed
       state dict; model.save_pretrained(DIR/NAME, state_dict=..., safe_serialization=True);
       compressor.update_config(DIR/NAME) writes config.json's "quantization_config" (llm-compressor's
       save_pretrained wrapper does exactly these calls). generation_config.json is deleted.
    4. AutoModelForCausalLM.from_pretrained(DIR/NAME, torch_dtype=float32, attn_implementation="eager",
       output_loading_info=True) twice: run_compressed=True (transformers' default: nn.Linear -> CompressedLinear,
       decompressed on its first forward) must report no missing/unexpected/mismatched keys; run_compressed=False
       (decompressed right after the load) may report exactly the compression parameters as unexpected and the
       packed modules' ".weight" as missing (transformers 4.49 checks the keys before decompressing). Both must
       reproduce the reference logits bit for bit.
  Writes DIR/NAME/{config.json, model.safetensors, ref_logits.safetensors, layout.txt}: ref_logits holds "ids" I64
  [2, 24] (torch.Generator seed 2, uniform in [0, 67)) and "logits" F32 [2, 24, 67] of step 2; layout.txt lists
  every stored tensor (name, dtype, shape) and the quantization_config. Schemes (--scheme, default all):
    w8a16_int     int-quantized   weights int8 per channel, symmetric
    w8a16_naive   naive-quantized the same (naive-quantized is an alias of int-quantized)
    w8a8_int      int-quantized   + input activations int8, dynamic per token, symmetric (preset "W8A8")
    w8a16_pack    pack-quantized  weights int8 per channel packed 4 to an int32 (what llm-compressor picks for W8A16)
    w4a16_g128    pack-quantized  weights int4 per group of 128, symmetric (preset "W4A16")
    w4a16_g32     pack-quantized  weights int4 per group of 32, symmetric
    fp8_tensor    float-quantized weights FP8 E4M3 per tensor + activations FP8 dynamic per token
    fp8_channel   float-quantized weights FP8 E4M3 per channel + activations FP8 dynamic per token ("FP8_DYNAMIC")
    fp8_channel_wonly float-quantized weights FP8 E4M3 per channel, activations not quantized (vLLM: W8A16 FP8)

--probe-gpt2: the same steps on the tiny GPT-2 of tools/make_hf_goldens.py (n_embd 64), printing what happens:
  targets ["Linear"] match only lm_head (GPT-2's projections are transformers' Conv1D, weight [in, out]), which is
  ignored: nothing to quantize. Targets ["Conv1D"] or name regexes ("re:.*c_attn$") do match, but compressed-tensors
  sizes scales from the weight only for nn.Linear, so a Conv1D gets a [1] scale: channel and group strategies fail;
  per-tensor INT8 / FP8 saves, but the default load (run_compressed=True) leaves the Conv1D a Conv1D holding the raw
  codes cast to float (scale never applied): wrong logits, no loading warning. Only run_compressed=False gives
  the right logits. An untied GPT-2 whose only nn.Linear, lm_head, is quantized loads with run_compressed=True but
  not with run_compressed=False (lm_head stays on the meta device). Exit 0: mptrain's quantized export must use a
  Llama-layout (nn.Linear) model.

Environment. torch 1.13 (Debian 12's python3-torch) cannot be used: every compressed-tensors release reads
torch.float8_e4m3fn at import, which needs torch >= 2.1. PyPI's Linux torch wheels pull the CUDA libraries (about
5 GB in the venv; CPU use is fine). transformers 4.49 needs accelerate for quantized models (low_cpu_mem_usage);
compressed-tensors 0.12.2 is the newest that imports with transformers 4.49 (0.13+ imports transformers.masking_utils,
0.16+ needs torch >= 2.10):
  /usr/bin/python3 -m venv /tmp/ct-venv
  /tmp/ct-venv/bin/pip install torch==2.5.1 transformers==4.49.0 compressed-tensors==0.12.2 accelerate==1.15.0 \
      safetensors numpy
  /tmp/ct-venv/bin/python tools/ct_reference.py --out /tmp/ct-ref
Made with torch 2.5.1 (+cu124 wheel, run on CPU), transformers 4.49.0, compressed-tensors 0.12.2, accelerate 1.15.0,
safetensors 0.8.0, numpy 2.4.6, pydantic 2.14.4 (Python 3.11); also passes with compressed-tensors 0.9.2 ... 0.11.0
(whose config.json lacks "version", "transform_config", "sparsity_config" and the per-group "format", and which
quantize "token" activations over the batch dimension instead of per token). The files are deterministic: a rerun
with the same versions writes the same bytes. Exit 1 on any failed check (--probe-gpt2: always 0).

Also checked for each scheme: the stored codes, scales and packing equal, bit for bit, an independent numpy
re-implementation (reference_codes, pack_int32 below): the recipe an exporter must follow.
"""
import argparse
import copy
import json
import os
import shutil
import struct
import sys
import traceback

import numpy as np
import torch

torch.set_num_threads(1)  # fixed reduction order (before transformers is imported)

import compressed_tensors  # noqa: E402
import safetensors  # noqa: E402
import transformers  # noqa: E402
from compressed_tensors.compressors import ModelCompressor  # noqa: E402
from compressed_tensors.quantization import (  # noqa: E402
    QuantizationArgs,
    QuantizationConfig,
    QuantizationScheme,
    QuantizationStatus,
    apply_quantization_config,
)
from compressed_tensors.quantization.utils import calculate_qparams  # noqa: E402
from compressed_tensors.utils import update_parameter_data  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.utils.quantization_config import CompressedTensorsConfig  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ct_check import decode_e4m3fn  # noqa: E402
from golden_io import sort_metadata  # noqa: E402

LLAMA = dict(vocab_size=67, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=32, rms_norm_eps=1e-5, tie_word_embeddings=False,
             attn_implementation="eager")
GPT2 = dict(vocab_size=67, n_positions=24, n_embd=64, n_layer=2, n_head=4, activation_function="gelu_new",
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5, attn_implementation="eager")
MODEL_SEED, PERTURB_SEED, IDS_SEED = 0, 1, 2
B, T = 2, 24

W_INT8_CH = dict(num_bits=8, type="int", symmetric=True, strategy="channel")
A_INT8_TOK = dict(num_bits=8, type="int", symmetric=True, strategy="token", dynamic=True)
A_FP8_TOK = dict(num_bits=8, type="float", symmetric=True, strategy="token", dynamic=True)
SCHEMES = {  # name: (format, weights, input_activations)
    "w8a16_int": ("int-quantized", W_INT8_CH, None),
    "w8a16_naive": ("naive-quantized", W_INT8_CH, None),
    "w8a8_int": ("int-quantized", W_INT8_CH, A_INT8_TOK),
    "w8a16_pack": ("pack-quantized", W_INT8_CH, None),
    "w4a16_g128": ("pack-quantized", dict(num_bits=4, type="int", symmetric=True, strategy="group", group_size=128),
                   None),
    "w4a16_g32": ("pack-quantized", dict(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32),
                  None),
    "fp8_tensor": ("float-quantized", dict(num_bits=8, type="float", symmetric=True, strategy="tensor"), A_FP8_TOK),
    "fp8_channel": ("float-quantized", dict(num_bits=8, type="float", symmetric=True, strategy="channel"),
                    A_FP8_TOK),
    "fp8_channel_wonly": ("float-quantized", dict(num_bits=8, type="float", symmetric=True, strategy="channel"),
                          None),
}


def versions():
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "compressed_tensors": compressed_tensors.__version__, "safetensors": safetensors.__version__}


def make_llama():
    torch.manual_seed(MODEL_SEED)
    model = LlamaForCausalLM(LlamaConfig(**LLAMA)).float().eval()
    g = torch.Generator().manual_seed(PERTURB_SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.1)
    return model


def make_gpt2(**overrides):
    torch.manual_seed(MODEL_SEED)
    return GPT2LMHeadModel(GPT2Config(**dict(GPT2, **overrides))).float().eval()


def make_ids(vocab):
    return torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(IDS_SEED), dtype=torch.int64)


@torch.no_grad()
def logits_of(model, ids):
    return model(ids).logits.detach().clone()


def quant_config(fmt, weights, acts, targets, ignore):
    scheme = QuantizationScheme(targets=targets, weights=QuantizationArgs(**weights),
                                input_activations=QuantizationArgs(**acts) if acts else None)
    return QuantizationConfig(config_groups={"group_0": scheme}, ignore=ignore, format=fmt)


@torch.no_grad()
def calibrate_weights(model):
    """llm-compressor's minmax observer on the weights: min/max per tensor / row / (row, group), then
    compressed-tensors' calculate_qparams. Returns the names of the calibrated modules."""
    done = []
    for name, m in model.named_modules():
        scheme = getattr(m, "quantization_scheme", None)
        if scheme is None or scheme.weights is None:
            continue
        args, w = scheme.weights, m.weight.detach()
        if args.strategy == "tensor":
            mn, mx = torch.aminmax(w)
        elif args.strategy == "channel":
            mn, mx = w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True)
        elif args.strategy == "group":
            g = w.reshape(w.shape[0], -1, args.group_size)
            mn, mx = g.amin(dim=2), g.amax(dim=2)
        else:
            raise ValueError(f"strategy {args.strategy}")
        scale, zp = calculate_qparams(mn, mx, args)
        if tuple(scale.shape) != tuple(m.weight_scale.shape):
            print(f"  note: {name}: calibrated scale {list(scale.shape)} but the module's weight_scale is "
                  f"{list(m.weight_scale.shape)}: it cannot hold it")
        update_parameter_data(m, scale, "weight_scale")
        if hasattr(m, "weight_zero_point"):
            update_parameter_data(m, zp, "weight_zero_point")
        m.quantization_status = QuantizationStatus.FROZEN
        done.append(name)
    return done


def file_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"]) for k, v in header.items()}, meta


def quantize_and_save(model, cfg, out):
    """Steps 1-3. Returns (reference-model, calibrated module names)."""
    apply_quantization_config(model, cfg)
    names = calibrate_weights(model)
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=cfg.format)
    if compressor is None or not names:
        raise RuntimeError(f"no module matched targets {cfg.config_groups['group_0'].targets} (less ignore "
                           f"{cfg.ignore}): nothing is quantized, so there is no quantization_config to save")
    state = compressor.compress(model)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    model.save_pretrained(out, state_dict=state, safe_serialization=True)
    compressor.update_config(out)
    gen = os.path.join(out, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    for f in ("model.safetensors", "config.json"):
        os.chmod(os.path.join(out, f), 0o644)  # save_pretrained's safetensors writer creates 0600
    return names


def load(out, run_compressed, failures, tag):
    """from_pretrained; run_compressed=True must report no keys at all. run_compressed=False decompresses after the
    load, so transformers 4.49 reports the compression parameters as unexpected and packed weights as missing:
    exactly those are allowed there."""
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            out, torch_dtype=torch.float32, attn_implementation="eager", output_loading_info=True,
            quantization_config=CompressedTensorsConfig(run_compressed=run_compressed))
    except Exception as e:
        failures.append(f"{tag}: from_pretrained raised {type(e).__name__}: {e}")
        traceback.print_exc(limit=3)
        return None
    allowed = {}
    if not run_compressed:
        stored, _ = file_header(os.path.join(out, "model.safetensors"))
        prefixes = {k.rsplit(".", 1)[0] for k in stored if k.endswith(".weight_scale")}
        allowed = {"unexpected_keys": {k for k in stored if k.rsplit(".", 1)[0] in prefixes
                                       and k.rsplit(".", 1)[1] != "weight"},
                   "missing_keys": {p + ".weight" for p in prefixes if p + ".weight" not in stored}}
    bad = {k: sorted(set(map(str, v)) - allowed.get(k, set())) for k, v in info.items() if v}
    bad = {k: v for k, v in bad.items() if v}
    if bad:
        failures.append(f"{tag}: loading info {bad}")
    return model.eval()


# ---- an independent re-implementation (numpy only) of what the library wrote: the exporter's recipe ----
ST_NP = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I8": "i1", "I32": "<i4", "I64": "<i8", "U8": "u1",
         "F8_E4M3": "u1"}


def raw_tensors(path):
    """{name: (dtype code, numpy array)} read from the bytes (numpy has no FP8: F8_E4M3 comes back as uint8)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    out = {}
    for k, v in header.items():
        a, b = v["data_offsets"]
        out[k] = (v["dtype"], np.frombuffer(data[a:b], dtype=ST_NP[v["dtype"]]).reshape(v["shape"]))
    return out


def round_e4m3fn(x):
    """float32 values already clamped to [-448, 448] -> nearest E4M3FN value (ties to even), as float64."""
    a = np.abs(x.astype(np.float64))
    _, ex = np.frexp(np.where(a == 0, 1.0, a))  # a = f * 2^ex, f in [0.5, 1)
    quantum = np.exp2(np.maximum(ex - 1, -6) - 3.0)  # 3 mantissa bits; below 2^-6 the subnormal step 2^-9
    return np.sign(x) * np.round(a / quantum) * quantum


def reference_codes(w, args):
    """(codes, scale) as compressed-tensors computes them for a symmetric scheme, from float32 w [out, in]:
    absmax over the block (tensor / output row / output row x group of input columns), scale = absmax / (range/2)
    in float32 with range = qmax - qmin (int8: 255 -> 127.5, int4: 15 -> 7.5, fp8: 896 -> 448), clamped below at
    float32 eps; code = round_half_even(clamp(w / scale, qmin, qmax)) (fp8: clamp to +-448, then round to E4M3)."""
    out_f, in_f = w.shape
    if args.strategy == "tensor":
        absmax = np.abs(w).max().reshape(1)
        expand = lambda s: s.reshape(1, 1)  # noqa: E731
    elif args.strategy == "channel":
        absmax = np.abs(w).max(axis=1, keepdims=True)
        expand = lambda s: s  # noqa: E731
    else:
        gs = args.group_size
        absmax = np.abs(w).reshape(out_f, in_f // gs, gs).max(axis=2)
        expand = lambda s: np.repeat(s, gs, axis=1)  # noqa: E731
    if args.type == "float":
        qmin, qmax, half = np.float32(-448), np.float32(448), np.float32(448)
    else:
        qmin, qmax = np.float32(-2 ** (args.num_bits - 1)), np.float32(2 ** (args.num_bits - 1) - 1)
        half = np.float32((qmax - qmin) / 2)
    scale = np.maximum(absmax.astype(np.float32) / half, np.finfo(np.float32).eps).astype(np.float32)
    v = np.clip(w / expand(scale), qmin, qmax).astype(np.float32)
    codes = round_e4m3fn(v) if args.type == "float" else np.round(v).astype(np.int8)
    return codes, scale


def pack_int32(q, num_bits):
    """int codes [out, in] -> int32 [out, ceil(in / (32/num_bits))]: code + 2^(num_bits-1) (unsigned), element
    j*k + i in bits [num_bits*i, num_bits*(i+1)) of word j (k = 32/num_bits: the lowest bits hold the first
    column), zero padding at the end of a row."""
    k = 32 // num_bits
    u = (q.astype(np.int64) + (1 << (num_bits - 1))).astype(np.uint64)
    pad = (-u.shape[1]) % k
    u = np.pad(u, ((0, 0), (0, pad)))
    words = np.zeros((u.shape[0], u.shape[1] // k), dtype=np.uint64)
    for i in range(k):
        words |= u[:, i::k] << np.uint64(num_bits * i)
    return words.astype(np.uint32).view(np.int32)


def independent_check(base, out, fmt, weights):
    """The stored tensors must be exactly reference_codes / pack_int32 of the float weights."""
    failures = []
    args = QuantizationArgs(**weights)
    raw = raw_tensors(os.path.join(out, "model.safetensors"))
    sd = {k: v.detach().numpy() for k, v in base.state_dict().items()}
    prefixes = sorted(k[: -len(".weight_scale")] for k in raw if k.endswith(".weight_scale"))
    for p in prefixes:
        w = sd[p + ".weight"].astype(np.float32)
        codes, scale = reference_codes(w, args)
        sdt, s = raw[p + ".weight_scale"]
        if sdt != "F32" or s.shape != scale.shape or s.tobytes() != scale.tobytes():
            failures.append(f"{p}.weight_scale: stored {sdt} {list(s.shape)} differs from the recipe's")
        if fmt == "pack-quantized":
            pdt, packed = raw[p + ".weight_packed"]
            if pdt != "I32" or packed.tobytes() != pack_int32(codes, args.num_bits).tobytes():
                failures.append(f"{p}.weight_packed differs from the recipe's")
            shdt, shape = raw[p + ".weight_shape"]
            if shape.tolist() != list(w.shape):
                failures.append(f"{p}.weight_shape {shdt} {shape.tolist()} != {list(w.shape)}")
        elif fmt == "float-quantized":
            qdt, q = raw[p + ".weight"]
            got = decode_e4m3fn(q)
            if qdt != "F8_E4M3" or not np.array_equal(got, codes):
                failures.append(f"{p}.weight: stored FP8 codes differ from the recipe's "
                                f"({int((got != codes).sum())} of {codes.size})")
        else:
            qdt, q = raw[p + ".weight"]
            if qdt != "I8" or q.tobytes() != codes.tobytes():
                failures.append(f"{p}.weight: stored int8 codes differ from the recipe's")
        extra = sorted(k for k in raw if k.startswith(p + ".") and k.rsplit(".", 1)[1] not in
                       ("weight", "weight_scale", "weight_packed", "weight_shape", "bias"))
        if extra:
            failures.append(f"{p}: unexpected stored tensors {extra}")
    return failures, len(prefixes)


def run_scheme(base, name, fmt, weights, acts, out_root, ids, failures, targets=("Linear",), ignore=("lm_head",)):
    out = os.path.join(out_root, name)
    model = copy.deepcopy(base)
    cfg = quant_config(fmt, weights, acts, list(targets), list(ignore))
    try:
        quantized = quantize_and_save(model, cfg, out)
    except Exception as e:
        failures.append(f"{name}: quantize/save raised {type(e).__name__}: {e}")
        traceback.print_exc(limit=4)
        return
    print(f"[{name}] format {fmt}: quantized {len(quantized)} modules: {quantized}")
    ref = logits_of(model, ids)
    dense = logits_of(base, ids)
    print(f"  max |fake-quantized - float| logits = {(ref - dense).abs().max().item():.3e}")
    stored, meta = file_header(os.path.join(out, "model.safetensors"))
    qc = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
    with open(os.path.join(out, "layout.txt"), "w") as f:
        f.write(f"# {name}: {versions()}\n# __metadata__ {meta}\n")
        for k in sorted(stored):
            f.write(f"{k} {stored[k][0]} {stored[k][1]}\n")
        f.write("quantization_config = " + json.dumps(qc, indent=2, sort_keys=True) + "\n")
    ref_path = os.path.join(out, "ref_logits.safetensors")
    meta_out = dict(sorted({f"{k}_version": v for k, v in versions().items()}.items()))
    save_file({"ids": ids, "logits": ref}, ref_path, metadata=meta_out)
    sort_metadata(ref_path)
    os.chmod(ref_path, 0o644)
    fails, n = independent_check(base, out, fmt, weights)
    print(f"  numpy re-implementation of the codes, scales and packing on {n} modules: "
          + ("identical" if not fails else "DIFFERENT"))
    failures.extend(f"{name}: {f}" for f in fails)
    for rc in (True, False):
        tag = f"{name} run_compressed={rc}"
        loaded = load(out, rc, failures, tag)
        if loaded is None:
            continue
        got = logits_of(loaded, ids)
        diff = (got - ref).abs().max().item()
        same = torch.equal(got, ref)
        print(f"  reload {tag}: logits equal bit for bit: {same} (max diff {diff:.3e})")
        if not same:
            failures.append(f"{tag}: reloaded logits differ from the fake-quantized model's (max {diff:.3e})")


def probe_gpt2(out_root):
    """Documents what compressed-tensors + transformers do with GPT-2's Conv1D (weight [in, out])."""
    base = make_gpt2()
    ids = make_ids(base.config.vocab_size)
    w4g32 = dict(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32)
    trials = [  # name, targets, ignore, format, weights, model
        ("gpt2_linear_w8", ("Linear",), ("lm_head",), "int-quantized", W_INT8_CH, base),
        ("gpt2_conv1d_w8_channel", ("Conv1D",), ("lm_head",), "int-quantized", W_INT8_CH, base),
        ("gpt2_conv1d_w8_tensor", ("Conv1D",), ("lm_head",), "int-quantized", dict(W_INT8_CH, strategy="tensor"),
         base),
        ("gpt2_regex_w4_g32", ("re:.*c_attn$", "re:.*c_proj$", "re:.*c_fc$"), ("lm_head",), "pack-quantized", w4g32,
         base),
        ("gpt2_conv1d_fp8_tensor", ("Conv1D",), ("lm_head",), "float-quantized",
         dict(num_bits=8, type="float", symmetric=True, strategy="tensor"), base),
        ("gpt2_untied_lm_head_only_w4_g32", ("Linear",), (), "pack-quantized", w4g32,
         make_gpt2(tie_word_embeddings=False)),
    ]
    for name, targets, ignore, fmt, w, model in trials:
        failures = []
        print(f"\n=== {name}: targets {list(targets)}, ignore {list(ignore)}, format {fmt}, weights {w}, "
              f"tie_word_embeddings {model.config.tie_word_embeddings}")
        run_scheme(model, name, fmt, w, None, out_root, ids, failures, targets=targets, ignore=ignore)
        out = os.path.join(out_root, name)
        if os.path.isfile(os.path.join(out, "layout.txt")):
            lines = [ln.strip() for ln in open(os.path.join(out, "layout.txt"))
                     if ln.startswith(("transformer.h.0.attn.c_attn", "lm_head"))]
            print("  stored: " + "; ".join(lines))
        print("  RESULT: " + ("ok" if not failures else "FAILED:\n    " + "\n    ".join(failures)))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--scheme", action="append", choices=sorted(SCHEMES))
    ap.add_argument("--probe-gpt2", action="store_true")
    args = ap.parse_args()
    print(f"versions: {versions()}")
    os.makedirs(args.out, exist_ok=True)
    if args.probe_gpt2:
        return probe_gpt2(args.out)
    base = make_llama()
    ids = make_ids(base.config.vocab_size)
    failures = []
    for name in args.scheme or list(SCHEMES):
        fmt, w, a = SCHEMES[name]
        run_scheme(base, name, fmt, w, a, args.out, ids, failures)
    if failures:
        print("\nFAILED:\n  " + "\n  ".join(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
