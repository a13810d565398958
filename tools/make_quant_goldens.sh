#!/usr/bin/env bash
# tools/make_quant_goldens.sh: the quantized-export goldens (tests/goldens/quantized/): two tiny trained models, what
# llama.cpp, transformers + compressed-tensors and the gguf package make of mptrain's exports of them, and what the gguf
# package and llama.cpp make of mptrain's Q4_K blocks (step 6, tools/q4k_reference.py, which also runs alone).
#
# A tool, never a build or test dependency: tests/deploy/test_export_goldens.cpp and tests/io/test_gguf_q4k.cpp read the
# committed files, so CI checks the consumers' results without installing them. Needs build/cpu (train_gpt,
# mpt-export, generate, tests/test_io) and three venvs:
#   /tmp/llama-venv  llama-cpp-python 0.3.36 (tools/llama_cpp_check.py's docstring: how it is built)
#   /tmp/ct-venv     torch 2.5.1, transformers 4.49.0, compressed-tensors 0.12.2, accelerate (tools/ct_check.py)
#   /tmp/gguf-venv   gguf 0.19.0, numpy, safetensors (tools/gguf_dump.py)
# Usage: bash tools/make_quant_goldens.sh [OUT]   (default tests/goldens/quantized; work files in a temporary dir)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/tests/goldens/quantized}
bin=$root/build/cpu/examples
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prompt=$'KING RICHARD:\nNow is the winter'

# 1. The models: train_gpt on the built-in tinyshakespeare (deterministic on one machine). The golden keeps the weights
#    (Hugging Face layout, as the checkpoint stores them), config.json and the tokenizer; the tests export from these.
"$bin/train_gpt" --model llama --tokenizer bpe --vocab-size 384 --layers 2 --heads 4 --kv-heads 2 --embd 64 --seq 64 \
  --batch 16 --steps 400 --lr 3e-3 --log-every 400 --eval-every 0 --sample 0 --save-dir "$work/llama" >/dev/null
"$bin/train_gpt" --layers 2 --heads 2 --embd 32 --seq 64 --batch 16 --steps 400 --lr 3e-3 --log-every 400 \
  --eval-every 0 --sample 0 --save-dir "$work/gpt" >/dev/null
for m in llama gpt; do
  mkdir -p "$out/$m"
  cp "$work/$m/step-00000400/model.safetensors" "$work/$m/step-00000400/config.json" "$work/$m/tokenizer.json" "$out/$m/"
done

# 2. llama.cpp on the GGUF exports (the Llama's f32, q8_0, q4_0; the GPT's f32, q8_0): prompt logits, 32 greedy tokens.
for m in llama gpt; do
  "$bin/generate" "$work/$m" --greedy --tokens 1 --prompt "$prompt" --logits-out "$work/$m.prompt.safetensors" >/dev/null
  formats="f32 q8_0 q4_0"
  [[ $m == gpt ]] && formats="f32 q8_0"
  for f in $formats; do
    "$bin/mpt-export" "$work/$m" --format gguf-$f --out "$work/$m.$f.gguf" >/dev/null
    /tmp/llama-venv/bin/python "$root/tools/llama_cpp_check.py" "$work/$m.$f.gguf" --ids "$work/$m.prompt.safetensors" \
      --generate 32 --out "$work/llama_cpp.$m.$f.safetensors" >/dev/null
  done
done
cp "$work/llama.prompt.safetensors" "$work/prompt.safetensors"
# 3. transformers + compressed-tensors on the Llama's compressed-tensors exports.
for f in int8 int4 fp8; do
  "$bin/mpt-export" "$work/llama" --format ct-$f --out "$work/llama.ct-$f" >/dev/null
  /tmp/ct-venv/bin/python - "$work" <<'PY'
import sys
from safetensors.numpy import load_file, save_file
w = sys.argv[1]
save_file({"ids": load_file(f"{w}/prompt.safetensors")["ids"].reshape(1, -1)}, f"{w}/ids2d.safetensors")
PY
  /tmp/ct-venv/bin/python "$root/tools/ct_check.py" "$work/llama.ct-$f" --ids "$work/ids2d.safetensors" \
    --out "$work/ct.$f.safetensors" >/dev/null 2>&1
done
# 4. The gguf package's dequantization of the GPT's q8_0 and q4_0 files and of the Llama's q4_0 file.
for f in q8_0 q4_0; do
  "$bin/mpt-export" "$work/gpt" --format gguf-$f --out "$work/gpt.$f.gguf" >/dev/null
  /tmp/gguf-venv/bin/python "$root/tools/gguf_dump.py" "$work/gpt.$f.gguf" --out "$work/gguf_py.gpt.$f.safetensors" >/dev/null
done
/tmp/gguf-venv/bin/python "$root/tools/gguf_dump.py" "$work/llama.q4_0.gguf" --out "$work/gguf_py.llama.q4_0.safetensors" >/dev/null

# 5. One file per consumer, tensors prefixed by format, provenance in sorted __metadata__.
/tmp/gguf-venv/bin/python - "$work" "$out" <<'PY'
import hashlib, json, sys
from safetensors import safe_open
from safetensors.numpy import load_file, save_file
w, out = sys.argv[1], sys.argv[2]
def meta(path):
    with safe_open(path, "np") as f:
        return f.metadata() or {}
def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()
def write(name, tensors, metadata):
    save_file(tensors, f"{out}/{name}", metadata={k: metadata[k] for k in sorted(metadata)})
t, m = {}, {}
for model, formats in [("llama", ["f32", "q8_0", "q4_0"]), ("gpt", ["f32", "q8_0"])]:
    t[f"{model}.ids"] = load_file(f"{w}/{model}.prompt.safetensors")["ids"]
    for f in formats:
        d = load_file(f"{w}/llama_cpp.{model}.{f}.safetensors")
        t[f"{model}.{f}.logits"], t[f"{model}.{f}.generated"] = d["logits"], d["generated"]
        mm = meta(f"{w}/llama_cpp.{model}.{f}.safetensors")
        m[f"{model}.{f}.gguf_sha256"] = mm["gguf_sha256"]
        m["llama_cpp_python_version"], m["kv_type"] = mm["llama_cpp_python_version"], mm["kv_type"]
write("llama_cpp.safetensors", t, m)
t, m = {}, {}
for f in ["int8", "int4", "fp8"]:
    d = load_file(f"{w}/ct.{f}.safetensors")
    t[f"{f}.logits"] = d["logits"]
    mm = meta(f"{w}/ct.{f}.safetensors")
    m[f"{f}.model_sha256"] = mm["model_sha256"]
    for k in ["torch_version", "transformers_version", "compressed_tensors_version"]:
        m[k] = mm[k]
write("compressed_tensors.safetensors", t, m)
t, m = {}, {}
for model, f in [("gpt", "q8_0"), ("gpt", "q4_0"), ("llama", "q4_0")]:
    d = load_file(f"{w}/gguf_py.{model}.{f}.safetensors")
    keep = [k for k in d if k.startswith("blk.") and k.endswith(".weight") and "norm" not in k]
    if model == "llama":
        keep = [k for k in keep if k.startswith("blk.0.attn_q") or k.startswith("blk.0.attn_k")]
    for k in keep:
        t[f"{model}.{f}.{k}"] = d[k]
    m[f"{model}.{f}.gguf_sha256"] = sha(f"{w}/{model}.{f}.gguf")
    m["gguf_version"] = meta(f"{w}/gguf_py.{model}.{f}.safetensors")["gguf_version"]
write("gguf_py.safetensors", t, m)
PY
# 6. Q4_K: the gguf package's and llama.cpp's dequantization of mptrain's Q4_K blocks of a fixed [8, 512] tensor, and
#    llama.cpp's own Q4_K quantization of it (tools/q4k_reference.py; the test writes the GGUF it reads).
/tmp/llama-venv/bin/python "$root/tools/q4k_reference.py" --test-io "$root/build/cpu/tests/test_io" \
  --out "$out/gguf_q4k.safetensors" >/dev/null
chmod 644 "$out"/*.safetensors "$out"/*/*
ls -l "$out" "$out"/llama "$out"/gpt
