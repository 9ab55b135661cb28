#!/usr/bin/env python3
"""Draws a soak run (stitch_soak --csv): the daemon's resident memory, its open descriptors
and the request rate over time, with the warm-up shaded.

  plot_soak.py SAMPLES.csv OUT.png [--warmup-fraction 0.25] [--title TEXT]

Uses matplotlib from Debian's packages (python3-matplotlib).
"""

import argparse
import csv

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("samples")
    parser.add_argument("out")
    parser.add_argument("--warmup-fraction", type=float, default=0.25)
    parser.add_argument("--title", default="stitchd soak")
    args = parser.parse_args()
    with open(args.samples) as f:
        rows = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]
    if len(rows) < 2:
        raise SystemExit("plot_soak.py: fewer than two samples in %s" % args.samples)
    t = [r["seconds"] for r in rows]
    rate = [0.0] + [(b["requests"] - a["requests"]) / max(b["seconds"] - a["seconds"], 1e-9)
                    for a, b in zip(rows, rows[1:])]
    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    series = [([r["rss_bytes"] / 2**20 for r in rows], "resident memory (MiB)"),
              ([r["open_fds"] for r in rows], "open descriptors"),
              (rate, "requests per second")]
    warm = t[-1] * args.warmup_fraction
    for ax, (values, label) in zip(axes, series):
        ax.plot(t, values, linewidth=1)
        ax.axvspan(0, warm, color="0.9", label="warm-up")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="lower right")
    axes[-1].set_xlabel("seconds")
    axes[0].set_title(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)


if __name__ == "__main__":
    main()
