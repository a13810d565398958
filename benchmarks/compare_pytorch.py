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
}


def model_flops_per_token(m):
    """Training FLOPs per token (forward 1/3, backward 2/3): 6 per weight of every Linear and the LM head, and causal
    attention's QK^T and PV (each query meets T/2 keys on average: 2*T*C per layer forward)."""
    L, C, V, T = m["layers"], m["embd"], m["vocab"], m["seq"]
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
    """One PyTorch run: the same GPT-2 as mptrain's nn::GPT (pre-LN blocks, tanh GELU, tied LM head, AdamW)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    m = MODELS[args.model]
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
            x = self.wte(idx) + self.wpe(torch.arange(T))
            for b in self.h:
                x = b(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
            return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))

    rss_before = rss_now()
    torch.manual_seed(7)
    model = GPT()
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and not n.startswith("w")]
    rest = [p for n, p in model.named_parameters() if p.dim() != 2 or n.startswith("w")]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), fused=True)
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), foreach=True)
    step_fn = torch.compile(model) if args.compile else model
    ids = torch.randint(0, m["vocab"], (m["batch"], T + 1))
    x, y = ids[:, :T].contiguous(), ids[:, 1:].contiguous()
    bf16 = args.precision == "bf16"
    fwd, bwd, optim, total = [], [], [], []
    loss = 0.0
    for s in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            l = step_fn(x, y)
        t1 = time.perf_counter()
        l.backward()
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
        "precision": args.precision, "threads": torch.get_num_threads(),
        "params": sum(p.numel() for p in model.parameters()), "tokens_per_step": tokens, "step_s": med(total),
        "forward_s": med(fwd), "backward_s": med(bwd), "optimizer_s": med(optim), "tokens_per_s": tokens / med(total),
        "final_loss": loss, "rss_peak_bytes": peak, "rss_growth_bytes": peak - rss_before,
        "allocator_peak_bytes": None}))


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


def run_json(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("compare_pytorch: %s failed (exit %d):\n%s" % (" ".join(cmd), p.returncode, p.stderr[-3000:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default="build/release/benchmarks/bench_train", help="the bench_train binary")
    ap.add_argument("--models", default="tiny,small,gpt2", help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--precisions", default="fp32,bf16,fp8-block", help="fp32, bf16, fp8-block (mptrain only)")
    ap.add_argument("--reps", type=int, default=3, help="interleaved repetitions (fresh processes) per row")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps per process")
    ap.add_argument("--steps", type=int, default=4, help="timed steps per process (their median is its result)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for both (OMP_NUM_THREADS)")
    ap.add_argument("--compile", action="store_true", help="also measure torch.compile'd PyTorch")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--precision", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return torch_worker(args)

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
    rows = []
    for model in args.models.split(","):
        m = MODELS[model]
        for precision in args.precisions.split(","):
            frameworks = ([] if precision.startswith("fp8") else ["pytorch"] + (["pytorch-compile"] if args.compile else []))
            frameworks.append("mptrain")
            runs = {f: [] for f in frameworks}
            for _ in range(args.reps):
                for f in frameworks:
                    if f == "mptrain":
                        cmd = [args.bench, "--layers", str(m["layers"]), "--heads", str(m["heads"]), "--embd",
                               str(m["embd"]), "--vocab", str(m["vocab"]), "--seq", str(m["seq"]), "--batch",
                               str(m["batch"]), "--precision", precision, "--warmup", str(args.warmup), "--steps",
                               str(args.steps), "--json", "-"]
                    else:
                        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--model", model, "--precision",
                               precision, "--threads", str(args.threads), "--warmup", str(args.warmup), "--steps",
                               str(args.steps)] + (["--compile"] if f == "pytorch-compile" else [])
                    runs[f].append(run_json(cmd, env))
            for f, rs in runs.items():
                keys = ["tokens_per_s", "step_s", "forward_s", "backward_s", "optimizer_s", "rss_peak_bytes",
                        "rss_growth_bytes"]
                row = {"model": model, "precision": precision, "framework": f, "runs": rs,
                       **{k: statistics.median(r[k] for r in rs) for k in keys}}
                row["rss_growth_per_token"] = row["rss_growth_bytes"] / rs[0]["tokens_per_step"]
                # Roofline: model FLOPs per second over the peak of the GEMMs' arithmetic (FP32 FMA for fp32, the
                # AVX512-BF16 dot product for bf16 and FP8, which runs on it), per phase.
                flops = model_flops_per_token(m) * rs[0]["tokens_per_step"]
                peak = peaks.get("fp32_fma_gflops" if precision == "fp32" else "bf16_dot_gflops") or 0
                row["model_gflop_per_step"] = flops / 1e9
                if peak:
                    row["peak_fraction"] = flops / row["step_s"] / 1e9 / peak
                    row["forward_peak_fraction"] = flops / 3 / row["forward_s"] / 1e9 / peak
                    row["backward_peak_fraction"] = 2 * flops / 3 / row["backward_s"] / 1e9 / peak
                if rs[0].get("allocator_peak_bytes") is not None:
                    row["allocator_peak_bytes"] = statistics.median(r["allocator_peak_bytes"] for r in rs)
                rows.append(row)
            print_rows(rows, model, precision)
    summary = summarize(rows)
    print("\nratios (mptrain tokens/s over the baseline's, same run):")
    for s in summary:
        print("  %-6s %-9s mptrain / %-16s %.2fx" % (s["model"], s["precision"], s["baseline"], s["ratio"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**info, "rows": rows, "ratios": summary}, f, indent=2)


def measure_peaks(args, env):
    """The machine's FP32 FMA and BF16 dot-product peaks and memcpy bandwidth (bench_kernels --peaks-only, beside
    bench_train), for the roofline columns."""
    kernels = os.path.join(os.path.dirname(args.bench), "bench_kernels")
    if not os.path.exists(kernels):
        return {}
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([kernels, "--peaks-only", "-n", str(64 << 20), "-r", "3", "--json", f.name], env=env,
                       capture_output=True, check=True)
        peaks = json.load(open(f.name))["peaks"]
    print("peaks (%d threads): FP32 FMA %.0f GFLOP/s, BF16 dot %.0f GFLOP/s, memcpy %.1f GB/s (256 MiB)" % (
        peaks["threads"], peaks["fp32_fma_gflops"], peaks["bf16_dot_gflops"], peaks["memcpy_gbps"]))
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
    main()
