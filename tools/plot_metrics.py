#!/usr/bin/env python3
"""tools/plot_metrics.py: train_gpt --log-json files (JSON lines) of one or several runs to one PNG.

  python3 tools/plot_metrics.py RUN.jsonl [RUN2.jsonl ...] -o OUT.png [--labels a,b]

Panels: training loss (and validation loss, markers) against the step; tokens per second; the loss scale (fp16 runs
with dynamic loss scaling; a panel is drawn only when some run logged it); the time a step waited for its batch.
Each run is one colour, labelled by --labels or its file name. Reading is shared with plot_convergence.py. Needs
matplotlib (Debian: python3-matplotlib; install-deps.sh --tools).
"""
import argparse
import json
import pathlib


def load(path):
    """The records of one log: {"train": [(step, record)], "val": [(step, val_loss)], "final": record or None}."""
    run = {"train": [], "val": [], "final": None}
    for n, line in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise SystemExit(f"{path}:{n}: not a JSON line ({e})")
        if r.get("final"):
            run["final"] = r
        elif "val_loss" in r:
            run["val"].append((r["step"], r["val_loss"]))
        elif "loss" in r:
            run["train"].append((r["step"], r))
    if not run["train"]:
        raise SystemExit(f"{path}: no training records (write one with train_gpt --log-json FILE)")
    return run


def series(run, key):
    return [(s, r[key]) for s, r in run["train"] if key in r]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--labels", help="comma-separated, one per log (default: the file names)")
    a = ap.parse_args()
    labels = a.labels.split(",") if a.labels else [pathlib.Path(p).stem for p in a.logs]
    if len(labels) != len(a.logs):
        raise SystemExit(f"--labels has {len(labels)} names for {len(a.logs)} logs")
    runs = [load(p) for p in a.logs]

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("loss", "cross-entropy (nats per token)"), ("tokens_per_s", "tokens / s")]
    if any(series(r, "loss_scale") for r in runs):
        panels.append(("loss_scale", "loss scale"))
    if any(series(r, "data_wait_ms") for r in runs):
        panels.append(("data_wait_ms", "data wait per step (ms)"))
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.6 * len(panels)), sharex=True, squeeze=False)
    for run, label in zip(runs, labels):
        colour = None
        for ax, (key, _) in zip(axes[:, 0], panels):
            points = series(run, key)
            if not points:
                continue
            line, = ax.plot(*zip(*points), linewidth=0.9, color=colour, label=label if key == "loss" else None)
            colour = line.get_color()
            if key == "loss" and run["val"]:
                ax.plot(*zip(*run["val"]), marker="o", linestyle="--", color=colour, label=f"{label} (val)")
            if key == "loss_scale":
                ax.set_yscale("log", base=2)
    for ax, (_, title) in zip(axes[:, 0], panels):
        ax.set_ylabel(title)
        ax.grid(alpha=0.3)
    axes[0, 0].legend()
    axes[-1, 0].set_xlabel("optimizer step")
    fig.tight_layout()
    fig.savefig(a.out, dpi=100)
    for run, label in zip(runs, labels):
        f = run["final"]
        tail = f", final val loss {f['val_loss']:.4f}, {f['tokens_per_s']:.0f} tok/s" if f else ""
        print(f"{label}: {len(run['train'])} training records, {len(run['val'])} validation losses{tail}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
