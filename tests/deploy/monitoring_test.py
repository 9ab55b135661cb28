#!/usr/bin/env python3
"""Checks the monitoring kit in deploy/prometheus and deploy/grafana.

  monitoring_test.py --source-dir DIR --stitchd PATH --promtool PATH

- promtool accepts the scrape configuration (and its Kubernetes example), both rule files and
  the rule unit tests, which all pass;
- every alert has a unit test in which it fires and one in which it does not, every recording
  rule's value is tested, and the rules follow the naming and labelling conventions;
- the Grafana dashboard is what its generator writes, is valid, and every panel has a unique
  id and a title;
- every metric the rules, their tests and the dashboard query is one a real stitchd exports
  (read from its /metrics page) or a recording rule, so renaming a metric breaks this test.

Needs promtool (Debian's prometheus package) and PyYAML (python3-yaml); a missing one is a
failure, not a skip. Standard library otherwise.
"""

import argparse
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from deploy_checks import CheckFailed, CheckRunner

# Series Prometheus itself writes for every target; the alerts may use them.
SCRAPE_SERIES = {"up"}

# Words of PromQL that are neither functions nor metric names.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
            "unless", "offset", "bool", "inf", "nan"}
# Keywords that may be followed by a parenthesised list of label names.
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}

TOKEN = re.compile(r"""
    (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<var>\$\{[^}]*\}|\$\w+)
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+(?![\w.]))
  | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<space>\s+)
  | (?P<other>.)
""", re.X | re.S)




def tokens(expr):
    out = []
    for m in TOKEN.finditer(expr):
        kind = m.lastgroup
        if kind != "space":
            out.append((kind, m.group()))
    return out


def metric_names(expr):
    """The metric names a PromQL expression selects (recording rule names included)."""
    toks = tokens(expr)
    names = set()
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        if kind == "other" and text in "[{":
            # Label matchers and range or subquery durations: nothing in them is a metric but
            # a {__name__="..."} matcher.
            close = "]" if text == "[" else "}"
            start = i
            while i < len(toks) and toks[i] != ("other", close):
                i += 1
            inner = toks[start + 1:i]
            for j in range(len(inner) - 2):
                if inner[j] == ("ident", "__name__") and inner[j + 1] == ("other", "=") \
                        and inner[j + 2][0] == "string":
                    names.add(inner[j + 2][1][1:-1])
            i += 1
            continue
        if kind == "ident":
            nxt = toks[i + 1] if i + 1 < len(toks) else (None, None)
            word = text.lower()
            if word in LABEL_LIST_KEYWORDS and nxt == ("other", "("):
                while i < len(toks) and toks[i] != ("other", ")"):
                    i += 1
            elif word in KEYWORDS:
                pass
            elif nxt == ("other", "(") or (
                    nxt[0] == "ident" and nxt[1].lower() in ("by", "without")):
                pass  # a function or an aggregation
            else:
                names.add(text)
        i += 1
    return names


def series_name(selector):
    """The metric name of a promtool input series such as 'up{job="x"}'."""
    m = re.match(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", selector)
    return m.group(1) if m else None


class Runner(CheckRunner):
    def __init__(self, args):
        super().__init__()
        self.source = pathlib.Path(args.source_dir).resolve()
        self.prometheus = self.source / "deploy" / "prometheus"
        self.grafana = self.source / "deploy" / "grafana"
        self.stitchd = args.stitchd
        self.promtool = args.promtool
        self.yaml = None
        self.exported = None

    # --- bookkeeping ---------------------------------------------------------------------

    def load_yaml(self, path):
        with open(path) as f:
            return self.yaml.safe_load(f)

    def rule_files(self):
        return sorted((self.prometheus / "rules").glob("*.yml"))

    def test_files(self):
        return sorted((self.prometheus / "tests").glob("*.yml"))

    def rules(self):
        """(file, group, rule) for every rule."""
        out = []
        for path in self.rule_files():
            for group in self.load_yaml(path).get("groups") or []:
                for rule in group.get("rules") or []:
                    out.append((path, group, rule))
        return out

    def recorded(self):
        return {r["record"] for _, _, r in self.rules() if "record" in r}

    # --- tools ---------------------------------------------------------------------------

    def require_tools(self):
        problems = []
        tool = self.promtool
        found = shutil.which(tool) if tool and not tool.endswith("-NOTFOUND") else None
        if not found:
            problems.append(
                "promtool not found (%r). It comes with Debian's prometheus package, which "
                "scripts/setup installs; re-run cmake afterwards so it finds it." % tool)
        else:
            self.promtool = found
        try:
            import yaml
            self.yaml = yaml
        except ImportError:
            problems.append("PyYAML is missing for %s: install python3-yaml (scripts/setup)."
                            % sys.executable)
        if not os.access(self.stitchd, os.X_OK):
            problems.append("stitchd is not an executable: %s" % self.stitchd)
        if problems:
            raise CheckFailed("\n".join(problems))

    def run_promtool(self, *args):
        cmd = [self.promtool, *args]
        p = subprocess.run(cmd, cwd=self.source, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=120)
        if p.returncode != 0:
            raise CheckFailed("$ %s\nexit status %d\n%s" % (" ".join(cmd), p.returncode, p.stdout))
        return p.stdout

    def rel(self, path):
        return str(pathlib.Path(path).relative_to(self.source))

    # --- promtool ------------------------------------------------------------------------

    def check_config(self):
        self.run_promtool("check", "config", self.rel(self.prometheus / "prometheus.yml"))

    def check_rules(self):
        files = self.rule_files()
        if len(files) < 2:
            raise CheckFailed("expected the recording and alert rule files in %s"
                              % self.rel(self.prometheus / "rules"))
        self.run_promtool("check", "rules", *[self.rel(p) for p in files])

    def check_rule_tests(self):
        files = self.test_files()
        if not files:
            raise CheckFailed("no rule unit tests in %s" % self.rel(self.prometheus / "tests"))
        self.run_promtool("test", "rules", *[self.rel(p) for p in files])

    def check_kubernetes_example(self):
        """Uncomments the Kubernetes example in prometheus.yml in place of static_configs."""
        lines = (self.prometheus / "prometheus.yml").read_text().splitlines()
        out, skipping, uncommenting, found = [], False, False, False
        for line in lines:
            if line == "    static_configs:":
                skipping = True
                continue
            if skipping and line.startswith("      "):
                continue
            skipping = False
            if line == "    # kubernetes_sd_configs:":
                uncommenting = found = True
            if uncommenting and line.startswith("    # "):
                line = "    " + line[len("    # "):]
            out.append(line)
        if not found:
            raise CheckFailed("prometheus.yml has no commented '# kubernetes_sd_configs:' example")
        text = "\n".join(out) + "\n"
        config = self.yaml.safe_load(text)
        job = next(j for j in config["scrape_configs"] if j["job_name"] == "stitchd")
        sd = job.get("kubernetes_sd_configs") or [{}]
        keep = [r for r in job.get("relabel_configs") or [] if r.get("action") == "keep"]
        if sd[0].get("role") != "pod" or not any(
                r.get("source_labels") == ["__meta_kubernetes_pod_label_app_kubernetes_io_name"]
                and r.get("regex") == "stitchd" for r in keep):
            raise CheckFailed("the Kubernetes example must discover pods and keep those "
                              "labelled app.kubernetes.io/name=stitchd")
        with tempfile.TemporaryDirectory(prefix="stitch-monitoring-") as tmp:
            # The rule files are resolved next to the configuration.
            shutil.copytree(self.prometheus / "rules", pathlib.Path(tmp) / "rules")
            path = pathlib.Path(tmp) / "prometheus.yml"
            path.write_text(text)
            try:
                self.run_promtool("check", "config", str(path))
            except CheckFailed as e:
                if "field kubernetes_sd_configs not found" not in str(e):
                    raise
                # Debian builds Prometheus without Kubernetes discovery; check the rest (the
                # relabelling) with a static target in its place.
                print("  (this promtool has no Kubernetes discovery; checking the example's "
                      "relabel_configs with a static target)")
                start = text.index("    kubernetes_sd_configs:")
                end = text.index("    relabel_configs:")
                path.write_text(text[:start] + "    static_configs:\n"
                                "      - targets: [\"placeholder:9464\"]\n" + text[end:])
                self.run_promtool("check", "config", str(path))

    # --- rule conventions and coverage ---------------------------------------------------

    def check_rule_conventions(self):
        problems = []
        for path, group, rule in self.rules():
            where = "%s: %s" % (self.rel(path), rule.get("record") or rule.get("alert"))
            if "record" in rule:
                if not re.fullmatch(r"[a-z][a-z_]*:[a-z][a-z0-9_]*:[a-z0-9_]+", rule["record"]):
                    problems.append("%s: a recording rule is named level:metric:operations"
                                    % where)
            else:
                severity = (rule.get("labels") or {}).get("severity")
                if severity not in ("critical", "warning", "info"):
                    problems.append("%s: severity label is %r" % (where, severity))
                annotations = rule.get("annotations") or {}
                for key in ("summary", "description"):
                    if not str(annotations.get(key, "")).strip():
                        problems.append("%s: no %s annotation" % (where, key))
        if problems:
            raise CheckFailed("\n".join(problems))

    def check_alert_coverage(self):
        alerts = [r["alert"] for _, _, r in self.rules() if "alert" in r]
        fires, quiet, unknown = set(), set(), []
        for path in self.test_files():
            for test in self.load_yaml(path).get("tests") or []:
                for case in test.get("alert_rule_test") or []:
                    name = case.get("alertname")
                    if name not in alerts:
                        unknown.append("%s: tests alert %r, which no rule file defines"
                                       % (self.rel(path), name))
                    (fires if case.get("exp_alerts") else quiet).add(name)
        problems = unknown
        for name in alerts:
            if name not in fires:
                problems.append("alert %s has no unit test in which it fires" % name)
            if name not in quiet:
                problems.append("alert %s has no unit test in which it stays quiet" % name)
        if not alerts:
            problems.append("no alerts found in %s" % self.rel(self.prometheus / "rules"))
        if problems:
            raise CheckFailed("\n".join(problems))

    def check_recording_coverage(self):
        """Every recording rule's value is tested, directly or through a rule built on it."""
        exprs = {r["record"]: r["expr"] for _, _, r in self.rules() if "record" in r}
        covered = set()
        for path in self.test_files():
            for test in self.load_yaml(path).get("tests") or []:
                for case in test.get("promql_expr_test") or []:
                    covered |= metric_names(case["expr"]) & exprs.keys()
        pending = list(covered)
        while pending:
            for name in metric_names(exprs[pending.pop()]) & exprs.keys():
                if name not in covered:
                    covered.add(name)
                    pending.append(name)
        missing = sorted(exprs.keys() - covered)
        if missing:
            raise CheckFailed("recording rules without a promql_expr_test of their value:\n  "
                              + "\n  ".join(missing))

    # --- the daemon's metrics ------------------------------------------------------------

    def read_exported(self):
        """Starts stitchd, reads /metrics and returns {family: type} from its TYPE lines."""
        tmp = tempfile.mkdtemp(prefix="stitch-monitoring-")
        info_path = pathlib.Path(tmp) / "stitchd.json"
        log_path = pathlib.Path(tmp) / "stitchd.log"
        cmd = [self.stitchd, "--data-dir", tmp, "--socket", os.path.join(tmp, "s.sock"),
               "--grpc-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
               "--log-level", "warn"]
        with open(log_path, "w") as log:
            try:
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            except OSError as e:
                shutil.rmtree(tmp, ignore_errors=True)
                raise CheckFailed("cannot start %s: %s" % (self.stitchd, e))
        try:
            deadline = time.monotonic() + 120
            info = None
            while info is None:
                if proc.poll() is not None:
                    raise CheckFailed("stitchd exited with status %d before serving:\n$ %s\n%s"
                                      % (proc.returncode, " ".join(cmd), log_path.read_text()))
                if time.monotonic() > deadline:
                    raise CheckFailed("stitchd did not write %s within 120 s:\n%s"
                                      % (info_path, log_path.read_text()))
                try:
                    info = json.loads(info_path.read_text())
                except (FileNotFoundError, json.JSONDecodeError):
                    time.sleep(0.1)
            url = "http://127.0.0.1:%d/metrics" % info["metrics_port"]
            with urllib.request.urlopen(url, timeout=30) as response:
                page = response.read().decode()
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            shutil.rmtree(tmp, ignore_errors=True)
        families = {}
        for line in page.splitlines():
            m = re.match(r"# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)\s*$", line)
            if m:
                families[m.group(1)] = m.group(2)
        if not families:
            raise CheckFailed("no # TYPE lines on %s:\n%s" % (url, page[:2000]))
        return families

    def exported_series_names(self):
        names = set()
        for family, kind in self.exported.items():
            if kind == "histogram":
                names |= {family + "_bucket", family + "_sum", family + "_count"}
            elif kind == "summary":
                names |= {family, family + "_sum", family + "_count"}
            elif kind == "counter" and not family.endswith("_total"):
                names |= {family, family + "_total"}
            else:
                names.add(family)
        return names

    def check_daemon_metrics(self):
        self.exported = self.read_exported()
        print("  stitchd exports %d metric families: %s"
              % (len(self.exported), ", ".join(sorted(self.exported))))

    def unknown_names(self, names, allowed):
        return sorted(n for n in names if n not in allowed)

    def check_rule_metrics(self):
        if self.exported is None:
            raise CheckFailed("no metric list: stitchd could not be scraped")
        exported = self.exported_series_names()
        recorded = self.recorded()
        allowed = exported | recorded | SCRAPE_SERIES
        problems = []
        for path, _, rule in self.rules():
            bad = self.unknown_names(metric_names(rule["expr"]), allowed)
            if bad:
                problems.append("%s: %s uses %s, which stitchd does not export"
                                % (self.rel(path), rule.get("record") or rule.get("alert"),
                                   ", ".join(bad)))
        for path in self.test_files():
            for test in self.load_yaml(path).get("tests") or []:
                for series in test.get("input_series") or []:
                    name = series_name(series["series"])
                    if name not in exported | SCRAPE_SERIES:
                        problems.append("%s: input series %s is not a metric stitchd exports"
                                        % (self.rel(path), name))
        if problems:
            raise CheckFailed("\n".join(problems))

    # --- the dashboard -------------------------------------------------------------------

    def check_dashboard_generated(self):
        generator = self.grafana / "generate_dashboard.py"
        p = subprocess.run([sys.executable, str(generator), "--stdout"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        if p.returncode != 0:
            raise CheckFailed("%s failed:\n%s" % (self.rel(generator), p.stderr))
        committed = (self.grafana / "stitchd-dashboard.json").read_text()
        if p.stdout != committed:
            raise CheckFailed("deploy/grafana/stitchd-dashboard.json is not what %s writes; "
                              "run it and commit the result" % self.rel(generator))

    def dashboard(self):
        path = self.grafana / "stitchd-dashboard.json"
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise CheckFailed("%s is not valid JSON: %s" % (self.rel(path), e))

    @staticmethod
    def all_panels(panels):
        for panel in panels:
            yield panel
            yield from Runner.all_panels(panel.get("panels") or [])

    def check_dashboard_structure(self):
        d = self.dashboard()
        problems = []
        if not isinstance(d.get("schemaVersion"), int) or d["schemaVersion"] < 36:
            problems.append("schemaVersion %r is older than Grafana 9" % d.get("schemaVersion"))
        variables = {v.get("name"): v for v in (d.get("templating") or {}).get("list") or []}
        ds = variables.get("datasource")
        if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
            problems.append("no `datasource` variable choosing a Prometheus data source")
        if "instance" not in variables:
            problems.append("no `instance` variable")
        ids = {}
        panels = list(self.all_panels(d.get("panels") or []))
        if not panels:
            problems.append("no panels")
        for panel in panels:
            title = panel.get("title")
            if not isinstance(title, str) or not title.strip():
                problems.append("panel %r has no title" % panel.get("id"))
            pid = panel.get("id")
            if not isinstance(pid, int):
                problems.append("panel %r has no numeric id" % title)
            elif pid in ids:
                problems.append("panels %r and %r share id %d" % (ids[pid], title, pid))
            else:
                ids[pid] = title
            if panel.get("type") != "row":
                uid = (panel.get("datasource") or {}).get("uid")
                if uid != "${datasource}":
                    problems.append("panel %r does not use the datasource variable" % title)
                if not panel.get("targets"):
                    problems.append("panel %r has no queries" % title)
                for t in panel.get("targets") or []:
                    if not str(t.get("expr", "")).strip():
                        problems.append("panel %r has a query without an expr" % title)
        if problems:
            raise CheckFailed("\n".join(problems))

    def check_dashboard_metrics(self):
        if self.exported is None:
            raise CheckFailed("no metric list: stitchd could not be scraped")
        allowed = self.exported_series_names() | self.recorded()
        d = self.dashboard()
        problems = []
        used = set()
        for panel in self.all_panels(d.get("panels") or []):
            for t in panel.get("targets") or []:
                names = metric_names(t.get("expr", ""))
                used |= names
                bad = self.unknown_names(names, allowed)
                if bad:
                    problems.append("panel %r queries %s: neither exported by stitchd nor a "
                                    "recording rule" % (panel.get("title"), ", ".join(bad)))
                if not names:
                    problems.append("panel %r has a query with no metric: %s"
                                    % (panel.get("title"), t.get("expr")))
        for v in (d.get("templating") or {}).get("list") or []:
            if v.get("type") != "query":
                continue
            query = v.get("query")
            query = query.get("query", "") if isinstance(query, dict) else str(query)
            m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query)
            names = metric_names(m.group(1)) if m else metric_names(query)
            bad = self.unknown_names(names, allowed)
            if bad:
                problems.append("variable %r queries %s" % (v.get("name"), ", ".join(bad)))
        if problems:
            raise CheckFailed("\n".join(problems))
        print("  the dashboard queries %d metrics" % len(used))

    # --- all -----------------------------------------------------------------------------

    def run(self):
        if not self.check("tools (promtool, PyYAML, stitchd)", self.require_tools):
            return 1
        self.check("promtool check config deploy/prometheus/prometheus.yml", self.check_config)
        self.check("promtool check config on the Kubernetes example",
                   self.check_kubernetes_example)
        self.check("promtool check rules deploy/prometheus/rules/*.yml", self.check_rules)
        self.check("promtool test rules deploy/prometheus/tests/*.yml", self.check_rule_tests)
        self.check("rule names, severities and annotations", self.check_rule_conventions)
        self.check("every alert fires and stays quiet in a unit test", self.check_alert_coverage)
        self.check("every recording rule's value is unit-tested", self.check_recording_coverage)
        self.check("scrape a real stitchd's /metrics", self.check_daemon_metrics)
        self.check("rules and their tests use only metrics stitchd exports",
                   self.check_rule_metrics)
        self.check("the dashboard is what generate_dashboard.py writes",
                   self.check_dashboard_generated)
        self.check("dashboard panels, ids, titles and variables", self.check_dashboard_structure)
        self.check("the dashboard queries only exported metrics and recording rules",
                   self.check_dashboard_metrics)
        return self.summary()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", required=True, help="the repository root")
    parser.add_argument("--stitchd", required=True, help="the stitchd binary to scrape")
    parser.add_argument("--promtool", required=True,
                        help="promtool (from Debian's prometheus package)")
    return Runner(parser.parse_args()).run()


if __name__ == "__main__":
    sys.exit(main())
