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
  5. The variable-shape workload (shapes.py, cited in PARAMETERS.md): the first --shape-tasks
     tasks that run BERT replay their start-up as BERT fine-tuning on SQuAD v1.1 with dynamic
     padding, asking for the kernels of every shape their steps ran at, twice: through a fleet
     whose jobs ask for exact shapes, and through one whose jobs name the outer parameters so
     the daemons key one bundle per power-of-two bucket. Each mode's compiles are checked
     against the daemons' own counters; report.md compares them.

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
import shapes  # noqa: E402

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

# The variable-shape workload (shapes.py): tasks of this model, fine-tuning BERT on SQuAD v1.1
# with dynamic padding, at batch shapes.BATCH (the model step's own batch). Its HLO has the
# batch in dimension 0 and the sequence in dimension 1, so a step is asked for at its token
# count in rows of the HLO's sequence length (step_extent; README.md, "Variable shapes").
SHAPE_MODEL = "bert_base_mlm"
SHAPE_MODES = ("exact", "bucketed")


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


def model_rows(model: dict[str, Any]) -> int:
    """The model step's outer extent as its HLO has it: dimension 0 of its activations, the
    batch (the sequence, model["seq_or_image"] tokens, is dimension 1)."""
    return int(model["batch"])


def step_extent(model: dict[str, Any], padded_length: int) -> int:
    """The extent a step of shapes.BATCH sequences padded to `padded_length` tokens is asked
    for at: its token count in rows of the HLO's sequence length (both powers of two times the
    same factor, so the extent falls in the bucket the token count would)."""
    tokens, seq = shapes.BATCH * padded_length, int(model["seq_or_image"])
    if tokens % seq:
        raise SystemExit("replay: %d tokens are not whole rows of %d" % (tokens, seq))
    return tokens // seq


def plan_shape_tasks(plan: list[dict[str, Any]], results: list[dict[str, Any]], n: int,
                     seed: int, model: dict[str, Any]) -> list[dict[str, Any]]:
    """The variable-shape workload: the first `n` tasks of the plan that run SHAPE_MODEL, each
    at the distinct padded lengths its steps drew (as many batches as the task ran steps at
    the model's fixed shape; at least one)."""
    rng = np.random.default_rng(np.random.PCG64(seed + 2))
    out = []
    for task, r in zip(plan, results):
        if len(out) == n:
            break
        if task["model"] != SHAPE_MODEL:
            continue
        lengths = shapes.distinct_padded_lengths(rng, r["steps"])
        out.append({"task": task["task"], "daemon_index": task["daemon_index"],
                    "steps": r["steps"], "padded_lengths": lengths,
                    "tokens": [shapes.BATCH * length for length in lengths],
                    "extents": [step_extent(model, length) for length in lengths]})
    return out


def describe_model(driver: pathlib.Path, path: str, rows: int) -> dict[str, Any]:
    """The driver's account of the model's distinct subgraphs: which follow the extent."""
    done = subprocess.run([str(driver), "--describe", path, "--rows", str(rows)],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit("replay: %s --describe failed: %s%s" % (driver, done.stdout,
                                                                 done.stderr))
    return json.loads(done.stdout)


def run_shape_tasks(shape_plan: list[dict[str, Any]], mode: str, model_path: str, rows: int,
                    subgraphs: list[int], fleet: Any, driver: pathlib.Path,
                    workdir: pathlib.Path) -> list[dict[str, Any]]:
    """Asks `mode`'s fleet for the kernels of every variable-shape task, one task at a time."""
    stderr = open(workdir / ("driver-%s.log" % mode), "w")
    process = subprocess.Popen([str(driver)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=stderr, text=True, bufsize=1)
    results = []
    started = time.time()
    every = max(1, len(shape_plan) // 5)
    compiled = 0
    try:
        for i, task in enumerate(shape_plan):
            process.stdin.write(json.dumps({
                "task": task["task"], "daemon": fleet.daemons[task["daemon_index"]].address,
                "model": model_path, "fallback": FALLBACK, "rows": rows,
                "extents": task["extents"], "shapes": mode, "subgraphs": subgraphs}) + "\n")
            process.stdin.flush()
            answer = process.stdout.readline()
            if not answer:
                raise SystemExit("replay: the driver exited (see %s)" % stderr.name)
            result = json.loads(answer)
            if "error" in result or result.get("fallbacks"):
                raise SystemExit("replay: %s task %d failed: %s" % (mode, task["task"],
                                                                  answer.strip()[:2000]))
            results.append(result)
            compiled += result["outcomes"].get("compiled", 0)
            if (i + 1) % every == 0 or i + 1 == len(shape_plan):
                log("[shapes %s] %d/%d tasks, compiles %d, %.0f s" % (
                    mode, i + 1, len(shape_plan), compiled, time.time() - started))
    finally:
        process.stdin.close()
        process.wait(timeout=60)
        stderr.close()
    return results


def counter_sum(scraped: dict[str, float], name: str, **labels: str) -> float:
    """The sum of a scraped counter's series whose labels include `labels`."""
    total = 0.0
    for series, value in scraped.items():
        if series != name and not series.startswith(name + "{"):
            continue
        if all('%s="%s"' % (k, v) in series for k, v in labels.items()):
            total += value
    return total


def shape_mode_summary(results: list[dict[str, Any]], fleet: Any) -> dict[str, Any]:
    """One mode's compiles, requests and hits as the driver saw them, beside the daemons' own
    counters (each daemon's /metrics, read after the last task)."""
    outcomes = collections.Counter()
    for r in results:
        outcomes.update(r["outcomes"])
    asked = [(s, e) for r in results for s, e in r["asked"]]
    scraped = [fleet.scrape(d) for d in fleet.daemons]
    return {
        "compiles": outcomes.get("compiled", 0),
        "outcomes": dict(outcomes),
        "requests": len(asked),
        "requests_at_extent": sum(1 for _, e in asked if e),
        "distinct_keys": len({k for r in results for k in r["keys"]}),
        "subgraph_shapes": len(set(asked)),
        "subgraph_buckets": len({(s, shapes.bucket_top(e) if e else 0) for s, e in asked}),
        "recorded_compiles": sum(counter_sum(m, "stitch_compiles_total", result="ok")
                                 for m in scraped),
        "recorded_requests": sum(counter_sum(m, "stitch_requests_total", method="Compile")
                                 for m in scraped),
        "recorded_bucket_requests": sum(counter_sum(m, "stitch_requests_total",
                                                    method="Compile", shape="bucket")
                                        for m in scraped),
        "recorded_cluster_writes": sum(counter_sum(m, "stitch_cluster_writes_total")
                                       for m in scraped),
    }


def shape_report(shape_plan: list[dict[str, Any]], described: dict[str, Any],
                 modes: dict[str, dict[str, Any]], seq: int) -> dict[str, Any]:
    """The variable-shape workload's figures and the checks on them. `described` lists the
    subgraphs the tasks asked for."""
    follow = [s["subgraph"] for s in described["subgraphs"] if s["follows"]]
    fixed = [s["subgraph"] for s in described["subgraphs"] if not s["follows"]]
    extents = sorted({e for t in shape_plan for e in t["extents"]})
    buckets = sorted({shapes.bucket_top(e) for e in extents})
    exact, bucketed = modes["exact"], modes["bucketed"]
    checks = {}
    for mode, m in modes.items():
        checks[mode + "_compiles_agree"] = m["recorded_compiles"] == m["compiles"]
        checks[mode + "_requests_agree"] = m["recorded_requests"] == m["requests"]
    # Only bucketed jobs' graphs name outer parameters, and the daemons answer every such
    # request with a bucket's bundle.
    checks["bucket_requests_agree"] = (
        bucketed["recorded_bucket_requests"] == bucketed["requests_at_extent"]
        and exact["recorded_bucket_requests"] == 0)
    checks["exact_one_per_subgraph_shape"] = (
        exact["compiles"] == exact["subgraph_shapes"] == len(fixed) + len(follow) * len(extents))
    checks["bucketed_at_most_one_per_subgraph_bucket"] = (
        bucketed["compiles"] <= bucketed["subgraph_buckets"]
        <= len(fixed) + len(follow) * len(buckets))
    checks["bucketed_at_most_exact"] = bucketed["compiles"] <= exact["compiles"]
    return {
        "model": SHAPE_MODEL,
        "tasks": len(shape_plan),
        "source": shapes.SOURCE,
        "batch": shapes.BATCH,
        "max_length": shapes.MAX_LENGTH,
        "pad_multiple": shapes.PAD_MULTIPLE,
        "rows": described["rows"],
        "seq": seq,
        "steps": sum(t["steps"] for t in shape_plan),
        "padded_lengths_per_task": (sum(len(t["extents"]) for t in shape_plan)
                                    / max(1, len(shape_plan))),
        "distinct_extents": extents,
        "buckets": buckets,
        "subgraphs_following": follow,
        "subgraphs_fixed": fixed,
        "occurrences_following": sum(s["occurrences"] for s in described["subgraphs"]
                                     if s["follows"]),
        "occurrences_fixed": sum(s["occurrences"] for s in described["subgraphs"]
                                 if not s["follows"]),
        "described": described["subgraphs"],
        "subgraphs_left_out": described.get("left_out", []),
        "modes": modes,
        "checks": checks,
    }


def shape_markdown(r: dict[str, Any]) -> list[str]:
    """The variable-shape table of report.md."""
    e, b = r["modes"]["exact"], r["modes"]["bucketed"]

    def hits(m, outcome):
        return m["outcomes"].get(outcome, 0)

    return [
        "",
        "Variable shapes: %d %s tasks fine-tuning on SQuAD v1.1 with dynamic padding (batch %d, "
        "padded to a multiple of %d tokens, at most %d; %.1f padded lengths per task), their "
        "subgraphs asked for at every extent: %d of %d distinct subgraphs follow the extent "
        "(%d of %d occurrences per step), %d stay as the HLO has them." % (
            r["tasks"], r["model"], r["batch"], r["pad_multiple"], r["max_length"],
            r["padded_lengths_per_task"], len(r["subgraphs_following"]),
            len(r["subgraphs_following"]) + len(r["subgraphs_fixed"]),
            r["occurrences_following"], r["occurrences_following"] + r["occurrences_fixed"],
            len(r["subgraphs_fixed"])) + (
            " %d larger subgraphs were left out (--shape-max-nodes)."
            % len(r["subgraphs_left_out"]) if r["subgraphs_left_out"] else ""),
        "",
        "| | exact shapes | power-of-two buckets |",
        "|---|---|---|",
        "| distinct extents (rows of %d tokens) / buckets seen | %d (%d to %d) | %d (top %s) |" % (
            r["seq"],
            len(r["distinct_extents"]), r["distinct_extents"][0], r["distinct_extents"][-1],
            len(r["buckets"]), ", ".join(str(t) for t in r["buckets"])),
        "| (subgraph, shape) / (subgraph, bucket) pairs asked for | %d | %d |" % (
            e["subgraph_shapes"], b["subgraph_buckets"]),
        "| kernel requests | %s | %s |" % (f"{e['requests']:,}", f"{b['requests']:,}"),
        "| compiles (daemons' own counters) | **%d** (%d) | **%d** (%d) |" % (
            e["compiles"], e["recorded_compiles"], b["compiles"], b["recorded_compiles"]),
        "| cluster-tier hits | %s | %s |" % (
            f"{hits(e, 'hit_cluster'):,}", f"{hits(b, 'hit_cluster'):,}"),
        "| node hits (memory, disk) | %s | %s |" % (
            f"{hits(e, 'hit_memory') + hits(e, 'hit_disk'):,}",
            f"{hits(b, 'hit_memory') + hits(b, 'hit_disk'):,}"),
        "| requests answered by a bucket's bundle (daemons' counters) | %s | %s |" % (
            f"{int(e['recorded_bucket_requests']):,}", f"{int(b['recorded_bucket_requests']):,}"),
    ]


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
    if r.get("shapes"):
        lines += shape_markdown(r["shapes"])
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
    ap.add_argument("--shape-tasks", type=int, default=0,
                    help="BERT tasks of the plan replayed at variable shapes (0: none)")
    ap.add_argument("--shape-max-nodes", type=int, default=0,
                    help="variable-shape tasks ask only for the subgraphs of at most this many "
                         "nodes (0: all); a shorter run for CI")
    ap.add_argument("--plan-only", action="store_true")
    ap.add_argument("--replot", action="store_true",
                    help="redraw the plots of --out from its report.json and series.json")
    args = ap.parse_args(None if argv is None else list(argv))
    if args.tasks < 1 or args.daemons < 1 or args.shape_tasks < 0:
        ap.error("--tasks and --daemons must be at least 1, --shape-tasks at least 0")
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
    shape_section = None
    shape_plan = plan_shape_tasks(plan, results, args.shape_tasks, args.seed,
                                  models[SHAPE_MODEL])
    if shape_plan:
        with open(args.out / "shapes.jsonl", "w") as f:
            for task in shape_plan:
                f.write(json.dumps(task, sort_keys=True) + "\n")
        model = models[SHAPE_MODEL]
        rows = model_rows(model)
        described = describe_model(args.driver, model["path"], rows)
        if args.shape_max_nodes > 0:
            described["left_out"] = [g["subgraph"] for g in described["subgraphs"]
                                     if g["nodes"] > args.shape_max_nodes]
            described["subgraphs"] = [g for g in described["subgraphs"]
                                      if g["nodes"] <= args.shape_max_nodes]
        asked_for = [g["subgraph"] for g in described["subgraphs"]]
        modes = {}
        for mode in SHAPE_MODES:
            # Each mode has its own fleet (daemons and Redis Cluster), so the two share no
            # cache entry and each fleet's counters are its mode's.
            with fleet_module.Fleet(args.out / ("fleet-" + mode), args.stitchd, args.daemons,
                                    target=TARGET, workers=args.workers, ptx_only=True,
                                    prometheus=None, log=log) as shape_fleet:
                shape_results = run_shape_tasks(shape_plan, mode, model["path"], rows,
                                                asked_for, shape_fleet, args.driver, args.out)
                modes[mode] = shape_mode_summary(shape_results, shape_fleet)
        shape_section = shape_report(shape_plan, described, modes, int(model["seq_or_image"]))
    report = build_report(args, plan, results, models, checks)
    report["shapes"] = shape_section
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
    if shape_section is not None and not all(shape_section["checks"].values()):
        log("replay: the variable-shape checks failed: %s" % json.dumps(shape_section["checks"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
