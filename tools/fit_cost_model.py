#!/usr/bin/env python3
"""Fits the cost model's constants to kernel times measured on a GPU, and prints the fit.

  python3 tools/fit_cost_model.py --price build/bench/gpu/cost_model_price \\
      [--set testdata/gpu/<device slug>/<date>_<commit>] [--rounds 4] [--fit NAME,...]

The model's terms stand for real effects (compiler/plan/src/cost_model.cc); the fit sets the
constants no datasheet gives: the fraction of the datasheet bandwidth streaming kernels reach,
the DRAM latency under load (Little's law), the per-kernel overhead on the GPU, the grid- and
block-barrier costs, the share of L2 a re-read survives in, and the instruction-issue term's
two times (a scheduler's per warp instruction, and between two issues of one warp). Everything
the model reads from the code (registers, instruction counts, strides, re-reads) comes from
the compiled plans, not from the fit. --fit names the constants to fit; the others keep their
starting values (h100-fit-2 fitted the issue constants alone, the rest held at h100-fit-1's).

Procedure. cost_model_price compiles the suite's 90 plans once per call and prices them under
each candidate set of constants; the objective is the mean |log(measured / modelled)| over the
90 plans of the set (stitch_kernels_ncu.tsv, kernel time by Nsight Compute, or where a set
has none stitch_kernels_cupti.tsv, gpu_bench's CUPTI records), which weighs a plan twice too
slow as much as one twice too fast and is not ruled by a few far-off plans.
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
)

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
        "assembled_registers": True,
    }


def read_measured(set_dir: pathlib.Path) -> dict[tuple[int, str], float]:
    path = next((set_dir / name for name in KERNEL_TIME_FILES if (set_dir / name).exists()),
                None)
    if path is None:
        sys.exit(f"fit_cost_model: {set_dir}: none of {', '.join(KERNEL_TIME_FILES)}")
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


def set_device(set_dir: pathlib.Path) -> str | None:
    """The device of the model's table the set was measured on, from its device.json; None
    (the target's own) where it names none."""
    try:
        device = json.loads((set_dir / "device.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    match = DEVICE_NAME.match(str(device.get("name", ""))) if isinstance(device, dict) else None
    return match.group(1) if match else None


def price(tool: pathlib.Path, target: str, device: str | None,
          candidates: list[dict[str, float]]) -> list[dict[tuple[int, str], float]]:
    """The modelled microseconds of every plan, one dict per candidate."""
    with tempfile.TemporaryDirectory(prefix="fit_cost_model.") as tmp:
        sets = pathlib.Path(tmp) / "sets.json"
        out = pathlib.Path(tmp) / "prices.csv"
        sets.write_text(json.dumps([parameters(c) for c in candidates]))
        command = [str(tool.absolute()), "--target", target, "--parameters", str(sets),
                   "--csv", str(out)] + (["--device", device] if device else [])
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"fit_cost_model: {' '.join(command)} exited with {result.returncode}:\n"
                     f"{result.stderr}")
        priced: list[dict[tuple[int, str], float]] = [{} for _ in candidates]
        for row in csv.DictReader(out.open(encoding="utf-8")):
            priced[int(row["set"])][(int(row["id"]), row["plan"])] = float(row["model_us"])
        return priced


def log_errors(measured: dict, modelled: dict) -> list[float]:
    return [math.log(measured[k] / modelled[k]) for k in sorted(measured)]


def objective(measured: dict, modelled: dict) -> float:
    return statistics.fmean(abs(e) for e in log_errors(measured, modelled))


def summary(measured: dict, modelled: dict) -> str:
    errors = sorted(measured[k] / modelled[k] - 1 for k in measured)
    magnitudes = sorted(abs(e) for e in errors)

    def pct(values, q):
        position = q * (len(values) - 1)
        low = math.floor(position)
        high = min(low + 1, len(values) - 1)
        return values[low] + (values[high] - values[low]) * (position - low)

    return (f"median |err| {pct(magnitudes, 0.5):.1%}, p90 |err| {pct(magnitudes, 0.9):.1%}, "
            f"median signed {pct(errors, 0.5):+.1%}, "
            f"mean |log err| {objective(measured, modelled):.3f}")


def fit(tool, target, device, measured, rounds, names):
    """Greedy descent over the constants `names`: each round prices, in one call, a ladder of
    multiples of every such constant's value with the others held, and takes the single best
    move; the ladder narrows when no move helps. The other constants keep their start."""
    current = {name: start for name, start, _, _ in CONSTANTS}
    spread = 2.0
    start_prices = price(tool, target, device, [current])[0]
    best_score = objective(measured, start_prices)
    print(f"start: {summary(measured, start_prices)}")
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
        scores = [objective(measured, m) for m in price(tool, target, device, candidates)]
        i = min(range(len(scores)), key=scores.__getitem__)
        moved = ""
        if scores[i] < best_score - 1e-9:
            moved = next(n for n in names if candidates[i][n] != current[n])
            current, best_score = candidates[i], scores[i]
            moved = f" ({moved} to {current[moved]:.4g})"
        else:
            spread = math.sqrt(spread)
        print(f"round {round_number}: mean |log err| {best_score:.4f}{moved}")
    return current


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--price", required=True, type=pathlib.Path,
                        help="the cost_model_price binary")
    parser.add_argument("--set", type=pathlib.Path, default=DEFAULT_SET,
                        help=f"the measurement set to fit (default {DEFAULT_SET})")
    parser.add_argument("--target", default="sm_90")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--fit", default=",".join(name for name, _, _, _ in CONSTANTS),
                        help="comma-separated constants to fit; the others keep their start "
                        "(default: all)")
    args = parser.parse_args()
    names = args.fit.split(",")
    unknown = sorted(set(names) - {name for name, _, _, _ in CONSTANTS})
    if unknown:
        sys.exit(f"fit_cost_model: --fit: unknown constant(s) {', '.join(unknown)}")

    measured = read_measured(args.set)
    device = set_device(args.set)
    print(f"fitting {len(measured)} plans of {args.set}, priced as {device or args.target}")
    constants = fit(args.price, args.target, device, measured, args.rounds, names)
    modelled = price(args.price, args.target, device, [constants])[0]
    print(f"fit: {summary(measured, modelled)}")
    print("\nconstants (cost_model.cc kFit*):")
    for name, _, low, high in CONSTANTS:
        edge = " (at its bound)" if constants[name] in (low, high) else ""
        print(f"  {name:<24} {constants[name]:.4g}{edge}")
    print("\nper plan (measured us, modelled us, measured/modelled - 1):")
    for key in sorted(measured):
        e = measured[key] / modelled[key] - 1
        print(f"  #{key[0]:<3} {key[1]:<15} {measured[key]:>9.1f} {modelled[key]:>9.2f} {e:>+7.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
