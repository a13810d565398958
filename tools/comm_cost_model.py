# tools/comm_cost_model.py: alpha-beta step-time model of data-parallel GPT-2 on H100 clusters, with --calibrate.
"""Usage: python3 tools/comm_cost_model.py [--wire fp32,fp8] [--json] [--calibrate --measured-... ]

One step: compute, bucketed gradient all-reduce with F32/BF16/FP8 on the wire, overlap with backward, ZeRO-1.

Compute: FLOPs/token = 6*P + 12*n_layer*n_embd*T (PaLM appendix B / llm.c MFU), at an ASSUMED achieved throughput
(--tflops, default 400 TFLOP/s dense BF16 = about 40% MFU of 989). Backward = 2/3 of it, forward 1/3.
Collectives (nccl-tests doc/PERFORMANCE.md): all-reduce t = lat + 2(N-1)/N * S/busbw, reduce-scatter and all-gather
t = lat + (N-1)/N * S/busbw (S = the whole array). Ring latency as NCCL's tuning.cc: 2(N-M) NVLink steps + 2(M-1)
network steps (M nodes); all-reduce takes min(ring, tree) latency,
tree = 2((g-1) alpha_intra + ceil(log2 M) alpha_inter).
Overlap: buckets (mptrain DataParallel: 25 MiB of F32 gradients, reverse registration order) become ready when backward
finishes their layer, go out one after another, and what runs past the end of backward is exposed.
"""
import argparse, json, math

# ---- Hardware and software constants (defaults of the flags below), with sources ----
H100_PEAK_BF16_TFLOPS = 989.0  # H100 SXM5 dense BF16 Tensor Core peak (NVIDIA H100 datasheet; 1979 is with sparsity)
ACHIEVED_TFLOPS = 400.0        # ASSUMPTION: achieved throughput per GPU, about 40% MFU of 989
NVLINK_BIDIR_GBS = 900.0       # DGX H100: 18 NVLink-4 links per GPU, 900 GB/s bidirectional = 450 GB/s each way
NVLINK_BUSBW_GBS = 360.0       # achievable ring all-reduce busbw in a DGX H100 (80% of 450); nccl-tests ~360-480
NIC_LINE_GBS = 400 / 8         # DGX H100: one ConnectX-7 InfiniBand NDR 400 Gb/s NIC per GPU = 50 GB/s line rate
NIC_GBS = 42.0                 # achievable per NIC (84%); a public 4-node HGX H100 run: 331 GB/s busbw = 8 x 41
GPUS_PER_NODE = 8              # DGX/HGX H100
NICS_PER_NODE = 8              # DGX H100 compute fabric: 8 x ConnectX-7, rail-optimised (NCCL: one ring per NIC)
ALPHA_INTRA_US = 5.0           # per ring step on NVLink, large messages (NCCL tuning.cc Simple: 3.4 us + 8.4 base)
ALPHA_INTER_US = 10.0          # per ring step across InfiniBand (NCCL tuning.cc, Simple: 9.6 us)
ALPHA_SMALL_INTRA_US = 0.5     # per step, tiny messages: NCCL LL protocol on NVLink (tuning.cc ring LL: 0.47 us)
ALPHA_SMALL_INTER_US = 2.7     # per step for tiny messages across the network (tuning.cc ring LL: 2.7 us)
BUCKET_MIB = 25.0              # mptrain DataParallelOptions.bucket_bytes: 25 << 20 bytes of F32 (PyTorch DDP's default)
WIRE_BYTES = {"fp32": 4, "bf16": 2, "fp8": 1}  # bytes per gradient element on the wire (FP8: E4M3 codes)
META_MSG_BYTES = 512           # mptrain DataParallel: per bucket an F32 [used flags | amaxes] MAX all-reduce, every
                               # wire format (FP8 waits for it before quantising): tiny, so latency only
PARAM_GATHER_BYTES = 4         # ZeRO-1 all-gathers the updated F32 parameters (mptrain: F32 weights, no extra master)
ADAM_MOMENT_BYTES = 8          # AdamW exp_avg + exp_avg_sq in F32
MASTER_BYTES = 4               # the F32 weights the optimizer updates (mptrain: the parameters themselves)
GPU_COUNTS = [8, 16, 32, 64, 128, 256, 512, 1024]
MODELS = {  # GPT-2 (Radford et al. 2019), tied LM head; micro_batch = sequences of ctx tokens per GPU per step
    "124M": dict(n_layer=12, n_embd=768, n_head=12, vocab=50257, ctx=1024, micro_batch=16),
    "1.5B": dict(n_layer=48, n_embd=1600, n_head=25, vocab=50257, ctx=1024, micro_batch=8),
}


def gpt2_segments(L, C, V, T):
    """Backward in execution order: (FLOPs per token, parameter tensor sizes final at the segment's end). The sizes
    follow mptrain's registration order (wte, wpe, h.0..h.L-1, ln_f) reversed, as DataParallel fills its buckets."""
    block = [C, C * C * 4, 4 * C, 4 * C * C, C, C, C, C * C, 3 * C, 3 * C * C, C, C]  # mlp.c_proj.b ... ln_1.w
    segs = [(6 * V * C + 6 * 2 * C, [C, C])]  # LM head matmul (tied wte), then ln_f
    segs += [(6 * sum(block) + 12 * C * T, block)] * L  # each block: 6 FLOPs/param + attention 12*C*T
    segs.append((6 * T * C, [T * C, V * C]))  # embeddings: wpe, then wte (tied: final only after the lookup's backward)
    return segs


def make_buckets(sizes_ready, bucket_bytes):
    """DataParallel's greedy bucketing: (numel, ready_s) in order -> [(numel, ready_s of its last tensor)]."""
    out, nbytes = [], bucket_bytes
    for n, ready in sizes_ready:
        if not out or nbytes + 4 * n > bucket_bytes:
            out.append([0, 0.0])
            nbytes = 0
        out[-1][0] += n
        out[-1][1] = max(out[-1][1], ready)
        nbytes += 4 * n
    return [tuple(b) for b in out]


def busbw_gbs(n, a):
    """Bottleneck bus bandwidth of a ring over n GPUs. Across nodes a GPU sends (g-1)/g of its ring traffic over NVLink
    and each node's NICs share the rest (one ring per NIC): t = S' * max((g-1)/(g*B_nvl), 1/(nics*B_nic))."""
    g = a.gpus_per_node
    if n <= g:
        return a.nvlink_busbw
    return 1.0 / max((g - 1) / g / a.nvlink_busbw, 1.0 / (a.nics_per_node * a.nic_gbs))


def collective_s(kind, nbytes, n, a, small=False):
    """Seconds for one collective of an nbytes array ('allreduce', 'reduce_scatter', 'all_gather') over n GPUs."""
    if n <= 1:
        return 0.0
    ai, ae = (a.alpha_small_intra, a.alpha_small_inter) if small else (a.alpha_intra, a.alpha_inter)
    g, m = min(n, a.gpus_per_node), math.ceil(n / a.gpus_per_node)
    k = 2 if kind == "allreduce" else 1
    lat = k * ((n - m) * ai + (m - 1) * ae)  # ring: k(N-1) steps, k(M-1) of them across nodes
    if kind == "allreduce":
        lat = min(lat, 2 * ((g - 1) * ai + math.ceil(math.log2(m)) * ae))  # NCCL picks a tree when it is faster
    return lat * 1e-6 + k * (n - 1) / n * nbytes / (busbw_gbs(n, a) * 1e9)


def overlap(buckets, bwd_s, eff):
    """buckets: [(ready_s, comm_s)] in launch order, serialised on one stream. Returns (comm_s, exposed_s): with eff=1
    what ends past the backward is exposed; eff<1 interpolates linearly towards no overlap at all (eff=0)."""
    t = total = 0.0
    for ready, c in buckets:
        t = max(t, ready) + c
        total += c
    return total, eff * max(0.0, t - bwd_s) + (1 - eff) * total


def model_step(name, n, wire, a, zero1=False):
    m = dict(MODELS[name])
    m["micro_batch"] = a.micro_batch_124m if name == "124M" else a.micro_batch_1_5b
    L, C, V, T = m["n_layer"], m["n_embd"], m["vocab"], m["ctx"]
    segs = gpt2_segments(L, C, V, T)
    P = sum(sum(s) for _, s in segs)
    fpt = sum(f for f, _ in segs)
    assert fpt == 6 * P + 12 * L * C * T
    tokens = m["micro_batch"] * T
    rate = a.tflops * 1e12
    compute = fpt * tokens / rate
    bwd = 2.0 / 3.0 * compute
    sizes_ready, t = [], 0.0
    for f, sizes in segs:
        t += 2.0 / 3.0 * f * tokens / rate
        sizes_ready += [(s, t) for s in sizes]
    buckets = make_buckets(sizes_ready, a.bucket_mib * 2**20)
    bpe = WIRE_BYTES[wire]
    meta = collective_s("allreduce", META_MSG_BYTES, n, a, small=True)  # the per-bucket MAX all-reduce
    # mptrain's ZeRO-1 reduce-scatters F32 gradients (it refuses compression with ZeRO-1)
    grad_kind = "reduce_scatter" if zero1 and wire == "fp32" else "allreduce"
    timeline = [(r, collective_s(grad_kind, k * bpe, n, a) + meta) for k, r in buckets]
    comm, exposed = overlap(timeline, bwd, a.overlap_efficiency)
    gather = sum(collective_s("all_gather", k * PARAM_GATHER_BYTES, n, a) for k, _ in buckets) if zero1 else 0.0
    comm, exposed = comm + gather, exposed + gather  # ZeRO-1: the all-gather follows the optimizer step, not hidden
    step = compute + exposed
    return dict(model=name, n=n, wire=wire, zero1=zero1, params=P, flops_per_token=fpt, tokens_per_gpu=tokens,
                buckets=len(buckets), busbw_gbs=busbw_gbs(n, a), compute_ms=compute * 1e3, backward_ms=bwd * 1e3,
                comm_ms=comm * 1e3, allgather_ms=gather * 1e3, exposed_ms=exposed * 1e3, step_ms=step * 1e3,
                comm_share=comm / step, exposed_share=exposed / step, tokens_s_gpu=tokens / step,
                tokens_s_total=n * tokens / step,
                opt_state_gb=P * (MASTER_BYTES + ADAM_MOMENT_BYTES / (n if zero1 else 1)) / 1e9)


def fmt_table(head, rows):
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] +
                     ["| " + " | ".join(r) + " |" for r in rows])


def report(a):
    out, text = {"assumptions": {k: v for k, v in vars(a).items() if not k.startswith("measured")}}, []
    out["results"] = []
    text.append(f"Assumptions: {a.tflops:g} TFLOP/s achieved per GPU = {100 * a.tflops / H100_PEAK_BF16_TFLOPS:.0f}% "
                f"MFU of {H100_PEAK_BF16_TFLOPS:g} (dense BF16); NVLink busbw {a.nvlink_busbw:g} of "
                f"{NVLINK_BIDIR_GBS / 2:g} GB/s per direction; {a.nics_per_node} x {a.nic_gbs:g} of "
                f"{NIC_LINE_GBS:g} GB/s InfiniBand per node; alpha {a.alpha_intra:g}/{a.alpha_inter:g} us per "
                f"NVLink/network step; {a.bucket_mib:g} MiB F32 buckets; "
                f"overlap efficiency {a.overlap_efficiency:g}.\n")
    for name in MODELS:
        for wire in a.wire.split(","):
            dp = [model_step(name, n, wire, a) for n in a.gpus]
            # mptrain refuses ZeRO-1 with compressed gradients (DataParallelOptions): F32 only.
            z1 = [model_step(name, n, wire, a, zero1=True) for n in a.gpus] if wire == "fp32" else []
            c3 = {w: [model_step(name, n, w, a)["comm_ms"] for n in a.gpus] for w in WIRE_BYTES}
            out["results"] += dp + z1
            r0 = dp[0]
            text.append(f"### GPT-2 {name}: P = {r0['params']:,}, {r0['flops_per_token'] / 1e9:.3f} GFLOP/token, "
                        f"{r0['tokens_per_gpu']} tokens/GPU/step, {r0['buckets']} buckets; exposed/step/shares with "
                        f"{wire.upper()} gradients on the wire\n")
            text.append(fmt_table(
                ["N", "busbw GB/s", "compute ms", "comm FP32 ms", "comm BF16 ms", "comm FP8 ms", "exposed ms",
                 "step ms", "comm %", "exposed %", "tok/s/GPU", "tok/s total"],
                [[str(r["n"]), f"{r['busbw_gbs']:.0f}", f"{r['compute_ms']:.1f}", f"{c3['fp32'][i]:.1f}",
                  f"{c3['bf16'][i]:.1f}", f"{c3['fp8'][i]:.1f}", f"{r['exposed_ms']:.2f}", f"{r['step_ms']:.1f}",
                  f"{100 * r['comm_share']:.0f}", f"{100 * r['exposed_share']:.1f}", f"{r['tokens_s_gpu']:,.0f}",
                  f"{r['tokens_s_total'] / 1e6:.2f}M"] for i, r in enumerate(dp)]) + "\n")
            if not z1:
                continue
            text.append("ZeRO-1 (F32 reduce-scatter; F32 all-gather after the step):\n")
            text.append(fmt_table(
                ["N", "RS+AG ms", "of which AG ms", "exposed ms", "step ms", "comm %", "tok/s total",
                 "opt. state GB/GPU DP", "ZeRO-1"],
                [[str(z["n"]), f"{z['comm_ms']:.1f}", f"{z['allgather_ms']:.1f}", f"{z['exposed_ms']:.2f}",
                  f"{z['step_ms']:.1f}", f"{100 * z['comm_share']:.0f}", f"{z['tokens_s_total'] / 1e6:.2f}M",
                  f"{d['opt_state_gb']:.2f}", f"{z['opt_state_gb']:.2f}"] for d, z in zip(dp, z1)]) + "\n")
    return out, "\n".join(text)


def calibrate(a):
    """The model applied to a measured small run: N ranks, one uniform bucket timeline, measured busbw and alpha."""
    need = ["measured_allreduce_busbw_gbs", "measured_alpha_us", "measured_step_ms", "measured_backward_ms",
            "measured_grad_bytes"]
    missing = ["--" + k.replace("_", "-") for k in need if getattr(a, k) is None]
    if missing:
        raise SystemExit("--calibrate needs " + " ".join(missing))
    n, bwd = a.measured_np, a.measured_backward_ms * 1e-3
    compute = a.measured_compute_ms * 1e-3 if a.measured_compute_ms is not None else 1.5 * bwd
    bucket = a.bucket_mib * 2**20 / 4  # elements per bucket (F32 bytes, as DataParallel)
    elems = a.measured_grad_bytes / 4
    k = max(1, math.ceil(elems / bucket))
    bpe = WIRE_BYTES[a.wire.split(",")[0]]
    per = [min(bucket, elems - i * bucket) for i in range(k)]
    lat = 2 * (n - 1) * a.measured_alpha_us * 1e-6  # per all-reduce; each bucket also has its MAX all-reduce
    timeline = [((i + 1) * bwd / k, 2 * lat +
                 2 * (n - 1) / n * e * bpe / (a.measured_allreduce_busbw_gbs * 1e9)) for i, e in enumerate(per)]
    comm, exposed = overlap(timeline, bwd, a.overlap_efficiency)
    step, ms = compute + exposed, a.measured_step_ms * 1e-3
    pred = dict(np=n, buckets=k, compute_ms=compute * 1e3, comm_ms=comm * 1e3, exposed_ms=exposed * 1e3,
                step_ms=step * 1e3, comm_share=comm / step, exposed_share=exposed / step)
    exp_ms = a.measured_exposed_ms if a.measured_exposed_ms is not None else ms * 1e3 - compute * 1e3
    meas = dict(step_ms=a.measured_step_ms, backward_ms=a.measured_backward_ms, compute_ms=a.measured_compute_ms,
                comm_ms=a.measured_comm_ms, exposed_ms=exp_ms,
                comm_share=None if a.measured_comm_ms is None else a.measured_comm_ms / a.measured_step_ms,
                exposed_share=exp_ms / a.measured_step_ms)
    src = "--measured-compute-ms" if a.measured_compute_ms is not None else "1.5 x --measured-backward-ms"
    esrc = "--measured-exposed-ms" if a.measured_exposed_ms is not None else "step - compute"
    f = lambda v, p="{:.2f}": "n/a" if v is None else p.format(v)
    rows = [["step ms", f(pred["step_ms"]), f(meas["step_ms"]), f"{100 * (step / ms - 1):+.0f}%"],
            ["compute ms", f(pred["compute_ms"]), f(meas["compute_ms"]), "from " + src],
            ["comm ms (all buckets)", f(pred["comm_ms"]), f(meas["comm_ms"]), f"{k} bucket(s)"],
            ["exposed comm ms", f(pred["exposed_ms"]), f(exp_ms), "measured: " + esrc],
            ["comm share %", f(100 * pred["comm_share"], "{:.1f}"),
             f(None if meas["comm_share"] is None else 100 * meas["comm_share"], "{:.1f}"), ""],
            ["exposed share %", f(100 * pred["exposed_share"], "{:.1f}"), f(100 * meas["exposed_share"], "{:.1f}"), ""]]
    text = (f"Calibration: N={n} ranks, busbw {a.measured_allreduce_busbw_gbs} GB/s, "
            f"alpha {a.measured_alpha_us} us/step,"
            f" {a.measured_grad_bytes / 1e6:.1f} MB gradients, {a.wire.split(',')[0].upper()} wire, overlap efficiency "
            f"{a.overlap_efficiency}\n\n" + fmt_table(["quantity", "predicted", "measured", "note"], rows))
    return dict(predicted=pred, measured=meas, assumptions={k: v for k, v in vars(a).items()}), text


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = p.add_argument
    add("--gpus", type=lambda s: [int(x) for x in s.split(",")], default=GPU_COUNTS, help="comma-separated N")
    add("--wire", default="fp32,fp8", help="gradient formats on the wire, comma-separated: fp32, bf16, fp8")
    add("--tflops", type=float, default=ACHIEVED_TFLOPS, help="achieved TFLOP/s per GPU (assumption)")
    add("--micro-batch-124m", type=int, default=MODELS["124M"]["micro_batch"], help="sequences/GPU/step, 124M")
    add("--micro-batch-1-5b", type=int, default=MODELS["1.5B"]["micro_batch"], help="sequences/GPU/step, 1.5B")
    add("--nvlink-busbw", type=float, default=NVLINK_BUSBW_GBS, help="achievable intra-node busbw, GB/s")
    add("--nic-gbs", type=float, default=NIC_GBS, help="achievable bandwidth per InfiniBand NIC, GB/s each way")
    add("--nics-per-node", type=int, default=NICS_PER_NODE, help="NICs (rails) per node; 1 = one NIC bottlenecks")
    add("--gpus-per-node", type=int, default=GPUS_PER_NODE)
    add("--alpha-intra", type=float, default=ALPHA_INTRA_US, help="us per NVLink ring step")
    add("--alpha-inter", type=float, default=ALPHA_INTER_US, help="us per network ring step")
    add("--alpha-small-intra", type=float, default=ALPHA_SMALL_INTRA_US, help="us per NVLink step, tiny messages")
    add("--alpha-small-inter", type=float, default=ALPHA_SMALL_INTER_US, help="us per network step, tiny messages")
    add("--bucket-mib", type=float, default=BUCKET_MIB, help="F32 gradient MiB per bucket")
    add("--overlap-efficiency", type=float, default=1.0, help="1 = perfect overlap with backward, 0 = none")
    add("--json", action="store_true", help="print machine-readable results instead of markdown")
    add("--calibrate", action="store_true", help="compare the model with a measured run (the --measured-* flags)")
    add("--measured-np", type=int, default=2, help="ranks of the measured run")
    add("--measured-allreduce-busbw-gbs", type=float, help="busbw of a large all-reduce on that machine, GB/s")
    add("--measured-alpha-us", type=float, help="latency per ring step on that machine (small all-reduce / 2(N-1))")
    add("--measured-step-ms", type=float, help="measured data-parallel step time")
    add("--measured-backward-ms", type=float, help="backward time, the overlap window (StepTiming finish_called_s)")
    add("--measured-grad-bytes", type=float, help="F32 gradient bytes all-reduced per step (4 x parameters)")
    add("--measured-compute-ms", type=float, help="optional: same step without communication (e.g. -np 1)")
    add("--measured-comm-ms", type=float, help="optional: measured total time inside the all-reduces")
    add("--measured-exposed-ms", type=float, help="optional: DataParallel::last_step().finish_wait_s, in ms")
    a = p.parse_args()
    if not 0.0 <= a.overlap_efficiency <= 1.0:
        p.error("--overlap-efficiency must lie in [0, 1]")
    if any(w not in WIRE_BYTES for w in a.wire.split(",")):
        p.error("--wire takes fp32, bf16, fp8")
    result, text = calibrate(a) if a.calibrate else report(a)
    print(json.dumps(result, indent=1) if a.json else text)


if __name__ == "__main__":
    main()
