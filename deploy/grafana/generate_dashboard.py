#!/usr/bin/env python3
"""Writes stitchd-dashboard.json, the Grafana dashboard for a stitchd fleet.

The JSON is generated so that panel ids and grid positions stay consistent; edit this file
and run it (python3 deploy/grafana/generate_dashboard.py), then commit both. The deployment
test (tests/deploy/monitoring_test.py) fails when the two disagree, and checks that every
query uses only metrics stitchd exports or the recording rules in deploy/prometheus/rules/.

Only the Python standard library is used.
"""

import argparse
import json
import pathlib
import sys

OUTPUT = pathlib.Path(__file__).resolve().parent / "stitchd-dashboard.json"

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Label matcher for the panels that follow the `instance` variable.
SEL = 'instance=~"$instance"'
RATE = "$__rate_interval"


def target(expr, legend="", ref="A", **extra):
    t = {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref}
    t.update(extra)
    return t


def targets(*pairs):
    """(expr, legend) pairs as targets A, B, C..."""
    return [target(e, l, chr(ord("A") + i)) for i, (e, l) in enumerate(pairs)]


class Dashboard:
    """Lays panels out left to right in rows of 24 grid units."""

    def __init__(self):
        self.panels = []
        self.next_id = 1
        self.x = 0
        self.y = 0
        self.row_height = 0

    def _place(self, w, h):
        if self.x + w > 24:
            self.x = 0
            self.y += self.row_height
            self.row_height = 0
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_height = max(self.row_height, h)
        return pos

    def _add(self, panel):
        panel["id"] = self.next_id
        self.next_id += 1
        self.panels.append(panel)

    def row(self, title):
        self.y += self.row_height
        self.x, self.row_height = 0, 0
        self._add({"type": "row", "title": title, "collapsed": False, "panels": [],
                   "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}})
        self.y += 1

    def timeseries(self, title, description, tgts, unit="short", w=12, h=8, stack=False,
                   min_value=0, max_value=None, bars=False, stepped=False, overrides=()):
        defaults = {
            "unit": unit,
            "min": min_value,
            "custom": {
                "drawStyle": "bars" if bars else "line",
                "lineInterpolation": "stepAfter" if stepped else "linear",
                "lineWidth": 1,
                "fillOpacity": 20 if stack or bars else 10,
                "showPoints": "never",
                "spanNulls": False,
                "stacking": {"group": "A", "mode": "normal" if stack else "none"},
            },
        }
        if max_value is not None:
            defaults["max"] = max_value
        self._add({
            "type": "timeseries",
            "title": title,
            "description": description,
            "datasource": DATASOURCE,
            "gridPos": self._place(w, h),
            "fieldConfig": {"defaults": defaults, "overrides": list(overrides)},
            "options": {
                "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                "tooltip": {"mode": "multi", "sort": "desc"},
            },
            "targets": tgts,
        })

    def stat(self, title, description, expr, unit="none", decimals=1, w=6, h=4):
        self._add({
            "type": "stat",
            "title": title,
            "description": description,
            "datasource": DATASOURCE,
            "gridPos": self._place(w, h),
            "fieldConfig": {"defaults": {"unit": unit, "decimals": decimals}, "overrides": []},
            "options": {
                "colorMode": "value",
                "graphMode": "area",
                "justifyMode": "auto",
                "orientation": "auto",
                "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                "textMode": "auto",
            },
            "targets": [target(expr)],
        })

    def table(self, title, description, expr, w=12, h=8, value_name="daemons"):
        self._add({
            "type": "table",
            "title": title,
            "description": description,
            "datasource": DATASOURCE,
            "gridPos": self._place(w, h),
            "fieldConfig": {"defaults": {}, "overrides": []},
            "options": {"showHeader": True},
            "transformations": [{"id": "organize", "options": {
                "excludeByName": {"Time": True},
                "renameByName": {"Value": value_name}}}],
            "targets": [target(expr, format="table", instant=True)],
        })


def right_axis_percent(regex):
    """A field override putting the series whose names match `regex` on a percent axis."""
    return {"matcher": {"id": "byRegexp", "options": regex},
            "properties": [{"id": "unit", "value": "percentunit"},
                           {"id": "custom.axisPlacement", "value": "right"}]}


def histogram_quantiles(metric, by=()):
    """p50 and p99 targets of a histogram over the selected instances."""
    group = ", ".join(list(by) + ["le"])
    suffix = "".join(" {{%s}}" % label for label in by)
    return targets(*[
        ("histogram_quantile(%s, sum by (%s) (rate(%s_bucket{%s}[%s])))"
         % (q, group, metric, SEL, RATE), "p%s%s" % (name, suffix))
        for q, name in (("0.5", "50"), ("0.99", "99"))
    ])


def build():
    d = Dashboard()

    d.row("Fleet savings")
    d.stat("GPU-hours saved, last 24 h",
           "GPU time the fleet's fused kernels saved over the last day: for every invocation "
           "jobs report, the time of the job's own fallback (XLA, Inductor or eager; the "
           "better of the XLA and Inductor models when a job did not say) minus the shipped "
           "plan's, from jobs' measured times where they timed both, from the cost model "
           "elsewhere. All daemons; the instance filter does not apply.",
           "sum(job:stitch_gpu_hours_saved:increase1d)")
    d.stat("GPU-hours saved, all time",
           "The daemons' persistent totals (saved in RocksDB, restored at start), summed "
           "over the daemons scraped now.",
           "sum(job:stitch_gpu_hours_saved:sum)")
    d.stat("Compile hours saved, last 24 h",
           "Compile time cache hits saved over the last day: each hit credits the stored "
           "compile time of its bundle.",
           "sum(job:stitch_compile_hours_saved:increase1d)")
    d.stat("Daemons reporting", "stitchd daemons scraped now.",
           "count(stitch_build_info)", decimals=0)
    d.timeseries("GPU-hours saved per day",
                 "Rolling 24-hour GPU time saved, fleet-wide, in GPU-hours.",
                 targets(("sum(job:stitch_gpu_hours_saved:increase1d)", "GPU-hours / 24 h"),
                         ("sum(job:stitch_compile_hours_saved:increase1d)",
                          "compile hours / 24 h")))
    d.timeseries("Kernel invocations reported",
                 "Bundle invocations jobs report (ReportUsage), fleet-wide, per second.",
                 targets(("sum(job:stitch_kernel_invocations_reported:rate5m)",
                          "invocations/s")), unit="ops")
    d.timeseries("Savings: measured, modeled, and the model alone",
                 "All-time GPU-hours saved by basis (measured where jobs timed both the "
                 "stitched kernels and their fallback, modeled elsewhere), beside what the cost "
                 "model alone credits for the same invocations and the measured time lost on "
                 "keys jobs timed slower than their fallback. The gap between the headline and "
                 "the model alone is the model's error where jobs measured.",
                 targets(("sum by (basis) (job:stitch_gpu_hours_saved:sum)", "saved ({{basis}})"),
                         ("sum(job:stitch_model_gpu_hours_saved:sum)", "model alone"),
                         ("sum(job:stitch_gpu_hours_lost:sum)", "lost (measured)"),
                         ("sum(job:stitch_gpu_hours_saved_net:sum)", "net")))
    d.stat("Share of savings measured",
           "The part of all-time GPU-hours saved that rests on jobs' measured times rather "
           "than the cost model.",
           "sum(job:stitch_gpu_seconds_saved_measured:ratio)", unit="percentunit", w=6, h=8)
    d.table("Model error by key",
            "Measured seconds per invocation over the cost model's, for each node's "
            "most-measured keys (stitchd --metrics-top-keys): 1 is a perfect model, above 1 "
            "the model is optimistic. `stitchctl runtimes` on the node lists every key.",
            "topk(20, instance:stitch_key_measured_over_modeled:ratio{%s})" % SEL, w=6, h=8,
            value_name="measured / modeled")
    d.table("Versions",
            "Daemons by stitchd version, compiler version and target, for rolling upgrades.",
            "count by (version, compiler_version, target) (stitch_build_info)", w=24, h=6)

    d.row("Hit ratios by tier")
    d.timeseries("Fleet hit ratio by tier",
                 "Share of Compile and Lookup requests answered from each cache tier, "
                 "fleet-wide (stacked: the top is the overall hit ratio).",
                 targets(("job_tier:stitch_requests_hit:ratio_rate5m", "{{tier}}")),
                 unit="percentunit", stack=True, max_value=1, w=8)
    d.timeseries("Hit ratio by instance",
                 "Share of Compile and Lookup requests answered from any cache tier.",
                 targets(("instance:stitch_requests_hit:ratio_rate5m{%s}" % SEL,
                          "{{instance}}")),
                 unit="percentunit", max_value=1, w=8)
    d.timeseries("Kernel requests by result",
                 "Compile and Lookup answers per second on the selected instances. A Lookup "
                 "miss, a refused Compile (queue full) and a missed deadline are fallbacks.",
                 targets(("sum by (result) (rate(stitch_requests_total{%s,"
                          "method=~\"Compile|Lookup\"}[%s]))" % (SEL, RATE), "{{result}}")),
                 unit="reqps", stack=True, w=8)

    d.row("Latency")
    d.timeseries("Lookup latency",
                 "Time to answer a request from the cache, selected instances.",
                 histogram_quantiles("stitch_lookup_duration_seconds"), unit="s", w=8)
    d.timeseries("Compile latency",
                 "Time to compile one subgraph, selected instances.",
                 histogram_quantiles("stitch_compile_duration_seconds"), unit="s", w=8)
    d.timeseries("Cluster call latency",
                 "Cluster tier round trips by operation (get, put, erase, lease, probe).",
                 histogram_quantiles("stitch_cluster_call_duration_seconds", by=("operation",)),
                 unit="s", w=8)

    d.row("Compile load")
    d.timeseries("Compiles by result",
                 "Compiles finished per second on the selected instances.",
                 targets(("sum by (result) (rate(stitch_compiles_total{%s}[%s]))" % (SEL, RATE),
                          "{{result}}")), unit="ops", stack=True)
    d.timeseries("Compile errors",
                 "Failed compiles per second and their share of all compiles, by instance.",
                 targets(("sum by (instance) (rate(stitch_compiles_total{%s,result=\"error\"}"
                          "[%s]))" % (SEL, RATE), "{{instance}} errors/s"),
                         ("instance:stitch_compiles_error:ratio_rate5m{%s}" % SEL,
                          "{{instance}} error ratio")),
                 overrides=[right_axis_percent(".* error ratio")])
    d.timeseries("Compile queue depth",
                 "Compiles waiting for a worker thread. Past --max-queue (default 256) Compile "
                 "requests are refused and jobs fall back.",
                 targets(("stitch_compile_queue_depth{%s}" % SEL, "{{instance}}")), w=8)
    d.timeseries("Compiles in flight", "Compiles running now.",
                 targets(("stitch_compiles_in_flight{%s}" % SEL, "{{instance}}")), w=8)
    d.timeseries("Compile requests refused",
                 "Compile requests answered with a fallback (queue full, deadline).",
                 targets(("sum by (instance) (rate(stitch_requests_total{%s,method=\"Compile\","
                          "result=\"fallback\"}[%s]))" % (SEL, RATE), "{{instance}}")),
                 unit="reqps", w=8)
    d.timeseries("Cluster writes and compile leases",
                 "Bundles published to the cluster, compiles left to the node holding the "
                 "key's lease, and waits that ended in a compile here.",
                 targets(("sum(rate(stitch_cluster_writes_total{%s}[%s]))" % (SEL, RATE),
                          "writes"),
                         ("sum(rate(stitch_cluster_lease_waits_total{%s}[%s]))" % (SEL, RATE),
                          "lease waits"),
                         ("sum(rate(stitch_cluster_lease_takeovers_total{%s}[%s]))"
                          % (SEL, RATE), "lease takeovers")), unit="ops", w=24)

    d.row("Cache occupancy")
    d.timeseries("Entries by tier", "Bundles held, selected instances.",
                 targets(("sum by (tier) (stitch_cache_entries{%s})" % SEL, "{{tier}}")))
    d.timeseries("Bytes and capacity by tier",
                 "Bytes held and the byte bound of each tier, selected instances.",
                 targets(("sum by (tier) (stitch_cache_bytes{%s})" % SEL, "{{tier}} held"),
                         ("sum by (tier) (stitch_cache_capacity_bytes{%s})" % SEL,
                          "{{tier}} capacity")), unit="bytes")
    d.timeseries("Fullness by tier",
                 "Bytes held over the byte bound. The LRU keeps a busy tier near 100%; "
                 "evictions say whether that hurts.",
                 targets(("instance_tier:stitch_cache_bytes_per_capacity_bytes:ratio{%s}" % SEL,
                          "{{instance}} {{tier}}")), unit="percentunit", max_value=1)
    d.timeseries("Evictions by tier", "Bundles evicted for space per second.",
                 targets(("sum by (tier) (rate(stitch_cache_evictions_total{%s}[%s]))"
                          % (SEL, RATE), "{{tier}}")), unit="cps")

    d.row("Errors")
    d.timeseries("Cluster errors by kind",
                 "Failed cluster calls per second (timeout, unavailable, auth, reply); each is "
                 "a miss.",
                 targets(("sum by (kind) (rate(stitch_cluster_errors_total{%s}[%s]))"
                          % (SEL, RATE), "{{kind}}")), unit="cps", stack=True, w=8)
    d.timeseries("Cluster circuit breaker",
                 "1 while an instance's breaker is open or probing (half_open); the breaker "
                 "answers cluster calls as misses without a round trip.",
                 targets(("stitch_cluster_breaker_state{%s,state!=\"closed\"}" % SEL,
                          "{{instance}} {{state}}"),
                         ("sum by (instance) (increase(stitch_cluster_breaker_trips_total{%s}"
                          "[%s]))" % (SEL, RATE), "{{instance}} trips")),
                 stepped=True, w=8)
    d.timeseries("Calls skipped by the breaker",
                 "Cluster calls answered as misses by the open breaker, per second.",
                 targets(("sum by (instance) (rate(stitch_cluster_skipped_calls_total{%s}[%s]))"
                          % (SEL, RATE), "{{instance}}")), unit="cps", w=8)
    d.timeseries("Rejected cluster entries by reason",
                 "Cluster entries never served (truncated, hmac, version, digest, key). "
                 "Anything here is worth a look: hmac means an entry not sealed with this "
                 "node's secret.",
                 targets(("sum by (reason) (increase(stitch_cluster_rejected_entries_total{%s}"
                          "[%s]))" % (SEL, RATE), "{{reason}}")), bars=True, w=8)
    d.timeseries("Corrupt cache entries by tier",
                 "Entries dropped for a bad digest, version or encoding.",
                 targets(("sum by (tier) (increase(stitch_cache_corrupt_entries_total{%s}[%s]))"
                          % (SEL, RATE), "{{tier}}")), bars=True, w=8)
    d.timeseries("Kernel request errors",
                 "Compile and Lookup requests that failed (neither a kernel nor a fallback).",
                 targets(("sum by (method) (rate(stitch_requests_total{%s,"
                          "method=~\"Compile|Lookup\",result=\"error\"}[%s]))" % (SEL, RATE),
                          "{{method}}")), unit="reqps", w=8)

    return {
        "annotations": {"list": [{
            "builtIn": 1,
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True,
            "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts",
            "type": "dashboard",
        }]},
        "description": "stitchd: fleet savings, cache hit ratios, latency, compile load, "
                       "cache occupancy and errors. Generated by "
                       "deploy/grafana/generate_dashboard.py.",
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [],
        "panels": d.panels,
        "refresh": "1m",
        "schemaVersion": 39,
        "tags": ["stitchd"],
        "templating": {"list": [
            {
                "name": "datasource",
                "label": "Data source",
                "type": "datasource",
                "query": "prometheus",
                "current": {},
                "hide": 0,
                "includeAll": False,
                "multi": False,
                "options": [],
                "refresh": 1,
                "regex": "",
            },
            {
                "name": "instance",
                "label": "Instance",
                "type": "query",
                "datasource": DATASOURCE,
                "definition": "label_values(stitch_build_info, instance)",
                "query": "label_values(stitch_build_info, instance)",
                "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
                "hide": 0,
                "includeAll": True,
                "allValue": ".*",
                "multi": True,
                "options": [],
                "refresh": 2,
                "regex": "",
                "sort": 1,
            },
        ]},
        "time": {"from": "now-24h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": "stitchd",
        "uid": "stitchd-fleet",
        "version": 1,
        "weekStart": "",
    }


def render():
    return json.dumps(build(), indent=2) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stdout", action="store_true",
                        help="print the dashboard instead of writing " + OUTPUT.name)
    args = parser.parse_args()
    text = render()
    if args.stdout:
        sys.stdout.write(text)
    else:
        OUTPUT.write_text(text)
        print("wrote", OUTPUT)


if __name__ == "__main__":
    main()
