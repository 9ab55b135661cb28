#!/usr/bin/env python3
"""Trains the learned correction to the analytical cost model, evaluates it on held-out suite
rows, and writes the C++ table stitchd evaluates it from.

  .venv-tools/bin/python tools/train_cost_residual.py --price build/bench/gpu/cost_model_price \\
      [--data testdata/gpu] [--runtimes FILE ...] [--summary PATH] [--no-write]

What it learns. The analytical model (compiler/plan/src/cost_model.cc, version h100-fit-2)
prices each plan from terms that stand for real effects. Its residual on a plan,
log(measured / modelled), is what is left; a small ensemble of gradient-boosted regression
trees (scikit-learn's GradientBoostingRegressor, pinned in tools/requirements-tools.txt)
predicts it from figures the model already has when it prices the plan: the plan's kernel
count, the model's estimate and the shares of its memory, instruction-issue and fixed
(launch, barrier) terms, DRAM over global bytes, and the slowest kernel's achieved bandwidth,
kind, vector width, registers, cubin instructions, resident blocks per SM and waves. The C++
library computes them (stitch/plan/learned_residual.h, ResidualFeaturesOf) and
`cost_model_price --features` prints them, so the trainer and stitchd read the same numbers.
The corrected estimate is the analytical one times exp(predicted residual).

Training data.
  * Every measured set under testdata/gpu/h100_80gb_hbm3/ that stores the compiled features of
    its commit (compiled_features.txt): its stitch_kernels_ncu.tsv gives the kernel time of
    each suite row's three plans (stitch's, the XLA model's, the Inductor model's). The plans
    are compiled and priced by this checkout, so a set counts only where its kernels are this
    checkout's; a set without compiled features (the first, ef5c71b, measured an earlier code
    generator) is left out and named. The script prints, per set, how many stitched kernels
    have the registers the checkout's assembler reports.
  * Runtimes that jobs reported to stitchd (--runtimes FILE, any number): a CSV with a header
    whose columns include those of `stitchctl runtimes --csv` (key, measured_seconds,
    modeled_seconds; target and kernels are checked where present) and one column per feature,
    named as in `cost_model_price --features` (kernels, modeled_us, ..., waves), the features
    of the plan the row timed priced by the same version. modeled_us must agree with
    modeled_seconds (the figure stitchd stored); every row of one key is one group. stitchd
    does not yet export a key's features beside its runtimes, so today's training data are
    the committed sets alone.

Evaluation: leave one group out. A group is a suite row (its three plans, in every set) or a
runtimes key; each is predicted by trees trained on all the other groups, so no plan of a
held-out row was seen in training, in any set. The held-out predictions give the error figures
of the corrected model, beside the analytical model's on the same plans: the median and 90th
percentile of |measured / modelled - 1| and the median signed error, over all held-out plans
and over the newest set's 90 (the calibration test's bounds apply to that set).

Whether it ships. The correction ships only if at least five groups are held out and, on the
held-out plans of all groups, it lowers both the median and the 90th percentile of |error|
below the analytical model's and keeps the median signed error within +-10%. The generated
table records the decision (CostResidualTable.ships) and stitchd's NewPricingCostModel applies the trees only where it
is true, the table corrects kCurrentCostModel, the device is the one it was trained on, and a
bundle's baselines are priced from assembled code as its shipped plan is
(kBaselinesPricedAssembled in learned_residual.h: not yet).

Output. Trained on every group, the trees are written as flat arrays into
compiler/plan/src/cost_residual_table.cc, and each training plan's features with the trees'
prediction into tests/compiler/plan/cost_residual_expected.tsv, which cost_residual_test.cc
evaluates in C++ and compares. Everything is deterministic (fixed seed, no subsampling, one
thread), so the ctest `cost_residual_training` trains again from the committed data, checks
that both files come out byte for byte as committed, and checks the ships flag against the
comparison. Rerun this script and commit its files after a change to the features, the
analytical model's version, the suite's plans or the measured sets. --summary writes the
figures as JSON; --no-write leaves the committed files alone.

The hyperparameters were set before any held-out figure was looked at and are not tuned on
it: 100 trees of depth 2, learning rate 0.05, at least 12 plans per leaf (two suite rows of
two sets), squared error, seed 0. COST_MODEL_SOURCES.md, section 7, records the run.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import pathlib
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO_ROOT / "testdata" / "gpu"
TABLE_PATH = REPO_ROOT / "compiler" / "plan" / "src" / "cost_residual_table.cc"
EXPECTED_PATH = REPO_ROOT / "tests" / "compiler" / "plan" / "cost_residual_expected.tsv"

# The analytical version whose residual the trees learn, and the device and target its
# measurements come from.
BASE_VERSION = "h100-fit-2"
DEVICE_SLUG = "h100_80gb_hbm3"
DEVICE_NAME = "H100"  # GpuDevice::name of the target below
TARGET = "sm_90"

# The features, in ResidualFeaturesOf's order (cost_model_price --features names them too;
# the script refuses a features file whose columns differ).
FEATURES = ("kernels", "modeled_us", "memory_share", "issue_share", "fixed_share",
            "dram_over_global", "bandwidth_fraction", "kind", "vector_width", "registers",
            "instructions", "resident_blocks", "waves")

# (plan name in cost_model_price's output, measured column in stitch_kernels_ncu.tsv)
PLANS = (("stitch", "stitch_us"), ("xla_model", "xla_model_plan_us"),
         ("inductor_model", "inductor_model_plan_us"))

SET_NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})_([0-9a-f]{7,40})$")

# Fixed before evaluation (see the docstring); not tuned on the held-out figures.
HYPERPARAMETERS = dict(n_estimators=100, max_depth=2, learning_rate=0.05, min_samples_leaf=12,
                       subsample=1.0, loss="squared_error", random_state=0)

# The bound on the median signed error the correction must keep, as the calibration's.
SIGNED_BOUND = 0.10
# Held out one at a time, fewer groups decide nothing: with too few plans for the trees to
# split (at least 12 a leaf), the correction is one constant, the analytical model's mean
# residual on those rows.
MIN_GROUPS = 5


class DataError(Exception):
    """A problem with the inputs, named by file (and line)."""


@dataclass
class Sample:
    group: str      # "suite:<id>" or "key:<cache key>"
    source: str     # the set's folder name, or the runtimes file
    plan: str       # stitch, xla_model, inductor_model; a runtimes row's kernels
    measured_us: float
    modeled_us: float
    features: tuple[float, ...]

    @property
    def residual(self) -> float:
        return math.log(self.measured_us / self.modeled_us)


# --- inputs -------------------------------------------------------------------------------------


def positive(text: str, where: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise DataError(f"{where}: {what} is {text!r}, not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise DataError(f"{where}: {what} is {text!r}; it must be positive and finite")
    return value


def feature_values(record: dict, where: str) -> tuple[float, ...]:
    values = []
    for name in FEATURES:
        try:
            value = float(record[name])
        except (TypeError, ValueError):
            raise DataError(f"{where}: feature {name} is {record.get(name)!r}") from None
        if not math.isfinite(value):
            raise DataError(f"{where}: feature {name} is not finite")
        values.append(value)
    return tuple(values)


def run_price(tool: pathlib.Path) -> tuple[dict[tuple[int, str], tuple[float, ...]], list[dict]]:
    """cost_model_price's features of every suite plan, and its per-plan CSV."""
    with tempfile.TemporaryDirectory(prefix="train_cost_residual.") as tmp:
        features_path = pathlib.Path(tmp) / "features.csv"
        csv_path = pathlib.Path(tmp) / "model.csv"
        command = [str(tool.absolute()), "--target", TARGET, "--version", BASE_VERSION,
                   "--csv", str(csv_path), "--features", str(features_path)]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        except OSError as e:
            raise DataError(f"{tool}: cannot run: {e.strerror or e}") from None
        if result.returncode != 0:
            tail = "\n    ".join((result.stdout + result.stderr).strip().splitlines()[-15:])
            raise DataError(f"`{' '.join(command)}` exited with {result.returncode}:\n    {tail}")
        features_text = features_path.read_text(encoding="utf-8")
        model_rows = list(csv.DictReader(io.StringIO(csv_path.read_text(encoding="utf-8"))))
    reader = csv.DictReader(io.StringIO(features_text))
    header = tuple(reader.fieldnames or ())
    if header[4:] != FEATURES:
        raise DataError(f"cost_model_price --features: columns {header[4:]} are not the "
                        f"trainer's {FEATURES}; update FEATURES with ResidualFeaturesOf")
    out: dict[tuple[int, str], tuple[float, ...]] = {}
    for record in reader:
        if record["set"] != "0":
            continue
        where = f"cost_model_price --features line {reader.line_num}"
        out[(int(record["id"]), record["plan"])] = feature_values(record, where)
    return out, [r for r in model_rows if r["set"] == "0"]


def read_measured(path: pathlib.Path) -> dict[int, dict[str, float]]:
    lines = [line.rstrip("\r").split("\t")
             for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        raise DataError(f"{path}: empty")
    header = lines[0]
    missing = [c for _, c in PLANS if c not in header] + ([] if "id" in header else ["id"])
    if missing:
        raise DataError(f"{path}: header lacks {', '.join(missing)}")
    rows: dict[int, dict[str, float]] = {}
    for number, fields in enumerate(lines[1:], start=2):
        where = f"{path} line {number}"
        if len(fields) != len(header):
            raise DataError(f"{where}: {len(fields)} fields, the header has {len(header)}")
        row_id = int(fields[header.index("id")])
        if row_id in rows:
            raise DataError(f"{where}: id {row_id} again")
        rows[row_id] = {plan: positive(fields[header.index(c)], where, c) for plan, c in PLANS}
    return rows


def compiled_registers(path: pathlib.Path) -> dict[tuple[int, str], int]:
    """compiled_features.txt: (suite id, kernel name) -> registers ptxas gave it."""
    line_re = re.compile(r"^#(\d+)\s+(\S+)\s.*registers\s+(\d+)")
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = line_re.match(line)
        if m:
            out[(int(m.group(1)), m.group(2))] = int(m.group(3))
    return out


def stitched_registers(model_rows: list[dict]) -> dict[int, list[str]]:
    """The checkout's stitched plans: suite id -> registers per kernel ('-' if unassembled)."""
    return {int(r["id"]): r["registers"].split(";") for r in model_rows if r["plan"] == "stitch"}


# gpu_bench.csv's kernel count column of each plan.
KERNEL_COUNT_COLUMNS = {"stitch": "stitch_kernels", "xla_model": "baseline_kernels",
                        "inductor_model": "inductor_kernels"}
# gpu_bench.csv's cubin size column of each plan: the plan's cubins' bytes, summed.
CUBIN_BYTES_COLUMNS = {"stitch": "stitch_cubin_bytes", "xla_model": "baseline_cubin_bytes",
                       "inductor_model": "inductor_cubin_bytes"}
# gpu_bench.csv's digest of each plan's PTX (bench/gpu/code_digest.h); sets measured before
# gpu_bench wrote it have none, and the other checks stand alone there.
CODE_COLUMNS = {"stitch": "stitch_code", "xla_model": "baseline_code",
                "inductor_model": "inductor_code"}


def ncu_dims(text: str) -> str:
    """Nsight Compute's "(130, 1, 1)" as cost_model_price writes it: 130x1x1."""
    return "x".join(part.strip() for part in text.strip("()").split(","))


def measured_launches(set_dir: pathlib.Path, counts: dict[int, dict[str, str]]
                      ) -> dict[tuple[int, str], str]:
    """(suite id, plan) -> its kernels' launches as cost_model_price's launches column writes
    them, from the set's Nsight Compute export. gpu_bench --warmup 1 --repeats 1 launches each
    plan's kernels twice, row by row in plan order (stitch, XLA model, Inductor model); the
    second launch is the one timed. Empty where the set has no export or its launches do not
    add up to the kernel counts of its gpu_bench.csv."""
    raw = set_dir / "stitch_kernels_ncu_raw.csv"
    if not raw.exists() or not counts:
        return {}
    launches: dict[int, str] = {}
    for record in csv.DictReader(io.StringIO(raw.read_text(encoding="utf-8"), newline="")):
        try:
            launch_id = int(record["ID"])
            dims = f"{ncu_dims(record['Grid Size'])}:{ncu_dims(record['Block Size'])}"
        except (KeyError, ValueError, AttributeError):
            return {}
        launches.setdefault(launch_id, dims)
    ordered = [launches[i] for i in sorted(launches)]
    out: dict[tuple[int, str], str] = {}
    position = 0
    for row_id in sorted(counts):
        for plan, column in KERNEL_COUNT_COLUMNS.items():
            n = counts[row_id].get(column, "")
            if not n.isdigit():
                return {}
            n = int(n)
            out[(row_id, plan)] = ";".join(ordered[position + n:position + 2 * n])
            position += 2 * n
    return out if position == len(ordered) else {}


def plans_changed_since_measured(set_dir: pathlib.Path, model_rows: list[dict]
                                 ) -> dict[tuple[int, str], str]:
    """(suite id, plan) -> why the checkout's plan is not the one the set measured.

    A plan whose kernel count, code digest or cubin bytes differ from gpu_bench.csv's, or
    whose launches (grid and block) differ from those Nsight Compute recorded, or a stitched
    plan whose kernels' registers differ from compiled_features.txt's, is other code than the
    set timed: its measured time says nothing of today's model of it, so it is left out of the
    set's figures until a GPU run measures it. The calibration test applies the same rule."""
    changed: dict[tuple[int, str], str] = {}
    bench = set_dir / "gpu_bench.csv"
    counts: dict[int, dict[str, str]] = {}
    if bench.exists():
        for record in csv.DictReader(io.StringIO(bench.read_text(encoding="utf-8"), newline="")):
            counts[int(record["id"])] = record
    compiled = set_dir / "compiled_features.txt"
    launches = measured_launches(set_dir, counts)
    measured_registers: dict[int, list[int]] = {}
    if compiled.exists():
        for (row_id, _), count in compiled_registers(compiled).items():
            measured_registers.setdefault(row_id, []).append(count)
    for record in model_rows:
        row_id, plan = int(record["id"]), record["plan"]
        column = KERNEL_COUNT_COLUMNS.get(plan)
        if row_id in counts and column and counts[row_id].get(column, "").isdigit():
            before, now = int(counts[row_id][column]), int(record["kernels"])
            if before != now:
                changed[(row_id, plan)] = f"{before} kernel(s) measured, {now} now"
                continue
        before_code = counts.get(row_id, {}).get(CODE_COLUMNS.get(plan, ""), "")
        now_code = record.get("code", "")
        if before_code and now_code and before_code != now_code:
            changed[(row_id, plan)] = f"code {before_code} measured, {now_code} now"
            continue
        cubin_column = CUBIN_BYTES_COLUMNS.get(plan, "")
        before_cubin = counts.get(row_id, {}).get(cubin_column, "")
        now_cubin = record.get("cubin_bytes", "")
        if before_cubin.isdigit() and now_cubin.isdigit() and int(now_cubin) > 0 and \
                before_cubin != now_cubin:
            changed[(row_id, plan)] = f"cubin of {before_cubin} bytes measured, {now_cubin} now"
            continue
        measured_launch = launches.get((row_id, plan))
        if measured_launch and record.get("launches") and measured_launch != record["launches"]:
            changed[(row_id, plan)] = (f"launches {measured_launch} measured, "
                                       f"{record['launches']} now")
            continue
        if plan == "stitch" and row_id in measured_registers:
            now_registers = sorted(int(r) for r in record["registers"].split(";") if r.isdigit())
            before_registers = sorted(measured_registers[row_id])
            if len(now_registers) == len(before_registers) and now_registers != before_registers:
                changed[(row_id, plan)] = (f"registers {before_registers} measured, "
                                           f"{now_registers} now")
    return changed


def read_sets(data: pathlib.Path, features: dict, model_rows: list[dict]
              ) -> tuple[list[Sample], list[str], str, dict[str, dict]]:
    """The samples of every usable set, what was left out and why, the newest set's name, and
    each used set's plans changed since measured (plans_changed_since_measured), by name."""
    folder = data / DEVICE_SLUG
    if not folder.is_dir():
        raise DataError(f"{folder}: no such folder (--data)")
    samples: list[Sample] = []
    notes: list[str] = []
    used: list[tuple[tuple[str, str], str]] = []
    changed_by_set: dict[str, dict] = {}
    checkout_registers = stitched_registers(model_rows)
    for tsv in sorted(folder.glob("*/stitch_kernels_ncu.tsv")):
        name = tsv.parent.name
        if not SET_NAME.match(name):
            raise DataError(f"{tsv.parent}: a set's folder is named <YYYY-MM-DD>_<commit>")
        compiled = tsv.parent / "compiled_features.txt"
        if not compiled.exists():
            notes.append(f"{name}: left out, no compiled_features.txt (its kernels are an "
                         "earlier code generator's, which this checkout cannot price)")
            continue
        measured = read_measured(tsv)
        missing = sorted({i for i, _ in features} - set(measured))
        extra = sorted(set(measured) - {i for i, _ in features})
        if missing or extra:
            raise DataError(f"{tsv}: suite rows unmeasured {missing}, measured but not in the "
                            f"suite {extra}")
        registers = compiled_registers(compiled)
        same = total = 0
        for (row_id, _), count in registers.items():
            total += 1
            same += str(count) in checkout_registers.get(row_id, [])
        changed = changed_by_set[name] = plans_changed_since_measured(tsv.parent, model_rows)
        notes.append(f"{name}: used; {same} of its {total} stitched kernels have the registers "
                     "this checkout's assembler reports")
        if changed:
            notes.append(f"{name}: left out, changed since measured: " + "; ".join(
                f"#{i} {p} ({why})" for (i, p), why in sorted(changed.items())))
        for row_id in sorted(measured):
            for plan, _ in PLANS:
                if (row_id, plan) in changed:
                    continue
                f = features[(row_id, plan)]
                samples.append(Sample(f"suite:{row_id}", name, plan, measured[row_id][plan],
                                      f[FEATURES.index("modeled_us")], f))
        used.append((measured_when(tsv.parent), name))
    if not used:
        raise DataError(f"{folder}: no set with compiled_features.txt to train on")
    return samples, notes, max(used)[1], changed_by_set


def measured_when(set_dir: pathlib.Path) -> tuple[str, str]:
    """When a set was measured: its folder's date, then gpu_bench's timestamp in device.json
    (two sets of one day are ordered by it, not by their commits' names)."""
    stamp = ""
    try:
        stamp = str(json.loads((set_dir / "device.json").read_text(encoding="utf-8")).get(
            "date", ""))
    except (OSError, ValueError, AttributeError):
        pass
    return (set_dir.name.split("_", 1)[0], stamp)


def read_runtimes(path: pathlib.Path) -> list[Sample]:
    """Rows of an exported runtimes file (see the docstring) as samples grouped by key."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    needed = ["key", "measured_seconds", "modeled_seconds", *FEATURES]
    missing = [c for c in needed if c not in (reader.fieldnames or [])]
    if missing:
        raise DataError(f"{path}: header lacks column(s) {', '.join(missing)}")
    samples = []
    for record in reader:
        where = f"{path} line {reader.line_num}"
        if None in record or any(v is None for v in record.values()):
            raise DataError(f"{where}: {len(reader.fieldnames or [])} fields expected")
        if record.get("target", TARGET) != TARGET:
            raise DataError(f"{where}: target {record['target']}, the table is for {TARGET}")
        measured = positive(record["measured_seconds"], where, "measured_seconds")
        modeled = positive(record["modeled_seconds"], where, "modeled_seconds")
        f = feature_values(record, where)
        modeled_us = f[FEATURES.index("modeled_us")]
        if abs(modeled * 1e6 / modeled_us - 1) > 1e-6:
            raise DataError(f"{where}: modeled_seconds {modeled:g} is not the features' "
                            f"modeled_us {modeled_us:g} (priced by another version?)")
        samples.append(Sample(f"key:{record['key']}", path.name, record.get("kernels", ""),
                              measured * 1e6, modeled_us, f))
    if not samples:
        raise DataError(f"{path}: no rows")
    return samples


# --- figures ------------------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float:
    """Linear interpolation between the closest ranks (as the calibration test)."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def figures(errors: list[float]) -> dict[str, float]:
    return {"plans": len(errors),
            "median_abs": percentile([abs(e) for e in errors], 0.5),
            "p90_abs": percentile([abs(e) for e in errors], 0.9),
            "median_signed": percentile(errors, 0.5)}


def describe(f: dict[str, float]) -> str:
    return (f"median |err| {f['median_abs']:6.1%}   p90 |err| {f['p90_abs']:6.1%}   "
            f"median signed {f['median_signed']:+6.1%}")


def ships(analytical: dict[str, float], corrected: dict[str, float],
          groups: int) -> tuple[bool, str]:
    """The rule: at least MIN_GROUPS groups held out, lower median and p90 |error| than the
    analytical model, signed within bound."""
    reasons = []
    if groups < MIN_GROUPS:
        reasons.append(f"{groups} groups held out, fewer than the {MIN_GROUPS} a comparison needs")
    if not corrected["median_abs"] < analytical["median_abs"]:
        reasons.append(f"median |err| {corrected['median_abs']:.1%} is not below the "
                       f"analytical {analytical['median_abs']:.1%}")
    if not corrected["p90_abs"] < analytical["p90_abs"]:
        reasons.append(f"p90 |err| {corrected['p90_abs']:.1%} is not below the analytical "
                       f"{analytical['p90_abs']:.1%}")
    if abs(corrected["median_signed"]) > SIGNED_BOUND:
        reasons.append(f"median signed {corrected['median_signed']:+.1%} is outside "
                       f"+-{SIGNED_BOUND:.0%}")
    if reasons:
        return False, "; ".join(reasons)
    return True, "lower median and p90 |err| than the analytical model, signed within bound"


# --- training -----------------------------------------------------------------------------------


def new_model():
    from sklearn.ensemble import GradientBoostingRegressor
    return GradientBoostingRegressor(**HYPERPARAMETERS)


def held_out_predictions(samples: list[Sample]) -> list[float]:
    """Each sample's residual predicted by trees that never saw its group."""
    import numpy as np
    x = np.array([s.features for s in samples], dtype=np.float64)
    y = np.array([s.residual for s in samples], dtype=np.float64)
    groups = [s.group for s in samples]
    predictions = [0.0] * len(samples)
    for group in sorted(set(groups), key=group_order):
        train = [i for i, g in enumerate(groups) if g != group]
        test = [i for i, g in enumerate(groups) if g == group]
        model = new_model().fit(x[train], y[train])
        for i, p in zip(test, model.predict(x[test])):
            predictions[i] = float(p)
    return predictions


def group_order(group: str):
    if group.startswith("suite:"):
        return (0, int(group[len("suite:"):]), "")
    return (1, 0, group)


def flatten(model) -> dict:
    """The trained ensemble as the C++ table's flat arrays."""
    roots, feature, threshold, left, right, value = [], [], [], [], [], []
    for stage in model.estimators_[:, 0]:
        tree = stage.tree_
        base = len(feature)
        roots.append(base)
        for node in range(tree.node_count):
            leaf = tree.children_left[node] < 0
            feature.append(-1 if leaf else int(tree.feature[node]))
            threshold.append(0.0 if leaf else float(tree.threshold[node]))
            left.append(-1 if leaf else base + int(tree.children_left[node]))
            right.append(-1 if leaf else base + int(tree.children_right[node]))
            value.append(float(tree.value[node][0][0]) if leaf else 0.0)
    initial = float(model.init_.predict([[0.0] * len(FEATURES)])[0])
    return dict(initial=initial, learning_rate=float(model.learning_rate), roots=roots,
                feature=feature, threshold=threshold, left=left, right=right, value=value)


def evaluate_table(table: dict, features: tuple[float, ...]) -> float:
    """The C++ evaluator's arithmetic (LearnedResidual::Predict), in Python."""
    import numpy as np
    raw = table["initial"]
    for root in table["roots"]:
        node = root
        while table["feature"][node] >= 0:
            x = float(np.float32(features[table["feature"][node]]))
            node = table["left"][node] if x <= table["threshold"][node] else table["right"][node]
        raw += table["learning_rate"] * table["value"][node]
    return raw


# --- output -------------------------------------------------------------------------------------


def cpp_array(kind: str, name: str, values: list, per_line: int) -> str:
    items = [repr(v) if isinstance(v, float) else str(v) for v in values]
    lines = []
    for i in range(0, len(items), per_line):
        lines.append("    " + ", ".join(items[i:i + per_line]) + ",")
    return f"const {kind} {name}[] = {{\n" + "\n".join(lines) + "\n};\n"


def table_source(table: dict, shipped: bool, summary: dict) -> str:
    held = summary["held_out"]["all"]
    lines = [
        "// clang-format off",
        "// Generated by tools/train_cost_residual.py from the measured sets in testdata/gpu/;",
        "// do not edit. The trees predict log(measured / modelled) of the analytical model",
        f"// {BASE_VERSION} on the {DEVICE_NAME} (stitch/plan/learned_residual.h).",
        "//",
        f"// Held out (leave one suite row out, {summary['groups']} rows, {held['plans']} plans"
        f" of {len(summary['sets'])} set(s)):",
        f"//   analytical:              {describe(held['analytical'])}",
        f"//   analytical + correction: {describe(held['corrected'])}",
        f"// Ships: {'yes' if shipped else 'no'} ({summary['ships_reason']}).",
        "",
        '#include "cost_residual_table.h"',
        "",
        "namespace stitch {",
        "namespace {",
        "",
        cpp_array("int", "kRoots", table["roots"], 16),
        cpp_array("int", "kFeature", table["feature"], 16),
        cpp_array("double", "kThreshold", table["threshold"], 4),
        cpp_array("int", "kLeft", table["left"], 16),
        cpp_array("int", "kRight", table["right"], 16),
        cpp_array("double", "kValue", table["value"], 4),
        "const char* const kFeatureNames[] = {",
        *[f'    "{name}",' for name in FEATURES],
        "};",
        "",
        "}  // namespace",
        "",
        "const CostResidualTable kCostResidualTable = {",
        f'    "{BASE_VERSION}",',
        f'    "{DEVICE_NAME}",',
        f"    {'true' if shipped else 'false'},  // ships",
        f"    {table['initial']!r},  // initial",
        f"    {table['learning_rate']!r},  // learning rate",
        f"    {len(table['roots'])},  // trees",
        "    kRoots,",
        f"    {len(table['feature'])},  // nodes",
        "    kFeature,",
        "    kThreshold,",
        "    kLeft,",
        "    kRight,",
        "    kValue,",
        f"    {len(FEATURES)},",
        "    kFeatureNames,",
        "};",
        "",
        "}  // namespace stitch",
        "// clang-format on",
        "",
    ]
    return "\n".join(lines)


def expected_source(samples: list[Sample], predictions: list[float]) -> str:
    lines = ["# Generated by tools/train_cost_residual.py: each training plan's features and the "
             "trees' prediction of log(measured / modelled); cost_residual_test.cc compares "
             "LearnedResidual::Predict with it.",
             "\t".join(("group", "source", "plan", *FEATURES, "predicted"))]
    for s, p in zip(samples, predictions):
        lines.append("\t".join((s.group, s.source, s.plan, *(repr(v) for v in s.features),
                                repr(p))))
    return "\n".join(lines) + "\n"


# --- main ---------------------------------------------------------------------------------------


def train(price: pathlib.Path, data: pathlib.Path, runtimes: list[pathlib.Path]) -> dict:
    """Everything the script prints and writes, as a dict."""
    import numpy as np
    features, model_rows = run_price(price)
    samples, notes, newest, changed = read_sets(data, features, model_rows)
    for path in runtimes:
        samples += read_runtimes(path)
    samples.sort(key=lambda s: (group_order(s.group), s.source, s.plan))

    predictions = held_out_predictions(samples)
    analytical = [s.measured_us / s.modeled_us - 1 for s in samples]
    corrected = [s.measured_us / (s.modeled_us * math.exp(p)) - 1
                 for s, p in zip(samples, predictions)]

    def split(select) -> dict:
        chosen = [i for i, s in enumerate(samples) if select(s)]
        return {"plans": len(chosen),
                "analytical": figures([analytical[i] for i in chosen]),
                "corrected": figures([corrected[i] for i in chosen])}

    held_out = {"all": split(lambda s: True), "newest": split(lambda s: s.source == newest)}
    shipped, reason = ships(held_out["all"]["analytical"], held_out["all"]["corrected"],
                            len({s.group for s in samples}))

    x = np.array([s.features for s in samples], dtype=np.float64)
    y = np.array([s.residual for s in samples], dtype=np.float64)
    model = new_model().fit(x, y)
    fitted = [float(p) for p in model.predict(x)]
    table = flatten(model)
    for s, p in zip(samples, fitted):
        # The exported arrays must predict what the library's trees predict.
        if abs(evaluate_table(table, s.features) - p) > 1e-12:
            raise DataError(f"the exported table predicts {evaluate_table(table, s.features)!r}"
                            f" for {s.group} {s.source} {s.plan}, the trees {p!r}")
    in_sample = figures([s.measured_us / (s.modeled_us * math.exp(p)) - 1
                         for s, p in zip(samples, fitted)])
    importances = sorted(zip(FEATURES, (float(v) for v in model.feature_importances_)),
                         key=lambda kv: -kv[1])
    sets = sorted({s.source for s in samples if s.group.startswith("suite:")})
    # Suite rows some set measured as the checkout compiles at least one of their plans.
    still_measured = sorted({row_id for (row_id, _) in features for name in sets
                             if any((row_id, plan) not in changed[name] for plan, _ in PLANS)})
    summary = {
        "base_version": BASE_VERSION, "device": DEVICE_NAME, "notes": notes,
        "sets": sets,
        "changed_since_measured": {name: len(changed[name]) for name in sets},
        "rows_still_measured": still_measured,
        "newest": newest, "groups": len({s.group for s in samples}),
        "runtimes_rows": sum(1 for s in samples if s.group.startswith("key:")),
        "hyperparameters": HYPERPARAMETERS, "held_out": held_out, "ships": shipped,
        "ships_reason": reason, "in_sample_corrected": in_sample,
        "importances": importances,
    }
    summary["table"] = table_source(table, shipped, summary)
    summary["expected"] = expected_source(samples, fitted)
    return summary


def report(summary: dict) -> None:
    print(f"train_cost_residual: residual of {summary['base_version']} on the "
          f"{summary['device']}")
    for note in summary["notes"]:
        print(f"  set {note}")
    if summary["runtimes_rows"]:
        print(f"  runtimes: {summary['runtimes_rows']} reported rows")
    hp = summary["hyperparameters"]
    print(f"  trees: {hp['n_estimators']} of depth {hp['max_depth']}, learning rate "
          f"{hp['learning_rate']}, >= {hp['min_samples_leaf']} plans per leaf, seed "
          f"{hp['random_state']}")
    print(f"\nheld out, leave one group out ({summary['groups']} groups: suite rows and keys; "
          "a held-out row's plans in every set are out of training):")
    for key, label in (("all", "all held-out plans"),
                       ("newest", f"newest set {summary['newest']}")):
        part = summary["held_out"][key]
        print(f"  {label} ({part['plans']} plans)")
        print(f"    analytical {summary['base_version']:<14} {describe(part['analytical'])}")
        print(f"    + correction{'':<13} {describe(part['corrected'])}")
    print(f"\nships: {'yes' if summary['ships'] else 'no'} ({summary['ships_reason']})")
    print(f"in sample (trained on every group; not the criterion): "
          f"{describe(summary['in_sample_corrected'])}")
    print("feature importances: " + ", ".join(f"{name} {value:.2f}"
                                              for name, value in summary["importances"]
                                              if value > 0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--price", required=True, type=pathlib.Path,
                        help="the cost_model_price binary (compiles and prices; no GPU)")
    parser.add_argument("--data", type=pathlib.Path, default=DEFAULT_DATA,
                        help=f"folder of device slugs and dated sets (default {DEFAULT_DATA})")
    parser.add_argument("--runtimes", type=pathlib.Path, action="append", default=[],
                        help="an exported runtimes file with features (see above); repeatable")
    parser.add_argument("--table", type=pathlib.Path, default=TABLE_PATH,
                        help=f"where to write the C++ table (default {TABLE_PATH})")
    parser.add_argument("--expected", type=pathlib.Path, default=EXPECTED_PATH,
                        help=f"where to write the C++ test's fixture (default {EXPECTED_PATH})")
    parser.add_argument("--summary", type=pathlib.Path,
                        help="also write the figures and the decision as JSON")
    parser.add_argument("--no-write", action="store_true",
                        help="print the figures only; write neither the table nor the fixture")
    args = parser.parse_args()
    try:
        summary = train(args.price, args.data, args.runtimes)
    except DataError as e:
        print(f"train_cost_residual: error: {e}", file=sys.stderr)
        return 1
    report(summary)
    if not args.no_write:
        args.table.write_text(summary["table"], encoding="utf-8")
        args.expected.write_text(summary["expected"], encoding="utf-8")
        print(f"\nwrote {args.table} and {args.expected}")
    if args.summary:
        shown = {k: v for k, v in summary.items() if k not in ("table", "expected")}
        args.summary.write_text(json.dumps(shown, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
