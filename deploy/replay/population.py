#!/usr/bin/env python3
"""Task population of the Alibaba PAI GPU cluster, July-August 2020, for the fleet replay.

The cluster is the one FusionStitching and AStitch were deployed on, as published in the
trace `cluster-trace-gpu-v2020` and characterised by Weng et al., "MLaaS in the Wild:
Workload Analysis and Scheduling in Large-Scale Heterogeneous GPU Clusters", NSDI 2022.

What it models, at the granularity of the trace's pai_task_table (a task is `inst_num`
instances, each asking for `plan_gpu` percent of a GPU):

- the cluster itself, read from the real machine table in trace/pai_machine_spec.tar.gz;
- per task: submit time (a Poisson process whose rate follows the published hour-of-day and
  day-of-week pattern), run time, GPUs requested, instances, GPU type, workload class,
  framework, and the fraction of the requested GPU that the task keeps busy.

The task tables themselves are not available, so every distribution is taken from what was
published with the trace: mostly the figures of the trace's own analysis notebook
(alibaba/clusterdata, cluster-trace-gpu-v2020/analysis/analysis.ipynb), which are the paper's
figures, digitised from the PNGs saved in the notebook. Every number, its source, whether it is
exact or read off a plot, and every assumption made where nothing was published, is listed in
PARAMETERS.md beside this file. Continuous distributions are drawn by inverse-CDF sampling,
interpolating between the published quantiles (log-linearly unless noted).

Python 3.11, standard library and numpy only.
    python3 deploy/replay/population.py [--n N] [--seed S]   prints a summary of a sample
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import math
import pathlib
import tarfile
from collections import Counter
from typing import Iterable, Sequence

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
MACHINE_SPEC_PATH = HERE / "trace" / "pai_machine_spec.tar.gz"

# Source shorthand used in the comments below (full references in PARAMETERS.md):
#   NB In[N] = alibaba/clusterdata @ 7a6c496e4f4b6ce6150be8f881cb051bf2abff42,
#              cluster-trace-gpu-v2020/analysis/analysis.ipynb, the code cell whose execution
#              count is N (shown as In [N]); its saved output figure, digitised from the PNG
#              (approximate: read off a plot). PARAMETERS.md gives each cell's 0-based index.
#   README    = the same repository, cluster-trace-gpu-v2020/README.md (exact text).

# ---------------------------------------------------------------------------------------------
# Cluster
# ---------------------------------------------------------------------------------------------

# README, pai_machine_spec section: the columns, in order (the CSV has no header row).
MACHINE_SPEC_COLUMNS = ("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu")

# The GPU types of the trace (README, pai_task_table: gpu_type; MISC = older K40m/K80/M60).
GPU_TYPES = ("MISC", "T4", "P100", "V100", "V100M32")


@dataclasses.dataclass(frozen=True)
class Machine:
    machine: str
    gpu_type: str  # one of GPU_TYPES, or "CPU" for the machines without GPUs
    cap_cpu: int  # CPU cores
    cap_mem: int  # GB of main memory
    cap_gpu: int  # number of GPUs


# ---------------------------------------------------------------------------------------------
# Task population parameters
# ---------------------------------------------------------------------------------------------

# A quantile table is ((cumulative probability, value), ...), nondecreasing in both. Two knots
# with the same value make an atom (a step of the published CDF); two with the same
# probability make a jump in value (a flat stretch of the CDF, no tasks in between).

# Task run time in seconds. NB In[14] (paper Fig. 4, "Task runtime (sec)", PAI curve): CDF of
# the mean instance run time of each task, all statuses. Read off a log axis from 10 s to 1e6 s;
# about +-5% in value, +-0.5 percentage points in probability, worse above p97.
DURATION_QUANTILES_S: tuple[tuple[float, float], ...] = (
    (0.000, 1.0),  # assumption: the plot starts at 10 s; 2.2% of tasks lie below it
    (0.022, 10.0),
    (0.050, 16.0),
    (0.100, 26.0),
    (0.150, 41.0),
    (0.200, 57.0),
    (0.250, 84.0),
    (0.300, 136.0),
    (0.350, 203.0),
    (0.400, 265.0),
    (0.450, 350.0),
    (0.500, 500.0),
    (0.550, 720.0),
    (0.600, 1000.0),
    (0.650, 1410.0),
    (0.700, 2080.0),
    (0.750, 3100.0),
    (0.800, 4550.0),
    (0.850, 6700.0),
    (0.900, 11000.0),
    (0.950, 21100.0),
    (0.970, 33000.0),
    (0.980, 45000.0),
    (0.990, 68000.0),
    (1.000, 300000.0),  # where the curve meets the top of the plot; approximate
)

# GPUs requested by a task, in percent of one GPU (inst_num * plan_gpu). NB In[21] (paper
# Fig. 6, "GPU Request" curve, x from 0 to 600%): a step CDF with steps at 10, 25, 50, 100,
# 200, ..., 600 percent. Read off a plot: +-1 percentage point in probability.
GPU_REQUEST_QUANTILES_PCT: tuple[tuple[float, float], ...] = (
    (0.000, 1.0),  # assumption: smallest request 1%; ~1.5% of tasks ask for under 10%
    (0.015, 10.0),
    (0.131, 10.0),  # atom at 10%
    (0.140, 25.0),
    (0.350, 25.0),  # atom at 25%
    (0.350, 50.0),  # CDF flat between 25% and 50%
    (0.443, 50.0),  # atom at 50%
    (0.447, 100.0),
    (0.819, 100.0),  # atom at 100%: one whole GPU
    (0.834, 200.0),
    (0.866, 200.0),  # atom at 200%
    (0.875, 300.0),
    (0.884, 300.0),
    (0.892, 400.0),
    (0.906, 400.0),
    (0.912, 500.0),
    (0.921, 500.0),
    (0.929, 600.0),  # last point on the published plot
    (1.000, 10000.0),  # ASSUMPTION: tail beyond 600% not published; log-linear up to 100 GPUs
)

# Share of tasks whose instances each ask for more than one GPU. NB In[18] (paper Fig. 5,
# top bar chart, "> 1 GPU"): 2.9% of tasks, read off a bar chart.
PLAN_GPU_ABOVE_ONE_SHARE = 0.029

# GPU actually used by a task, percent of one GPU, summed over its instances. NB In[21], "GPU
# Usage" curve of the same plot. Linear interpolation (the table starts at 0). The first 55%
# of tasks sit at or left of the first pixel column (about 2.4%), so the low end is coarse.
GPU_USAGE_QUANTILES_PCT: tuple[tuple[float, float], ...] = (
    (0.000, 0.0),
    (0.550, 2.4),
    (0.620, 4.0),
    (0.700, 10.0),
    (0.740, 15.0),
    (0.775, 20.0),
    (0.810, 27.0),
    (0.845, 37.0),
    (0.880, 48.0),
    (0.905, 60.0),
    (0.923, 77.0),
    (0.940, 95.0),
    (0.963, 200.0),
    (0.976, 300.0),
    (0.990, 600.0),
    (1.000, 1000.0),  # assumption: the plot ends at 600%
)

# GPU type of a task, share of tasks. NB In[18] (paper Fig. 5, bottom bar chart), read off a
# bar chart (+-0.3 points); normalised to sum to one when drawn.
GPU_TYPE_TASK_SHARES: dict[str, float] = {
    "MISC": 0.671,
    "T4": 0.218,
    "P100": 0.070,
    "V100": 0.026,
    "V100M32": 0.0165,
}

# Workload classes. README, pai_group_tag_table: about 9% of instances carry a workload tag
# ("graphlearn", "ctr", "bert", ...; the example row is "nmt"); exact text. The share of each
# class was not found in any reachable source. ASSUMPTION: the tagged 9% is split evenly over
# the classes below, and the same 9% holds per task; the untagged rest is "other".
WORKLOAD_TAGGED_SHARE = 0.09
WORKLOAD_CLASSES = ("bert", "ctr", "graphlearn", "nmt", "resnet", "inception", "xlnet", "rl")
OTHER_WORKLOAD = "other"

# Framework. README names TensorFlow, PyTorch and Graph-Learn as frameworks users submit in;
# no shares are published. ASSUMPTION: graphlearn tasks run Graph-Learn, the other tagged
# classes TensorFlow (PAI-TF), and untagged tasks are "unknown".
FRAMEWORK_BY_WORKLOAD: dict[str, str] = {w: "tensorflow" for w in WORKLOAD_CLASSES}
FRAMEWORK_BY_WORKLOAD["graphlearn"] = "graphlearn"
FRAMEWORK_BY_WORKLOAD[OTHER_WORKLOAD] = "unknown"

# Arrival rate: tasks submitted in one week of the trace. NB In[9] (paper Fig. 3, hourly task
# submissions over the week starting Sunday 1970-01-25 00:00 UTC+8, i.e. a shifted trace
# date): the 168 hourly points summed, about 115,400. Read off a plot, about +-5%. The median
# hourly counts of NB In[10] give 18,500 a day (130,000 a week) for comparison.
TASKS_PER_WEEK = 115_400.0

# Hour-of-day shape: median tasks submitted in each hour of the day over the trace, UTC+8.
# NB In[10] (paper Fig. 3, box plot), median line of each box, read off a plot (+-15 tasks).
HOURLY_MEDIAN_TASKS: tuple[float, ...] = (
    1085, 744, 542, 450, 560, 542, 606, 733, 594, 704, 1085, 1119,
    773, 762, 963, 1010, 975, 1079, 813, 802, 773, 681, 606, 525,
)

# Day-of-week shape, Sunday first: tasks per day in the week of NB In[9], read off the plot
# (Sunday's first hour, hidden by the axis, taken as 920). Only one week is published.
DAILY_TASKS_SUN_FIRST: tuple[float, ...] = (14_600, 17_345, 18_358, 17_635, 18_240, 17_045, 13_005)

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_WEEK = 7 * 24 * SECONDS_PER_HOUR


@dataclasses.dataclass(frozen=True)
class Task:
    task_id: int
    submit_seconds: float  # from the start of the replay, which is a Sunday 00:00 UTC+8
    duration_seconds: float
    gpus: float  # instances * plan_gpu_percent / 100
    instances: int
    plan_gpu_percent: float  # per instance, as pai_task_table.plan_gpu
    workload: str  # one of WORKLOAD_CLASSES or OTHER_WORKLOAD
    gpu_type: str  # one of GPU_TYPES
    framework: str
    gpu_utilization: float  # fraction of the requested GPUs kept busy, in [0, 1]

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.duration_seconds / SECONDS_PER_HOUR


# ---------------------------------------------------------------------------------------------
# Machine table
# ---------------------------------------------------------------------------------------------


def _read_spec_text(path: pathlib.Path) -> str:
    """The CSV text of a machine table, from a .tar.gz holding one .csv, or a plain .csv."""
    if not path.exists():
        raise ValueError(f"{path}: no such file")
    if path.name.endswith(".csv"):
        return path.read_text(encoding="utf-8")
    try:
        with tarfile.open(path, "r:*") as tar:
            members = [m for m in tar.getmembers() if m.isfile() and m.name.endswith(".csv")]
            if len(members) != 1:
                raise ValueError(f"{path}: expected one .csv in the archive, found {len(members)}")
            data = tar.extractfile(members[0])
            assert data is not None  # a regular file always has data
            return data.read().decode("utf-8")
    except (tarfile.TarError, EOFError, OSError) as err:
        raise ValueError(f"{path}: not a readable tar archive ({err})") from err
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: the CSV is not UTF-8 text ({err})") from err


def _count(value: str, column: str, where: str) -> int:
    """A non-negative whole number from a CSV cell; the trace writes them as integers."""
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{where}: {column} is not a number: {value!r}") from None
    if not math.isfinite(number) or number != int(number):
        raise ValueError(f"{where}: {column} is not a whole number: {value!r}")
    if number < 0:
        raise ValueError(f"{where}: {column} is negative: {value!r}")
    return int(number)


def parse_machine_spec(text: str, source: str = "machine spec") -> list[Machine]:
    """Machines from the CSV text of pai_machine_spec (no header row, MACHINE_SPEC_COLUMNS)."""
    machines: list[Machine] = []
    seen: set[str] = set()
    for line_no, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        where = f"{source} line {line_no}"
        if not row:
            continue  # a trailing newline
        if len(row) != len(MACHINE_SPEC_COLUMNS):
            raise ValueError(f"{where}: expected {len(MACHINE_SPEC_COLUMNS)} columns "
                             f"({','.join(MACHINE_SPEC_COLUMNS)}), found {len(row)}")
        name, gpu_type = row[0].strip(), row[1].strip()
        if not name:
            raise ValueError(f"{where}: empty machine name")
        if name in seen:
            raise ValueError(f"{where}: machine {name} appears twice")
        if gpu_type not in GPU_TYPES and gpu_type != "CPU":
            raise ValueError(f"{where}: unknown gpu_type {gpu_type!r}")
        cpu, mem, gpu = (_count(v, c, where) for v, c in zip(row[2:], MACHINE_SPEC_COLUMNS[2:]))
        if gpu_type == "CPU" and gpu:
            raise ValueError(f"{where}: a CPU machine with {gpu} GPUs")
        seen.add(name)
        machines.append(Machine(name, gpu_type, cpu, mem, gpu))
    if not machines:
        raise ValueError(f"{source}: no machines")
    return machines


def load_machine_spec(path: str | pathlib.Path = MACHINE_SPEC_PATH) -> list[Machine]:
    """The machines of pai_machine_spec.tar.gz (or a plain CSV); ValueError on bad input."""
    path = pathlib.Path(path)
    return parse_machine_spec(_read_spec_text(path), str(path))


def gpus_by_type(machines: Iterable[Machine]) -> dict[str, int]:
    """Total GPUs of each GPU type (CPU-only machines left out)."""
    totals: Counter[str] = Counter()
    for m in machines:
        if m.cap_gpu:
            totals[m.gpu_type] += m.cap_gpu
    return dict(totals.most_common())


def machines_by_type(machines: Iterable[Machine]) -> dict[str, int]:
    return dict(Counter(m.gpu_type for m in machines).most_common())


# ---------------------------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------------------------


def quantile(table: Sequence[tuple[float, float]], u: np.ndarray, log: bool = True) -> np.ndarray:
    """Inverse CDF of a quantile table at probabilities u, interpolating between knots.

    log=True interpolates log(value), right for run times and GPU counts spanning decades.
    """
    probs = np.array([p for p, _ in table])
    values = np.array([v for _, v in table], dtype=float)
    if probs[0] != 0.0 or probs[-1] != 1.0 or np.any(np.diff(probs) < 0) or np.any(np.diff(values) < 0):
        raise ValueError("a quantile table must run from 0 to 1, nondecreasing in both columns")
    # The right end of the segment holding u; ties in probability (jumps) skip their zero-width
    # segment, so the value just after the jump is used.
    hi = np.clip(np.searchsorted(probs, u, side="right"), 1, len(probs) - 1)
    lo = hi - 1
    width = probs[hi] - probs[lo]
    frac = np.where(width > 0, (u - probs[lo]) / np.where(width > 0, width, 1.0), 1.0)
    if log:
        drawn = np.exp(np.log(values[lo]) + frac * (np.log(values[hi]) - np.log(values[lo])))
    else:
        drawn = values[lo] + frac * (values[hi] - values[lo])
    # An atom (a step of the published CDF) gives its value exactly, not a rounded exp(log()).
    return np.where(values[lo] == values[hi], values[lo], drawn)


def cdf_at(table: Sequence[tuple[float, float]], value: float) -> float:
    """P(X <= value) under a quantile table (the top of an atom at value counts)."""
    best = 0.0
    for (p0, v0), (p1, v1) in zip(table, table[1:]):
        if value >= v1:
            best = p1
        elif v0 <= value < v1:
            span = math.log(v1 / v0) if v0 > 0 else 1.0
            part = math.log(value / v0) / span if v0 > 0 else 0.0
            best = max(best, p0 + (p1 - p0) * part)
    return best


def weekly_hourly_rate() -> np.ndarray:
    """Expected tasks in each of the 168 hours of a week (Sunday 00:00 first), summing to
    TASKS_PER_WEEK: the day-of-week shape times the hour-of-day shape."""
    day = np.array(DAILY_TASKS_SUN_FIRST, dtype=float)
    hour = np.array(HOURLY_MEDIAN_TASKS, dtype=float)
    shape = np.outer(day / day.sum(), hour / hour.sum()).ravel()
    return TASKS_PER_WEEK * shape


def tasks_per_week() -> float:
    """Tasks the trace's cluster starts in an average week (see TASKS_PER_WEEK)."""
    return TASKS_PER_WEEK


def sample_submit_seconds(rng: np.random.Generator, n: int) -> np.ndarray:
    """n arrival times of a Poisson process whose rate repeats weekly, hour by hour, as
    weekly_hourly_rate(): unit-exponential gaps, mapped through the inverse of the cumulative
    rate. Sorted, seconds from Sunday 00:00."""
    rate = weekly_hourly_rate()
    cum = np.concatenate([[0.0], np.cumsum(rate)])  # expected tasks by the start of each hour
    targets = np.cumsum(rng.exponential(1.0, size=n))
    weeks, rest = np.divmod(targets, cum[-1])
    hour = np.clip(np.searchsorted(cum, rest, side="right") - 1, 0, len(rate) - 1)
    within = (rest - cum[hour]) / rate[hour]
    return weeks * SECONDS_PER_WEEK + (hour + within) * SECONDS_PER_HOUR


def split_instances(rng: np.random.Generator, request_pct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(instances, plan_gpu percent per instance) for each task's total GPU request.

    Up to one GPU: one instance. Above one GPU: one multi-GPU instance for a share of tasks
    chosen so that PLAN_GPU_ABOVE_ONE_SHARE of all tasks have plan_gpu > 100%; otherwise as
    many instances of at most one GPU each as needed (ASSUMPTION, see PARAMETERS.md).
    """
    above = request_pct > 100.0
    p_above = 1.0 - cdf_at(GPU_REQUEST_QUANTILES_PCT, 100.0)
    single_share = min(1.0, PLAN_GPU_ABOVE_ONE_SHARE / p_above) if p_above > 0 else 0.0
    single = above & (rng.random(request_pct.shape) < single_share)
    instances = np.where(above & ~single, np.ceil(request_pct / 100.0 - 1e-9), 1.0).astype(int)
    return instances, request_pct / instances


def sample_tasks(n: int, seed: int) -> list[Task]:
    """n tasks drawn from the published distributions, sorted by submit time; the same seed
    gives the same tasks. Duration, request, GPU type and workload are drawn independently of
    each other (their joint distribution is not published); GPU usage is tied to the request's
    rank (ASSUMPTION, see PARAMETERS.md)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.Generator(np.random.PCG64(seed))
    submit = sample_submit_seconds(rng, n)
    duration = quantile(DURATION_QUANTILES_S, rng.random(n))
    rank = rng.random(n)
    request = quantile(GPU_REQUEST_QUANTILES_PCT, rank)
    usage = quantile(GPU_USAGE_QUANTILES_PCT, rank, log=False)
    utilization = np.clip(usage / request, 0.0, 1.0)
    instances, plan = split_instances(rng, request)

    type_names = list(GPU_TYPE_TASK_SHARES)
    type_p = np.array([GPU_TYPE_TASK_SHARES[t] for t in type_names])
    gpu_type = rng.choice(len(type_names), size=n, p=type_p / type_p.sum())

    workloads = list(WORKLOAD_CLASSES) + [OTHER_WORKLOAD]
    each = WORKLOAD_TAGGED_SHARE / len(WORKLOAD_CLASSES)
    workload = rng.choice(len(workloads), size=n, p=[each] * len(WORKLOAD_CLASSES) + [1 - WORKLOAD_TAGGED_SHARE])

    return [
        Task(
            task_id=i,
            submit_seconds=float(submit[i]),
            duration_seconds=float(duration[i]),
            gpus=float(request[i] / 100.0),
            instances=int(instances[i]),
            plan_gpu_percent=float(plan[i]),
            workload=workloads[workload[i]],
            gpu_type=type_names[gpu_type[i]],
            framework=FRAMEWORK_BY_WORKLOAD[workloads[workload[i]]],
            gpu_utilization=float(utilization[i]),
        )
        for i in range(n)
    ]


def gpu_hours_per_week(tasks: Sequence[Task]) -> float:
    """GPU-hours requested in a week at the trace's task rate, from a sample's mean."""
    if not tasks:
        return 0.0
    return tasks_per_week() * sum(t.gpu_hours for t in tasks) / len(tasks)


# ---------------------------------------------------------------------------------------------
# Summary for an operator
# ---------------------------------------------------------------------------------------------


def _fmt_seconds(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def summary(tasks: Sequence[Task], machines: Sequence[Machine] | None = None) -> str:
    lines: list[str] = []
    if machines is not None:
        lines.append(f"cluster: {len(machines)} machines, {sum(m.cap_gpu for m in machines)} GPUs "
                     + ", ".join(f"{k} {v}" for k, v in gpus_by_type(machines).items()))
    n = len(tasks)
    span = tasks[-1].submit_seconds / SECONDS_PER_WEEK if tasks else 0.0
    lines.append(f"sample: {n} tasks over {span:.2f} weeks (trace rate {tasks_per_week():,.0f} tasks/week)")
    if not tasks:
        return "\n".join(lines)
    qs = (0.10, 0.25, 0.50, 0.75, 0.90, 0.99)
    dur = np.quantile([t.duration_seconds for t in tasks], qs)
    gpus = np.quantile([t.gpus for t in tasks], qs)
    util = np.quantile([t.gpu_utilization for t in tasks], qs)
    lines.append("")
    lines.append(f"{'quantile':<22}" + "".join(f"{f'p{round(q * 100)}':>10}" for q in qs))
    lines.append(f"{'duration':<22}" + "".join(f"{_fmt_seconds(v):>10}" for v in dur))
    lines.append(f"{'GPUs requested':<22}" + "".join(f"{v:>10.2f}" for v in gpus))
    lines.append(f"{'GPU utilization':<22}" + "".join(f"{v:>10.3f}" for v in util))
    for title, key in (("workload", "workload"), ("GPU type", "gpu_type"), ("framework", "framework")):
        counts = Counter(getattr(t, key) for t in tasks)
        lines.append("")
        lines.append(f"{title:<22}{'tasks':>10}{'share':>10}{'GPU-h share':>14}")
        gpu_h = Counter()
        for t in tasks:
            gpu_h[getattr(t, key)] += t.gpu_hours
        total_h = sum(gpu_h.values()) or 1.0
        for name, count in counts.most_common():
            lines.append(f"{name:<22}{count:>10}{count / n:>10.3f}{gpu_h[name] / total_h:>14.3f}")
    inst = Counter(t.instances for t in tasks)
    lines.append("")
    lines.append("instances per task: " + ", ".join(
        f"{k}: {v / n:.3f}" for k, v in sorted(inst.items())[:6]) + (", ..." if len(inst) > 6 else ""))
    lines.append(f"GPU-hours requested per week at the trace rate: {gpu_hours_per_week(tasks):,.0f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="tasks to draw (default 20000)")
    parser.add_argument("--seed", type=int, default=2020, help="random seed (default 2020)")
    parser.add_argument("--machine-spec", default=str(MACHINE_SPEC_PATH))
    args = parser.parse_args()
    machines = load_machine_spec(args.machine_spec)
    print(f"seed {args.seed}")
    print(summary(sample_tasks(args.n, args.seed), machines))


if __name__ == "__main__":
    main()
