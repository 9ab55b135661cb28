#!/usr/bin/env python3
"""Prints the README's GPU table from one measured set under testdata/gpu/<device>/<set>/.

    tools/gpu_table.py testdata/gpu/h100_80gb_hbm3/2026-11-26_52c5190 [--peak-gbps 3352]
        [--bounds CSV]

Kernel time against kernel time: stitch's plans by Nsight Compute (stitch_kernels_ncu.tsv) or,
in a set without it, by CUPTI's activity records of gpu_bench's own runs
(stitch_kernels_cupti.tsv), torch.compile by torch.profiler (torch_compile_kernels.tsv), jax.jit by back-to-back calls
(jax_jit_kernels.tsv; dispatch-bound under about 60 us). % of peak is the subgraph's
lower-bound bytes (gpu_bench.csv) over stitch's kernel time, against the device's peak:
--peak-gbps, else the set's device.json (memory clock times bus width), else the H100's.

Where a statistic over a whole tensor makes every plan read a tensor again (batch norm's
per-channel sums over the batch: gpu_bench's schedule_bound_bytes, ForcedRereadBytes), the
goal of 80% of peak for rows above 64 MB is counted on those bytes, and a line below the table
names each such row. A set measured before gpu_bench wrote that column takes it from --bounds,
a CSV of the same columns (gpu_bench --list --target <the set's target> --csv PATH).
"""

import argparse
import csv
import json
import math
import os
import sys

BIG_ROW_BYTES = 64e6
JAX_MIN_US = 60.0


def read_tsv(path, has_header):
    rows = {}
    with open(path, encoding="utf-8") as f:
        lines = [l.rstrip("\n").split("\t") for l in f if l.strip()]
    if has_header:
        lines = lines[1:]
    for n, fields in enumerate(lines, start=2 if has_header else 1):
        try:
            rows[int(fields[0])] = float(fields[1])
        except (ValueError, IndexError):
            sys.exit(f"gpu_table: {path}:{n}: expected an id and a time in microseconds")
    return rows


def peak_of_set(set_dir):
    """The peak GB/s the set's device.json records, or the H100's 3,352 where it has none."""
    try:
        with open(os.path.join(set_dir, "device.json"), encoding="utf-8") as f:
            peak = json.load(f).get("peak_bytes_per_second")
    except (OSError, ValueError):
        peak = None
    return peak / 1e9 if isinstance(peak, (int, float)) and peak > 0 else 3352.0


def read_bounds(path):
    """{id: schedule_bound_bytes} from a gpu_bench CSV; rows without the column are left out."""
    bounds = {}
    try:
        with open(path, encoding="utf-8") as f:
            for n, row in enumerate(csv.DictReader(f), start=2):
                if row.get("schedule_bound_bytes"):
                    bounds[int(row["id"])] = float(row["schedule_bound_bytes"])
    except OSError as e:
        sys.exit(f"gpu_table: {path}: {e.strerror}")
    except (KeyError, TypeError, ValueError):
        sys.exit(f"gpu_table: {path}:{n}: expected an id and schedule_bound_bytes in bytes")
    return bounds


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("set_dir")
    parser.add_argument("--peak-gbps", type=float, default=None)
    parser.add_argument("--bounds", default=None,
                        help="a gpu_bench CSV whose schedule_bound_bytes the set lacks")
    args = parser.parse_args()
    d = args.set_dir
    if args.peak_gbps is None:
        args.peak_gbps = peak_of_set(d)
    stitch_file = os.path.join(d, "stitch_kernels_ncu.tsv")
    if not os.path.exists(stitch_file):
        stitch_file = os.path.join(d, "stitch_kernels_cupti.tsv")
    stitch = read_tsv(stitch_file, True)
    torch = read_tsv(os.path.join(d, "torch_compile_kernels.tsv"), False)
    jax = read_tsv(os.path.join(d, "jax_jit_kernels.tsv"), False)
    info = {}
    bench_csv = os.path.join(d, "gpu_bench.csv")
    with open(bench_csv, encoding="utf-8") as f:
        for row in csv.DictReader(f):
            info[int(row["id"])] = (row["subgraph"], float(row["lower_bound_bytes"]))
    bounds = read_bounds(bench_csv) or (read_bounds(args.bounds) if args.bounds else {})
    print("| id | subgraph | LB MB | stitch µs | % peak | torch.compile µs | jax.jit µs "
          "| vs torch.compile | vs jax.jit |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    vs_torch, vs_jax, big, big_ok, rereads = [], [], 0, 0, []
    for i in sorted(stitch):
        name, lb = info[i]
        us = stitch[i]
        peak = lb / (us * 1e-6) / (args.peak_gbps * 1e9) * 100
        schedule = bounds.get(i, lb)
        schedule_peak = schedule / (us * 1e-6) / (args.peak_gbps * 1e9) * 100
        if schedule > lb:
            rereads.append(f"#{i} {schedule / 1e6:.1f} MB ({schedule_peak:.0f}% of peak)")
        t, j = torch.get(i), jax.get(i)
        st = t / us if t else float("nan")
        sj = j / us if j else float("nan")
        if t:
            vs_torch.append(st)
        if j and j >= JAX_MIN_US:
            vs_jax.append(sj)
        if lb > BIG_ROW_BYTES:
            big += 1
            big_ok += schedule_peak >= 80
        print(f"| {i} | {name} | {lb / 1e6:.1f} | {us:.1f} | {peak:.0f}% | {t:.1f} | {j:.1f} "
              f"| {st:.2f} | {sj:.2f} |")
    under = sum(1 for v in vs_torch if v < 0.97)
    print()
    print(f"Geomean vs torch.compile: {geomean(vs_torch):.2f}x over {len(vs_torch)} rows "
          f"({under} under 0.97x). Geomean vs jax.jit on the {len(vs_jax)} rows where XLA takes "
          f"≥ {JAX_MIN_US:.0f} µs: {geomean(vs_jax):.2f}x. Rows above 64 MB at ≥ 80% of peak: "
          f"{big_ok} of {big}.")
    if rereads:
        print(f"Rows whose statistic over a whole tensor makes every plan read it again, with "
              f"the bytes that schedule must move (the 80% above counts these): "
              f"{', '.join(rereads)}.")


if __name__ == "__main__":
    main()
