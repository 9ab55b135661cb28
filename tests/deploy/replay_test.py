#!/usr/bin/env python3
"""The fleet replay, short and seeded, against real daemons, a real Redis Cluster and a real
Prometheus (deploy/replay/replay.py): its figures and plots are checked, not only produced.

  replay_test.py --source-dir DIR --stitchd PATH --driver PATH --prometheus PATH

Checks: the plan is a function of the seed; the replay's totals equal what Prometheus recorded
from the daemons (GPU-hours saved through the recording rule, compiles, requests); every
distinct key is compiled exactly once across the fleet and other nodes hit the cluster tier;
the term-by-term account multiplies out to the savings; the plotted series sum to the totals;
the plots are PNG images of a sensible size. The variable-shape workload (BERT on SQuAD with
dynamic padding): recomputed here from the tasks' extents, exact shapes compile one bundle per
(subgraph, shape) and buckets at most one per (subgraph, bucket), buckets compile fewer, and
each mode's compiles and requests are the daemons' own counters.
"""

import argparse
import json
import math
import pathlib
import struct
import subprocess
import sys
import tempfile

SEED = 11
TASKS = 150
DAEMONS = 3
SHAPE_TASKS = 8
# The variable-shape tasks ask only for BERT's subgraphs of at most this many nodes (one that
# follows the extent, 36 occurrences a step, and one that is not shape-generic): each of the
# four large ones takes 5 to 30 s to compile, once per shape.
SHAPE_MAX_NODES = 1100


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


def run_replay(args, out, seed, plan_only=False):
    argv = [sys.executable, str(args.source_dir / "deploy/replay/replay.py"),
            "--tasks", str(TASKS), "--seed", str(seed), "--daemons", str(DAEMONS),
            "--out", str(out), "--stitchd", str(args.stitchd), "--driver", str(args.driver),
            "--prometheus", args.prometheus, "--models", str(args.source_dir / "testdata/models"),
            "--shape-tasks", str(SHAPE_TASKS), "--shape-max-nodes", str(SHAPE_MAX_NODES)]
    if plan_only:
        argv.append("--plan-only")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        fail("replay exited %d:\n%s\n%s" % (done.returncode, done.stdout, done.stderr[-4000:]))
    return done


def check_plan_is_seeded(args, tmp):
    plans = []
    for name, seed in (("a", SEED), ("b", SEED), ("c", SEED + 1)):
        run_replay(args, tmp / name, seed, plan_only=True)
        plans.append((tmp / name / "plan.jsonl").read_text())
    if plans[0] != plans[1]:
        fail("the same seed gave two plans")
    if plans[0] == plans[2]:
        fail("another seed gave the same plan")
    print("PASS the plan is a function of the seed (%d tasks)" % len(plans[0].splitlines()))


def png_size(path):
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        fail("%s is not a PNG image" % path.name)
    return struct.unpack(">II", data[16:24])


def check_report(out):
    report = json.loads((out / "report.json").read_text())
    checks = report["prometheus"]
    for flag in ("gpu_hours_agree", "dashboard_agrees", "compiles_agree", "requests_agree"):
        if not checks[flag]:
            fail("%s is false: %s" % (flag, json.dumps(checks)))
    if report["saved_gpu_hours"] <= 0:
        fail("the replay saved nothing")
    print("PASS Prometheus recorded %.4f GPU-h saved (%d dashboard queries agree), %d compiles "
          "and %d requests: the replay's own totals" % (
              checks["recorded_gpu_hours_saved"], len(checks["dashboard_panels"]),
              checks["recorded_compiles"], checks["recorded_requests"]))

    outcomes = report["outcomes"]
    if outcomes.get("compiled") != report["distinct_keys"]:
        fail("%d compiles for %d distinct keys: the cluster tier should make it one each"
             % (outcomes.get("compiled", 0), report["distinct_keys"]))
    if outcomes.get("hit_cluster", 0) <= 0 or checks["recorded_cluster_writes"] < outcomes["compiled"]:
        fail("no node hit the cluster tier, or not every compile was published: %r, %r"
             % (outcomes, checks["recorded_cluster_writes"]))
    print("PASS %d distinct keys compiled once each across %d daemons; %d cluster hits"
          % (report["distinct_keys"], report["daemons"], outcomes["hit_cluster"]))

    account = report["account"]
    if sum(a["tasks"] for a in account.values()) != report["tasks"]:
        fail("the account's tasks do not add up")
    total = sum(a["saved_gpu_hours"] for a in account.values())
    if not close(total, report["saved_gpu_hours"]):
        fail("the account's savings %r differ from the total %r" % (total, report["saved_gpu_hours"]))
    for name, a in account.items():
        # Saved per task = busy time x memory-intensive share x (1 - 1 / speedup), up to the
        # whole steps a task runs.
        product = (a["busy_gpu_hours_per_task"] * a["memory_intensive_share"]
                   * (1 - 1 / a["speedup_on_share"]))
        if not close(product, a["saved_gpu_hours_per_task"], rel=0.02):
            fail("%s: %r x %r x (1 - 1/%r) = %r, but the replay saved %r per task" % (
                name, a["busy_gpu_hours_per_task"], a["memory_intensive_share"],
                a["speedup_on_share"], product, a["saved_gpu_hours_per_task"]))
        if not 0 < a["memory_intensive_share"] < 1 or a["speedup_on_share"] < 1:
            fail("%s: implausible terms %r" % (name, a))
    if not close(report["saved_gpu_hours_per_week"],
                 report["saved_gpu_hours_per_task"] * report["tasks_per_week"]):
        fail("per week is not per task times the trace's rate")
    print("PASS the term-by-term account multiplies out (%s)" % ", ".join(
        "%s %.1f%% x %.2fx" % (n, 100 * a["memory_intensive_share"], a["speedup_on_share"])
        for n, a in account.items()))
    return report


def check_plots(out, report):
    series = json.loads((out / "series.json").read_text())
    cumulative = series["cumulative_saved_gpu_hours"]
    if not cumulative or not close(cumulative[-1], report["saved_gpu_hours"]):
        fail("the savings plot ends at %r, the replay saved %r" % (
            cumulative[-1] if cumulative else None, report["saved_gpu_hours"]))
    if any(b < a for a, b in zip(cumulative, cumulative[1:])):
        fail("the cumulative savings go down")
    ratios = [r for r in series["hit_ratio"] if not math.isnan(r)]
    warmup = series["warmup_hit_ratio"]
    if not ratios or not all(0 <= r <= 1 for r in ratios + warmup) or warmup[-1] <= warmup[0]:
        fail("the hit ratio should stay in [0, 1] and rise as the caches warm: %r, %r"
             % (ratios, warmup))
    first_tasks = series["warmup_tasks"]
    if first_tasks[0] != 1 or first_tasks[-1] != report["tasks"] or warmup[0] != 0:
        fail("the warm-up should run from the first task (all compiled) to the last: %r, %r"
             % (first_tasks, warmup))
    by_workload = series["saved_by_workload_gpu_hours"]
    if not close(sum(by_workload.values()), report["saved_gpu_hours"]):
        fail("savings by workload do not add up to the total")
    for name in ("savings_over_time.png", "hit_ratio_over_time.png", "savings_by_workload.png"):
        if name not in report["plots"]:
            fail("%s was not drawn" % name)
        width, height = png_size(out / name)
        if width < 300 or height < 200 or (out / name).stat().st_size < 5000:
            fail("%s is %dx%d, %d bytes" % (name, width, height, (out / name).stat().st_size))
    print("PASS the plotted series add up to the totals; 3 PNG plots")


def bucket_top(extent):
    top = 1
    while top < extent:
        top *= 2
    return top


def check_shapes(out, report):
    shapes = report["shapes"]
    tasks = [json.loads(line) for line in (out / "shapes.jsonl").read_text().splitlines()]
    if len(tasks) != SHAPE_TASKS or shapes["tasks"] != SHAPE_TASKS:
        fail("%d variable-shape tasks planned, %d reported, %d asked for"
             % (len(tasks), shapes["tasks"], SHAPE_TASKS))
    for t in tasks:
        lengths = t["padded_lengths"]
        if not lengths or any(l % shapes["pad_multiple"] or not 0 < l <= shapes["max_length"]
                              for l in lengths):
            fail("task %d: padded lengths %r" % (t["task"], lengths))
        # A step of batch x l tokens runs at that many tokens in rows of the HLO's sequence.
        if [e * shapes["seq"] for e in t["extents"]] != [shapes["batch"] * l for l in lengths]:
            fail("task %d: extents %r are not %d x %r tokens in rows of %d"
                 % (t["task"], t["extents"], shapes["batch"], lengths, shapes["seq"]))
    extents = {e for t in tasks for e in t["extents"]}
    buckets = {bucket_top(e) for e in extents}
    follow, fixed = len(shapes["subgraphs_following"]), len(shapes["subgraphs_fixed"])
    if follow < 1 or len(extents) <= len(buckets):
        fail("nothing to compare: %d subgraphs follow the extent; %d extents in %d buckets"
             % (follow, len(extents), len(buckets)))
    exact, bucketed = shapes["modes"]["exact"], shapes["modes"]["bucketed"]
    for mode, m in (("exact", exact), ("bucketed", bucketed)):
        if m["compiles"] != m["recorded_compiles"] or m["requests"] != m["recorded_requests"]:
            fail("%s: the replay counted %d compiles and %d requests, the daemons %r and %r"
                 % (mode, m["compiles"], m["requests"], m["recorded_compiles"],
                    m["recorded_requests"]))
    if exact["recorded_bucket_requests"] != 0 or \
            bucketed["recorded_bucket_requests"] != bucketed["requests_at_extent"] or \
            bucketed["requests_at_extent"] <= 0:
        fail("requests answered by bucket bundles: exact %r, bucketed %r of %r"
             % (exact["recorded_bucket_requests"], bucketed["recorded_bucket_requests"],
                bucketed["requests_at_extent"]))
    if not bucketed["compiles"] < exact["compiles"]:
        fail("buckets compiled %d, exact shapes %d" % (bucketed["compiles"], exact["compiles"]))
    want_exact = fixed + follow * len(extents)
    if exact["compiles"] != want_exact:
        fail("exact shapes compiled %d bundles, not one per (subgraph, shape): %d + %d x %d = %d"
             % (exact["compiles"], fixed, follow, len(extents), want_exact))
    most_bucketed = fixed + follow * len(buckets)
    if bucketed["compiles"] > most_bucketed:
        fail("buckets compiled %d bundles, over one per (subgraph, bucket): %d + %d x %d = %d"
             % (bucketed["compiles"], fixed, follow, len(buckets), most_bucketed))
    if not all(shapes["checks"].values()):
        fail("the replay's own variable-shape checks failed: %r" % shapes["checks"])
    if "| compiles (daemons' own counters) | **%d**" % exact["compiles"] not in \
            (out / "report.md").read_text():
        fail("report.md lacks the variable-shape table")
    print("PASS variable shapes: %d tasks, %d extents in %d buckets, %d subgraphs follow the "
          "extent and %d do not; compiles exact %d = one per (subgraph, shape), bucketed %d <= "
          "%d (one per (subgraph, bucket)); both the daemons' own counts"
          % (len(tasks), len(extents), len(buckets), follow, fixed, exact["compiles"],
             bucketed["compiles"], most_bucketed))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-dir", type=pathlib.Path, required=True)
    ap.add_argument("--stitchd", type=pathlib.Path, required=True)
    ap.add_argument("--driver", type=pathlib.Path, required=True)
    ap.add_argument("--prometheus", required=True)
    args = ap.parse_args()
    print("seed %d, %d tasks, %d daemons" % (SEED, TASKS, DAEMONS))
    with tempfile.TemporaryDirectory(prefix="stitch-replay-") as tmp:
        tmp = pathlib.Path(tmp)
        check_plan_is_seeded(args, tmp)
        out = tmp / "run"
        run_replay(args, out, SEED)
        report = check_report(out)
        check_plots(out, report)
        check_shapes(out, report)
    print("all checks passed")


if __name__ == "__main__":
    main()
