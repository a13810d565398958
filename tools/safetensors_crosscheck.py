#!/usr/bin/env python3
"""tools/safetensors_crosscheck.py: checks mptrain's safetensors files against the reference implementation.

Needs `pip install safetensors numpy` (a tool dependency, never a build or test dependency).

  emit-cpp OUT.h   Serializes GOLDEN (every dtype mptrain supports, odd shapes, a scalar, zero-size tensors,
                   metadata) with the reference and writes the bytes as a C++ array. tests/io/reference_golden.h
                   is that output: test_io reads it and requires save_safetensors to reproduce it byte for byte.
  check FILE...    Files written by mptrain: the reference must open them (it validates the layout), serialize the
                   same tensors and metadata to identical bytes, and, for files named golden*.safetensors, hold
                   exactly the GOLDEN pattern. test_io writes such files when MPT_SAFETENSORS_EXPORT_DIR is set:

  MPT_SAFETENSORS_EXPORT_DIR=/tmp/st build/tests/test_io --gtest_filter='SafetensorsReference.*'
  python3 tools/safetensors_crosscheck.py check /tmp/st/*.safetensors
"""
import json
import struct
import sys

import numpy as np
import safetensors
from safetensors import deserialize, safe_open, serialize

# Header code -> the name the reference's Python API takes.
PY_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn",
            "F8_E5M2": "float8_e5m2", "I64": "int64", "I32": "int32", "U16": "uint16", "U8": "uint8"}
SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4, "U16": 2, "U8": 1}

# Mirrored in tests/io/test_safetensors_reference.cpp (kGolden): name, dtype, shape.
GOLDEN = [("a.f64", "F64", [3]), ("b.f32", "F32", [3, 5]), ("c.f16", "F16", [7]), ("d.bf16", "BF16", []),
          ("e.f8e4m3", "F8_E4M3", [2, 3, 2]), ("f.f8e5m2", "F8_E5M2", [5]), ("g.i64", "I64", [2]),
          ("h.i32", "I32", [1, 3]), ("i.u16", "U16", [3]), ("j.u8", "U8", [9]), ("k.empty", "F32", [0, 4]),
          ("l.empty", "U8", [0])]
GOLDEN_METADATA = {"format": "pt"}


def golden_bytes(index, nbytes):
    """Byte k of GOLDEN[index]: every bit pattern shows up, NaN payloads included."""
    return bytes((index * 16 + k * 5 + 1) & 0xFF for k in range(nbytes))


def serialize_raw(tensors, metadata):
    """tensors: {name: (code, shape, bytes)} -> file bytes, through the reference serializer."""
    keep_alive = []
    specs = {}
    for name, (code, shape, data) in tensors.items():
        buf = np.frombuffer(data, dtype=np.uint8).copy()
        keep_alive.append(buf)
        if hasattr(safetensors, "TensorSpec"):  # safetensors >= 0.7
            specs[name] = safetensors.TensorSpec(dtype=PY_NAMES[code], shape=list(shape), data_ptr=buf.ctypes.data,
                                                 data_len=buf.nbytes)
        else:
            specs[name] = {"dtype": code, "shape": list(shape), "data": bytes(data)}
    return bytes(serialize(specs, metadata=metadata or None))


def golden_tensors():
    out = {}
    for i, (name, code, shape) in enumerate(GOLDEN):
        n = SIZES[code] * int(np.prod(shape, dtype=np.int64))
        out[name] = (code, shape, golden_bytes(i, n))
    return out


def emit_cpp(out_path):
    data = serialize_raw(golden_tensors(), GOLDEN_METADATA)
    lines = [", ".join(f"0x{b:02x}" for b in data[i:i + 16]) for i in range(0, len(data), 16)]
    text = ("// tests/io/reference_golden.h: GOLDEN of tools/safetensors_crosscheck.py as serialized by the\n"
            f"// reference implementation (Python safetensors {safetensors.__version__}); regenerate with `emit-cpp`.\n"
            "#pragma once\n\n"
            f"inline constexpr unsigned char kReferenceGolden[{len(data)}] = {{\n    "
            + ",\n    ".join(lines) + "};\n")
    with open(out_path, "w") as f:
        f.write(text)
    print(f"wrote {out_path}: {len(data)} bytes from safetensors {safetensors.__version__}")


def check(path):
    with open(path, "rb") as f:
        raw = f.read()
    with safe_open(path, framework="numpy") as f:  # validates like every reference reader
        metadata = f.metadata() or {}
    tensors = {name: (info["dtype"], info["shape"], bytes(info["data"])) for name, info in deserialize(raw)}
    for name, (code, shape, data) in tensors.items():
        if code in ("F64", "F32", "F16", "I64", "I32", "U16", "U8"):  # numpy reads these natively
            arr = np.frombuffer(data, dtype=np.dtype(PY_NAMES[code]).newbyteorder("<")).reshape(shape)
            assert arr.tobytes() == data
    again = serialize_raw(tensors, metadata)
    if len(metadata) <= 1:  # the reference writes metadata in hash order: bytes only comparable with one key
        assert again == raw, f"{path}: the reference serializes the same content to different bytes"
    else:
        n, m = struct.unpack("<Q", raw[:8])[0], struct.unpack("<Q", again[:8])[0]
        assert json.loads(raw[8:8 + n]) == json.loads(again[8:8 + m]) and raw[8 + n:] == again[8 + m:], path
    if path.split("/")[-1].startswith("golden"):
        assert tensors == golden_tensors() and metadata == GOLDEN_METADATA, f"{path}: not the GOLDEN content"
    print(f"ok {path}: {len(tensors)} tensors, {len(metadata)} metadata keys, {len(raw)} bytes")


def main(argv):
    if len(argv) == 3 and argv[1] == "emit-cpp":
        emit_cpp(argv[2])
    elif len(argv) >= 3 and argv[1] == "check":
        for path in argv[2:]:
            check(path)
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
