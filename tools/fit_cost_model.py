#!/usr/bin/env python3
"""Fits the cost model's constants to kernel times measured on a GPU, and prints the fit.

  python3 tools/fit_cost_model.py --price build/bench/gpu/cost_model_price \\
      [--set testdata/gpu/<device slug>/<date>_<commit>] [--rounds 4] [--fit NAME,...]

The model's terms stand for real effects (compiler/plan/src/cost_model.cc); the fit sets the
constants no datasheet gives: the fraction of the datasheet bandwidth streaming kernels reach,
the DRAM latency under load (Little's law), the per-kernel overhead on the GPU, the grid- and
block-barrier costs, the share of L2 a re-read survives in, the instruction-issue term's
two times (a scheduler's per warp instruction, and between two issues of one warp), and the
interval at which an SM starts blocks. Candidates are priced in fit-4's form, whose partial
waves draw what their loads in flight allow (fit-3's sets were fitted before it). Everything
the model reads from the code (registers, instruction counts, strides, re-reads) comes from
the compiled plans, not from the fit. --fit names the constants to fit; the others keep their
starting values (h100-fit-2 fitted the issue constants alone, the rest held at h100-fit-1's).

Procedure. cost_model_price compiles the suite's 90 plans once per call and prices them under
each candidate set of constants; the objective is the mean |log(measured / modelled)| over the
90 plans of the set (stitch_kernels_ncu.tsv, kernel time by Nsight Compute, or where a set
has none stitch_kernels_cupti.tsv, gpu_bench's CUPTI records), which weighs a plan twice too
slow as much as one twice too fast and is not ruled by a few far-off plans.

Where the set also holds a mapping sweep (mappings.csv, `gpu_bench --mappings`: each loop,
row-stitched and column-phase global kernel timed under every mapping the scheduler chose
among), cost_model_price --mappings prices the same mappings, joined on suite id, kernel,
mapping and the kernel's code digest (a mapping whose code changed since it was timed is left
out and counted). The objective is then the mean of the two sources' mean |log error|, the
sweep's weighed by --sweep-weight (0 reports it without fitting to it). The sweep is what
the scheduler's choices rest on, so the tool also reports, before and after the fit, per
swept kernel whether the model's cheapest mapping is within 3% of the fastest measured.
A set may hold the sweep alone.
The set is priced as the device its device.json names (cost_model_price --device: an H200
set's sm_90 plans as an H200), and the bandwidth and the re-use window are fitted as shares
of that device's table figures. Greedy descent: each round prices a ladder of multiples of
every constant's current value (the others held) in one call and takes the single best
move; the ladder narrows when no move helps. The printed
constants go into cost_model.cc's kFit* constants, rounded; COST_MODEL_SOURCES.md section 6
records the run.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_SET = REPO_ROOT / "testdata" / "gpu" / "h100_80gb_hbm3" / "2026-11-26_a83a312"

# A device.json name ("NVIDIA H100 80GB HBM3", "NVIDIA H200") names the device of the model's
# table (gpu_device.cc) by its first word after the vendor's, as the calibration test reads it.
DEVICE_NAME = re.compile(r"^NVIDIA\s+(\S+)")

# The files of kernel times a set may hold, the first found read.
KERNEL_TIME_FILES = ("stitch_kernels_ncu.tsv", "stitch_kernels_cupti.tsv")

# (name, starting value, lower bound, upper bound); parameters() maps them onto the fields of
# CostModelParameters. The constants h100-fit-1 shares start at its values (its run started
# from the datasheet's: 700 ns, 2.5 us, 1.3 us, 40 ns and a 2 us row pass).
CONSTANTS = (
    ("bandwidth_fraction", 0.90, 0.5, 1.0),
    ("dram_latency_seconds", 425e-9, 200e-9, 3000e-9),
    ("launch_seconds", 3.0e-6, 0.5e-6, 8e-6),
    ("grid_barrier_seconds", 3.0e-6, 0.2e-6, 20e-6),
    ("block_barrier_seconds", 72e-9, 5e-9, 2000e-9),
    ("row_pass_seconds", 2e-6, 0.0, 20e-6),
    ("reuse_window_fraction", 0.5, 0.05, 1.0),
    # Instruction issue (h100-fit-2): a scheduler's time per warp instruction, started at one
    # per cycle of the 1980 MHz boost clock, and the time between one warp's dependent issues,
    # started at 4 cycles.
    ("issue_seconds", 1 / 1.98e9, 0.25e-9, 4e-9),
    ("dependent_issue_seconds", 4 / 1.98e9, 0.5e-9, 20e-9),
    # Block starts (fit-4): the interval at which an SM starts blocks, started at the H100's
    # 90 ns read off its loops of many short blocks (COST_MODEL_SOURCES.md, section 6).
    ("block_dispatch_seconds", 90e-9, 0.0, 300e-9),
)

# The sweep's file in a set, and what counts as the model picking the fastest mapping: within
# 3% of it, the run-to-run spread of stitch's kernels on the H100 (gpu_bench's kFaster).
SWEEP_FILE = "mappings.csv"
NEAR_FASTEST = 0.97

PLANS = (("stitch", "stitch_us"), ("xla_model", "xla_model_plan_us"),
         ("inductor_model", "inductor_model_plan_us"))


def parameters(values: dict[str, float]) -> dict[str, float]:
    """A candidate as the fields cost_model_price --parameters reads."""
    return {
        "bandwidth_fraction": values["bandwidth_fraction"],
        "dram_latency_seconds": values["dram_latency_seconds"],
        "launch_seconds": values["launch_seconds"],
        "grid_barrier_seconds": values["grid_barrier_seconds"],
        "block_barrier_seconds": values["block_barrier_seconds"],
        "row_pass_seconds": values["row_pass_seconds"],
        "reuse_window_fraction": values["reuse_window_fraction"],
        "issue_seconds": values["issue_seconds"],
        "dependent_issue_seconds": values["dependent_issue_seconds"],
        "block_dispatch_seconds": values["block_dispatch_seconds"],
        "assembled_registers": True,
        # fit-4's form: a partial wave draws what its loads in flight allow.
        "partial_rounds_share_bandwidth": True,
    }


def read_measured(set_dir: pathlib.Path) -> dict[tuple[int, str], float]:
    """The plans' kernel times, by (suite id, plan); empty where the set has none."""
    path = next((set_dir / name for name in KERNEL_TIME_FILES if (set_dir / name).exists()),
                None)
    if path is None:
        return {}
    rows = list(csv.DictReader(path.open(encoding="utf-8"), delimiter="\t"))
    if not rows:
        sys.exit(f"fit_cost_model: {path}: no rows")
    measured = {}
    for number, row in enumerate(rows, start=2):
        for plan, column in PLANS:
            try:
                value = float(row[column])
            except (KeyError, TypeError, ValueError):
                sys.exit(f"fit_cost_model: {path} line {number}: bad or missing {column}")
            if not math.isfinite(value) or value <= 0:
                sys.exit(f"fit_cost_model: {path} line {number}: {column} is {value}")
            measured[(int(row["id"]), plan)] = value
    return measured


SweepKey = tuple[int, int, str]  # (suite id, kernel index in the stitched plan, mapping)


def read_sweep(set_dir: pathlib.Path) -> dict[SweepKey, tuple[float, str]]:
    """The sweep's measured kernel times and code digests, by (id, kernel, mapping); empty
    where the set has no sweep. A mapping that failed or whose outputs differed from the
    shipped mapping's is left out, and so is a regrouping of kernels (span or kernels other
    than 1: its time is a sum of kernels, which cost_model_price --mappings does not price)."""
    path = set_dir / SWEEP_FILE
    if not path.exists():
        return {}
    measured = {}
    with path.open(encoding="utf-8", newline="") as f:
        for number, row in enumerate(csv.DictReader(f), start=2):
            where = f"{path} line {number}"
            try:
                key = (int(row["id"]), int(row["kernel"]), row["mapping"])
                text, code = row["kernel_us"], row["code"]
                failed = row["error"] or row["matches"] == "NO"
            except (KeyError, TypeError, ValueError):
                sys.exit(f"fit_cost_model: {where}: bad or missing id, kernel, mapping, "
                         "kernel_us, matches, code or error")
            regrouped = row.get("span", "1") != "1" or row.get("kernels", "1") != "1"
            if failed or regrouped or not text:
                continue
            try:
                us = float(text)
            except ValueError:
                sys.exit(f"fit_cost_model: {where}: kernel_us is {text!r}")
            if not math.isfinite(us) or us <= 0:
                sys.exit(f"fit_cost_model: {where}: kernel_us is {us}")
            if key in measured:
                sys.exit(f"fit_cost_model: {where}: #{key[0]} kernel {key[1]} {key[2]!r} twice")
            measured[key] = (us, code)
    return measured


def set_target(set_dir: pathlib.Path) -> str | None:
    """The target the set's plans were compiled for (device.json's target), or None."""
    try:
        device = json.loads((set_dir / "device.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    target = device.get("target") if isinstance(device, dict) else None
    return target if isinstance(target, str) and target else None


def set_device(set_dir: pathlib.Path) -> str | None:
    """The device of the model's table the set was measured on, from its device.json; None
    (the target's own) where it names none."""
    try:
        device = json.loads((set_dir / "device.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    match = DEVICE_NAME.match(str(device.get("name", ""))) if isinstance(device, dict) else None
    return match.group(1) if match else None


@dataclasses.dataclass
class Prices:
    """One candidate's modelled microseconds: each plan's, by (id, plan), and each swept
    mapping's, by (id, kernel, mapping), with the mapping's code digest."""

    plans: dict[tuple[int, str], float] = dataclasses.field(default_factory=dict)
    sweep: dict[SweepKey, tuple[float, str]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Measured:
    """What a set measured: the plans' kernel times and the sweep's, keyed as Prices."""

    plans: dict[tuple[int, str], float]
    sweep: dict[SweepKey, tuple[float, str]]
    ids: list[int]  # the suite rows measured, for cost_model_price --only


def price(tool: pathlib.Path, target: str, device: str | None,
          candidates: list[dict[str, float]], measured: Measured) -> list[Prices]:
    """The modelled microseconds of every plan, and of every swept mapping where the set has a
    sweep, one Prices per candidate."""
    with tempfile.TemporaryDirectory(prefix="fit_cost_model.") as tmp:
        sets = pathlib.Path(tmp) / "sets.json"
        out = pathlib.Path(tmp) / "prices.csv"
        swept = pathlib.Path(tmp) / "mappings.csv"
        sets.write_text(json.dumps([parameters(c) for c in candidates]))
        command = [str(tool.absolute()), "--target", target, "--parameters", str(sets),
                   "--only", ",".join(str(i) for i in measured.ids), "--csv", str(out)]
        command += ["--device", device] if device else []
        command += ["--mappings", str(swept)] if measured.sweep else []
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"fit_cost_model: {' '.join(command)} exited with {result.returncode}:\n"
                     f"{result.stderr}")
        priced = [Prices() for _ in candidates]
        for row in csv.DictReader(out.open(encoding="utf-8")):
            priced[int(row["set"])].plans[(int(row["id"]), row["plan"])] = float(row["model_us"])
        if measured.sweep:
            for prices, sweep in zip(priced, read_sweep_prices(swept, len(candidates))):
                prices.sweep = sweep
        return priced


def read_sweep_prices(path: pathlib.Path, sets: int) -> list[dict[SweepKey, tuple[float, str]]]:
    """cost_model_price --mappings' CSV: each set's modelled microseconds and code digest of
    every swept mapping, by (id, kernel, mapping)."""
    priced: list[dict[SweepKey, tuple[float, str]]] = [{} for _ in range(sets)]
    with path.open(encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            key = (int(row["id"]), int(row["kernel"]), row["mapping"])
            priced[int(row["set"])][key] = (float(row["model_us"]), row["code"])
    return priced


def sweep_pairs(measured: Measured, prices: Prices) -> dict[SweepKey, tuple[float, float]]:
    """(measured us, modelled us) of each swept mapping the checkout compiles to the code that
    was timed."""
    pairs = {}
    for key, (us, code) in measured.sweep.items():
        modelled = prices.sweep.get(key)
        if modelled is not None and modelled[1] == code:
            pairs[key] = (us, modelled[0])
    return pairs


def mean_abs_log(pairs) -> float:
    """The mean |log(measured / modelled)| of (measured, modelled) pairs."""
    return statistics.fmean(abs(math.log(m / p)) for m, p in pairs)


def plan_pairs(measured: Measured, prices: Prices) -> dict[tuple[int, str], tuple[float, float]]:
    missing = sorted(set(measured.plans) - set(prices.plans))
    if missing:
        sys.exit(f"fit_cost_model: measured but not priced (not in the suite?): {missing}")
    return {k: (measured.plans[k], prices.plans[k]) for k in measured.plans}


def objective(measured: Measured, prices: Prices, sweep_weight: float) -> float:
    """The mean |log error| of the plans and of the swept mappings, the latter weighed by
    `sweep_weight` against the former."""
    parts = []
    if measured.plans:
        parts.append((1.0, mean_abs_log(plan_pairs(measured, prices).values())))
    sweep = sweep_pairs(measured, prices)
    if sweep and sweep_weight > 0:
        parts.append((sweep_weight, mean_abs_log(sweep.values())))
    if not parts:
        sys.exit("fit_cost_model: nothing to fit: no plan times, and no swept mapping compiles "
                 "to the code that was timed")
    return sum(w * v for w, v in parts) / sum(w for w, _ in parts)


def summary(pairs) -> str:
    pairs = list(pairs)
    if not pairs:
        return "none"
    errors = sorted(m / p - 1 for m, p in pairs)
    magnitudes = sorted(abs(e) for e in errors)

    def pct(values, q):
        position = q * (len(values) - 1)
        low = math.floor(position)
        high = min(low + 1, len(values) - 1)
        return values[low] + (values[high] - values[low]) * (position - low)

    return (f"median |err| {pct(magnitudes, 0.5):.1%}, p90 |err| {pct(magnitudes, 0.9):.1%}, "
            f"median signed {pct(errors, 0.5):+.1%}, mean |log err| {mean_abs_log(pairs):.3f}")


def ranking(pairs: dict[SweepKey, tuple[float, float]]) -> tuple[int, int, list[str]]:
    """Per swept kernel with two or more mappings in `pairs`, whether the mapping the model
    prices cheapest is measured within NEAR_FASTEST of the fastest. Returns how many are, of
    how many kernels, and a line for each that is not."""
    kernels: dict[tuple[int, int], list[tuple[str, float, float]]] = {}
    for (suite_id, kernel, mapping), (us, modelled) in pairs.items():
        kernels.setdefault((suite_id, kernel), []).append((mapping, us, modelled))
    right, counted, misses = 0, 0, []
    for (suite_id, kernel), group in sorted(kernels.items()):
        if len(group) < 2:
            continue
        counted += 1
        fastest = min(group, key=lambda g: g[1])
        cheapest = min(group, key=lambda g: g[2])
        if cheapest[1] * NEAR_FASTEST <= fastest[1]:
            right += 1
        else:
            misses.append(f"#{suite_id} kernel {kernel}: the model's cheapest {cheapest[0]} "
                          f"measured {cheapest[1]:.1f} us, the fastest {fastest[0]} "
                          f"{fastest[1]:.1f} us")
    return right, counted, misses


def report(label: str, measured: Measured, prices: Prices) -> None:
    if measured.plans:
        print(f"{label} plans: {summary(plan_pairs(measured, prices).values())}")
    if measured.sweep:
        pairs = sweep_pairs(measured, prices)
        right, counted, misses = ranking(pairs)
        print(f"{label} sweep: {summary(pairs.values())}; the model's cheapest mapping within "
              f"{1 - NEAR_FASTEST:.0%} of the fastest measured on {right} of {counted} kernels")
        for miss in misses:
            print(f"  {miss}")


def fit(tool, target, device, measured: Measured, rounds, names, sweep_weight):
    """Greedy descent over the constants `names`: each round prices, in one call, a ladder of
    multiples of every such constant's value with the others held, and takes the single best
    move; the ladder narrows when no move helps. The other constants keep their start."""
    current = {name: start for name, start, _, _ in CONSTANTS}
    spread = 2.0
    start_prices = price(tool, target, device, [current], measured)[0]
    best_score = objective(measured, start_prices, sweep_weight)
    if measured.sweep:
        timed = len(sweep_pairs(measured, start_prices))
        print(f"sweep: {timed} of {len(measured.sweep)} mappings compile to the code timed; "
              "the others are left out")
    report("start", measured, start_prices)
    for round_number in range(1, rounds + 1):
        candidates = []
        for name, _, low, high in CONSTANTS:
            if name not in names:
                continue
            for i in range(-4, 5):
                if i == 0:
                    continue
                value = min(high, max(low, current[name] * spread ** (i / 4)))
                candidates.append(dict(current, **{name: value}))
        scores = [objective(measured, m, sweep_weight)
                  for m in price(tool, target, device, candidates, measured)]
        i = min(range(len(scores)), key=scores.__getitem__)
        moved = ""
        if scores[i] < best_score - 1e-9:
            moved = next(n for n in names if candidates[i][n] != current[n])
            current, best_score = candidates[i], scores[i]
            moved = f" ({moved} to {current[moved]:.4g})"
        else:
            spread = math.sqrt(spread)
        print(f"round {round_number}: objective {best_score:.4f}{moved}")
    return current


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--price", required=True, type=pathlib.Path,
                        help="the cost_model_price binary")
    parser.add_argument("--set", type=pathlib.Path, default=DEFAULT_SET,
                        help=f"the measurement set to fit (default {DEFAULT_SET})")
    parser.add_argument("--target", default=None,
                        help="the target the set's plans were compiled for (default: the "
                        "set's device.json, else sm_90)")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--fit", default=",".join(name for name, _, _, _ in CONSTANTS),
                        help="comma-separated constants to fit; the others keep their start "
                        "(default: all)")
    parser.add_argument("--sweep-weight", type=float, default=1.0,
                        help="the mapping sweep's weight in the objective against the plans' "
                        "(default 1; 0 reports the sweep without fitting to it)")
    args = parser.parse_args()
    names = args.fit.split(",")
    unknown = sorted(set(names) - {name for name, _, _, _ in CONSTANTS})
    if unknown:
        sys.exit(f"fit_cost_model: --fit: unknown constant(s) {', '.join(unknown)}")
    if not math.isfinite(args.sweep_weight) or args.sweep_weight < 0:
        sys.exit("fit_cost_model: --sweep-weight must be a non-negative number")

    plans, sweep = read_measured(args.set), read_sweep(args.set)
    if not plans and not sweep:
        sys.exit(f"fit_cost_model: {args.set}: no kernel times (none of "
                 f"{', '.join(KERNEL_TIME_FILES + (SWEEP_FILE,))})")
    measured = Measured(plans, sweep, sorted({k[0] for k in plans} | {k[0] for k in sweep}))
    device = set_device(args.set)
    target = args.target or set_target(args.set) or "sm_90"
    print(f"fitting {len(plans)} plans and {len(sweep)} swept mappings of {args.set}, compiled "
          f"for {target}, priced as {device or target}")
    constants = fit(args.price, target, device, measured, args.rounds, names, args.sweep_weight)
    modelled = price(args.price, target, device, [constants], measured)[0]
    report("fit", measured, modelled)
    print("\nconstants (cost_model.cc kFit*):")
    for name, _, low, high in CONSTANTS:
        edge = " (at its bound)" if constants[name] in (low, high) else ""
        print(f"  {name:<24} {constants[name]:.4g}{edge}")
    if plans:
        print("\nper plan (measured us, modelled us, measured/modelled - 1):")
        for key, (us, model_us) in sorted(plan_pairs(measured, modelled).items()):
            print(f"  #{key[0]:<3} {key[1]:<15} {us:>9.1f} {model_us:>9.2f} "
                  f"{us / model_us - 1:>+7.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
