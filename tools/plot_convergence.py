#!/usr/bin/env python3
"""tools/plot_convergence.py: training and validation loss per precision from train_gpt --log-json files.

  python3 tools/plot_convergence.py LOG_DIR OUT.png

Reads LOG_DIR/<precision>.jsonl (with plot_metrics.load), plots training loss (thin) and validation loss (markers) against the step, and
prints the markdown table of final validation loss, its difference from fp32 and tokens/s. Needs matplotlib (pip).
"""
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import plot_metrics  # noqa: E402  (tools/plot_metrics.py: the log reader)

ORDER = ["fp32", "bf16", "fp16", "fp8-delayed", "fp8-current", "fp8-block"]


def load(path):
    """(training (step, loss) pairs, validation (step, val_loss) pairs, the final record) of one log."""
    run = plot_metrics.load(path)
    return [(s, r["loss"]) for s, r in run["train"]], run["val"], run["final"]


def main():
    log_dir, out = pathlib.Path(sys.argv[1]), sys.argv[2]
    runs = {p: load(log_dir / f"{p}.jsonl") for p in ORDER if (log_dir / f"{p}.jsonl").exists()}
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, (train, val, _) in runs.items():
        line, = ax.plot(*zip(*train), linewidth=0.8, alpha=0.6)
        ax.plot(*zip(*val), marker="o", color=line.get_color(), label=f"{name} (val)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats/char)")
    ax.set_title("GPT-2 6x384, T=256, tinyshakespeare: training (thin) and validation loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    base = runs["fp32"][2]["val_loss"] if "fp32" in runs else None
    print("| precision | final val loss | vs fp32 | tokens/s | skipped steps |")
    print("|---|---|---|---|---|")
    for name, (_, _, f) in runs.items():
        rel = f"{(f['val_loss'] / base - 1) * 100:+.2f}%" if base else "-"
        print(f"| {name} | {f['val_loss']:.4f} | {rel} | {f['tokens_per_s']:.0f} | {f['skipped']} |")


if __name__ == "__main__":
    main()
