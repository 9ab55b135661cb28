#!/usr/bin/env python3
"""The fleet replay: the tasks of a cluster shaped like Alibaba PAI's 2020 GPU cluster, played
through real stitchd daemons that share a real Redis Cluster tier, with a real Prometheus
scraping them.

  replay.py --tasks 20000 --seed 2020 --daemons 4 --out out/replay

What happens, in order:
  1. A task population is drawn from the published distributions (population.py, cited in
     PARAMETERS.md), deterministically from --seed.
  2. Each task is placed on a machine of its GPU type from the trace's machine table, and the
     machine on one of the --daemons stitchd processes (each stands for a share of the
     cluster's nodes). Its workload picks one of the model training steps in
     testdata/models/ (the mapping and its reasons are in README.md, MODEL_FOR_WORKLOAD below).
  3. The tasks run in submit order through stitch_replay_driver, which does what a framework
     integration does: it asks the task's daemon for the kernels of every memory-intensive
     subgraph of the model's step, then reports the step's invocations for as many steps as
     the task's busy GPU time holds, with the job's fallback (XLA).
  4. The replay's own totals are checked against what Prometheus recorded from the daemons,
     and it writes report.json, report.md, series.json and three PNG plots to --out.

--plan-only writes the task plan (plan.jsonl) without starting anything: the replay is a
function of --seed, and the plan shows it.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import pathlib
import subprocess
import sys
import time
import zlib
from typing import Any, Iterable

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402  (Debian's python3-numpy)

import population  # noqa: E402

# The papers' fleet figures (../../README.md, "Fleet savings"): GPU-hours saved per task.
PAPERS = {
    "FusionStitching": {"gpu_hours": 7000, "tasks": 30000, "period": "month"},
    "AStitch": {"gpu_hours": 20000, "tasks": 70000, "period": "week"},
}

# Pricing the compute-bound part of a step (matrix multiplies and convolutions): XLA's flop
# count of the step at a fraction of an A100's dense TF32 tensor-core peak (156 TFLOP/s, the
# NVIDIA A100 datasheet). The fraction is an assumption; README.md shows what it moves.
A100_TF32_FLOPS = 156e12
COMPUTE_EFFICIENCY = 0.4
# The daemons' target: the trace's P100, V100 and MISC GPUs predate every target stitchd
# plans for, so every task is priced on an A100, whose faster memory makes the saving per
# step smaller than on the trace's own GPUs would be.
TARGET = "sm_80"
# Every job runs XLA's kernels where stitchd's are not used: the baseline both papers report
# against. The report adds what an eager (no compiler) fleet would have saved.
FALLBACK = "xla"

# The trace's workload classes, by the model step that stands for them (README.md gives the
# reasons). Untagged tasks ("other", ~91% of the trace) draw one of the four models with the
# weights below.
MODEL_FOR_WORKLOAD = {
    "bert": "bert_base_mlm",
    "xlnet": "bert_base_mlm",
    "nmt": "gpt2_small",
    "resnet": "resnet50",
    "inception": "resnet50",
    "ctr": "dlrm_criteo",
    "graphlearn": "dlrm_criteo",
    "rl": "dlrm_criteo",
}
OTHER_MODEL_WEIGHTS = {"bert_base_mlm": 0.25, "gpt2_small": 0.25, "resnet50": 0.25,
                       "dlrm_criteo": 0.25}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_models(models_dir: pathlib.Path) -> dict[str, dict[str, Any]]:
    """The model steps of models.json by name, each with its file's path and compute time."""
    entries = json.loads((models_dir / "models.json").read_text())
    models = {}
    for e in entries:
        path = models_dir / e["file"]
        if not path.is_file():
            raise SystemExit("replay: %s lists %s, which is missing" % (models_dir, path))
        flops = float(e["flops_per_step"])
        if not math.isfinite(flops) or flops <= 0:
            raise SystemExit("replay: %s: bad flops_per_step %r" % (e["name"], flops))
        models[e["name"]] = dict(e, path=str(path.resolve()),
                                 compute_seconds=flops / (A100_TF32_FLOPS * COMPUTE_EFFICIENCY))
    for name in set(MODEL_FOR_WORKLOAD.values()) | set(OTHER_MODEL_WEIGHTS):
        if name not in models:
            raise SystemExit("replay: no model %r in %s/models.json" % (name, models_dir))
    return models


def plan_tasks(n: int, seed: int, daemons: int,
               models: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The replay's task plan: population draws placed on machines, daemons and models."""
    tasks = population.sample_tasks(n, seed)
    machines = population.load_machine_spec(HERE / "trace" / "pai_machine_spec.tar.gz")
    by_type: dict[str, list[str]] = collections.defaultdict(list)
    for m in machines:
        by_type[m.gpu_type].append(m.machine)
    rng = np.random.default_rng(np.random.PCG64(seed + 1))
    other_names = sorted(OTHER_MODEL_WEIGHTS)
    other_p = np.array([OTHER_MODEL_WEIGHTS[k] for k in other_names])
    plan = []
    for t in tasks:
        candidates = by_type.get(t.gpu_type)
        if not candidates:
            raise SystemExit("replay: no machine of type %s in the machine table" % t.gpu_type)
        machine = candidates[int(rng.integers(len(candidates)))]
        model = MODEL_FOR_WORKLOAD.get(t.workload)
        if model is None:
            model = other_names[int(rng.choice(len(other_names), p=other_p / other_p.sum()))]
        busy = t.duration_seconds * t.gpus * t.gpu_utilization
        plan.append({
            "task": t.task_id,
            "submit_seconds": t.submit_seconds,
            "workload": t.workload,
            "gpu_type": t.gpu_type,
            "machine": machine,
            "daemon_index": zlib.crc32(machine.encode()) % daemons,
            "model": model,
            "gpus": t.gpus,
            "duration_seconds": t.duration_seconds,
            "gpu_utilization": t.gpu_utilization,
            "busy_gpu_seconds": busy,
            "compute_seconds_per_step": models[model]["compute_seconds"],
        })
    return plan


def run_tasks(plan: list[dict[str, Any]], models: dict[str, dict[str, Any]], fleet: Any,
              driver: pathlib.Path, workdir: pathlib.Path) -> list[dict[str, Any]]:
    """Plays the plan through the driver, one task at a time; returns each task's answer."""
    stderr = open(workdir / "driver.log", "w")
    process = subprocess.Popen([str(driver)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=stderr, text=True, bufsize=1)
    results = []
    started = time.time()
    every = max(1, len(plan) // 20)
    totals = collections.Counter()
    saved = 0.0
    try:
        for i, task in enumerate(plan):
            line = json.dumps({
                "task": task["task"],
                "daemon": fleet.daemons[task["daemon_index"]].address,
                "model": models[task["model"]]["path"],
                "fallback": FALLBACK,
                "busy_gpu_seconds": task["busy_gpu_seconds"],
                "compute_seconds_per_step": task["compute_seconds_per_step"],
            })
            process.stdin.write(line + "\n")
            process.stdin.flush()
            answer = process.stdout.readline()
            if not answer:
                raise SystemExit("replay: the driver exited (see %s)" % (workdir / "driver.log"))
            result = json.loads(answer)
            if "error" in result or "report_error" in result or result.get("fallbacks"):
                raise SystemExit("replay: task %d failed: %s" % (task["task"], answer.strip()))
            results.append(result)
            totals.update(result["outcomes"])
            saved += result["saved_gpu_seconds"]
            if (i + 1) % every == 0 or i + 1 == len(plan):
                asked = sum(totals.values())
                log("[%3d%%] %d/%d tasks, trace time %s, compiles %d, hit ratio %.3f, "
                    "saved %.2f GPU-h, %.0f s" % (
                        100 * (i + 1) // len(plan), i + 1, len(plan),
                        _clock(task["submit_seconds"]), totals["compiled"],
                        1 - totals["compiled"] / max(asked, 1), saved / 3600,
                        time.time() - started))
    finally:
        process.stdin.close()
        process.wait(timeout=60)
        stderr.close()
    return results


def _clock(seconds: float) -> str:
    days, rest = divmod(int(seconds), 86400)
    return "day %d %02d:%02d" % (days, rest // 3600, rest % 3600 // 60)


def account(plan: list[dict[str, Any]], results: list[dict[str, Any]],
            models: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The term-by-term account, per model and for the whole run."""
    rows: dict[str, dict[str, float]] = {}
    for task, r in zip(plan, results):
        row = rows.setdefault(task["model"], collections.defaultdict(float))
        row["tasks"] += 1
        row["busy_gpu_seconds"] += task["busy_gpu_seconds"]
        row["steps"] += r["steps"]
        row["saved_gpu_seconds"] += r["saved_gpu_seconds"]
        row["compute_seconds_per_step"] = task["compute_seconds_per_step"]
        row["mi_seconds_per_step"] = r["baseline_seconds_per_step"][FALLBACK]
        row["stitched_seconds_per_step"] = r["stitched_seconds_per_step"]
        eager_step = task["compute_seconds_per_step"] + r["baseline_seconds_per_step"]["eager"]
        eager_steps = math.floor(task["busy_gpu_seconds"] / eager_step) if eager_step > 0 else 0
        row["saved_if_eager_gpu_seconds"] += eager_steps * max(
            0.0, r["baseline_seconds_per_step"]["eager"] - r["stitched_seconds_per_step"])
    out = {}
    for name, row in sorted(rows.items()):
        step = row["compute_seconds_per_step"] + row["mi_seconds_per_step"]
        out[name] = {
            "tasks": int(row["tasks"]),
            "step_seconds": step,
            "compute_seconds_per_step": row["compute_seconds_per_step"],
            "memory_intensive_share": row["mi_seconds_per_step"] / step,
            "speedup_on_share": row["mi_seconds_per_step"] / row["stitched_seconds_per_step"],
            "steps_per_task": row["steps"] / row["tasks"],
            "busy_gpu_hours_per_task": row["busy_gpu_seconds"] / row["tasks"] / 3600,
            "saved_gpu_hours_per_task": row["saved_gpu_seconds"] / row["tasks"] / 3600,
            "saved_gpu_hours": row["saved_gpu_seconds"] / 3600,
            "saved_if_eager_gpu_hours": row["saved_if_eager_gpu_seconds"] / 3600,
        }
    return out


def series(plan: list[dict[str, Any]], results: list[dict[str, Any]],
           bin_seconds: float) -> dict[str, list[float]]:
    """Savings and hit ratio over trace time, in bins of `bin_seconds` by submit time."""
    bins: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for task, r in zip(plan, results):
        b = bins[int(task["submit_seconds"] // bin_seconds)]
        b["saved"] += r["saved_gpu_seconds"]
        b["asked"] += sum(r["outcomes"].values())
        b["compiled"] += r["outcomes"].get("compiled", 0)
    hours, cumulative, ratio = [], [], []
    total = 0.0
    for k in range(max(bins) + 1 if bins else 0):
        b = bins.get(k, collections.Counter())
        total += b["saved"]
        hours.append((k + 1) * bin_seconds / 3600)
        cumulative.append(total / 3600)
        ratio.append(1 - b["compiled"] / b["asked"] if b["asked"] else float("nan"))
    # The warm-up: the hit ratio over the first n tasks, at log-spaced n, since a fleet's
    # compiles are over within its first tasks and a plot against trace time shows only 1.
    asked = np.cumsum([sum(r["outcomes"].values()) for r in results])
    compiled = np.cumsum([r["outcomes"].get("compiled", 0) for r in results])
    points = np.unique(np.round(np.logspace(0, math.log10(len(results)), 60)).astype(int))
    return {"trace_hours": hours, "cumulative_saved_gpu_hours": cumulative,
            "hit_ratio": ratio, "warmup_tasks": [int(n) for n in points],
            "warmup_hit_ratio": [float(1 - compiled[n - 1] / asked[n - 1]) if asked[n - 1]
                                 else float("nan") for n in points]}


def dashboard_savings_queries() -> list[str]:
    """The Grafana dashboard's queries of the all-time GPU-hours saved, for every instance."""
    dashboard = json.loads((ROOT / "deploy/grafana/stitchd-dashboard.json").read_text())
    exprs = []

    def visit(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            visit(panel.get("panels", []))
            for target in panel.get("targets", []):
                expr = target.get("expr", "")
                if "job:stitch_gpu_hours_saved:sum" in expr:
                    exprs.append(expr.replace("$instance", ".*"))

    visit(dashboard.get("panels", []))
    return exprs


def check_prometheus(fleet: Any, saved_seconds: float, compiled_keys: int,
                     requests: int) -> dict[str, Any]:
    """What Prometheus recorded from the daemons, beside the replay's own totals."""
    fleet.wait_for_scrape()
    recorded_hours = None
    for _ in range(60):  # the recording rule follows the scrape by one evaluation
        recorded_hours = fleet.query_sum("sum(job:stitch_gpu_hours_saved:sum)")
        if recorded_hours is not None and abs(recorded_hours * 3600 - saved_seconds) <= \
                1e-6 * max(1.0, saved_seconds):
            break
        time.sleep(1)
    by_result = {labels.get("result", ""): value for labels, value in fleet.query(
        'sum by (result) (stitch_requests_total{method="Compile"})')}
    panels = {expr: fleet.query_sum(expr) for expr in dashboard_savings_queries()}
    compiles = fleet.query_sum('sum(stitch_compiles_total{result="ok"})') or 0
    cluster_writes = fleet.query_sum("sum(stitch_cluster_writes_total)") or 0
    checks = {
        "recorded_gpu_hours_saved": recorded_hours,
        "replay_gpu_hours_saved": saved_seconds / 3600,
        "gpu_hours_agree": recorded_hours is not None and
        abs(recorded_hours * 3600 - saved_seconds) <= 1e-6 * max(1.0, saved_seconds),
        "dashboard_panels": panels,
        "dashboard_agrees": bool(panels) and all(
            v is not None and abs(v * 3600 - saved_seconds) <= 1e-6 * max(1.0, saved_seconds)
            for v in panels.values()),
        "recorded_compiles": compiles,
        "replay_compiled_keys": compiled_keys,
        "compiles_agree": compiles == compiled_keys,
        "recorded_requests_by_result": by_result,
        "recorded_requests": sum(by_result.values()),
        "replay_requests": requests,
        "requests_agree": sum(by_result.values()) == requests,
        "recorded_cluster_writes": cluster_writes,
    }
    return checks


def plot(out: pathlib.Path, timeline: dict[str, list[float]],
         by_workload: dict[str, float]) -> list[str]:
    """Draws the three PNGs; returns their file names."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        names.append(name)

    def over_time(values, ylabel, title, **style):
        fig, ax = plt.subplots(figsize=(7, 3.6))
        ax.plot(timeline["trace_hours"], values, **style)
        ax.set_xlabel("trace time (hours)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        return fig, ax

    fig, _ = over_time(timeline["cumulative_saved_gpu_hours"], "GPU-hours saved (cumulative)",
                       "Savings over time", color="tab:green")
    save(fig, "savings_over_time.png")
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 3.6))
    ax.plot(timeline["warmup_tasks"], timeline["warmup_hit_ratio"], color="tab:blue",
            marker=".", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("tasks started (log scale)")
    ax.set_title("Warm-up: hit ratio of the first n tasks")
    bx.plot(timeline["trace_hours"], timeline["hit_ratio"], color="tab:blue", marker=".",
            linewidth=0.8)
    bx.set_xlabel("trace time (hours)")
    bx.set_title("Hit ratio of the tasks started in each bin")
    for a in (ax, bx):
        a.set_ylim(0, 1.02)
        a.set_ylabel("cache hit ratio")
        a.grid(alpha=0.3)
    save(fig, "hit_ratio_over_time.png")

    fig, ax = plt.subplots(figsize=(7, 3.6))
    labels = sorted(by_workload, key=lambda k: -by_workload[k])
    ax.bar(labels, [by_workload[k] for k in labels], color="tab:purple")
    ax.set_ylabel("GPU-hours saved")
    ax.set_title("Savings by workload")
    ax.tick_params(axis="x", rotation=30)
    save(fig, "savings_by_workload.png")
    return names


def markdown(report: dict[str, Any]) -> str:
    """The report as the README quotes it."""
    r = report
    lines = [
        "| | this replay | FusionStitching | AStitch |",
        "|---|---|---|---|",
        "| GPU-h saved per task | %.4f | %.3f | %.3f |" % (
            r["saved_gpu_hours_per_task"], r["papers"]["FusionStitching"],
            r["papers"]["AStitch"]),
        "| tasks per week at the trace's rate | %s | %s | %s |" % (
            f"{r['tasks_per_week']:,.0f}", "~7,000 (30,000 a month)", "70,000"),
        "| GPU-h saved per week | %s | ~1,630 (7,000 a month) | 20,000 |" % (
            f"{r['saved_gpu_hours_per_week']:,.0f}"),
        "",
        "| model | tasks | step (ms) | compute (ms) | memory-intensive share | speedup on it "
        "| busy GPU-h / task | steps / task | GPU-h saved / task |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, a in r["account"].items():
        lines.append("| %s | %d | %.1f | %.1f | %.1f%% | %.2fx | %.3f | %s | %.4f |" % (
            name, a["tasks"], a["step_seconds"] * 1e3, a["compute_seconds_per_step"] * 1e3,
            100 * a["memory_intensive_share"], a["speedup_on_share"],
            a["busy_gpu_hours_per_task"], f"{a['steps_per_task']:,.0f}",
            a["saved_gpu_hours_per_task"]))
    f = r["fleet"]
    lines.append("| all | %d | | | %.1f%% | %.2fx | %.3f | %s | %.4f |" % (
        r["tasks"], 100 * f["memory_intensive_share"], f["speedup_on_share"],
        f["busy_gpu_hours_per_task"], f"{f['steps_per_task']:,.0f}",
        r["saved_gpu_hours_per_task"]))
    c = r["prometheus"]
    lines += [
        "",
        "Kernel requests %d: compiled %d, %s. Prometheus recorded %.4f GPU-h saved "
        "(replay: %.4f), %d compiles (replay: %d distinct keys compiled)." % (
            r["requests"], r["outcomes"].get("compiled", 0),
            ", ".join("%s %d" % (k, v) for k, v in sorted(r["outcomes"].items())
                      if k != "compiled"),
            c["recorded_gpu_hours_saved"] or 0, c["replay_gpu_hours_saved"],
            c["recorded_compiles"], c["replay_compiled_keys"]),
        "With an eager fallback (no compiler) instead of XLA the same tasks would have saved "
        "%.2f GPU-h (%.4f per task)." % (r["saved_if_eager_gpu_hours"],
                                          r["saved_if_eager_gpu_hours"] / max(r["tasks"], 1)),
    ]
    return "\n".join(lines) + "\n"


def build_report(args: argparse.Namespace, plan: list[dict[str, Any]],
                 results: list[dict[str, Any]], models: dict[str, dict[str, Any]],
                 checks: dict[str, Any]) -> dict[str, Any]:
    outcomes = collections.Counter()
    for r in results:
        outcomes.update(r["outcomes"])
    saved = sum(r["saved_gpu_seconds"] for r in results)
    busy = sum(t["busy_gpu_seconds"] for t in plan)
    acct = account(plan, results, models)
    mi = sum(a["tasks"] * a["memory_intensive_share"] for a in acct.values())
    by_workload = collections.defaultdict(float)
    for t, r in zip(plan, results):
        by_workload[t["workload"]] += r["saved_gpu_seconds"] / 3600
    per_task = saved / 3600 / len(plan)
    saved_fraction = saved / busy if busy else 0.0
    fleet_share = mi / len(plan)
    # The fleet's speedup on its memory-intensive time: the one that, at the fleet's share,
    # gives the fraction of busy time saved.
    speedup = 1 / (1 - saved_fraction / fleet_share) if 0 < saved_fraction < fleet_share else 1
    return {
        "seed": args.seed,
        "tasks": len(plan),
        "daemons": args.daemons,
        "target": TARGET,
        "fallback": FALLBACK,
        "compute_efficiency": COMPUTE_EFFICIENCY,
        "trace_hours": (plan[-1]["submit_seconds"] - plan[0]["submit_seconds"]) / 3600,
        "requests": sum(outcomes.values()),
        "outcomes": dict(outcomes),
        "saved_gpu_hours": saved / 3600,
        "saved_gpu_hours_per_task": per_task,
        "tasks_per_week": population.tasks_per_week(),
        "saved_gpu_hours_per_week": per_task * population.tasks_per_week(),
        "busy_gpu_hours": busy / 3600,
        "saved_fraction_of_busy_time": saved_fraction,
        "fleet": {"memory_intensive_share": fleet_share, "speedup_on_share": speedup,
                  "busy_gpu_hours_per_task": busy / 3600 / len(plan),
                  "steps_per_task": sum(r["steps"] for r in results) / len(plan)},
        "papers": {k: v["gpu_hours"] / v["tasks"] for k, v in PAPERS.items()},
        "saved_if_eager_gpu_hours": sum(a["saved_if_eager_gpu_hours"] for a in acct.values()),
        "account": acct,
        "saved_by_workload_gpu_hours": dict(by_workload),
        "prometheus": checks,
    }


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=2020)
    ap.add_argument("--daemons", type=int, default=4)
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "out" / "replay")
    ap.add_argument("--stitchd", type=pathlib.Path, default=ROOT / "build/daemon/stitchd")
    ap.add_argument("--driver", type=pathlib.Path,
                    default=ROOT / "build/deploy/replay/stitch_replay_driver")
    ap.add_argument("--models", type=pathlib.Path, default=ROOT / "testdata/models")
    ap.add_argument("--prometheus", default="prometheus")
    ap.add_argument("--workers", type=int, default=2, help="compile threads per daemon")
    ap.add_argument("--bins", type=int, default=48, help="time bins of the plots")
    ap.add_argument("--plan-only", action="store_true")
    ap.add_argument("--replot", action="store_true",
                    help="redraw the plots of --out from its report.json and series.json")
    args = ap.parse_args(None if argv is None else list(argv))
    if args.tasks < 1 or args.daemons < 1:
        ap.error("--tasks and --daemons must be at least 1")
    if args.replot:
        report = json.loads((args.out / "report.json").read_text())
        timeline = json.loads((args.out / "series.json").read_text())
        plot(args.out, timeline, report["saved_by_workload_gpu_hours"])
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    models = load_models(args.models)
    plan = plan_tasks(args.tasks, args.seed, args.daemons, models)
    with open(args.out / "plan.jsonl", "w") as f:
        for task in plan:
            f.write(json.dumps(task, sort_keys=True) + "\n")
    log("replay: %d tasks (seed %d) over %.1f hours of trace time, %d daemons; plan in %s" % (
        len(plan), args.seed, (plan[-1]["submit_seconds"] - plan[0]["submit_seconds"]) / 3600,
        args.daemons, args.out / "plan.jsonl"))
    if args.plan_only:
        return 0
    for binary in (args.stitchd, args.driver):
        if not binary.is_file():
            raise SystemExit("replay: %s is missing; build it first (scripts/build)" % binary)

    import fleet as fleet_module
    workdir = args.out / "fleet"
    with fleet_module.Fleet(workdir, args.stitchd, args.daemons, target=TARGET,
                            workers=args.workers, ptx_only=True, prometheus=args.prometheus,
                            log=log) as fleet:
        results = run_tasks(plan, models, fleet, args.driver, args.out)
        compiled = sum(r["outcomes"].get("compiled", 0) for r in results)
        requests = sum(sum(r["outcomes"].values()) for r in results)
        saved = sum(r["saved_gpu_seconds"] for r in results)
        checks = check_prometheus(fleet, saved, compiled, requests)
    report = build_report(args, plan, results, models, checks)
    report["distinct_keys"] = len({k for r in results for k in r["keys"]})
    span = plan[-1]["submit_seconds"] - plan[0]["submit_seconds"]
    timeline = series(plan, results, max(span / args.bins, 60.0))
    (args.out / "series.json").write_text(json.dumps(
        dict(timeline, saved_by_workload_gpu_hours=report["saved_by_workload_gpu_hours"]),
        indent=1))
    report["plots"] = plot(args.out, timeline, report["saved_by_workload_gpu_hours"])
    (args.out / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True))
    (args.out / "report.md").write_text(markdown(report))
    print(markdown(report))
    ok = all(checks[k] for k in ("gpu_hours_agree", "dashboard_agrees", "compiles_agree",
                                  "requests_agree"))
    if not ok:
        log("replay: the replay's totals and Prometheus's disagree: %s" % json.dumps(checks))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
