#!/usr/bin/env python3
"""tools/gguf_dump.py: reads a GGUF file with llama.cpp's own Python package, the consumer check of mptrain's writer.

A tool, never a build or test dependency. It needs the `gguf` package (llama.cpp's gguf-py) in a venv:

  python3 -m venv /tmp/gguf-venv && /tmp/gguf-venv/bin/pip install gguf numpy safetensors
  /tmp/gguf-venv/bin/python tools/gguf_dump.py MODEL.gguf [--out MODEL.safetensors]

It prints every key-value pair (type and value; long arrays shortened) and every tensor (name, ggml type, shape as
torch sees it, i.e. GGUF's dims reversed), dequantizes every tensor to float32 with gguf.quants.dequantize, and with
--out writes those float32 tensors (row-major shape) to a safetensors file: tensors sorted by name, __metadata__
{"gguf_version", "numpy_version"} first and sorted, so the same file and package versions give the same bytes.
Compare the values with what mptrain's dequantize_gguf gives for the same file.
"""
import argparse
import json
import struct
import sys
from importlib.metadata import version

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

SHOWN = 8  # array elements printed


def field_text(field):
    types = [t.name for t in field.types]
    kind = types[0] if len(types) == 1 else f"{types[0]}[{types[-1]}]"
    value = field.contents()
    if isinstance(value, list):
        more = f", ... ({len(value)} elements)" if len(value) > SHOWN else ""
        value = "[" + ", ".join(repr(v) for v in value[:SHOWN]) + more + "]"
    else:
        value = repr(value)
    return f"{field.name}: {kind} = {value}"


def torch_shape(tensor):
    return tuple(int(d) for d in reversed(tensor.shape.tolist()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf", help="the GGUF file")
    parser.add_argument("--out", help="write every tensor, dequantized to float32, to this safetensors file")
    args = parser.parse_args()

    reader = GGUFReader(args.gguf)
    print(f"{args.gguf}: {len(reader.fields)} fields, {len(reader.tensors)} tensors, alignment {reader.alignment}, "
          f"data at byte {reader.data_offset} (gguf {version('gguf')}, numpy {np.__version__})")
    for field in reader.fields.values():
        if field.name.startswith("GGUF."):  # the header, which gguf-py lists as fields too
            continue
        print("  " + field_text(field))

    out = {}
    for tensor in reader.tensors:
        shape = torch_shape(tensor)
        values = dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False).reshape(shape)
        print(f"  tensor {tensor.name}: {tensor.tensor_type.name} {list(shape)}, {tensor.n_bytes} bytes at data "
              f"offset {tensor.data_offset - reader.data_offset}; float32 min {values.min() if values.size else 0} "
              f"max {values.max() if values.size else 0}")
        out[tensor.name] = np.ascontiguousarray(values)

    if args.out:
        metadata = {"gguf_version": version("gguf"), "numpy_version": np.__version__}
        write_safetensors(args.out, out, metadata)
        from safetensors.numpy import load_file  # the reference implementation must read it back unchanged
        back = load_file(args.out)
        assert sorted(back) == sorted(out) and all(np.array_equal(back[k], out[k]) for k in out), args.out
        print(f"wrote {len(out)} float32 tensors to {args.out}")
    return 0


def write_safetensors(path, tensors, metadata):
    """Float32 tensors by name, "__metadata__" first: written here because safetensors' own save_file orders the
    metadata by a hash map, differently from run to run."""
    header, offset, blobs = {"__metadata__": dict(sorted(metadata.items()))}, 0, []
    for name in sorted(tensors):
        blob = tensors[name].astype("<f4").tobytes()
        shape = list(tensors[name].shape)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


if __name__ == "__main__":
    sys.exit(main())
