#!/usr/bin/env python3
"""tools/make_pointwise_goldens.py: PyTorch goldens for the general ops in bf16 and f16
(tests/goldens/pointwise_lowp.safetensors).

A tool, never a build or test dependency: the C++ tests only read the committed file.

  python tools/make_pointwise_goldens.py [--out tests/goldens/pointwise_lowp.safetensors]

For each dtype (bf16, f16) and op, inputs of 512 elements drawn in float32 from torch.Generator().manual_seed(300 + k)
(k: the op's index) in the op's range, then rounded to the dtype; PyTorch computes in that dtype on the CPU (its
kernels widen to float32 and round once, as ours do) the forward y = op(x) (or op(a, b)) and, for dy = N(0, 1) in the
dtype, the gradients through autograd. Stored per op and dtype (prefix "<dtype>.<op>."): x (or a and b), dy, y, dx (or
da and db), all in the dtype.

Ops: neg abs relu silu tanh sigmoid exp log sqrt rsqrt softplus pow2 pow1.5 clamp (-0.5, 0.75); sub div maximum
minimum pow swiglu (silu(a) * b). Inputs avoid the kinks (|x| >= 0.02 and away from the clamp bounds) and ties.

__metadata__: "ops" (JSON: each op's input range), "torch_version", "safetensors_version"; sorted by key
(make_goldens.sort_metadata).

Checks (exit 1 on failure): every golden is finite; PyTorch's float32 results rounded to the dtype agree with its
low-precision ones within one unit in the last place; a second computation gives the same bits; the file re-reads
identically and is under MAX_BYTES.

The committed file was produced with torch 2.15.0+cu132 (CPU, 1 thread) and safetensors 0.8.0 from pip.
"""
import argparse
import json
import os
import sys

import safetensors
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_goldens import write_goldens  # noqa: E402

MAX_BYTES = 256 * 1024
N = 512
UNARY = [
    ("neg", lambda x: -x, (-3, 3)),
    ("abs", torch.abs, (-3, 3)),
    ("relu", torch.relu, (-3, 3)),
    ("silu", F.silu, (-8, 8)),
    ("tanh", torch.tanh, (-4, 4)),
    ("sigmoid", torch.sigmoid, (-12, 12)),
    ("exp", torch.exp, (-8, 8)),
    ("log", torch.log, (0.01, 50)),
    ("sqrt", torch.sqrt, (0.01, 50)),
    ("rsqrt", torch.rsqrt, (0.01, 50)),
    ("softplus", F.softplus, (-20, 20)),
    ("pow2", lambda x: torch.pow(x, 2), (-3, 3)),
    ("pow1.5", lambda x: torch.pow(x, 1.5), (0.1, 9)),
    ("clamp", lambda x: torch.clamp(x, -0.5, 0.75), (-3, 3)),
]
BINARY = [
    ("sub", torch.sub, (-3, 3)),
    ("div", torch.div, (0.5, 3)),
    ("maximum", torch.maximum, (-3, 3)),
    ("minimum", torch.minimum, (-3, 3)),
    ("pow", torch.pow, (0.5, 2.5)),
    ("swiglu", lambda a, b: F.silu(a) * b, (-3, 3)),
]
KINKS = (0.0, -0.5, 0.75)


def draw(gen, lo, hi, dtype):
    v = torch.rand(N, generator=gen, dtype=torch.float64) * (hi - lo) + lo
    for k in KINKS:
        v = torch.where((v - k).abs() < 0.02, v + 0.05, v)
    return v.to(dtype)


def ulp_ok(low, ref32, dtype):
    """|low - round(ref32)| <= one ulp of the dtype at that value (both compared in float64)."""
    r = ref32.to(dtype).double()
    step = torch.finfo(dtype).eps * torch.maximum(r.abs(), torch.tensor(torch.finfo(dtype).tiny, dtype=torch.float64))
    return bool(((low.double() - r).abs() <= step * 1.0001).all())


def make_all():
    arrays, failures = {}, []
    for dtype, name in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
        for k, (op, fn, (lo, hi)) in enumerate(UNARY + BINARY):
            gen = torch.Generator().manual_seed(300 + k)
            binary = k >= len(UNARY)
            xs = [draw(gen, lo, hi, dtype) for _ in range(2 if binary else 1)]
            dy = torch.randn(N, generator=gen).to(dtype)
            leaves = [x.clone().requires_grad_() for x in xs]
            y = fn(*leaves)
            y.backward(dy)
            grads = [leaf.grad for leaf in leaves]
            # The same in float32, for the one-ulp agreement check.
            leaves32 = [x.float().requires_grad_() for x in xs]
            y32 = fn(*leaves32)
            y32.backward(dy.float())
            if not ulp_ok(y.detach(), y32.detach(), dtype):
                failures.append(f"{name}.{op}: PyTorch's {name} forward differs from its float32 by more than an ulp")
            p = f"{name}.{op}."
            names = ["a", "b"] if binary else ["x"]
            gnames = ["da", "db"] if binary else ["dx"]
            for n_, t in zip(names, xs):
                arrays[p + n_] = t
            arrays[p + "dy"] = dy
            arrays[p + "y"] = y.detach()
            for n_, g in zip(gnames, grads):
                arrays[p + n_] = g
            for t in [y.detach()] + grads:
                if not torch.isfinite(t.float()).all():
                    failures.append(f"{p}: a non-finite golden")
    return arrays, failures




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "goldens",
                                                  "pointwise_lowp.safetensors"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    arrays, failures = make_all()
    again, _ = make_all()
    if any(not torch.equal(arrays[k].view(torch.int16), again[k].view(torch.int16)) for k in arrays):
        failures.append("a second computation gives other bits")
    if failures:
        print("\n".join(failures), file=sys.stderr)
        return 1
    from safetensors.torch import save_file, load_file
    meta = {"ops": json.dumps({op: [lo, hi] for op, _, (lo, hi) in UNARY + BINARY}, sort_keys=True),
            "torch_version": torch.__version__, "safetensors_version": safetensors.__version__}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    save_file({k: v.contiguous() for k, v in arrays.items()}, args.out, metadata=meta)
    from make_goldens import sort_metadata
    sort_metadata(args.out)
    os.chmod(args.out, 0o644)
    back = load_file(args.out)
    if set(back) != set(arrays) or any(not torch.equal(back[k].view(torch.int16), arrays[k].view(torch.int16))
                                       for k in arrays):
        print("the file does not re-read identically", file=sys.stderr)
        return 1
    size = os.path.getsize(args.out)
    if size >= MAX_BYTES:
        print(f"file is {size} bytes", file=sys.stderr)
        return 1
    print(f"wrote {args.out}: {len(arrays)} tensors, {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
