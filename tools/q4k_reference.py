#!/usr/bin/env python3
"""tools/q4k_reference.py: what the gguf package and llama.cpp make of mptrain's Q4_K blocks: the Q4_K golden.

A tool, never a build or test dependency: it writes tests/goldens/quantized/gguf_q4k.safetensors, which
tests/io/test_gguf_q4k.cpp (GgufQ4K.TheGgufPackageAndLlamaCppReadAndWriteTheSameBlocks) reads.

  /tmp/llama-venv/bin/python tools/q4k_reference.py --test-io build/cpu/tests/test_io \\
      --out tests/goldens/quantized/gguf_q4k.safetensors

It runs that test with MPT_WRITE_Q4K_GGUF set, which writes a GGUF holding "source" (F32 [8, 512], a fixed formula)
and "q4k" (mptrain's io::quantize_q4_k of it). Then, for "q4k":
  "gguf_py.dequantized"    F32 [8, 512]  gguf.quants.dequantize (the gguf package, llama.cpp's gguf-py)
  "llama_cpp.dequantized"  F32 [8, 512]  ggml's dequantize_row_q4_K (libggml-base of llama-cpp-python)
  "llama_cpp.quantized"    U8 [8, 288]   ggml's quantize_row_q4_K_ref of "source": llama.cpp's own Q4_K bytes (what
                                         llama-quantize writes without an importance matrix)
  __metadata__ (sorted): "q4k_sha256" (of mptrain's Q4_K bytes as the gguf package read them), "gguf_sha256" (the
  file), "gguf_version", "llama_cpp_python_version", "numpy_version", "same_bytes_as_llama_cpp" ("true"/"false").
The venv is tools/llama_cpp_check.py's (/tmp/llama-venv: llama-cpp-python 0.3.36 built with GGML_NATIVE=OFF, gguf
0.19.0, numpy, safetensors). Exit 1 (nothing written) if the file does not hold the two tensors as described.

  /tmp/llama-venv/bin/python tools/q4k_reference.py --llama-quantize MODEL.f32.gguf MODEL.q4_k.gguf

instead runs llama.cpp's own quantizer (llama_model_quantize, MOSTLY_Q4_K_S with pure=True: every 2-D tensor Q4_K,
no importance matrix) on mpt-export's gguf-f32 file and compares every Q4_K tensor of its gguf-q4_k file of the same
checkpoint with llama.cpp's, byte for byte; exit 1 when one differs.
"""
import argparse
import ctypes
import hashlib
import os
import subprocess
import sys
import tempfile
from importlib.metadata import version

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import sha256_file, sort_metadata  # noqa: E402

SHAPE = (8, 512)


def fail(msg):
    print(f"q4k_reference: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def ggml():
    """libggml-base of the installed llama_cpp package, with the two Q4_K row functions typed."""
    import llama_cpp
    lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
    for name in ("quantize_row_q4_K_ref", "dequantize_row_q4_K"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        getattr(lib, name).restype = None
    return lib


def compare_with_llama_quantize(f32_path, q4k_path):
    """llama.cpp's Q4_K file of `f32_path` against ours, tensor by tensor."""
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = 14  # LLAMA_FTYPE_MOSTLY_Q4_K_S
    params.pure = True
    params.nthread = 1
    with tempfile.TemporaryDirectory() as work:
        out = os.path.join(work, "llama_cpp.q4_k.gguf")
        if llama_cpp.llama_model_quantize(f32_path.encode(), out.encode(), ctypes.byref(params)) != 0:
            fail(f"llama_model_quantize failed on {f32_path}")
        theirs = {t.name: t for t in GGUFReader(out).tensors}
        ours = [t for t in GGUFReader(q4k_path).tensors if t.tensor_type == GGMLQuantizationType.Q4_K]
        differ = [t.name for t in ours if theirs[t.name].tensor_type != GGMLQuantizationType.Q4_K
                  or not np.array_equal(np.asarray(theirs[t.name].data), np.asarray(t.data))]
    print(f"{q4k_path}: {len(ours) - len(differ)} of {len(ours)} Q4_K tensors byte-identical to llama.cpp's "
          f"llama_model_quantize of {f32_path}" + (f"; differ: {differ}" if differ else ""))
    return 1 if differ or not ours else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--test-io", help="mptrain's build/cpu/tests/test_io")
    parser.add_argument("--out", help="the golden safetensors file to write")
    parser.add_argument("--llama-quantize", nargs=2, metavar=("F32_GGUF", "Q4K_GGUF"),
                        help="compare mpt-export's gguf-q4_k file with llama.cpp's quantization of its gguf-f32 file")
    args = parser.parse_args()
    if args.llama_quantize:
        return compare_with_llama_quantize(*args.llama_quantize)
    if not args.test_io or not args.out:
        parser.error("--test-io and --out are required (or --llama-quantize)")

    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "q4k.gguf")
        subprocess.run([args.test_io, "--gtest_filter=GgufQ4K.TheGgufPackageAndLlamaCppReadAndWriteTheSameBlocks"],
                       env=dict(os.environ, MPT_WRITE_Q4K_GGUF=path), check=True, stdout=subprocess.DEVNULL)
        reader = GGUFReader(path)
        tensors = {t.name: t for t in reader.tensors}
        if set(tensors) != {"source", "q4k"}:
            fail(f"{path} holds {sorted(tensors)}, expected source and q4k")
        src, q = tensors["source"], tensors["q4k"]
        if src.tensor_type != GGMLQuantizationType.F32 or q.tensor_type != GGMLQuantizationType.Q4_K:
            fail(f"types {src.tensor_type.name}, {q.tensor_type.name}: expected F32 and Q4_K")
        x = np.ascontiguousarray(np.asarray(src.data, dtype=np.float32).reshape(SHAPE))
        ours = np.ascontiguousarray(np.asarray(q.data, dtype=np.uint8).reshape(SHAPE[0], -1))
        if ours.shape[1] != SHAPE[1] // 256 * 144:
            fail(f"q4k holds {ours.shape} bytes, expected [8, 288]")
        gguf_values = dequantize(ours, GGMLQuantizationType.Q4_K).astype(np.float32).reshape(SHAPE)

        lib = ggml()
        theirs = np.zeros_like(ours)
        lib.quantize_row_q4_K_ref(x.ctypes.data, theirs.ctypes.data, x.size)
        ggml_values = np.zeros(SHAPE, dtype=np.float32)
        lib.dequantize_row_q4_K(ours.ctypes.data, ggml_values.ctypes.data, x.size)

        same = bool(np.array_equal(ours, theirs))
        blocks_differ = int((ours.reshape(-1, 144) != theirs.reshape(-1, 144)).any(axis=1).sum())
        print(f"{path}: llama.cpp's quantize_row_q4_K_ref gives the same bytes: {same} ({blocks_differ} of "
              f"{ours.size // 144} blocks differ); gguf == ggml dequantization: "
              f"{np.array_equal(gguf_values.view(np.uint32), ggml_values.view(np.uint32))}; RMS error "
              f"{float(np.sqrt(np.mean((gguf_values.astype(np.float64) - x) ** 2))):.6g}")
        import llama_cpp
        meta = {
            "q4k_sha256": hashlib.sha256(ours.tobytes()).hexdigest(),
            "gguf_sha256": sha256_file(path),
            "gguf_version": version("gguf"),
            "llama_cpp_python_version": llama_cpp.__version__,
            "numpy_version": np.__version__,
            "same_bytes_as_llama_cpp": "true" if same else "false",
        }
    save_file({"gguf_py.dequantized": gguf_values, "llama_cpp.dequantized": ggml_values,
               "llama_cpp.quantized": theirs}, args.out, metadata=meta)
    sort_metadata(args.out)
    os.chmod(args.out, 0o644)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
