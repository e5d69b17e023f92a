#!/usr/bin/env python3
"""Loss curves of several training runs side by side, from examples/train.py's JSON reports.

    python3 examples/plot_runs.py runs/*.json -o runs/loss.png

Left: training loss (smoothed) per token; right: validation loss per token, with the
relative gap of each run's final validation loss to the BF16 run's in the legend. Also
prints that table (and writes it next to the PNG as .md). Needs matplotlib for the PNG;
without it, only the table is written.
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def load(paths):
    runs = []
    for p in paths:
        with open(p) as f:
            r = json.load(f)
        if "val_curve" not in r:  # another kind of JSON in the same directory (a benchmark)
            print(f"plot_runs: {p} is not a training report, skipped", file=sys.stderr)
            continue
        r["_path"] = p
        runs.append(r)
    return runs


def baseline(runs):
    for r in runs:
        if r.get("recipe", {}).get("name") == "bf16" or r.get("name") == "bf16":
            return r
    return None


def table(runs) -> str:
    base = baseline(runs)
    lines = ["| run | recipe | steps | tokens | final val loss | vs bf16 | tokens/s | step (ms) | peak memory |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        gap = ""
        if base is not None and r["tokens"] == base["tokens"]:
            gap = f"{100 * (r['final_val_loss'] / base['final_val_loss'] - 1):+.2f}%"
        elif base is not None:
            gap = "(unequal tokens)"
        mem = r.get("memory", {})
        mem_s = ", ".join(f"{k}={v:.2f}" for k, v in mem.items())
        tps = f"{r['tokens_per_s']:,.0f}" if r.get("tokens_per_s") else "n/a"
        st = f"{1000 * r['step_time_s']:.1f}" if r.get("step_time_s") == r.get("step_time_s") else "n/a"
        lines.append(f"| {r['name']} | {r.get('recipe', {}).get('name', '?')} | {r['steps']} | {r['tokens'] / 1e6:.2f}M"
                     f" | {r['final_val_loss']:.4f} | {gap} | {tps} | {st} | {mem_s} |")
    dev = sorted({r.get("device", "?") for r in runs})
    dates = sorted({r.get("date", "?")[:10] for r in runs})
    lines.append("")
    lines.append(f"device: {', '.join(dev)}; date: {', '.join(dates)}")
    return "\n".join(lines)


def smooth(ys, k):
    if k <= 1 or len(ys) < k:
        return ys
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y
        if i >= k:
            acc -= ys[i - k]
        out.append(acc / min(i + 1, k))
    return out


def plot(runs, out):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_runs: matplotlib is not installed (pip install matplotlib); wrote the table only",
              file=sys.stderr)
        return False
    base = baseline(runs)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    for r in runs:
        tps = r["tokens"] / max(1, r["steps"])
        curve = r.get("train_curve", [])
        if curve:
            xs = [c["step"] * tps / 1e6 for c in curve]
            ys = smooth([c["loss"] for c in curve], max(1, len(curve) // 50))
            ax1.plot(xs, ys, label=r["name"], linewidth=1.2)
        vc = r.get("val_curve", [])
        if vc:
            label = r["name"]
            if base is not None and r is not base and r["tokens"] == base["tokens"]:
                label += f" ({100 * (r['final_val_loss'] / base['final_val_loss'] - 1):+.2f}%)"
            ax2.plot([c["tokens"] / 1e6 for c in vc], [c["val_loss"] for c in vc], marker="o", markersize=3,
                     label=label, linewidth=1.2)
    ax1.set(title="training loss (smoothed)", xlabel="tokens (M)", ylabel="cross-entropy (nats/byte)")
    ax2.set(title="validation loss", xlabel="tokens (M)", ylabel="cross-entropy (nats/byte)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    # the end of training is where the recipes differ; zoom the validation plot there
    finals = [c["val_loss"] for r in runs for c in r.get("val_curve", [])[len(r.get("val_curve", [])) // 2:]]
    if finals:
        lo, hi = min(finals), max(finals)
        ax2.set_ylim(lo - 0.05 * (hi - lo + 1e-3), hi + 0.5 * (hi - lo + 1e-3))
    dev = ", ".join(sorted({r.get("device", "?") for r in runs}))
    fig.suptitle(f"nvfp4 training runs ({dev})", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="JSON reports from examples/train.py")
    ap.add_argument("-o", "--out", default="loss.png", help="PNG to write")
    a = ap.parse_args(argv)
    runs = load(a.runs)
    t = table(runs)
    print(t)
    with open(os.path.splitext(a.out)[0] + ".md", "w") as f:
        f.write(t + "\n")
    if plot(runs, a.out):
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
