#!/usr/bin/env python3
"""benchmarks/compare_pytorch.py: mptrain against PyTorch on the same GPT-2 training step, in one run, interleaved.

Each (model, precision) pair is measured `--reps` times; every repetition runs PyTorch and then mptrain
(benchmarks/bench_train) as fresh processes with the same thread count, model, batch, optimizer and precision, and
each process reports the medians of its own timed steps. The table gives the medians over the repetitions and the
ratios, and --json writes everything with the machine, CPU flags and versions.

  python3 benchmarks/compare_pytorch.py --bench build/release/benchmarks/bench_train --json compare.json

PyTorch gets its best eager settings: torch.autocast(cpu, bfloat16) for bf16 (its BF16 matmuls are checked to reach
oneDNN), fused AdamW, scaled_dot_product_attention and the same threads; --compile adds torch.compile'd rows.
FP8 has no PyTorch CPU training recipe: fp8-block is compared with mptrain's own bf16.

--device cuda (tools/gpu-suite.sh runs it): GPT-2 124M at T=1024, batch 8 on cuda:0, every phase timed between
torch.cuda.synchronize() calls (mptrain: bench_train --device cuda, which synchronizes the same way); PyTorch in bf16
autocast (and torch.compile'd with --compile) against mptrain's bf16 and FP8 recipes, plus torchao's and
TransformerEngine's FP8 where importable; throughput, TFLOP/s and MFU (6N + 12LCT FLOPs per token, PaLM); --gemm
adds cuBLAS GEMM TFLOP/s through torch. torch is optional there: without it (or without a CUDA build of it) only mptrain's rows run
and the run exits 3. It refuses (exit 2) when no GPU is visible.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

MODELS = {  # layers, heads, width, vocab, sequence, batch
    "tiny": dict(layers=2, heads=4, embd=128, vocab=65, seq=256, batch=16),
    "small": dict(layers=6, heads=6, embd=384, vocab=65, seq=256, batch=16),
    "gpt2": dict(layers=12, heads=12, embd=768, vocab=50257, seq=256, batch=4),
    # GPT-2 with the vocabulary padded to a multiple of 64 (nanoGPT's and llm.c's 50304): aligned logits rows
    "gpt2-padded": dict(layers=12, heads=12, embd=768, vocab=50304, seq=256, batch=4),
    # Llama (RMSNorm, rotary, grouped-query attention, SwiGLU, untied head; mptrain's nn::Llama, bench_train --model
    # llama): llama-small has small's width and depth, 2 kv heads and the SwiGLU width 8/3 C (a GPT block's FLOPs).
    "llama-tiny": dict(family="llama", layers=2, heads=4, kv_heads=2, embd=128, ffn=352, vocab=65, seq=256, batch=16),
    "llama-small": dict(family="llama", layers=6, heads=6, kv_heads=2, embd=384, ffn=1024, vocab=65, seq=256,
                        batch=16),
}


MFU_FORMULA = ("model FLOPs per token = 6*N + 12*L*C*T (PaLM, appendix B; nanoGPT's estimate_mfu): N = parameters "
               "without the position embedding (the tied LM head counted once), L layers, C width, T sequence length "
               "(attention's QK^T and PV counted without causal masking); MFU = tokens/s * FLOPs per token / dense "
               "peak FLOP/s (BF16 peak for every row; FP8 rows also against the FP8 peak)")

# Dense (no sparsity) tensor-core peaks in TFLOP/s by GPU name, most specific first: (bf16, fp8 or None).
PEAK_TFLOPS = [
    ("GH200", 989, 1979), ("H200", 989, 1979), ("H100 PCIe", 756, 1513), ("H100 NVL", 835, 1671), ("H100", 989, 1979),
    ("H800", 989, 1979), ("H20", 148, 296), ("B200", 2250, 4500), ("L40S", 362, 733), ("A100", 312, None),
    ("A800", 312, None), ("A10G", 70, None), ("L4", 121, 242),
]


def palm_flops_per_token(m):
    """6*N + 12*L*C*T with N the parameters without the position embedding: per block 12*C*C weights and 13*C biases
    and LayerNorm parameters, the tied token embedding (vocab x C) and the final LayerNorm."""
    L, C, V, T = m["layers"], m["embd"], m["vocab"], m["seq"]
    n = L * (12 * C * C + 13 * C) + V * C + 2 * C
    return 6 * n + 12 * L * C * T, n


def peak_tflops(gpu_name, capability, bf16_override, fp8_override):
    """(bf16, fp8, source) dense peaks for `gpu_name`; overrides win. FP8 defaults to 2x BF16 from sm_89 up."""
    bf16 = fp8 = None
    source = "none: unknown GPU %r (pass --peak-tflops)" % gpu_name
    for key, b, f in PEAK_TFLOPS:
        if gpu_name and key.lower() in gpu_name.lower():
            bf16, fp8, source = b, f, "table (%s)" % key
            break
    if bf16_override:
        bf16, source = bf16_override, "--peak-tflops"
        fp8 = 2 * bf16 if capability and tuple(capability) >= (8, 9) else None
    if fp8_override:
        fp8 = fp8_override
    return bf16, fp8, source


def model_flops_per_token(m):
    """Training FLOPs per token (forward 1/3, backward 2/3): 6 per weight of every Linear and the LM head, and causal
    attention's QK^T and PV (each query meets T/2 keys on average: 2*T*C per layer forward)."""
    L, C, V, T = m["layers"], m["embd"], m["vocab"], m["seq"]
    if m.get("family") == "llama":  # q and o (C x C), k and v (C x kv width), the three SwiGLU matrices (C x ffn)
        kv = C // m["heads"] * m["kv_heads"]
        return 6 * (L * (2 * C * C + 2 * C * kv + 3 * C * m["ffn"]) + C * V) + 6 * L * T * C
    return 6 * (12 * L * C * C + C * V) + 6 * L * T * C


def rss_now():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def rss_peak():
    """This process image's peak RSS (VmHWM). Not getrusage's ru_maxrss: Linux keeps that across exec, so a child of
    this driver would report at least the driver's own RSS at fork time."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def torch_worker(args):
    """One PyTorch run: the same GPT-2 as mptrain's nn::GPT (pre-LN blocks, tanh GELU, tied LM head, AdamW), or the
    same Llama as nn::Llama (RMSNorm, rotate_half rotary embeddings, SDPA with enable_gqa, SwiGLU, untied head)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    dev = args.device
    if dev == "cpu":
        torch.set_num_threads(args.threads)
    m = model_shape(args)
    C, H, T = m["embd"], m["heads"], m["seq"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            B = x.shape[0]
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(m["vocab"], C), nn.Embedding(T, C)
            self.h = nn.ModuleList(Block() for _ in range(m["layers"]))
            self.ln_f = nn.LayerNorm(C)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
            for b in self.h:
                x = b(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
            return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))

    class LlamaBlock(nn.Module):
        def __init__(self):
            super().__init__()
            D, Hkv, Ff = C // H, m.get("kv_heads", H), m.get("ffn", 4 * C)
            self.D, self.Hkv = D, Hkv
            self.input_layernorm = nn.RMSNorm(C, eps=1e-5)
            self.post_attention_layernorm = nn.RMSNorm(C, eps=1e-5)
            self.q_proj, self.o_proj = nn.Linear(C, H * D, bias=False), nn.Linear(H * D, C, bias=False)
            self.k_proj, self.v_proj = nn.Linear(C, Hkv * D, bias=False), nn.Linear(C, Hkv * D, bias=False)
            self.gate_proj, self.up_proj = nn.Linear(C, Ff, bias=False), nn.Linear(C, Ff, bias=False)
            self.down_proj = nn.Linear(Ff, C, bias=False)

        def forward(self, x, cos, sin):
            B, D = x.shape[0], self.D

            def rope(t):  # (B, T, heads, D), Hugging Face's rotate_half
                t1, t2 = t[..., : D // 2], t[..., D // 2:]
                return t * cos + torch.cat((-t2, t1), -1) * sin

            h = self.input_layernorm(x)
            q = rope(self.q_proj(h).view(B, T, H, D)).transpose(1, 2)
            k = rope(self.k_proj(h).view(B, T, self.Hkv, D)).transpose(1, 2)
            v = self.v_proj(h).view(B, T, self.Hkv, D).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.Hkv != H)
            x = x + self.o_proj(y.transpose(1, 2).reshape(B, T, C))
            h = self.post_attention_layernorm(x)
            return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            D = C // H
            self.embed_tokens = nn.Embedding(m["vocab"], C)
            self.layers = nn.ModuleList(LlamaBlock() for _ in range(m["layers"]))
            self.norm, self.lm_head = nn.RMSNorm(C, eps=1e-5), nn.Linear(C, m["vocab"], bias=False)
            inv = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
            ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
            self.register_buffer("cos", torch.cat((ang.cos(), ang.cos()), -1).float()[None, :, None, :])
            self.register_buffer("sin", torch.cat((ang.sin(), ang.sin()), -1).float()[None, :, None, :])

        def forward(self, idx, targets):
            x = self.embed_tokens(idx)
            for b in self.layers:
                x = b(x, self.cos, self.sin)
            logits = self.lm_head(self.norm(x))
            return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))

    def sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    rss_before = rss_now()
    torch.manual_seed(7)
    model = (Llama() if m.get("family") == "llama" else GPT()).to(dev)
    fp8_context = fp8_recipe(args.precision, model)
    embedding = ("w", "embed")  # GPT's wte/wpe, Llama's embed_tokens: no weight decay (mptrain: Linear weights only)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and not n.startswith(embedding)]
    rest = [p for n, p in model.named_parameters() if p.dim() != 2 or n.startswith(embedding)]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), fused=True)
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), foreach=True)
    step_fn = torch.compile(model) if args.compile else model
    ids = torch.randint(0, m["vocab"], (m["batch"], T + 1)).to(dev)
    x, y = ids[:, :T].contiguous(), ids[:, 1:].contiguous()
    bf16 = args.precision in ("bf16", "fp8-torchao", "fp8-te")  # bf16 autocast around the FP8 Linears too
    fwd, bwd, optim, total = [], [], [], []
    loss = 0.0
    for s in range(args.warmup + args.steps):
        if s == args.warmup and dev == "cuda":
            torch.cuda.reset_peak_memory_stats()
        sync()
        t0 = time.perf_counter()
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=bf16), fp8_context():
            l = step_fn(x, y)
        sync()
        t1 = time.perf_counter()
        l.backward()
        sync()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = l.item()
        t3 = time.perf_counter()
        if s >= args.warmup:
            fwd.append(t1 - t0), bwd.append(t2 - t1), optim.append(t3 - t2), total.append(t3 - t0)
    peak = rss_peak()
    tokens = m["batch"] * T
    med = statistics.median
    print(json.dumps({
        "framework": "pytorch-compile" if args.compile else "pytorch", "version": torch.__version__,
        "precision": args.precision, "threads": torch.get_num_threads(), "device": dev,
        "device_name": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
        "params": sum(p.numel() for p in model.parameters()), "tokens_per_step": tokens, "step_s": med(total),
        "forward_s": med(fwd), "backward_s": med(bwd), "optimizer_s": med(optim), "tokens_per_s": tokens / med(total),
        "final_loss": loss, "rss_peak_bytes": peak, "rss_growth_bytes": peak - rss_before,
        "allocator_peak_bytes": torch.cuda.max_memory_allocated() if dev == "cuda" else None}))


def fp8_recipe(precision, model):
    """PyTorch's FP8 training for the fp8-torchao and fp8-te rows: converts the model's nn.Linear layers and returns
    the context the forward runs in (a null context for the other precisions)."""
    import contextlib
    import torch
    if precision == "fp8-torchao":  # dynamic per-tensor scaling of x, W and dy (like mptrain's fp8-current)
        from torchao.float8 import convert_to_float8_training
        convert_to_float8_training(model)
        return contextlib.nullcontext
    if precision == "fp8-te":  # delayed scaling from an amax history (like mptrain's fp8-delayed), E4M3/E5M2
        import transformer_engine.pytorch as te
        from transformer_engine.common.recipe import DelayedScaling, Format
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, torch.nn.Linear):
                    lin = te.Linear(child.in_features, child.out_features, bias=child.bias is not None,
                                    params_dtype=torch.float32, device="cuda")
                    with torch.no_grad():
                        lin.weight.copy_(child.weight)
                        if child.bias is not None:
                            lin.bias.copy_(child.bias)
                    setattr(parent, name, lin)
        recipe = DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=16, amax_compute_algo="max")
        return lambda: te.fp8_autocast(enabled=True, fp8_recipe=recipe)
    return contextlib.nullcontext


def info_worker():
    """What this Python's torch offers for the CUDA comparison, as one JSON line (run in its own process, so that the
    driver itself never imports torch or creates a CUDA context)."""
    out = {"python": platform.python_version(), "executable": sys.executable}
    try:
        import torch
    except Exception as e:  # noqa: BLE001 (any import failure means no PyTorch rows)
        out["torch_error"] = "%s: %s" % (type(e).__name__, e)
        print(json.dumps(out))
        return
    out.update(torch=torch.__version__, torch_cuda=torch.version.cuda, cuda_available=torch.cuda.is_available(),
               device_count=torch.cuda.device_count() if torch.cuda.is_available() else 0)
    if out["cuda_available"]:
        out.update(gpu=torch.cuda.get_device_name(0), capability=list(torch.cuda.get_device_capability(0)),
                   cudnn=torch.backends.cudnn.version(),
                   gpu_memory_bytes=torch.cuda.get_device_properties(0).total_memory)
    for pkg, mod in (("torchao", "torchao.float8"), ("transformer_engine", "transformer_engine.pytorch")):
        try:
            __import__(mod)
            out[pkg] = getattr(sys.modules[pkg], "__version__", "importable")
        except Exception as e:  # noqa: BLE001
            out[pkg + "_error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    print(json.dumps(out))


def gemm_worker(args):
    """cuBLAS through torch on cuda:0: BF16 matmul and FP8 (E4M3, torch._scaled_mm) TFLOP/s on a large square GEMM and
    on GPT-2's own shapes (B*T tokens), timed with CUDA events: what the GPU's GEMMs reach, next to the datasheet peak."""
    import torch
    m = model_shape(args)
    tokens, C, V = m["batch"] * m["seq"], m["embd"], m["vocab"]
    shapes = [("square 8192", 8192, 8192, 8192), ("mlp fwd", tokens, 4 * C, C), ("mlp dgrad", tokens, C, 4 * C),
              ("mlp wgrad", 4 * C, C, tokens), ("lm head fwd", tokens, V, C)]
    iters = args.steps * 5
    rows = []
    for name, M, N, K in shapes:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        for dtype in ("bf16", "e4m3"):
            row = {"shape": name, "m": M, "n": N, "k": K, "dtype": dtype}
            try:
                if dtype == "bf16":
                    fn = lambda: a @ b.t()  # noqa: E731
                else:
                    if K % 16 or N % 16:
                        raise ValueError("torch._scaled_mm needs k and n divisible by 16")
                    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
                    one = torch.ones((), device="cuda")
                    fn = lambda: torch._scaled_mm(a8, b8.t(), one, one, out_dtype=torch.bfloat16)  # noqa: E731
                for _ in range(3):
                    fn()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(iters):
                    fn()
                end.record()
                torch.cuda.synchronize()
                ms = start.elapsed_time(end) / iters
                row.update(ms=ms, tflops=2 * M * N * K / ms / 1e9)
            except Exception as e:  # noqa: BLE001 (an FP8 GEMM this GPU or build lacks is a row, not an abort)
                row["error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            rows.append(row)
    print(json.dumps({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "iters": iters,
                      "gemm": rows}))


def onednn_check(threads):
    """Runs one BF16 autocast Linear forward and backward with ONEDNN_VERBOSE=1: do PyTorch's BF16 GEMMs reach oneDNN?"""
    code = ("import torch; torch.set_num_threads(%d); l = torch.nn.Linear(384, 1536); x = torch.randn(4096, 384, "
            "requires_grad=True)\nwith torch.autocast('cpu', dtype=torch.bfloat16): y = l(x)\ny.float().sum().backward()"
            % threads)
    env = dict(os.environ, ONEDNN_VERBOSE="1", DNNL_VERBOSE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout
    lines = [ln for ln in out.splitlines() if ("matmul" in ln or "inner_product" in ln) and "exec" in ln]
    bf16 = [ln for ln in lines if "bf16" in ln]
    version = next((ln.split("oneDNN ")[1].split()[0] for ln in out.splitlines() if ",info,oneDNN v" in ln), None)
    return {"onednn_version": version, "onednn_gemm_calls": len(lines), "onednn_bf16_gemm_calls": len(bf16),
            "example": bf16[0] if bf16 else (lines[0] if lines else None)}


def machine_info():
    flags = ""
    model_name = platform.processor()
    with open("/proc/cpuinfo") as f:
        for ln in f:
            if ln.startswith("flags") and not flags:
                flags = ln.split(":", 1)[1].split()
            if ln.startswith("model name"):
                model_name = ln.split(":", 1)[1].strip()
    wanted = ["avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_bf16", "amx_tile"]
    return {"cpu": model_name, "cores": os.cpu_count(), "flags": [f for f in wanted if f in flags],
            "python": platform.python_version(), "kernel": platform.release()}


def run_json(cmd, env, timeout=None):
    """The last stdout line of `cmd` as JSON, or raises RunError naming the command and the end of its stderr."""
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RunError("%s: no result within --timeout %s s" % (" ".join(cmd), timeout))
    except OSError as e:
        raise RunError("%s: %s" % (" ".join(cmd), e))
    if p.returncode != 0:
        raise RunError("%s failed (exit %d): %s" % (" ".join(cmd), p.returncode, p.stderr.strip()[-1500:]))
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise RunError("%s printed no JSON result: %s" % (" ".join(cmd), (p.stdout + p.stderr).strip()[-1500:]))


class RunError(Exception):
    pass


def model_shape(args, name=None):
    """The shape of model `name` (default --model) with --seq and --batch applied."""
    m = dict(MODELS[name or args.model])
    if args.seq:
        m["seq"] = args.seq
    if args.batch:
        m["batch"] = args.batch
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default="build/release/benchmarks/bench_train", help="the bench_train binary")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where both train (cuda: cuda:0)")
    ap.add_argument("--models", help="comma-separated: %s (default tiny,small,gpt2; cuda: gpt2)" % ", ".join(MODELS))
    ap.add_argument("--precisions", help="fp32, bf16, fp8-delayed, fp8-current, fp8-block (FP8: mptrain only; "
                    "default fp32,bf16,fp8-block; cuda: bf16 and the three FP8 recipes, plus "
                    "fp8-torchao and fp8-te for PyTorch where those packages import)")
    ap.add_argument("--seq", type=int, help="sequence length for every model (default: the model's; cuda: 1024)")
    ap.add_argument("--batch", type=int, help="sequences per step for every model (default: the model's; cuda: 8)")
    ap.add_argument("--reps", type=int, default=3, help="interleaved repetitions (fresh processes) per row")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps per process")
    ap.add_argument("--steps", type=int, default=4, help="timed steps per process (their median is its result)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for both (OMP_NUM_THREADS)")
    ap.add_argument("--compile", action="store_true", help="also measure torch.compile'd PyTorch")
    ap.add_argument("--timeout", type=float, help="seconds allowed per process (a run past it is an error row)")
    ap.add_argument("--gemm", action="store_true", help="cuda: also cuBLAS GEMM TFLOP/s through torch (BF16, FP8)")
    ap.add_argument("--gemm-only", action="store_true", help="cuda: only the cuBLAS GEMMs, no training rows")
    ap.add_argument("--peak-tflops", type=float, help="cuda: dense BF16 peak for MFU instead of the table by GPU name")
    ap.add_argument("--peak-fp8-tflops", type=float, help="cuda: dense FP8 peak (default 2x BF16 from sm_89 up)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--markdown", help="cuda: write the table as markdown here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--task", default="train", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--precision", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.device == "cuda":
        args.models = args.models or "gpt2"
        args.precisions = args.precisions or "bf16,fp8-delayed,fp8-current,fp8-block"
        args.seq, args.batch = args.seq or 1024, args.batch or 8
    args.models = args.models or "tiny,small,gpt2"
    args.precisions = args.precisions or "fp32,bf16,fp8-block"
    if args.worker:
        return {"train": torch_worker, "gemm": gemm_worker, "info": lambda a: info_worker()}[args.task](args)
    if args.device == "cuda":
        return cuda_main(args)

    import torch
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    peaks = measure_peaks(args, env)
    info = {"machine": machine_info(), "torch": torch.__version__, "threads": args.threads,
            "onednn_check": onednn_check(args.threads), "reps": args.reps, "steps": args.steps, "warmup": args.warmup,
            "peaks": peaks}
    print("machine: %s, %d cores, flags %s; PyTorch %s (oneDNN %s), %d threads; BF16 autocast GEMMs on oneDNN: %d of %d "
          "calls" % (info["machine"]["cpu"], info["machine"]["cores"], " ".join(info["machine"]["flags"]),
                     torch.__version__, info["onednn_check"]["onednn_version"], args.threads,
                     info["onednn_check"]["onednn_bf16_gemm_calls"], info["onednn_check"]["onednn_gemm_calls"]))
    rows, errors = [], []
    for model in args.models.split(","):
        m = model_shape(args, model)
        for precision in args.precisions.split(","):
            frameworks = ([] if precision.startswith("fp8") else ["pytorch"] + (["pytorch-compile"] if args.compile else []))
            frameworks.append("mptrain")
            runs = measure(args, env, model, precision, frameworks, errors)
            for f, rs in runs.items():
                if not rs:
                    continue
                row = median_row(model, precision, f, rs)
                # Roofline: model FLOPs per second over the peak of the GEMMs' arithmetic (FP32 FMA for fp32; for
                # bf16 and FP8, which runs as bf16, the faster of the AVX512-BF16 dot product and the AMX-BF16 tiles,
                # as mpt::dense_peak takes it; amx_bf16_gflops is absent from older bench_kernels JSON), per phase.
                flops = model_flops_per_token(m) * rs[0]["tokens_per_step"]
                if precision == "fp32":
                    peak = peaks.get("fp32_fma_gflops") or 0
                else:
                    peak = max(peaks.get("bf16_dot_gflops") or 0, peaks.get("amx_bf16_gflops") or 0)
                row["model_gflop_per_step"] = flops / 1e9
                if peak:
                    row["peak_fraction"] = flops / row["step_s"] / 1e9 / peak
                    row["forward_peak_fraction"] = flops / 3 / row["forward_s"] / 1e9 / peak
                    row["backward_peak_fraction"] = 2 * flops / 3 / row["backward_s"] / 1e9 / peak
                rows.append(row)
            print_rows(rows, model, precision)
    summary = summarize(rows)
    print("\nratios (mptrain tokens/s over the baseline's, same run):")
    for s in summary:
        print("  %-6s %-9s mptrain / %-16s %.2fx" % (s["model"], s["precision"], s["baseline"], s["ratio"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**info, "rows": rows, "ratios": summary, "errors": errors}, f, indent=2)
    if errors:
        raise SystemExit("compare_pytorch: %d run(s) failed:\n  %s" % (len(errors), "\n  ".join(errors)))


def worker_cmd(args, task, model=None, precision=None, compile_=False):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--task", task, "--device", args.device, "--threads",
           str(args.threads), "--warmup", str(args.warmup), "--steps", str(args.steps)]
    cmd += ["--model", model or "gpt2"] + (["--precision", precision] if precision else [])
    cmd += (["--seq", str(args.seq)] if args.seq else []) + (["--batch", str(args.batch)] if args.batch else [])
    return cmd + (["--compile"] if compile_ else [])


def measure(args, env, model, precision, frameworks, errors):
    """`args.reps` interleaved fresh processes of each framework; a failed one is logged in `errors`, not fatal."""
    m = model_shape(args, model)
    runs = {f: [] for f in frameworks}
    failed = set()
    for _ in range(args.reps):
        for f in frameworks:
            if f in failed:  # it failed once: the next repetition would too, and costs the same time
                continue
            if f == "mptrain":
                cmd = [args.bench, "--layers", str(m["layers"]), "--heads", str(m["heads"]), "--embd", str(m["embd"]),
                       "--vocab", str(m["vocab"]), "--seq", str(m["seq"]), "--batch", str(m["batch"]), "--precision",
                       precision, "--warmup", str(args.warmup), "--steps", str(args.steps), "--json", "-"]
                cmd += ["--device", "cuda"] if args.device == "cuda" else []
                if m.get("family") == "llama":
                    cmd += ["--model", "llama", "--kv-heads", str(m["kv_heads"]), "--ffn", str(m["ffn"])]
            else:
                cmd = worker_cmd(args, "train", model, precision, compile_=f.endswith("-compile"))
            try:
                runs[f].append(run_json(cmd, env, args.timeout))
            except RunError as e:
                failed.add(f)
                errors.append("%s %s %s: %s" % (model, precision, f, e))
                print("compare_pytorch: %s" % errors[-1], file=sys.stderr)
    return runs


def median_row(model, precision, framework, rs):
    keys = ["tokens_per_s", "step_s", "forward_s", "backward_s", "optimizer_s", "rss_peak_bytes", "rss_growth_bytes"]
    row = {"model": model, "precision": precision, "framework": framework, "runs": rs,
           **{k: statistics.median(r[k] for r in rs) for k in keys}}
    row["rss_growth_per_token"] = row["rss_growth_bytes"] / rs[0]["tokens_per_step"]
    if rs[0].get("allocator_peak_bytes") is not None:
        row["allocator_peak_bytes"] = statistics.median(r["allocator_peak_bytes"] for r in rs)
    return row


def gpu_visible(info):
    """(visible, gpu name, why torch cannot be used): torch's view first, nvidia-smi's when torch has no CUDA (which
    then also fills info["capability"])."""
    if info.get("cuda_available"):
        return True, info["gpu"], None
    torch_says = ("torch cannot be imported by %s (%s)" % (info.get("executable"), info["torch_error"])
                  if "torch_error" in info else "torch %s (built for CUDA %s) sees no GPU (torch.cuda.is_available() "
                  "is False)" % (info["torch"], info["torch_cuda"]))
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=60)
        names = [ln.strip() for ln in p.stdout.splitlines() if ln.strip()] if p.returncode == 0 else []
        smi = "nvidia-smi lists %d GPU(s)" % len(names) if p.returncode == 0 else (
            "nvidia-smi failed (exit %d: %s)" % (p.returncode, (p.stderr or p.stdout).strip()[:300]))
    except (OSError, subprocess.TimeoutExpired) as e:
        names, smi = [], "no nvidia-smi (%s)" % e.__class__.__name__
    if names:
        name, _, cap = names[0].rpartition(",")
        try:
            info["capability"] = [int(v) for v in cap.strip().split(".")]
        except ValueError:
            name = names[0]
        return True, name.strip() or names[0], torch_says
    return False, None, "%s; %s; CUDA_VISIBLE_DEVICES=%s" % (torch_says, smi, os.environ.get("CUDA_VISIBLE_DEVICES",
                                                                                             "(unset)"))


def cuda_main(args):
    """mptrain against PyTorch on cuda:0 (module docstring). Exit status: 0 all rows ran, 1 a run failed, 2 no GPU,
    3 one side (PyTorch, its CUDA build or the bench_train binary) is missing and only the other side ran."""
    env = dict(os.environ)
    try:
        info = run_json(worker_cmd(args, "info"), env, 300)
    except RunError as e:
        info = {"torch_error": str(e), "executable": sys.executable}
    visible, gpu, torch_missing = gpu_visible(info)
    if not visible:
        print("compare_pytorch --device cuda: no GPU visible: %s" % torch_missing, file=sys.stderr)
        return 2
    have_bench = not args.gemm_only and os.path.isfile(args.bench) and os.access(args.bench, os.X_OK)
    missing = {}
    if torch_missing:
        missing["pytorch"] = torch_missing
    if args.gemm_only and torch_missing:
        print("compare_pytorch --gemm-only: no PyTorch GEMMs: %s" % torch_missing, file=sys.stderr)
        return 3
    if not have_bench and not args.gemm_only:
        missing["mptrain"] = "no bench_train binary at %s (build it or pass --bench)" % args.bench
    if len(missing) == 2:
        print("compare_pytorch --device cuda: nothing to run: %s; %s" % (missing["pytorch"], missing["mptrain"]),
              file=sys.stderr)
        return 3
    for side, why in missing.items():
        print("compare_pytorch: %s rows skipped: %s" % (side, why), file=sys.stderr)
    fp8_baselines = {}
    for pkg, precision in (("torchao", "fp8-torchao"), ("transformer_engine", "fp8-te")):
        fp8_baselines[precision] = ("missing: torch has no CUDA here" if torch_missing else
                                    info.get(pkg) or "missing: %s" % info.get(pkg + "_error", "not importable"))

    precisions = args.precisions.split(",")
    if any(p.startswith("fp8") for p in precisions) and not torch_missing:
        precisions += [p for p in ("fp8-torchao", "fp8-te")
                       if p not in precisions and not fp8_baselines[p].startswith("missing")]
    capability = info.get("capability")
    peak_bf16, peak_fp8, peak_source = peak_tflops(gpu, capability, args.peak_tflops, args.peak_fp8_tflops)
    print("GPU: %s (capability %s); torch %s, CUDA %s, cuDNN %s; dense peaks BF16 %s, FP8 %s TFLOP/s (%s); FP8 in "
          "PyTorch: torchao %s, TransformerEngine %s" % (
              gpu, capability, info.get("torch"), info.get("torch_cuda"), info.get("cudnn"), peak_bf16, peak_fp8,
              peak_source, fp8_baselines["fp8-torchao"], fp8_baselines["fp8-te"]))
    sys.stdout.flush()

    rows, errors = [], []
    gemm = None
    if (args.gemm or args.gemm_only) and not torch_missing:
        try:
            gemm = run_json(worker_cmd(args, "gemm", args.models.split(",")[0]), env, args.timeout)
            for g in gemm["gemm"]:
                print("  cuBLAS %-12s %5d x %5d x %5d %-5s %s" % (g["shape"], g["m"], g["n"], g["k"], g["dtype"],
                      "%.0f TFLOP/s" % g["tflops"] if "tflops" in g else g["error"]))
        except RunError as e:
            errors.append("gemm: %s" % e)
    for model in [] if args.gemm_only else args.models.split(","):
        m = model_shape(args, model)
        flops_per_token, n_params = palm_flops_per_token(m)
        for precision in precisions:
            frameworks = []
            if not torch_missing and precision in ("fp32", "bf16", "fp8-torchao", "fp8-te"):
                frameworks += ["pytorch"] + (["pytorch-compile"] if args.compile else [])
            if have_bench and precision not in ("fp8-torchao", "fp8-te"):
                frameworks.append("mptrain")
            for f, rs in measure(args, env, model, precision, frameworks, errors).items():
                if not rs:
                    continue
                row = median_row(model, precision, f, rs)
                tflops = row["tokens_per_s"] * flops_per_token / 1e12
                row.update(flops_per_token=flops_per_token, tflops=tflops,
                           mfu=tflops / peak_bf16 if peak_bf16 else None)
                if precision.startswith("fp8"):
                    row["mfu_fp8_peak"] = tflops / peak_fp8 if peak_fp8 else None
                rows.append(row)
                print("%-6s %-12s %-16s %9.0f tok/s  step %7.1f ms  %6.1f TFLOP/s  MFU %s" % (
                    model, precision, f, row["tokens_per_s"], row["step_s"] * 1e3, tflops,
                    "%.1f%%" % (100 * row["mfu"]) if row["mfu"] is not None else "-"))
                sys.stdout.flush()
    for r in rows:
        base = find(rows, r["model"], "bf16", "pytorch")
        r["vs_pytorch_bf16"] = r["tokens_per_s"] / base["tokens_per_s"] if base else None
        own = find(rows, r["model"], "bf16", r["framework"])
        r["vs_own_bf16"] = r["tokens_per_s"] / own["tokens_per_s"] if own and r["precision"] != "bf16" else None
    result = {"device": "cuda", "gpu": gpu, "capability": capability, "torch_info": info, "missing": missing,
              "fp8_baselines": fp8_baselines, "peak_tflops": {"bf16": peak_bf16, "fp8": peak_fp8,
                                                              "source": peak_source},
              "mfu_formula": MFU_FORMULA, "models": {m: model_shape(args, m) for m in args.models.split(",")},
              "model_params_without_wpe": {m: palm_flops_per_token(model_shape(args, m))[1]
                                           for m in args.models.split(",")},
              "reps": args.reps, "steps": args.steps, "warmup": args.warmup, "compile": args.compile,
              "bench": args.bench, "gemm": gemm, "rows": rows, "errors": errors}
    table = markdown_table(result)
    print("\n" + table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    if errors:
        print("compare_pytorch: %d run(s) failed (above, and in the table)" % len(errors), file=sys.stderr)
    return 1 if errors else 3 if missing else 0


def markdown_table(result):
    """The CUDA comparison as one markdown table, with the GPU, versions, peaks and formula above it."""
    info, pk = result["torch_info"], result["peak_tflops"]
    lines = ["GPU: %s (capability %s); PyTorch %s (CUDA %s, cuDNN %s); dense peaks BF16 %s, FP8 %s TFLOP/s (%s); "
             "%d warm-up + %d timed steps per process, %d repetition(s). %s." % (
                 result["gpu"], result["capability"], info.get("torch", "missing"), info.get("torch_cuda"),
                 info.get("cudnn"), pk["bf16"], pk["fp8"], pk["source"], result["warmup"], result["steps"],
                 result["reps"], result["mfu_formula"]), ""]
    for side, why in result["missing"].items():
        lines += ["Missing: %s: %s." % (side, why), ""]
    for name, state in result["fp8_baselines"].items():
        lines += ["PyTorch %s: %s." % (name, state)]
    if result["rows"]:
        lines += ["", "| model | precision | framework | tok/s | step ms | fwd / bwd / opt ms | TFLOP/s | MFU (BF16 "
                  "peak) | MFU (FP8 peak) | vs PyTorch bf16 | vs own bf16 | GPU mem peak GiB |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    pct = lambda v: "-" if v is None else "%.1f%%" % (100 * v)  # noqa: E731
    ratio = lambda v: "-" if v is None else "%.2fx" % v  # noqa: E731
    for r in result["rows"]:
        mem = r.get("allocator_peak_bytes")
        lines.append("| %s | %s | %s | %s | %.1f | %.1f / %.1f / %.1f | %.1f | %s | %s | %s | %s | %s |" % (
            r["model"], r["precision"], r["framework"], "{:,.0f}".format(r["tokens_per_s"]), r["step_s"] * 1e3,
            r["forward_s"] * 1e3, r["backward_s"] * 1e3, r["optimizer_s"] * 1e3, r["tflops"], pct(r["mfu"]),
            pct(r.get("mfu_fp8_peak")), ratio(r["vs_pytorch_bf16"]), ratio(r["vs_own_bf16"]),
            "%.2f" % (mem / 2**30) if mem else "-"))
    if result.get("gemm"):
        lines += ["", "| cuBLAS GEMM (torch) | m x n x k | dtype | TFLOP/s |", "|---|---|---|---|"]
        for g in result["gemm"]["gemm"]:
            lines.append("| %s | %d x %d x %d | %s | %s |" % (g["shape"], g["m"], g["n"], g["k"], g["dtype"],
                                                           "%.0f" % g["tflops"] if "tflops" in g else g["error"]))
    lines += [""] + ["Failed: %s" % e.replace("\n", " ") for e in result["errors"]]
    return "\n".join(lines) + "\n"


def measure_peaks(args, env):
    """The machine's FP32 FMA, BF16 dot-product and AMX-BF16 tile peaks and memcpy bandwidth (bench_kernels
    --peaks-only, beside bench_train), for the roofline columns."""
    kernels = os.path.join(os.path.dirname(args.bench), "bench_kernels")
    if not os.path.exists(kernels):
        return {}
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([kernels, "--peaks-only", "-n", str(64 << 20), "-r", "3", "--json", f.name], env=env,
                       capture_output=True, check=True)
        peaks = json.load(open(f.name))["peaks"]
    print("peaks (%d threads): FP32 FMA %.0f GFLOP/s, BF16 dot %.0f GFLOP/s, AMX-BF16 %.0f GFLOP/s, memcpy %.1f GB/s "
          "(256 MiB)" % (peaks["threads"], peaks["fp32_fma_gflops"], peaks["bf16_dot_gflops"],
                         peaks.get("amx_bf16_gflops") or 0, peaks["memcpy_gbps"]))
    return peaks


def find(rows, model, precision, framework):
    return next((r for r in rows if (r["model"], r["precision"], r["framework"]) == (model, precision, framework)), None)


def summarize(rows):
    out = []
    for r in rows:
        if r["framework"] != "mptrain":
            continue
        if r["precision"].startswith("fp8"):
            base = find(rows, r["model"], "bf16", "mptrain")
            name = "mptrain bf16"
            if base:
                out.append({"model": r["model"], "precision": r["precision"], "baseline": name,
                            "ratio": r["tokens_per_s"] / base["tokens_per_s"]})
            continue
        for f in ("pytorch", "pytorch-compile"):
            base = find(rows, r["model"], r["precision"], f)
            if base:
                out.append({"model": r["model"], "precision": r["precision"], "baseline": f,
                            "ratio": r["tokens_per_s"] / base["tokens_per_s"],
                            "memory_per_token_ratio": r["rss_growth_per_token"] / base["rss_growth_per_token"]})
    return out


def print_rows(rows, model, precision):
    print("\n%-6s %-9s %-16s %10s %9s %9s %9s %9s %10s %10s %6s %6s %6s" % (
        "model", "precision", "framework", "tok/s", "step ms", "fwd ms", "bwd ms", "opt ms", "RSS MiB", "growth MiB",
        "%peak", "fwd%", "bwd%"))
    for r in rows:
        if (r["model"], r["precision"]) != (model, precision):
            continue
        pct = lambda k: "%5.0f%%" % (100 * r[k]) if k in r else "     -"
        print("%-6s %-9s %-16s %10.0f %9.1f %9.1f %9.1f %9.1f %10.0f %10.0f %6s %6s %6s" % (
            model, precision, r["framework"], r["tokens_per_s"], r["step_s"] * 1e3, r["forward_s"] * 1e3,
            r["backward_s"] * 1e3, r["optimizer_s"] * 1e3, r["rss_peak_bytes"] / 2**20, r["rss_growth_bytes"] / 2**20,
            pct("peak_fraction"), pct("forward_peak_fraction"), pct("backward_peak_fraction")))
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
