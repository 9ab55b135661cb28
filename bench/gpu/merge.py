"""`frameworks.py merge`: gpu_bench's results and the frameworks' in one table per device.

Joins stitch.csv and device.json (written by gpu_bench) with frameworks.json (written by
`frameworks.py time`) into bench/results/gpu_<device>.csv and .md. Needs only the standard
library, so any Python can write the table.
"""

import csv
import json
import math
import os
import statistics

from timing import FRAMEWORKS

FRAMEWORK_LABELS = {"torch-eager": "PyTorch eager", "torch-compile": "torch.compile",
                    "jax-jit": "jax.jit"}


def number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def fmt(v, digits):
    return "-" if v is None else f"{v:.{digits}f}"


def geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


LARGE_ROW_BYTES = 64e6  # rows above this are held to the bandwidth goal
PEAK_GOAL = 0.80
PARITY = 0.97


def add_kernel_columns(out, row, rid, fw_kernel_time, peak):
    """Kernel-time columns of one row: stitch's from stitch.csv, the frameworks' profiles."""
    s_kernel = number(row.get("stitch_kernel_us"))
    bound = number(row.get("lower_bound_bytes"))
    out["stitch_kernel_us"] = "" if s_kernel is None else f"{s_kernel:.2f}"
    out["stitch_kernel_pct_peak"] = (f"{100 * bound / (s_kernel * 1e-6) / peak:.2f}"
                                     if s_kernel and bound and peak else "")
    for mode in FRAMEWORKS:
        key = mode.replace("-", "_")
        t = fw_kernel_time(mode, rid)
        out[f"{key}_kernel_us"] = "" if t is None else f"{t:.2f}"
        out[f"kernel_speedup_vs_{key}"] = "" if t is None or not s_kernel else \
            f"{t / s_kernel:.3f}"


def kernel_time_section(merged, fw, device):
    """The kernel-time table and the goals it is held to, or nothing without kernel times."""
    if not any(number(o["stitch_kernel_us"]) for o in merged):
        return ["", f"Kernel time: {device.get('kernel_timing') or 'not measured'}."]
    shown = ("torch-compile", "jax-jit")
    lines = ["", "## Kernel time", "",
             f"Stitch: {device.get('kernel_timing', '')}. " + "; ".join(
                 f"{FRAMEWORK_LABELS[m]}: {fw[m].get('version', '') or fw[m].get('note', '')}"
                 for m in shown) + ".", "",
             "| id | stitch kernel µs | % of peak | " +
             " | ".join(f"{FRAMEWORK_LABELS[m]} kernel µs" for m in shown) + " | " +
             " | ".join(f"over {FRAMEWORK_LABELS[m]}" for m in shown) + " |",
             "|---:|---:|---:|" + "---:|" * (2 * len(shown))]
    for o in merged:
        cells = [str(o["id"]), fmt(number(o["stitch_kernel_us"]), 1),
                 fmt(number(o["stitch_kernel_pct_peak"]), 1)]
        cells += [fmt(number(o[f"{m.replace('-', '_')}_kernel_us"]), 1) for m in shown]
        cells += [fmt(number(o[f"kernel_speedup_vs_{m.replace('-', '_')}"]), 2) for m in shown]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    compile_speedups = [number(o["kernel_speedup_vs_torch_compile"]) for o in merged]
    compile_speedups = [v for v in compile_speedups if v]
    if compile_speedups:
        slow = [str(o["id"]) for o in merged
                if (number(o["kernel_speedup_vs_torch_compile"]) or 1) < PARITY]
        lines.append(f"- Over torch.compile, kernel time against kernel time: "
                     f"{fmt(geomean(compile_speedups), 2)}x (geometric mean over "
                     f"{len(compile_speedups)} rows); under {PARITY}x: "
                     f"{', '.join('#' + i for i in slow) if slow else 'none'}.")
    jax_rows = [o for o in merged if (number(o["jax_jit_kernel_us"]) or 0) >= 60]
    jax_speedups = [number(o["kernel_speedup_vs_jax_jit"]) for o in jax_rows]
    if any(jax_speedups):
        lines.append(f"- Over jax.jit on the {len(jax_rows)} rows where its kernels take at least "
                     f"60 µs: {fmt(geomean(jax_speedups), 2)}x.")
    large = [o for o in merged if (number(o["lower_bound_bytes"]) or 0) > LARGE_ROW_BYTES and
             number(o["stitch_kernel_pct_peak"])]
    if large:
        met = [o for o in large if number(o["stitch_kernel_pct_peak"]) >= 100 * PEAK_GOAL]
        lines.append(f"- Rows above {LARGE_ROW_BYTES / 1e6:.0f} MB at {100 * PEAK_GOAL:.0f}% of "
                     f"peak or more, in kernel time: {len(met)} of {len(large)}.")
    return lines


def command_merge(args):
    with open(os.path.join(args.run_dir, "stitch.csv")) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(args.run_dir, "device.json")) as f:
        device = json.load(f)
    frameworks_path = args.frameworks or os.path.join(args.run_dir, "frameworks.json")
    report = {"frameworks": {}}
    if os.path.exists(frameworks_path):
        with open(frameworks_path) as f:
            report = json.load(f)
    fw = report.get("frameworks", {})
    notes = dict(args.note or [])
    for mode in FRAMEWORKS:
        if mode not in fw:
            fw[mode] = {"note": notes.get(mode) or args.missing_note or "not run"}

    def fw_time(mode, rid):
        t = fw[mode].get("times", {}).get(str(rid), {})
        return t.get("median_us")

    def fw_kernel_time(mode, rid):
        t = fw[mode].get("times", {}).get(str(rid), {})
        return t.get("kernel", {}).get("median_us")

    peak = float(device.get("peak_bytes_per_second") or 0)
    fields = ["id", "subgraph", "lower_bound_bytes", "stitch_kernels", "baseline_kernels",
              "stitch_us", "baseline_us", "speedup_vs_baseline", "stitch_gbps", "stitch_pct_peak",
              "baseline_gbps", "baseline_pct_peak"]
    fields += [f"{m.replace('-', '_')}_us" for m in FRAMEWORKS]
    fields += [f"speedup_vs_{m.replace('-', '_')}" for m in FRAMEWORKS]
    fields += ["stitch_matches", "baseline_matches", "stitch_loaded", "error"]
    fields += ["stitch_kernel_us", "stitch_kernel_pct_peak"]
    fields += [f"{m.replace('-', '_')}_kernel_us" for m in FRAMEWORKS]
    fields += [f"kernel_speedup_vs_{m.replace('-', '_')}" for m in FRAMEWORKS]
    merged = []
    for row in rows:
        rid = int(row["id"])
        s_us, b_us = number(row["stitch_us"]), number(row["baseline_us"])
        out = {"id": rid, "subgraph": row["subgraph"],
               "lower_bound_bytes": row["lower_bound_bytes"],
               "stitch_kernels": row["stitch_kernels"], "baseline_kernels": row["baseline_kernels"],
               "stitch_us": row["stitch_us"], "baseline_us": row["baseline_us"],
               "speedup_vs_baseline": row["speedup"], "stitch_gbps": row["stitch_gbps"],
               "stitch_pct_peak": row["stitch_pct_peak"], "baseline_gbps": row["baseline_gbps"],
               "baseline_pct_peak": row["baseline_pct_peak"],
               "stitch_matches": row["stitch_matches"],
               "baseline_matches": row["baseline_matches"], "stitch_loaded": row["stitch_loaded"],
               "error": row["error"]}
        for mode in FRAMEWORKS:
            t = fw_time(mode, rid)
            key = mode.replace("-", "_")
            out[f"{key}_us"] = "" if t is None else f"{t:.2f}"
            out[f"speedup_vs_{key}"] = "" if t is None or not s_us else f"{t / s_us:.3f}"
        add_kernel_columns(out, row, rid, fw_kernel_time, peak)
        out["_s_us"], out["_b_us"] = s_us, b_us
        merged.append(out)

    slug = device.get("slug", "unknown")
    os.makedirs(args.results, exist_ok=True)
    csv_path = os.path.join(args.results, f"gpu_{slug}.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for out in merged:
            w.writerow(out)

    loaded = sorted({o["stitch_loaded"] for o in merged if o["stitch_loaded"] not in ("", "-")})
    loaded_text = {"cubin": "loaded as cubin", "ptx": "loaded as PTX (JIT-compiled by the driver)"}
    lines = [f"# GPU benchmark: {device['name']}", ""]
    lines.append(
        f"{device.get('date', '')}. {device['name']} ({device['arch']}, {device['sms']} SMs, "
        f"{int(device['memory_bytes']) / 2 ** 30:.0f} GiB), driver {device['driver_version']}; "
        f"peak DRAM bandwidth {peak / 1e9:.0f} GB/s ({device['peak_source']}). Stitch kernels "
        f"compiled for {device['target']}"
        + (f", {' and '.join(loaded_text.get(x, x) for x in loaded)}" if loaded else "")
        + f". Every time is the median of {device['repeats']} runs "
        f"of the whole subgraph after {device['warmup']} warm-up "
        f"run{'' if device['warmup'] == 1 else 's'}"
        + (", with the L2 cache flushed before each run." if device["flush_l2"] else "."))
    lines.append("")
    header = ["id", "subgraph", "kernels stitch / base", "stitch µs", "base µs", "speedup",
              "stitch GB/s", "% of peak"] + [f"{FRAMEWORK_LABELS[m]} µs" for m in FRAMEWORKS] + \
             ["speedup over fastest framework", "correct"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|---:|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(FRAMEWORKS) +
                 "---:|:---:|")
    for out in merged:
        fw_times = [number(out[f"{m.replace('-', '_')}_us"]) for m in FRAMEWORKS]
        best = min([t for t in fw_times if t], default=None)
        correct = "yes" if out["stitch_matches"] == "yes" and out["baseline_matches"] == "yes" \
            else ("NO" if "NO" in (out["stitch_matches"], out["baseline_matches"]) else "-")
        cells = [str(out["id"]), out["subgraph"],
                 f"{out['stitch_kernels'] or '-'} / {out['baseline_kernels'] or '-'}",
                 fmt(out["_s_us"], 1), fmt(out["_b_us"], 1),
                 fmt(number(out["speedup_vs_baseline"]), 2),
                 fmt(number(out["stitch_gbps"]), 0), fmt(number(out["stitch_pct_peak"]), 1)]
        cells += [fmt(t, 1) for t in fw_times]
        cells += [fmt(best / out["_s_us"], 2) if best and out["_s_us"] else "-", correct]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    base_speedups = [number(o["speedup_vs_baseline"]) for o in merged]
    timed = sum(1 for s in base_speedups if s)
    if timed:
        summary = [f"- Stitched plans over the XLA-style baseline plans: "
                   f"{fmt(geomean(base_speedups), 2)}x (geometric mean over {timed} subgraphs)."]
    else:
        summary = ["- Stitched and baseline plans: not timed."]
    for mode in FRAMEWORKS:
        key = mode.replace("-", "_")
        speedups = [number(o[f"speedup_vs_{key}"]) for o in merged]
        timed = sum(1 for s in speedups if s)
        if timed:
            summary.append(f"- Over {FRAMEWORK_LABELS[mode]} ({fw[mode].get('version', '')}): "
                           f"{fmt(geomean(speedups), 2)}x (geometric mean over {timed} subgraphs).")
        else:
            why = fw[mode].get("note") or "no results"
            summary.append(f"- {FRAMEWORK_LABELS[mode]}: not timed: {why}.")
    pct = [number(o["stitch_pct_peak"]) for o in merged if number(o["stitch_pct_peak"])]
    if pct:
        summary.append(f"- Stitched plans reach a median {statistics.median(pct):.1f}% of peak "
                       f"bandwidth (lower-bound bytes over measured time).")
    wrong = [str(o["id"]) for o in merged if "NO" in (o["stitch_matches"], o["baseline_matches"])]
    if wrong:
        summary.append(f"- Outputs differ from the reference interpreter for #{', #'.join(wrong)}.")
    errors = [f"#{o['id']}: {o['error']}" for o in merged if o["error"]]
    for mode in FRAMEWORKS:
        for rid, t in sorted(fw[mode].get("times", {}).items(), key=lambda kv: int(kv[0])):
            if "error" in t:
                errors.append(f"{FRAMEWORK_LABELS[mode]} #{rid}: {t['error']}")
    lines += summary
    lines += kernel_time_section(merged, fw, device)
    if errors:
        lines += ["", "Errors:", ""] + [f"- {e}" for e in errors]
    lines += ["", "How to read it:", "",
              "- GB/s counts the lower-bound bytes (every input read once, every output written "
              "once) over the measured time, so a plan that moves more bytes scores lower.",
              "- Stitch and PyTorch times are CUDA-event times on the GPU (launch gaps "
              "included); jax.jit times are host wall-clock around one call and "
              "`block_until_ready`, so they include dispatch.",
              "- Kernel times are the sum of each run's kernel durations as the GPU records "
              "them (CUPTI for stitch, torch.profiler and jax.profiler for the frameworks), "
              "median of as many runs, L2 flushed alike; memsets and copies are not counted.",
              "- The frameworks run the same op graph as stitch, one framework op per stitch op "
              "(eager runs them one by one; torch.compile and jax.jit fuse as they can), not "
              "hand-written library kernels such as `F.layer_norm`.",
              "- rng-uniform uses each framework's own generator (torch.rand, jax.random), "
              "stitch's kernels Philox-4x32-10. PyTorch holds u32 and u64 in int32 and int64, "
              "so its unsigned shifts and compares take a few extra ops.",
              "- correct: both plans' outputs match the reference interpreter at the emulation "
              "scale on this GPU."]
    md_path = os.path.join(args.results, f"gpu_{slug}.md")
    with open(md_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {csv_path} and {md_path}")
    return 0
