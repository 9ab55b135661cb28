#!/usr/bin/env python3
"""tools/fit_cost_model.py on a mapping sweep (mappings.csv, `gpu_bench --mappings`).

  python3 tests/compiler/plan/cost_model_sweep_fit_test.py \
      --price build/bench/gpu/cost_model_price

No GPU has run the sweep yet, so the test makes one: the mappings of three suite rows' kernels
(#4's row kernel, #16's loop, #20's global kernel), each "measured" at the price
cost_model_price --mappings gives it under known constants (the fit's starting constants with
the bandwidth share and the DRAM latency moved). Fitting those two constants to the sweep
alone must find them again and leave the sweep's error near zero; that fails if the tool
joins the sweep's rows with the wrong prices, drops them, or fits to the plans instead. A
kernel whose dearest mapping is then "measured" fastest must be reported as the one kernel
whose fastest mapping the model does not pick, by the fit tool and by the calibration test,
which reports a set's sweep beside its plans. One mapping is "measured" with a code digest the
checkout no longer compiles, and must be left out and counted. A malformed kernel time and
a set with no times at all must each be refused with one line naming what is wrong.
"""

from __future__ import annotations

import argparse
import csv
import json
import pathlib
import re
import subprocess
import sys
import tempfile

from tool_modules import load_tool

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
FIT_PATH = REPO_ROOT / "tools" / "fit_cost_model.py"
CALIBRATION_PATH = REPO_ROOT / "tests" / "compiler" / "plan" / "cost_model_calibration_test.py"
# A measured set whose plan times the calibration test's copy of the data borrows.
CALIBRATION_SET = REPO_ROOT / "testdata" / "gpu" / "h200" / "2026-11-28_afdf996"
ROWS = "4,16,20"
# Constants reachable from the start by the fit's ladder (multiples of 2^(k/4)), so that a
# working fit lands on them.
MOVED = {"bandwidth_fraction": 2 ** -0.25, "dram_latency_seconds": 2 ** 0.75}
SWEEP_HEADER = ("id", "kernel", "kernel_name", "candidate", "shipped", "mapping", "kernel_us",
                "matches", "code", "error")


def load_fit():
    return load_tool("fit_cost_model")


def fail(message: str) -> None:
    print(f"FAIL: {message}")
    sys.exit(1)


def priced_sweep(price: pathlib.Path, constants: dict, tmp: pathlib.Path) -> list[dict]:
    """cost_model_price --mappings' rows for ROWS under `constants`."""
    sets, out = tmp / "truth.json", tmp / "truth_mappings.csv"
    sets.write_text(json.dumps([constants]))
    subprocess.run([str(price), "--only", ROWS, "--parameters", str(sets), "--mappings",
                    str(out), "--csv", str(tmp / "truth_plans.csv")], check=True)
    with out.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def write_set(folder: pathlib.Path, rows: list[dict]) -> None:
    folder.mkdir()
    (folder / "device.json").write_text(
        json.dumps({"name": "NVIDIA H100 80GB HBM3", "target": "sm_90"}))
    with (folder / "mappings.csv").open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, SWEEP_HEADER)
        writer.writeheader()
        for row in rows:
            writer.writerow(row)


def run_fit(price: pathlib.Path, folder: pathlib.Path, *extra: str):
    return subprocess.run([sys.executable, str(FIT_PATH), "--price", str(price), "--set",
                           str(folder), *extra], capture_output=True, text=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--price", required=True, type=pathlib.Path)
    args = parser.parse_args()
    fit = load_fit()
    start = {name: value for name, value, _, _ in fit.CONSTANTS}
    truth = dict(start)
    for name, factor in MOVED.items():
        truth[name] = start[name] * factor

    with tempfile.TemporaryDirectory(prefix="sweep_fit_test.") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        priced = priced_sweep(args.price.absolute(), fit.parameters(truth), tmp)
        kernels = {(r["id"], r["kernel"]) for r in priced}
        if len(kernels) != 3 or len(priced) < 12:
            fail(f"expected the mappings of 3 kernels, got {len(priced)} of {sorted(kernels)}")
        rows = [{"id": r["id"], "kernel": r["kernel"], "kernel_name": r["kernel_name"],
                 "candidate": r["candidate"], "shipped": r["shipped"], "mapping": r["mapping"],
                 "kernel_us": r["model_us"], "matches": "-" if r["shipped"] == "1" else "yes",
                 "code": r["code"], "error": ""} for r in priced]
        rows[-1]["code"] = "0" * 16  # timed as code the checkout no longer compiles
        write_set(tmp / "set", rows)

        result = run_fit(args.price, tmp / "set", "--fit", ",".join(MOVED), "--rounds", "8")
        print(result.stdout)
        if result.returncode != 0:
            fail(f"the fit exited with {result.returncode}: {result.stderr}")
        out = result.stdout
        expected = f"sweep: {len(rows) - 1} of {len(rows)} mappings compile to the code timed"
        if expected not in out:
            fail(f"missing {expected!r}")
        for name, factor in MOVED.items():
            found = re.search(rf"^  {name}\s+(\S+)", out, re.MULTILINE)
            if not found:
                fail(f"no fitted {name} in the output")
            ratio = float(found.group(1)) / truth[name]
            print(f"{name}: fitted {found.group(1)}, truth {truth[name]:.4g} ({ratio:.3f}x)")
            if abs(ratio - 1) > 0.03:
                fail(f"{name} fitted at {ratio:.3f}x the constant the sweep was made with")
        final = re.search(r"^fit sweep: .*mean \|log err\| (\S+); .* on (\d+) of (\d+) kernels",
                          out, re.MULTILINE)
        if not final:
            fail("no final sweep line")
        if float(final.group(1)) > 0.01:
            fail(f"the sweep's mean |log err| after the fit is {final.group(1)}")
        if final.group(2) != final.group(3) or final.group(3) != "3":
            fail(f"the fitted model ranks {final.group(2)} of {final.group(3)} kernels right")

        # A kernel whose dearest mapping is measured fastest by far: the model's cheapest is
        # then not within 3% of the fastest, for that kernel alone.
        loop = [r for r in rows[:-1] if r["id"] == "16"]
        dearest = max(loop, key=lambda r: float(r["kernel_us"]))
        fastest = min(float(r["kernel_us"]) for r in loop)
        upset = [dict(r, kernel_us=str(fastest / 2)) if r is dearest else r for r in rows]
        write_set(tmp / "upset", upset)
        result = run_fit(args.price, tmp / "upset", "--rounds", "0")
        print(result.stdout)
        if "the model's cheapest mapping within 3% of the fastest measured on 2 of 3 kernels" \
                not in result.stdout or "#16 kernel 0: the model's cheapest" not in result.stdout \
                or f"the fastest {dearest['mapping']} " not in result.stdout:
            fail("a kernel measured fastest under its dearest mapping is not reported as such")

        # The calibration test reports a set's sweep beside its plans, joined the same way.
        data = tmp / "data" / "h200" / "2026-01-01_0000000"
        data.mkdir(parents=True)
        for name in ("stitch_kernels_cupti.tsv", "device.json"):
            (data / name).write_bytes((CALIBRATION_SET / name).read_bytes())
        (data / "mappings.csv").write_bytes((tmp / "upset" / "mappings.csv").read_bytes())
        result = subprocess.run([sys.executable, str(CALIBRATION_PATH), "--price",
                                 str(args.price), "--data", str(tmp / "data")],
                                capture_output=True, text=True)
        print(result.stdout[-2000:])
        if result.returncode != 0:
            fail(f"the calibration test exited with {result.returncode}: {result.stderr}")
        if f"sweep (mappings.csv, REPORT ONLY): {len(rows) - 1} of {len(rows)} mappings " \
                "compile to the code timed" not in result.stdout or \
                "#16 kernel 0: the model's cheapest" not in result.stdout:
            fail("the calibration test does not report the set's sweep")

        # Bad input: a malformed time, and a set with no times at all.
        bad = [dict(rows[0], kernel_us="fast")] + rows[1:]
        write_set(tmp / "bad", bad)
        refused = run_fit(args.price, tmp / "bad", "--rounds", "1")
        if refused.returncode == 0 or "mappings.csv line 2: kernel_us is 'fast'" not in \
                refused.stderr:
            fail(f"a malformed kernel time was not refused by line: {refused.stderr!r}")
        (tmp / "empty").mkdir()
        refused = run_fit(args.price, tmp / "empty", "--rounds", "1")
        if refused.returncode == 0 or "no kernel times" not in refused.stderr:
            fail(f"a set with no times was not refused: {refused.stderr!r}")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
