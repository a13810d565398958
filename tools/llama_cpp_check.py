#!/usr/bin/env python3
"""tools/llama_cpp_check.py: runs a GGUF model through llama.cpp (PyPI llama-cpp-python): prompt logits + greedy ids.

A tool, never a build or test dependency: the consumer check of mptrain's GGUF export (tools/llama_cpp_reference.py
shows it on files written by llama.cpp's own converter).

  llama_cpp_check.py MODEL.gguf --ids IDS.safetensors --generate N --out OUT.safetensors
                     [--n-ctx C] [--kv-type f32|f16] [--verbose]

IDS.safetensors holds "ids", I64 [T] or [1, T]: the prompt, fed to llama.cpp exactly as given (no BOS is inserted,
no text is tokenized). llama_cpp.Llama(MODEL, n_ctx=C, n_batch=n_ubatch=T, logits_all=True, n_threads=1,
n_threads_batch=1, seed=0, flash_attn=False, type_k=type_v=KV) evaluates the T ids as one batch, then
Llama.generate() draws N tokens with llama.cpp's greedy sampler (temp=0, top_k=1, repeat/frequency/presence
penalties off), each new token evaluated one at a time through the KV cache; generation does not stop at EOS. Writes
OUT.safetensors:
  "logits"     F32 [T, n_vocab]  llama.cpp's logits at every prompt position (row t predicts token t+1)
  "generated"  I64 [N]           the greedy tokens
  __metadata__ (sorted by key): "gguf_sha256" (hex sha256 of MODEL.gguf), "llama_cpp_python_version", "kv_type",
  "n_ctx" (the context llama.cpp allocated), "n_ctx_train", "n_vocab", "system_info" (llama_print_system_info()),
  "llama_cpp_warnings" (llama.cpp's WARN-level log lines while loading and running, e.g. a missing newline token).
Checks (exit 1 with the reason on stderr, nothing written): the model loads (llama.cpp's own error/warning log lines
are printed on failure; a GGML_ASSERT inside llama.cpp, e.g. for duplicate token strings or an F16 norm weight,
aborts the process instead: exit 134 after llama.cpp prints the assertion), ids in [0, n_vocab), T >= 1, T + N <=
the model's context_length (positions past it would mean nothing to compare), every logit finite, and every
generated token is the argmax (lowest index on ties) of the logits llama.cpp returned for its position: llama.cpp's
sampler and its logits agree.

--kv-type: llama.cpp's KV cache holds K and V in F16 by default, which adds ~1e-3 relative error even to an F32 model;
this tool defaults to f32 so that an F32 GGUF matches a float32 reference closely; --kv-type f16 gives llama.cpp's
default behaviour. --n-ctx: default the smallest multiple of 256 >= T + N (llama.cpp pads n_ctx up to a multiple of
256 anyway). Deterministic: one thread, fixed ids, greedy; rerunning with the same build gives the same bytes.

Environment (what this was developed and checked with; Debian 12, Python 3.11, CPU only):

  apt-get install python3-torch python3-numpy python3-venv cmake g++
  /usr/bin/python3 -m venv --system-site-packages /tmp/llama-venv
  CMAKE_ARGS="-DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL=2 \\
      /tmp/llama-venv/bin/pip install llama-cpp-python==0.3.36        # builds llama.cpp: 12.5 min on 2 cores
  /tmp/llama-venv/bin/pip install transformers==4.49.0 safetensors==0.8.0 gguf==0.19.0 sentencepiece==0.2.3
  /tmp/llama-venv/bin/python tools/llama_cpp_check.py MODEL.gguf --ids IDS.safetensors --generate 32 \\
      --out OUT.safetensors

GGML_NATIVE=OFF builds ggml's CPU backend for a fixed x86-64 level (SSE4.2, AVX, AVX2, BMI2, FMA, F16C; no AVX-512
even where the build machine has it) instead of -march=native: every AVX2 machine runs the same kernels, so the
numbers do not depend on which machine built it (a CPU without AVX2 cannot run it). Only llama_cpp, safetensors and
numpy are needed here (not torch).
"""
import argparse
import contextlib
import ctypes
import io
import os
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import sha256_file, sort_metadata  # noqa: E402

_LOG = []  # (level, text) of llama.cpp's log, kept for error reports
_LOG_CB = None


def fail(msg):
    print(f"llama_cpp_check: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def write_sorted(path, arrays, meta):
    """save_file, then rewrite the header in place with __metadata__ sorted by key (the writer keeps it in a hash
    map), mode 0644; re-reads and compares."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    save_file(arrays, path, metadata=meta)
    sort_metadata(path)
    os.chmod(path, 0o644)
    with safe_open(path, framework="np") as f:
        if f.metadata() != meta or set(f.keys()) != set(arrays):
            fail(f"{path} does not re-read as written")
        for k in f.keys():
            if f.get_tensor(k).tobytes() != arrays[k].tobytes():
                fail(f"{path}: {k} does not re-read as written")


def read_ids(path):
    with safe_open(path, framework="np") as f:
        if "ids" not in f.keys():
            fail(f"{path} has no tensor 'ids' (has {sorted(f.keys())})")
        ids = f.get_tensor("ids")
    if ids.dtype != np.int64:
        fail(f"ids must be I64, got {ids.dtype}")
    if ids.ndim == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.ndim != 1 or ids.shape[0] < 1:
        fail(f"ids must be [T] or [1, T] with T >= 1, got shape {list(ids.shape)}")
    return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--ids", required=True)
    ap.add_argument("--generate", type=int, required=True, metavar="N")
    ap.add_argument("--out", required=True)
    ap.add_argument("--n-ctx", type=int, default=0)
    ap.add_argument("--kv-type", choices=["f32", "f16"], default="f32")
    ap.add_argument("--verbose", action="store_true", help="let llama.cpp print its log")
    args = ap.parse_args()

    if args.generate < 0:
        fail("--generate must be >= 0")
    if not os.path.isfile(args.model):
        fail(f"no such file: {args.model}")
    ids = read_ids(args.ids)
    T, N = int(ids.shape[0]), args.generate

    try:
        import llama_cpp
    except Exception as e:  # noqa: BLE001
        fail(f"cannot import llama_cpp: {e}")

    # Keep llama.cpp's log (errors say why a file does not load); replaces llama_cpp._logger's callback. Held in a
    # global: llama.cpp may still log from destructors after main() returns.
    global _LOG_CB

    def log_py(level, text, _user):
        s = text.decode("utf-8", "replace")
        if level == 5 and _LOG:  # GGML_LOG_LEVEL_CONT: continues the previous message
            level = _LOG[-1][0]
        _LOG.append((level, s))
        if args.verbose:
            print(s, end="", file=sys.stderr, flush=True)

    _LOG_CB = log_cb = llama_cpp.llama_log_callback(log_py)
    llama_cpp.llama_log_set(log_cb, ctypes.c_void_p(0))

    n_ctx = args.n_ctx or max(256, -(-(T + N) // 256) * 256)
    if n_ctx < T + N:
        fail(f"--n-ctx {n_ctx} < prompt + generation = {T + N}")
    kv = {"f32": llama_cpp.GGML_TYPE_F32, "f16": llama_cpp.GGML_TYPE_F16}[args.kv_type]
    # verbose=True only so that llama-cpp-python does not point fd 2 at /dev/null while loading: a GGML_ASSERT
    # (e.g. duplicate token strings) then still says why the process aborts. Its Python-level prints are dropped.
    chatter = io.StringIO()
    try:
        with contextlib.redirect_stderr(chatter), contextlib.redirect_stdout(chatter):
            llm = llama_cpp.Llama(model_path=args.model, n_ctx=n_ctx, n_batch=max(T, 1), n_ubatch=max(T, 1),
                                  logits_all=True, n_threads=1, n_threads_batch=1, seed=0, flash_attn=False,
                                  type_k=kv, type_v=kv, verbose=True)
        llama_cpp.llama_log_set(log_cb, ctypes.c_void_p(0))  # in case Llama() installed its own
    except Exception as e:  # noqa: BLE001
        lines = [s.rstrip() for lvl, s in _LOG if lvl in (3, 4) and s.strip()]  # GGML_LOG_LEVEL_WARN, _ERROR
        fail(f"llama.cpp cannot load {args.model}: {e}" + "".join(f"\n  llama.cpp: {s}" for s in lines[-20:]))

    n_vocab = llm.n_vocab()
    n_ctx_train = llm._model.n_ctx_train()
    if ids.min() < 0 or ids.max() >= n_vocab:
        fail(f"ids must lie in [0, {n_vocab}), got [{ids.min()}, {ids.max()}]")
    if T + N > n_ctx_train:
        fail(f"prompt + generation = {T + N} exceeds the model's context_length {n_ctx_train}")

    generated = []
    if N > 0:
        gen = llm.generate([int(t) for t in ids], top_k=1, top_p=1.0, min_p=0.0, typical_p=1.0, temp=0.0,
                           repeat_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0, reset=True)
        for tok in gen:
            generated.append(int(tok))
            if len(generated) == N:
                break
        gen.close()
    else:
        llm.eval([int(t) for t in ids])

    scores = np.array(llm.scores[: T + max(N - 1, 0)], dtype=np.float32)  # rows evaluated so far
    if llm.n_tokens != T + max(N - 1, 0):
        fail(f"llama.cpp evaluated {llm.n_tokens} tokens, expected {T + max(N - 1, 0)}")
    if not np.isfinite(scores).all():
        fail("llama.cpp returned non-finite logits")
    for i, tok in enumerate(generated):
        row = scores[T - 1 + i]
        if int(np.argmax(row)) != tok:
            fail(f"generated token {i} = {tok} is not the argmax {int(np.argmax(row))} of its logits "
                 f"({row[tok]} vs {row.max()})")
        if i + 1 < len(generated) and llm.input_ids[T + i] != tok:
            fail(f"generated token {i} was not the one evaluated next")

    warnings = "".join(s for lvl, s in _LOG if lvl == 3).strip()  # GGML_LOG_LEVEL_WARN lines, in order
    meta = {
        "gguf_sha256": sha256_file(args.model),
        "llama_cpp_warnings": warnings,
        "kv_type": args.kv_type,
        "llama_cpp_python_version": llama_cpp.__version__,
        "n_ctx": str(llm.n_ctx()),
        "n_ctx_train": str(n_ctx_train),
        "n_vocab": str(n_vocab),
        "system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
    }
    arrays = {"logits": np.ascontiguousarray(scores[:T]),
              "generated": np.array(generated, dtype=np.int64).reshape(N)}
    if hasattr(llm, "close"):
        with contextlib.redirect_stderr(chatter), contextlib.redirect_stdout(chatter):
            llm.close()
    write_sorted(args.out, arrays, meta)
    print(f"llama_cpp_check: ok: T={T} N={N} n_vocab={n_vocab} kv={args.kv_type} generated={generated}")


if __name__ == "__main__":
    main()
