#!/usr/bin/env python3
# tools/llmc_memory.py: the device memory llm.c's train_gpt2cu allocates for a GPT-2 shape, from its own formulas.
"""llm.c allocates every buffer once, with sizes its source computes from the shape (train_gpt2.cu at karpathy/llm.c
f1e2ace: fill_in_parameter_sizes, fill_in_activation_sizes, gpt2_allocate_weights / gpt2_allocate_state, and
llmc/cublas_common.h's cuBLASLt workspace). This script repeats those formulas, so that issue 31's memory target
("GPU memory peak at most llm.c's at the same batch") can be compared without a GPU against mptrain's allocator peak,
which the emulated device reproduces (bench_step_cost). Not counted, as llm.c's own "allocating" lines do not count
them: the CUDA context, cuDNN's workspace (allocated on demand, up to 256 MiB) and the small buffers (inputs,
targets, the loss scalar). llm.c's "device memory usage" line (cudaMemGetInfo after allocating) includes the context.

Usage: tools/llmc_memory.py [--batch 8] [--seq 1024] [--layers 12] [--heads 12] [--embd 768] [--vocab 50257]
                            [--recompute 0] [--no-master-weights] [--json]
"""
import argparse
import json

MIB = 1024 * 1024
BF16, F32 = 2, 4  # floatX is bf16 in train_gpt2cu's default build


def padded_vocab(v):
    return (v + 127) // 128 * 128  # llm.c pads the vocabulary to a multiple of 128 (50257 -> 50304)


def parameters(L, C, V, maxT):
    Vp = padded_vocab(V)
    # wte, wpe, ln1w/b, qkvw/b, attprojw/b, ln2w/b, fcw/b, fcprojw/b, lnfw/b (fill_in_parameter_sizes)
    return (Vp * C + maxT * C + 2 * L * C + L * 3 * C * C + L * 3 * C + L * C * C + L * C + 2 * L * C
            + L * 4 * C * C + L * 4 * C + L * C * 4 * C + L * C + 2 * C)


def activations(B, T, L, NH, C, V, recompute):
    """(name, elements, bytes per element) of fill_in_activation_sizes with cuDNN attention (ENABLE_CUDNN)."""
    Vp = padded_vocab(V)
    return [
        ("encoded", B * T * C, BF16),
        ("ln1", L * B * T * C if recompute < 2 else 0, BF16),
        ("ln1_mean", L * B * T, F32), ("ln1_rstd", L * B * T, F32),
        ("atty", L * B * T * C, BF16),
        ("att (cuDNN stats)", L * B * NH * T, F32),
        ("residual2", L * B * T * C, BF16),
        ("ln2", L * B * T * C if recompute < 2 else 0, BF16),
        ("ln2_mean", L * B * T, F32), ("ln2_rstd", L * B * T, F32),
        ("fch", L * B * T * 4 * C, BF16),
        ("fch_gelu", L * B * T * 4 * C if recompute < 1 else B * T * 4 * C, BF16),
        ("residual3", L * B * T * C, BF16),
        ("lnf", B * T * C, BF16), ("lnf_mean", B * T, F32), ("lnf_rstd", B * T, F32),
        ("losses", B * T, F32),
        ("qkvr", L * B * T * 3 * C, BF16),
        ("output", B * T * max(3 * C, NH * T, Vp), BF16),
        ("scratch_bt4c", B * T * 4 * C, BF16),
        ("scratch_btc", B * T * C, BF16),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--max-seq", type=int, default=1024, help="the checkpoint's max_seq_len (wpe rows)")
    ap.add_argument("--recompute", type=int, default=0, choices=[0, 1, 2],
                    help="train_gpt2cu -r (tools' baseline runs -r 0; llm.c's default is 1)")
    ap.add_argument("--no-master-weights", action="store_true", help="train_gpt2cu -w 0")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    n = parameters(a.layers, a.embd, a.vocab, a.max_seq)
    acts = activations(a.batch, a.seq, a.layers, a.heads, a.embd, a.vocab, a.recompute)
    parts = {
        "parameters (bf16)": n * BF16,
        "gradients (bf16)": n * BF16,
        "AdamW m (f32)": n * F32,
        "AdamW v (f32)": n * F32,
        "master weights (f32)": 0 if a.no_master_weights else n * F32,
        "activations": sum(e * b for _, e, b in acts),
        "cuBLASLt workspace": 32 * MIB,
    }
    total = sum(parts.values())
    if a.json:
        print(json.dumps({"parameters": n, "bytes": parts, "total_bytes": total, "total_mib": total / MIB,
                          "activations": {name: e * b for name, e, b in acts}}, indent=1))
        return
    print(f"llm.c train_gpt2cu, {a.layers} layers x {a.embd}, {a.heads} heads, vocab {a.vocab} "
          f"(padded {padded_vocab(a.vocab)}), batch {a.batch} x {a.seq}, -r {a.recompute}: {n:,} parameters")
    for name, b in parts.items():
        print(f"  {name:24s} {b / MIB:10.1f} MiB")
    print(f"  {'total':24s} {total / MIB:10.1f} MiB (without the CUDA context and cuDNN's workspace)")


if __name__ == "__main__":
    main()
