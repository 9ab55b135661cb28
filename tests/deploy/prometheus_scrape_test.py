#!/usr/bin/env python3
"""A real Prometheus scrapes a real stitchd and evaluates the recording rules: the GPU-hours
saved that the dashboard's panels show equal the daemon's own totals.

  prometheus_scrape_test.py --source-dir DIR --stitchd PATH --demo-job PATH --prometheus PATH

A demo job (an XLA job, so its savings are priced against the XLA model) compiles a model's
subgraphs on the daemon and reports 100 steps of usage; Prometheus (Debian's package) scrapes
the daemon every second with deploy/prometheus/rules loaded; the test queries its HTTP API
for the raw counter, the recording rule and every dashboard panel expression built on it.
Standard library only; a missing binary is a failure, not a skip.
"""

import argparse
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

MODEL = "testdata/corpus/hlo/real_models/mobilenet_v2_pytorchxla_train_bs96.hlo"
SAVED = "stitch_gpu_seconds_saved_total"


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, predicate, timeout=90):
    end = time.time() + timeout
    while time.time() < end:
        value = predicate()
        if value is not None:
            return value
        time.sleep(0.25)
    fail("timed out waiting for " + what)


def get(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def daemon_saved(metrics_url):
    """The daemon's savings counters by baseline label, from its /metrics page."""
    values = {}
    for line in get(metrics_url).splitlines():
        if line.startswith(SAVED + "{"):
            labels, value = line.rsplit(" ", 1)
            values[labels[len(SAVED):]] = float(value)
    return values


def query(prometheus_url, expr):
    """The sum of an instant query's values, or None while it has no result."""
    url = prometheus_url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    body = json.loads(get(url))
    if body.get("status") != "success":
        fail("query %r: %s" % (expr, body))
    result = body["data"]["result"]
    if not result:
        return None
    return sum(float(r["value"][1]) for r in result)


def dashboard_exprs(source_dir):
    """Every dashboard panel query that reads the cumulative savings."""
    dashboard = json.loads((source_dir / "deploy/grafana/stitchd-dashboard.json").read_text())
    exprs = []

    def visit(panels):
        for panel in panels:
            visit(panel.get("panels", []))
            for target in panel.get("targets", []):
                expr = target.get("expr", "")
                if "stitch_gpu_hours_saved:sum" in expr:
                    exprs.append(expr.replace("$instance", ".*"))

    visit(dashboard.get("panels", []))
    return exprs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source-dir", required=True, type=pathlib.Path)
    parser.add_argument("--stitchd", required=True)
    parser.add_argument("--demo-job", required=True)
    parser.add_argument("--prometheus", required=True)
    args = parser.parse_args()
    for name, path in (("stitchd", args.stitchd), ("demo job", args.demo_job),
                       ("prometheus", args.prometheus)):
        if not os.access(path, os.X_OK):
            fail("%s not found at %r (install Debian's prometheus package: scripts/setup)"
                 % (name, path))

    with tempfile.TemporaryDirectory(prefix="stitchd-prom-") as tmp:
        tmp = pathlib.Path(tmp)
        daemon = subprocess.Popen(
            [args.stitchd, "--data-dir", str(tmp / "data"), "--socket", str(tmp / "s.sock"),
             "--grpc-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
             "--workers", "2", "--log-level", "warn"],
            stdout=open(tmp / "stitchd.log", "w"), stderr=subprocess.STDOUT)
        prometheus = None
        try:
            info_path = tmp / "data" / "stitchd.json"

            def read_info():
                try:
                    info = json.loads(info_path.read_text())
                    return info if info.get("pid") == daemon.pid else None
                except (OSError, ValueError):
                    return None

            info = wait_for("stitchd to serve", read_info)
            metrics_port = info["metrics_port"]
            job = subprocess.run(
                [args.demo_job, str(args.source_dir / MODEL), "--daemon",
                 "unix://" + str(tmp / "s.sock"), "--steps", "100"],
                capture_output=True, text=True, timeout=600)
            if job.returncode != 0:
                fail("demo job: " + job.stdout + job.stderr)
            saved = daemon_saved("http://127.0.0.1:%d/metrics" % metrics_port)
            total = sum(saved.values())
            xla = '{baseline="xla",basis="modeled"}'
            if saved.get(xla, 0) <= 0 or total != saved[xla]:
                fail("the XLA job's savings should all be under %s (it timed nothing): %r"
                     % (xla, saved))
            print("PASS daemon saved %.6g GPU-s, all against the XLA model" % total)

            web_port = free_port()
            config = tmp / "prometheus.yml"
            rules = sorted(str(p) for p in (args.source_dir / "deploy/prometheus/rules").glob("*.yml"))
            config.write_text(
                "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                "rule_files: %s\n"
                "scrape_configs:\n"
                "  - job_name: stitchd\n"
                "    static_configs: [{targets: ['127.0.0.1:%d']}]\n" % (json.dumps(rules), metrics_port))
            prometheus = subprocess.Popen(
                [args.prometheus, "--config.file=" + str(config),
                 "--storage.tsdb.path=" + str(tmp / "tsdb"),
                 "--web.listen-address=127.0.0.1:%d" % web_port],
                stdout=open(tmp / "prometheus.log", "w"), stderr=subprocess.STDOUT)
            url = "http://127.0.0.1:%d" % web_port
            wait_for("Prometheus to be ready", lambda: True if _ready(url) else None)

            scraped = wait_for("the first scrape", lambda: query(url, "sum(%s)" % SAVED))
            if abs(scraped - total) > 1e-9 * max(1.0, total):
                fail("Prometheus has %r GPU-s saved, the daemon %r" % (scraped, total))
            print("PASS Prometheus scraped the same total")

            hours = wait_for("the recording rule",
                             lambda: query(url, "sum(job:stitch_gpu_hours_saved:sum)"))
            if abs(hours * 3600 - total) > 1e-9 * max(1.0, total):
                fail("job:stitch_gpu_hours_saved:sum is %r h, the daemon saved %r s" % (hours, total))
            by_baseline = query(url, 'sum(job:stitch_gpu_hours_saved:sum{baseline="xla"})')
            if by_baseline is None or abs(by_baseline - hours) > 1e-12 * max(1.0, hours):
                fail("the recording rule lost the baseline label: %r" % by_baseline)
            print("PASS the recording rule gives %.6g GPU-h, the daemon's total" % hours)

            exprs = dashboard_exprs(args.source_dir)
            if not exprs:
                fail("no dashboard panel shows job:stitch_gpu_hours_saved:sum")
            for expr in exprs:
                shown = query(url, expr)
                if shown is None or abs(shown - hours) > 1e-12 * max(1.0, hours):
                    fail("dashboard query %r shows %r, expected %r" % (expr, shown, hours))
            print("PASS %d dashboard panel queries show the same GPU-hours" % len(exprs))
        finally:
            for process in (prometheus, daemon):
                if process is not None and process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    try:
                        process.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        process.kill()
    print("all checks passed")


def _ready(url):
    try:
        return get(url + "/-/ready").strip() != ""
    except OSError:
        return False


if __name__ == "__main__":
    main()
