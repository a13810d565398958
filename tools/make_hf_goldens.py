#!/usr/bin/env python3
"""tools/make_hf_goldens.py: Hugging Face transformers GPT2LMHeadModel goldens (tests/goldens/hf_gpt2/).

A tool, never a build or test dependency: the C++ tests only read the committed files, so they prove interop with
transformers' GPT-2 without Python.

  python3 tools/make_hf_goldens.py [--out tests/goldens/hf_gpt2]
  python3 tools/make_hf_goldens.py --ours DIR [--out tests/goldens/hf_gpt2]

Default mode: a GPT2LMHeadModel written by transformers itself, and its logits.
  GPT2Config(vocab_size=67, n_positions=24, n_embd=32, n_layer=2, n_head=4, activation_function="gelu_new",
  resid_pdrop=embd_pdrop=attn_pdrop=0, layer_norm_epsilon=1e-5, tie_word_embeddings=True); torch.manual_seed(0);
  GPT2LMHeadModel(config), float32, eval mode (transformers' own init: N(0, 0.02), c_proj weights
  N(0, 0.02/sqrt(2*n_layer))). The tensors that init sets to constants are then perturbed so that every name mapping
  and transpose is exercised, from torch.Generator seed 1 in named_parameters() order, drawn in float32: every
  non-LayerNorm bias += N(0, 0.02), LayerNorm weights = 1 + N(0, 0.1), LayerNorm biases = N(0, 0.02).
  Writes, in OUT:
    model.safetensors, config.json   model.save_pretrained(OUT, safe_serialization=True), i.e. transformers' layout:
                                     "transformer.wte.weight", "transformer.h.0.attn.c_attn.weight", ...; Conv1D
                                     weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) stored [in, out]; the
                                     tied lm_head.weight and the causal-mask buffers (attn.bias, attn.masked_bias,
                                     non-persistent) not stored. The generation_config.json it also writes is deleted
                                     (from_pretrained does not need it).
    hf_logits.safetensors            "ids" I64 [2, 24] (torch.Generator seed 2, uniform in [0, 67)); "logits" F32
                                     [2, 24, 67] of the float32 model; "logits_f64" F64 [2, 24, 67] of the same model
                                     converted with .double() (the float32 weights exactly). __metadata__:
                                     transformers_version, torch_version, safetensors_version, attn_implementation,
                                     max_abs_f32_vs_f64 ("%.3e" of max |logits - logits_f64|).
  Checks (exit 1 on failure): the stored names are exactly the model's state_dict less lm_head.weight, all F32;
  from_pretrained(OUT) reports no missing/unexpected/mismatched keys, ties lm_head to wte and reproduces the float32
  logits bit for bit; max_abs_f32_vs_f64 < 1e-5; hf_logits.safetensors re-reads identically.

--ours DIR: DIR holds model.safetensors + config.json exported by mptrain in that layout (the C++ helper
  `build/main/tests/hf_export_model DIR`). GPT2LMHeadModel.from_pretrained(DIR, output_loading_info=True) must report
  no missing, unexpected or mismatched keys (the causal-mask buffers "*.attn.bias" / "*.attn.masked_bias" would be
  ignored if reported missing; transformers 4.49 does not report them: they are non-persistent buffers), and the
  file must hold exactly the names save_pretrained writes for that config, all F32 (so e.g. a stored lm_head.weight
  fails, although transformers would accept it). The ids of OUT/hf_logits.safetensors go through model.double();
  writes OUT/ours_logits.safetensors: "ids" I64 [2, 24], "logits_f64" F64 [2, 24, vocab]; __metadata__ model_sha256
  (sha256 hex of DIR/model.safetensors), transformers_version, torch_version, safetensors_version,
  attn_implementation. When DIR/model.safetensors is OUT/model.safetensors byte for byte (e.g. `--ours OUT`), its
  logits_f64 must equal hf_logits' bit for bit (a self-test of this mode). On any failure (exit 1) nothing is
  written.

All written files are deterministic: rerunning with the same versions gives the same bytes (one CPU thread, fixed
seeds, __metadata__ sorted by key, mode 0644).

The committed files were produced by torch 1.13.0a0 (Debian bookworm's python3-torch 1.13.1+dfsg-4, CPU) with numpy
1.24.2 (python3-numpy) and, from PyPI, transformers 4.49.0 (the newest that imports with torch 1.13: 4.50 needs
torch.distributed.tensor), safetensors 0.8.0, tokenizers 0.21.4, huggingface_hub 0.36.2; attention "eager"
(transformers picks sdpa only for torch >= 2.1.1):

  apt-get install python3-torch python3-numpy python3-venv
  /usr/bin/python3 -m venv --system-site-packages /tmp/hf-venv
  /tmp/hf-venv/bin/pip install transformers==4.49.0 safetensors
  /tmp/hf-venv/bin/python tools/make_hf_goldens.py
  build/main/tests/hf_export_model /tmp/mpt-hf-export
  /tmp/hf-venv/bin/python tools/make_hf_goldens.py --ours /tmp/mpt-hf-export

Another torch or transformers version may change the last float32 bits of "logits" (and transformers' init may draw
differently); logits_f64 is what the C++ tests should compare against.
"""
import argparse
import copy
import json
import os
import struct
import sys

import safetensors
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import sha256_file  # noqa: E402
import transformers
from safetensors import safe_open
from safetensors.numpy import save_file
from transformers import GPT2Config, GPT2LMHeadModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_goldens import sort_metadata  # noqa: E402  (the same deterministic metadata order)

CONFIG = dict(vocab_size=67, n_positions=24, n_embd=32, n_layer=2, n_head=4, activation_function="gelu_new",
              resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5, tie_word_embeddings=True)
MODEL_SEED = 0      # torch.manual_seed before GPT2LMHeadModel(config)
PERTURB_SEED = 1    # torch.Generator for the biases and LayerNorm parameters
IDS_SEED = 2        # torch.Generator for the ids
B, T = 2, 24
F32_VS_F64_TOL = 1e-5
MASK_BUFFERS = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers that old checkpoints stored


def versions():
    return {"transformers_version": transformers.__version__, "torch_version": torch.__version__,
            "safetensors_version": safetensors.__version__}


def write_safetensors(path, tensors, meta, failures):
    """save_file + sorted metadata + 0644, then re-read and compare."""
    arrays = {k: v.detach().cpu().numpy().copy() for k, v in tensors.items()}
    save_file(arrays, path, metadata=meta)
    sort_metadata(path)
    os.chmod(path, 0o644)  # the reference writer creates it 0600
    with safe_open(path, framework="np") as f:
        if f.metadata() != meta:
            failures.append(f"{path}: metadata differs on re-read")
        if set(f.keys()) != set(arrays):
            failures.append(f"{path}: tensor names differ on re-read")
        for k in f.keys():
            a = f.get_tensor(k)
            if a.dtype != arrays[k].dtype or a.shape != arrays[k].shape or a.tobytes() != arrays[k].tobytes():
                failures.append(f"{path}: {k} differs on re-read")
    print(f"wrote {path}: {os.path.getsize(path)} bytes; "
          + ", ".join(f"{k} {arrays[k].dtype} {list(arrays[k].shape)}" for k in arrays))


def file_tensors(path):
    """{name: (dtype code, shape)} from a safetensors header, and its __metadata__."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"]) for k, v in header.items()}, meta


def expected_names(model):
    """The names save_pretrained stores for this model: the state_dict less the tied LM head (the causal-mask
    buffers are non-persistent, so not in the state_dict)."""
    names = set(model.state_dict().keys())
    if model.config.tie_word_embeddings:
        names.discard("lm_head.weight")
    return names


def check_layout(path, model, failures):
    """The file's names must be exactly those save_pretrained writes for `model`'s config, all F32."""
    stored, meta = file_tensors(path)
    want = expected_names(model)
    extra, missing = sorted(set(stored) - want), sorted(want - set(stored))
    if extra:
        failures.append(f"{path}: tensors save_pretrained does not store: {extra}")
    if missing:
        failures.append(f"{path}: tensors save_pretrained stores but the file lacks: {missing}")
    not_f32 = sorted(k for k, (dt, _) in stored.items() if dt != "F32")
    if not_f32:
        failures.append(f"{path}: tensors not F32: {[(k, stored[k][0]) for k in not_f32]}")
    sd = model.state_dict()
    for k, (dt, shape) in stored.items():
        if k in sd and list(sd[k].shape) != shape:
            failures.append(f"{path}: {k} has shape {shape}, the model's is {list(sd[k].shape)}")
    return stored, meta


def load_checked(directory, failures):
    """from_pretrained with output_loading_info; a non-empty key list (less the mask buffers) is a failure."""
    try:
        model, info = GPT2LMHeadModel.from_pretrained(directory, output_loading_info=True)
    except Exception as e:  # a shape mismatch raises unless ignore_mismatched_sizes; bad metadata raises OSError
        failures.append(f"GPT2LMHeadModel.from_pretrained({directory!r}) raised {type(e).__name__}: {e}")
        return None
    print(f"from_pretrained loading info: { {k: v for k, v in info.items()} }")
    missing = [k for k in info["missing_keys"] if not k.endswith(MASK_BUFFERS)]
    ignored = [k for k in info["missing_keys"] if k.endswith(MASK_BUFFERS)]
    if ignored:
        print(f"  ignored missing causal-mask buffers: {ignored}")
    for what, keys in (("missing_keys", missing), ("unexpected_keys", info["unexpected_keys"]),
                       ("mismatched_keys", info["mismatched_keys"]), ("error_msgs", info.get("error_msgs", []))):
        if keys:
            failures.append(f"from_pretrained({directory!r}): {what} = {keys}")
    model.eval()
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        failures.append(f"from_pretrained({directory!r}): lm_head.weight is not tied to transformer.wte.weight")
    return model


@torch.no_grad()
def logits_of(model, ids):
    return model(ids).logits.detach().clone()


def perturb_constants(model):
    """Biases += N(0, 0.02), LayerNorm weights = 1 + N(0, 0.1), LayerNorm biases = N(0, 0.02)."""
    g = torch.Generator().manual_seed(PERTURB_SEED)
    ln_params = {f"{mn}.{pn}" for mn, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm)
                 for pn, _ in m.named_parameters(recurse=False)}
    changed = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            def normal(std):
                return torch.randn(p.shape, generator=g, dtype=torch.float32) * std
            if name in ln_params and name.endswith(".weight"):
                p.copy_(1.0 + normal(0.1))
            elif name in ln_params:
                p.copy_(normal(0.02))
            elif name.endswith(".bias"):
                p.add_(normal(0.02))
            else:
                continue
            changed.append(name)
    return changed


def make_goldens(out):
    failures = []
    config = GPT2Config(**CONFIG)
    torch.manual_seed(MODEL_SEED)
    model = GPT2LMHeadModel(config).float().eval()
    changed = perturb_constants(model)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, safetensors {safetensors.__version__},"
          f" attention {model.config._attn_implementation}")
    print(f"perturbed {len(changed)} tensors: {changed}")

    os.makedirs(out, exist_ok=True)
    for stale in ("model.safetensors", "config.json", "generation_config.json", "pytorch_model.bin"):
        if os.path.exists(os.path.join(out, stale)):
            os.remove(os.path.join(out, stale))
    model.save_pretrained(out, safe_serialization=True)
    gen = os.path.join(out, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    model_path = os.path.join(out, "model.safetensors")
    os.chmod(model_path, 0o644)
    os.chmod(os.path.join(out, "config.json"), 0o644)
    written = sorted(os.listdir(out))
    print(f"save_pretrained left in {out}: {written}")

    stored, meta = check_layout(model_path, model, failures)
    print(f"{model_path}: {os.path.getsize(model_path)} bytes, __metadata__ {meta}, {len(stored)} tensors:")
    for k in sorted(stored):
        print(f"  {k:40s} {stored[k][0]} {stored[k][1]}")
    if meta != {"format": "pt"}:
        failures.append(f"{model_path}: __metadata__ {meta}, expected {{'format': 'pt'}}")
    print(f"config.json:\n{open(os.path.join(out, 'config.json')).read()}")

    ids = torch.randint(0, config.vocab_size, (B, T), generator=torch.Generator().manual_seed(IDS_SEED),
                        dtype=torch.int64)
    logits = logits_of(model, ids)
    logits_f64 = logits_of(copy.deepcopy(model).double(), ids)
    assert logits.dtype == torch.float32 and logits_f64.dtype == torch.float64
    max_abs = (logits.double() - logits_f64).abs().max().item()
    print(f"logits: max |f32 - f64| = {max_abs:.3e}, max |f64| = {logits_f64.abs().max().item():.3e}")
    if not max_abs < F32_VS_F64_TOL:
        failures.append(f"max |logits f32 - f64| = {max_abs:.3e} >= {F32_VS_F64_TOL:g}")

    reloaded = load_checked(out, failures)
    if reloaded is not None:
        if reloaded.config._attn_implementation != model.config._attn_implementation:
            failures.append(f"reloaded attention {reloaded.config._attn_implementation}")
        if not torch.equal(logits_of(reloaded, ids), logits):
            failures.append("the reloaded model's float32 logits differ from the saved model's")

    meta = dict(versions(), attn_implementation=model.config._attn_implementation,
                max_abs_f32_vs_f64=f"{max_abs:.3e}")
    write_safetensors(os.path.join(out, "hf_logits.safetensors"),
                      {"ids": ids, "logits": logits, "logits_f64": logits_f64}, meta, failures)
    return failures


def check_ours(directory, out):
    failures = []
    model_path = os.path.join(directory, "model.safetensors")
    for need in (model_path, os.path.join(directory, "config.json")):
        if not os.path.isfile(need):
            return [f"{need} does not exist"]
    golden_path = os.path.join(out, "hf_logits.safetensors")
    if not os.path.isfile(golden_path):
        return [f"{golden_path} does not exist: run this tool without --ours first"]
    with safe_open(golden_path, framework="pt") as f:
        ids = f.get_tensor("ids")
        golden_f64 = f.get_tensor("logits_f64")
    digest = sha256_file(model_path)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, safetensors {safetensors.__version__}")
    print(f"{model_path}: {os.path.getsize(model_path)} bytes, sha256 {digest}")
    _, meta = file_tensors(model_path)
    if not meta or meta.get("format") != "pt":
        return failures + [f"{model_path}: __metadata__ is {meta}; transformers requires {{\"format\": \"pt\"}}"]

    model = load_checked(directory, failures)
    if model is None:
        return failures
    stored, _ = check_layout(model_path, model, failures)
    print(f"{len(stored)} tensors: " + ", ".join(f"{k} {dt} {shape}" for k, (dt, shape) in sorted(stored.items())))
    c = model.config
    print(f"config: vocab_size {c.vocab_size}, n_positions {c.n_positions}, n_embd {c.n_embd}, n_layer {c.n_layer}, "
          f"n_head {c.n_head}, activation {c.activation_function}, layer_norm_epsilon {c.layer_norm_epsilon}, "
          f"tie_word_embeddings {c.tie_word_embeddings}, attention {c._attn_implementation}")
    if c.vocab_size < CONFIG["vocab_size"] or c.n_positions < T:
        return failures + [f"the golden ids need vocab_size >= {CONFIG['vocab_size']} and n_positions >= {T}"]

    logits_f64 = logits_of(model.double(), ids)
    print(f"logits_f64 {list(logits_f64.shape)}, max |x| = {logits_f64.abs().max().item():.3e}")
    golden_model = os.path.join(out, "model.safetensors")
    if os.path.isfile(golden_model) and sha256_file(golden_model) == digest:
        same = logits_f64.shape == golden_f64.shape and torch.equal(logits_f64, golden_f64)
        print(f"DIR/model.safetensors is {golden_model}: logits_f64 equal to hf_logits' bit for bit: {same}")
        if not same:
            failures.append("the same model.safetensors as the golden gave different logits_f64")
    if failures:  # nothing written: the logits of a wrongly loaded model must not pass for ours
        return failures
    meta = dict(versions(), attn_implementation=c._attn_implementation, model_sha256=digest)
    write_safetensors(os.path.join(out, "ours_logits.safetensors"), {"ids": ids, "logits_f64": logits_f64}, meta,
                      failures)
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out", default=os.path.join(repo, "tests", "goldens", "hf_gpt2"))
    ap.add_argument("--ours", metavar="DIR", help="check mptrain's export in DIR and write OUT/ours_logits.safetensors")
    args = ap.parse_args()

    torch.set_num_threads(1)  # fixed reduction order: regenerating gives the same bits
    failures = check_ours(args.ours, args.out) if args.ours else make_goldens(args.out)
    if failures:
        print("\nFAILED:\n  " + "\n  ".join(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
