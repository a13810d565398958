#!/usr/bin/env python3
"""tools/ct_check.py: load a compressed-tensors quantized checkpoint with transformers and write its logits.

A tool, never a build or test dependency: the consumer check for mptrain's quantized Hugging Face exports (the
layout of the compressed-tensors library, which vLLM reads; see tools/ct_reference.py for exports written by the
library itself).

  python3 tools/ct_check.py DIR --ids IDS.safetensors --out LOGITS.safetensors [--no-decompressed-check]

DIR holds config.json (with a "quantization_config" of quant_method "compressed-tensors") and model.safetensors.
IDS.safetensors holds "ids", I64 [B, T]. Checks (exit 1 with the reasons on any failure; nothing is written then):
  - config.json's quantization_config: quant_method "compressed-tensors", quantization_status "compressed", a format
    of int-quantized / naive-quantized / pack-quantized / float-quantized (top level or per group); model.safetensors'
    __metadata__ is {"format": "pt"} (transformers refuses other files).
  - AutoModelForCausalLM.from_pretrained(DIR, torch_dtype=float32, attn_implementation="eager",
    output_loading_info=True) with transformers' default run_compressed=True reports no missing, unexpected or
    mismatched keys and no error messages. The quantization config it parsed is printed.
  - Every module that the file stores quantized (a "<prefix>.weight_scale" next to "<prefix>.weight" or
    "<prefix>.weight_packed") is an nn.Linear with a quantization scheme (transformers 4.49: CompressedLinear;
    GPT-2's Conv1D is matched by class name but then runs on the raw codes), every module the config quantizes has
    its scale in the file, and the float32 weight the loaded module computes with equals, bit for bit, this tool's
    own reading of the file: (code - zero_point) * scale, int8 / FP8 E4M3 codes or int32 words of num_bits-bit
    fields (first column in the lowest bits, stored as code + 2^(num_bits-1)), the scale [1] / [out, 1] /
    [out, in/group_size] broadcast over its block.
  - Every stored tensor went into a model tensor of the same shape, and the quantized data (weight I8 / F8_E4M3,
    weight_packed I32, weight_shape I32 or I64) into one of the same dtype: from_pretrained casts silently. Scales
    are F32 (compressed-tensors dequantizes to the scale's dtype: a BF16 scale breaks a float32 forward).
  - Unless --no-decompressed-check: a second load with run_compressed=False (weights decompressed once on load;
    transformers 4.49 then reports the compressed names as unexpected and packed weights as missing: exactly those
    are allowed) gives the same float32 logits bit for bit.
Writes OUT: "logits" F32 [B, T, vocab] (the float32 model); "logits_f64" F64 [B, T, vocab] (a fresh load converted
with .double() before its first forward: codes and scales exact, so the weights are exactly code * scale; any
dynamic activation quantization is then computed in float64 too, so with activation quantization f32 and f64 differ
by whole activation steps where a rounding flips), left out if that fails (max_abs_f32_vs_f64 then says why);
__metadata__ (sorted): model_sha256 (sha256 hex of DIR/model.safetensors), quant_format, torch_version,
transformers_version, compressed_tensors_version, safetensors_version, attn_implementation, max_abs_f32_vs_f64.
Deterministic: one CPU thread, so rerunning with the same versions gives the same bytes (mode 0644).
What it cannot see: an exporter that packs or scales consistently wrong (say, nibbles reversed) still loads; its
logits then differ from the exporter's own, which is the comparison the caller makes.

Environment (see tools/ct_reference.py: torch 1.13 cannot import compressed-tensors; transformers 4.49 needs
accelerate to load quantized models):
  /usr/bin/python3 -m venv /tmp/ct-venv
  /tmp/ct-venv/bin/pip install torch==2.5.1 transformers==4.49.0 compressed-tensors==0.12.2 accelerate==1.15.0 \
      safetensors numpy
Tested with torch 2.5.1, transformers 4.49.0, compressed-tensors 0.12.2 (the newest that imports with transformers
4.49; 0.13+ needs transformers.masking_utils), accelerate 1.15.0, safetensors 0.8.0, numpy 2.4.6 (Python 3.11); also
passes, with the same logits, under compressed-tensors 0.9.2 (logits differ where activations are quantized: 0.9-0.11
quantize "token" activations over the batch dimension) and under transformers 4.57.6 + compressed-tensors 0.15.0.1.
"""
import argparse
import json
import os
import struct
import sys

import torch

torch.set_num_threads(1)  # fixed reduction order: rerunning gives the same bits

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import sha256_file, sort_metadata  # noqa: E402

FORMATS = ("int-quantized", "naive-quantized", "pack-quantized", "float-quantized")
# suffixes the quantization compressors write next to a quantized module's prefix
COMPRESSION_SUFFIXES = ("weight_scale", "weight_zero_point", "weight_g_idx", "weight_packed", "weight_shape")
# (suffix, allowed file dtypes) of the quantized data: loaded into a tensor of exactly that dtype
CODE_DTYPES = {"weight": ("I8", "F8_E4M3"), "weight_packed": ("I32",), "weight_shape": ("I32", "I64")}
TORCH_TO_ST = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
               torch.int8: "I8", torch.int32: "I32", torch.int64: "I64", torch.uint8: "U8"}
if hasattr(torch, "float8_e4m3fn"):
    TORCH_TO_ST[torch.float8_e4m3fn] = "F8_E4M3"


def file_header(path):
    """{name: (dtype code, shape)} from a safetensors header, and its __metadata__."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"]) for k, v in header.items()}, meta


def versions():
    import compressed_tensors
    return {"torch_version": torch.__version__, "transformers_version": transformers.__version__,
            "compressed_tensors_version": compressed_tensors.__version__,
            "safetensors_version": safetensors.__version__}


def check_config(directory, failures):
    cfg = json.load(open(os.path.join(directory, "config.json")))
    qc = cfg.get("quantization_config")
    if not isinstance(qc, dict):
        failures.append("config.json has no quantization_config")
        return None, None
    print("config.json quantization_config:\n" + json.dumps(qc, indent=2, sort_keys=True))
    if qc.get("quant_method") != "compressed-tensors":
        failures.append(f"quantization_config.quant_method is {qc.get('quant_method')!r}, not 'compressed-tensors'")
    if qc.get("quantization_status") != "compressed":
        failures.append(f"quantization_config.quantization_status is {qc.get('quantization_status')!r}, "
                        "not 'compressed' (transformers would treat the stored weights as dense)")
    formats = {qc.get("format")} | {g.get("format") for g in (qc.get("config_groups") or {}).values()
                                     if isinstance(g, dict) and g.get("format")}
    formats.discard(None)
    bad = sorted(f for f in formats if f not in FORMATS)
    if bad or not formats:
        failures.append(f"quantization_config format(s) {sorted(formats)}: need one of {FORMATS}")
    return cfg, qc


def load(directory, run_compressed, failures, allowed=None):
    from transformers import AutoModelForCausalLM
    from transformers.utils.quantization_config import CompressedTensorsConfig
    kwargs = dict(torch_dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    if not run_compressed:
        kwargs["quantization_config"] = CompressedTensorsConfig(run_compressed=False)
    tag = f"from_pretrained(run_compressed={run_compressed})"
    try:
        model, info = AutoModelForCausalLM.from_pretrained(directory, **kwargs)
    except Exception as e:  # a shape mismatch raises unless ignore_mismatched_sizes; bad metadata raises OSError
        failures.append(f"{tag} raised {type(e).__name__}: {e}")
        return None
    allowed = allowed or {}
    for what in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        keys = sorted(map(str, info.get(what) or []))
        ok = allowed.get(what, set())
        extra = [k for k in keys if k not in ok]
        if extra:
            failures.append(f"{tag}: {what} = {extra}")
        elif keys:
            print(f"{tag}: {len(keys)} {what}, all expected for this load path")
    return model.eval()


def quantized_prefixes(stored):
    return sorted(k[: -len(".weight_scale")] for k in stored if k.endswith(".weight_scale"))


ST_NP = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "BF16": "<u2", "I8": "i1", "I32": "<i4", "I64": "<i8",
         "U8": "u1", "F8_E4M3": "u1"}


def raw_tensors(path, names):
    """{name: (dtype code, numpy array)} read from the file's bytes (F8_E4M3 and BF16 come back as raw integers)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for k in names:
            v = header[k]
            a, b = v["data_offsets"]
            f.seek(base + a)
            out[k] = (v["dtype"], np.frombuffer(f.read(b - a), dtype=ST_NP[v["dtype"]]).reshape(v["shape"]))
    return out


def decode_e4m3fn(u8):
    """FP8 E4M3FN bytes -> float64 (exact): sign, 4 exponent bits (bias 7), 3 mantissa bits, e=0 subnormal."""
    u = u8.astype(np.int64)
    s, e, m = u >> 7, (u >> 3) & 15, u & 7
    v = np.where(e == 0, m * 2.0 ** -9, (1 + m / 8.0) * np.exp2(e - 7.0))
    v = np.where((e == 15) & (m == 7), np.nan, v)
    return np.where(s == 1, -v, v)


def file_dequantized(path, prefix, stored, num_bits):
    """This tool's own reading of the layout: float32 (code - zero_point) * scale, the scale broadcast over the
    block its shape implies ([1]: tensor, [out, 1]: channel, [out, G]: groups of in/G consecutive columns); packed
    codes: num_bits-bit fields, the first column in the lowest bits of each int32, stored as code + 2^(num_bits-1)."""
    names = [n for n in (f"{prefix}.{s}" for s in ("weight", "weight_packed", "weight_shape", "weight_scale",
                                                   "weight_zero_point")) if n in stored]
    raw = raw_tensors(path, names)
    if f"{prefix}.weight_packed" in raw:
        words = raw[f"{prefix}.weight_packed"][1].view(np.uint32).astype(np.int64)
        out_f, in_f = (int(x) for x in raw[f"{prefix}.weight_shape"][1])
        k = 32 // num_bits
        fields = np.stack([(words >> (num_bits * i)) & ((1 << num_bits) - 1) for i in range(k)], axis=-1)
        codes = (fields.reshape(words.shape[0], -1)[:, :in_f] - (1 << (num_bits - 1))).astype(np.float64)
        if codes.shape != (out_f, in_f):
            raise ValueError(f"{prefix}.weight_packed {list(words.shape)} does not hold weight_shape {[out_f, in_f]}")
    else:
        dt, q = raw[f"{prefix}.weight"]
        codes = decode_e4m3fn(q) if dt == "F8_E4M3" else q.astype(np.float64)
    out_f, in_f = codes.shape
    scale = raw[f"{prefix}.weight_scale"][1].astype(np.float32)
    zp = raw[f"{prefix}.weight_zero_point"][1].astype(np.float64) if f"{prefix}.weight_zero_point" in raw else None
    if scale.size == 1:
        scale, zp = scale.reshape(1, 1), (zp.reshape(1, 1) if zp is not None else None)
    elif scale.shape[0] != out_f or in_f % scale.shape[1]:
        raise ValueError(f"{prefix}.weight_scale {list(scale.shape)} does not fit a weight [{out_f}, {in_f}]")
    else:
        rep = in_f // scale.shape[1]
        scale = np.repeat(scale, rep, axis=1)
        zp = np.repeat(zp.reshape(out_f, -1), rep, axis=1) if zp is not None else None
    if zp is not None:
        codes = codes - zp
    return codes.astype(np.float32) * scale  # codes and code differences are exact in float32


def effective_weight(module):
    """The float weight the loaded module computes with: its floating weight (decompressed by the loader), or what
    compressed-tensors' decompress_module makes of its compressed parameters (CompressedLinear before a forward)."""
    w = getattr(module, "weight", None)
    if isinstance(w, torch.Tensor) and w.is_floating_point() and w.element_size() > 1:
        return w.detach()
    compressor = getattr(module, "compressor", None)
    if compressor is None:
        return None
    return compressor.decompress_module(module).detach()


def check_modules(model, stored, model_path, failures):
    """The quantized modules and the stored tensors must line up; returns {prefix: class name} of quantized ones."""
    modules = dict(model.named_modules())
    in_file = quantized_prefixes(stored)
    quantized = {n: type(m).__name__ for n, m in modules.items()
                 if getattr(m, "quantization_scheme", None) is not None
                 and getattr(m.quantization_scheme, "weights", None) is not None}
    for p in sorted(set(quantized) - set(in_file)):
        failures.append(f"{p}: quantized by the config ({quantized[p]}) but the file has no {p}.weight_scale")
    if not in_file:
        failures.append("the file stores no quantized module (no *.weight_scale)")
    for p in in_file:
        m = modules.get(p)
        if m is None:
            failures.append(f"{p}.weight_scale: the model has no module {p}")
            continue
        if not isinstance(m, torch.nn.Linear) or p not in quantized:
            failures.append(f"{p}: stored quantized but loaded as {type(m).__name__}"
                            f"{'' if p in quantized else ' without a quantization scheme'}: compressed-tensors only "
                            "handles nn.Linear (GPT-2's Conv1D would run on the raw codes)")
            continue
    sd = model.state_dict()
    for name, (dt, shape) in sorted(stored.items()):
        suffix = name.rsplit(".", 1)[-1]
        prefix = name.rsplit(".", 1)[0]
        if prefix in in_file and suffix.endswith("_scale") and dt != "F32":
            failures.append(f"{name}: stored {dt}; loaded in float32, compressed-tensors keeps the scale's dtype and "
                            "dequantizes to it, so a non-F32 scale breaks the float32 forward: store F32")
        if prefix in in_file and suffix in CODE_DTYPES and dt not in CODE_DTYPES[suffix]:
            failures.append(f"{name}: stored {dt}, allowed {CODE_DTYPES[suffix]}")
        if name not in sd:
            if prefix not in in_file:  # a quantized module's parameters may be gone once it is decompressed
                failures.append(f"{name}: stored but not a model tensor")
            continue
        t = sd[name]
        if list(t.shape) != list(shape):
            failures.append(f"{name}: stored {dt} {shape}, model tensor {list(t.shape)}")
        model_dt = TORCH_TO_ST.get(t.dtype, str(t.dtype))
        if prefix in in_file and suffix in ("weight", "weight_packed") and dt != model_dt:
            failures.append(f"{name}: stored {dt} but loaded into {model_dt} (silently cast)")
    return {p: type(modules[p]).__name__ for p in in_file if p in modules}


def check_weights(model, stored, model_path, failures):
    """After a forward (when every version has decompressed what it decompresses): the float32 weight each
    quantized module computes with must equal file_dequantized bit for bit."""
    modules = dict(model.named_modules())
    for p in quantized_prefixes(stored):
        m = modules[p]
        try:
            want = torch.from_numpy(file_dequantized(model_path, p, stored, m.quantization_scheme.weights.num_bits))
            got = effective_weight(m)
        except Exception as e:
            failures.append(f"{p}: cannot dequantize: {type(e).__name__}: {e}")
            continue
        if got is None or got.dtype != torch.float32 or tuple(got.shape) != tuple(want.shape):
            failures.append(f"{p}: the loaded module's weight is "
                            f"{None if got is None else (got.dtype, list(got.shape))}, expected float32 "
                            f"{list(want.shape)}")
        elif not torch.equal(got, want):
            failures.append(f"{p}: the loaded module's weight differs from (code - zero_point) * scale read from "
                            f"the file (max {(got - want).abs().max().item():.3e})")


@torch.no_grad()
def logits_of(model, ids):
    return model(ids).logits.detach().clone()


def check(directory, ids_path, out_path, decompressed_check):
    failures = []
    model_path = os.path.join(directory, "model.safetensors")
    for need in (model_path, os.path.join(directory, "config.json"), ids_path):
        if not os.path.isfile(need):
            return [f"{need} does not exist"]
    try:
        v = versions()
    except ImportError as e:
        return [f"compressed-tensors is not importable ({e}); see this tool's docstring for the environment"]
    print(", ".join(f"{k[:-8]} {val}" for k, val in v.items()))
    with safe_open(ids_path, framework="pt") as f:
        if "ids" not in f.keys():
            return [f"{ids_path} has no tensor 'ids'"]
        ids = f.get_tensor("ids")
    if ids.dtype != torch.int64 or ids.ndim != 2:
        return [f"ids must be I64 [B, T], got {ids.dtype} {list(ids.shape)}"]

    cfg, qc = check_config(directory, failures)
    digest = sha256_file(model_path)
    stored, meta = file_header(model_path)
    print(f"{model_path}: {os.path.getsize(model_path)} bytes, sha256 {digest}, __metadata__ {meta}, "
          f"{len(stored)} tensors")
    if meta != {"format": "pt"}:
        failures.append(f"{model_path}: __metadata__ {meta}; transformers requires {{'format': 'pt'}}")
    if failures or cfg is None:
        return failures
    vocab = cfg.get("vocab_size")
    max_pos = cfg.get("max_position_embeddings", cfg.get("n_positions"))
    if vocab is not None and (ids.min().item() < 0 or ids.max().item() >= vocab):
        return [f"ids outside [0, {vocab})"]
    if max_pos is not None and ids.shape[1] > max_pos:
        return [f"ids has T={ids.shape[1]} > max positions {max_pos}"]

    model = load(directory, True, failures)
    if model is None:
        return failures
    pq = model.config.quantization_config
    parsed = pq.quantization_config.model_dump() if getattr(pq, "quantization_config", None) is not None else None
    print("parsed by transformers (CompressedTensorsConfig.quantization_config):\n"
          + json.dumps(parsed, indent=2, sort_keys=True, default=str))
    qformat = parsed.get("format") if parsed else None
    mods = check_modules(model, stored, model_path, failures)
    print(f"{len(mods)} quantized modules: " + ", ".join(f"{p} ({c})" for p, c in mods.items()))
    for p in list(mods)[:1]:
        print("  e.g. " + ", ".join(f"{k} {stored[k][0]} {stored[k][1]}" for k in sorted(stored)
                                    if k.rsplit(".", 1)[0] == p))
    if failures:
        return failures

    try:
        logits = logits_of(model, ids)
    except Exception as e:
        return failures + [f"the float32 forward raised {type(e).__name__}: {e}"]
    print(f"logits F32 {list(logits.shape)}, max |x| = {logits.abs().max().item():.3e}")
    check_weights(model, stored, model_path, failures)
    if failures:
        return failures
    print(f"the weights of all {len(mods)} quantized modules equal (code - zero_point) * scale read from the file")
    logits_f64, f64_note = None, ""
    try:
        # a fresh load, converted before its first forward (CompressedLinear decompresses on the first one); not a
        # deepcopy: compressed-tensors' wrapped forward closes over the original module, so a copy runs the
        # original's float32 parameters
        f64_failures = []
        f64_model = load(directory, True, f64_failures)
        if f64_model is None:
            raise RuntimeError("; ".join(f64_failures))
        logits_f64 = logits_of(f64_model.double(), ids)
        if logits_f64.dtype != torch.float64:
            raise TypeError(f"got {logits_f64.dtype}")
        max_abs = (logits.double() - logits_f64).abs().max().item()
        f64_note = f"{max_abs:.3e}"
        print(f"logits_f64: max |f32 - f64| = {f64_note}")
    except Exception as e:
        f64_note = f"unavailable: {type(e).__name__}: {e}"
        print(f"logits_f64 {f64_note}")
        logits_f64 = None

    if decompressed_check:
        allowed = {"unexpected_keys": {k for k in stored if k.rsplit(".", 1)[-1] in COMPRESSION_SUFFIXES
                                       and k.rsplit(".", 1)[-1] != "weight"},
                   "missing_keys": {p + ".weight" for p in quantized_prefixes(stored)
                                    if p + ".weight" not in stored}}
        dec = load(directory, False, failures, allowed)
        if dec is not None:
            try:
                same = torch.equal(logits_of(dec, ids), logits)
            except Exception as e:
                return failures + [f"the run_compressed=False forward raised {type(e).__name__}: {e}"]
            print(f"run_compressed=False (decompressed on load): float32 logits equal bit for bit: {same}")
            if not same:
                failures.append("run_compressed=False gives other float32 logits than run_compressed=True")
    if failures:
        return failures

    out_meta = dict(v, model_sha256=digest, quant_format=str(qformat),
                    attn_implementation=model.config._attn_implementation, max_abs_f32_vs_f64=f64_note)
    tensors = {"logits": logits.numpy().copy()}
    if logits_f64 is not None:
        tensors["logits_f64"] = logits_f64.numpy().copy()
    out_dir = os.path.dirname(os.path.abspath(out_path))
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, out_path, metadata=out_meta)
    sort_metadata(out_path)
    os.chmod(out_path, 0o644)
    with safe_open(out_path, framework="np") as f:
        if f.metadata() != out_meta or sorted(f.keys()) != sorted(tensors) or any(
                f.get_tensor(k).tobytes() != tensors[k].tobytes() for k in tensors):
            return [f"{out_path}: differs on re-read"]
    print(f"wrote {out_path}: " + ", ".join(f"{k} {a.dtype} {list(a.shape)}" for k, a in tensors.items()))
    return []


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", metavar="DIR")
    ap.add_argument("--ids", required=True, help="safetensors file with 'ids' I64 [B, T]")
    ap.add_argument("--out", required=True, help="safetensors file to write the logits to")
    ap.add_argument("--no-decompressed-check", action="store_true",
                    help="skip the second load with run_compressed=False")
    args = ap.parse_args()
    failures = check(args.dir, args.ids, args.out, not args.no_decompressed_check)
    if failures:
        print("\nFAILED:\n  " + "\n  ".join(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
