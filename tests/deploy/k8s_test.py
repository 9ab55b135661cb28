#!/usr/bin/env python3
"""Checks the Kubernetes manifests in deploy/k8s and the Dockerfile.

  k8s_test.py --source-dir DIR --stitchd PATH --python-tools DIR

- renders the Kustomize base (deploy/k8s) and the cluster overlay (deploy/k8s/overlays/cluster)
  with a loader of its own (no kustomize or kubectl binary): `namespace`, `resources` (files
  and directories) and `patches` by file (strategic merge, with the merge keys of the objects
  used here); a kustomization using anything else fails the test rather than being rendered
  wrongly;
- validates every built-in object, and the example job pod, against the Kubernetes schemas
  offline with kubernetes-validate (strict: unknown fields are errors), for the oldest
  Kubernetes version the manifests support and the newest the tool ships; the Prometheus
  Operator objects (PodMonitor, PrometheusRule) are checked by hand instead;
- checks that the pieces agree: the socket and data paths of the config with the DaemonSet's
  hostPath volumes and the job pod's mount and address, the listen ports with the container,
  Service, probe and PodMonitor ports, the selectors with the pod labels, the overlay's secret
  file paths with the Secret's keys and mount, and in the base and the overlay alike the TLS
  files with their Secret and mount (mutual TLS on, plaintext TCP refused, the files neither
  group-writable nor readable by others, placeholders rather than PEM committed, probes httpGet
  /healthz on the metrics port), the PrometheusRule with deploy/prometheus/rules/*.yml and its
  generator, the grace period with drain_seconds, the memory limit with the cache size, and
  the Dockerfile with the DaemonSet (its CMD listening on every interface of the container, on
  an EXPOSEd port);
- runs the real daemon's parser on both configs (paths moved to a temporary directory): the
  DaemonSet's own args plus --print-config must exit 0, so a misspelt key fails; each config
  without its TLS files must be refused (grpc_require_tls); and each must refuse to start with
  the committed TLS Secret's placeholders in its TLS files.

Needs PyYAML (python3-yaml) for the python3 that runs it, and kubernetes-validate in the
virtualenv whose bin directory --python-tools names (scripts/setup installs both); a missing one
is a failure, not a skip. Standard library otherwise.
"""

import argparse
import copy
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

from deploy_checks import CheckFailed, CheckRunner

# The oldest Kubernetes the manifests are for (the Service's internalTrafficPolicy is GA from
# 1.26), and "latest": the newest schemas kubernetes-validate ships.
KUBERNETES_VERSIONS = ("1.29", "latest")

# The user the image creates and the DaemonSet runs as.
STITCHD_UID = 10001

# The keys of TLS on the gRPC TCP port: on in the base and every overlay, plaintext refused.
TLS_FILE_KEYS = ("tls_cert_file", "tls_key_file", "tls_client_ca_file")
TLS_KEYS = TLS_FILE_KEYS + ("grpc_require_tls",)

# Memory a compile worker may take, on top of the memory cache (for the limit check).
WORKER_BYTES = 256 << 20

# Kinds without a namespace; kustomize's `namespace` leaves them alone.
CLUSTER_SCOPED = {"Namespace", "PriorityClass", "ClusterRole", "ClusterRoleBinding",
                  "CustomResourceDefinition", "StorageClass", "PersistentVolume",
                  "RuntimeClass", "ValidatingWebhookConfiguration",
                  "MutatingWebhookConfiguration"}

# Objects of these API groups have no schema in kubernetes-validate; checked by hand.
CRD_GROUPS = {"monitoring.coreos.com"}

# Strategic merge: lists of objects merged by these keys (as the Kubernetes API declares them);
# every other list is replaced by the patch's.
MERGE_KEYS = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name",
              "volumes": "name", "env": "name", "volumeMounts": "mountPath",
              "volumeDevices": "devicePath", "imagePullSecrets": "name", "hostAliases": "ip"}

KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
KUSTOMIZATION_KEYS = {"apiVersion", "kind", "namespace", "resources", "patches"}

# Runs inside the --python-tools virtualenv: validates the objects of a JSON file and prints
# one JSON result per object and version.
VALIDATE_SCRIPT = r"""
import json, sys
from kubernetes_validate import utils
objects = json.load(open(sys.argv[1]))
versions = [utils.major_minor(utils.latest_version()) if v == "latest" else v
            for v in sys.argv[2:]]
out = []
for obj in objects:
    for version in versions:
        r = {"kind": obj.get("kind"), "name": (obj.get("metadata") or {}).get("name"),
             "version": version}
        try:
            r["validated"] = utils.validate(obj, version, strict=True)
        except utils.ValidationError as e:
            r["error"] = "%s: %s" % (".".join(str(p) for p in e.path) or "(top)", e.message)
        except utils.SchemaNotFoundError as e:
            r["error"] = e.message
        except utils.VersionNotSupportedError as e:
            r["error"] = e.message
        out.append(r)
json.dump(out, sys.stdout)
"""




def group_of(api_version):
    return api_version.split("/")[0] if "/" in api_version else ""


def strategic_merge(base, patch):
    """Applies a strategic-merge patch to base (a dict) in place."""
    for key, value in patch.items():
        if key.startswith("$"):
            raise CheckFailed("patch directive %r: the test's loader does not implement it" % key)
        if value is None:
            base.pop(key, None)
        elif key not in base:
            base[key] = copy.deepcopy(value)
        elif isinstance(value, dict) and isinstance(base[key], dict):
            strategic_merge(base[key], value)
        elif isinstance(value, list) and isinstance(base[key], list):
            base[key] = merge_list(key, base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def merge_list(key, base, patch):
    merge_key = MERGE_KEYS.get(key)
    if key == "ports" and all(isinstance(p, dict) for p in base + patch):
        # Container ports merge by containerPort, Service ports by port.
        merge_key = "containerPort" if any("containerPort" in p for p in base + patch) else "port"
    if not merge_key or not all(isinstance(p, dict) and merge_key in p for p in base + patch):
        return copy.deepcopy(patch)
    out = copy.deepcopy(base)
    for item in patch:
        match = [b for b in out if b[merge_key] == item[merge_key]]
        if match:
            strategic_merge(match[0], item)
        else:
            out.append(copy.deepcopy(item))
    return out


def container(pod_spec, name):
    for c in pod_spec.get("containers") or []:
        if c.get("name") == name:
            return c
    raise CheckFailed("no container %r in the pod spec" % name)


def parse_listen(text, what):
    m = re.fullmatch(r"(\[[^\]]*\]|[^:\[\]]*):(\d+)", str(text))
    if not m:
        raise CheckFailed("%s is %r, not host:port" % (what, text))
    return m.group(1), int(m.group(2))


def stitchd_size(value, what):
    """A size as stitchd reads it: an integer with an optional binary unit."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(value))
    units = {"": 0, "b": 0, "k": 10, "kib": 10, "m": 20, "mib": 20, "g": 30, "gib": 30,
             "t": 40, "tib": 40}
    if not m or m.group(2).lower() not in units:
        raise CheckFailed("%s is %r, not a size stitchd reads" % (what, value))
    return int(m.group(1)) << units[m.group(2).lower()]


def quantity(value, what):
    """A Kubernetes memory quantity in bytes."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTPE]i?|[kmMGTPE])?", str(value))
    if not m:
        raise CheckFailed("%s is %r, not a quantity this test reads" % (what, value))
    suffix = m.group(2) or ""
    factor = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
              "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
              "Ei": 2**60}.get(suffix)
    if factor is None:
        raise CheckFailed("%s is %r, not a memory quantity" % (what, value))
    return float(m.group(1)) * factor


def first_difference(got, want):
    """Where two lists of rule groups first differ, in words."""
    for i in range(max(len(got), len(want))):
        g = got[i] if i < len(got) else None
        w = want[i] if i < len(want) else None
        if g == w:
            continue
        if g is None or w is None or g.get("name") != w.get("name"):
            return "group %d is %r, expected %r" % (i + 1, (g or {}).get("name"),
                                                    (w or {}).get("name"))
        for j in range(max(len(g.get("rules") or []), len(w.get("rules") or []))):
            gr = (g.get("rules") or [])[j:j + 1]
            wr = (w.get("rules") or [])[j:j + 1]
            if gr != wr:
                name = (wr or gr)[0].get("alert") or (wr or gr)[0].get("record")
                return "group %s, rule %s" % (w.get("name"), name)
        return "group %s" % w.get("name")
    return "no difference"


def labels_match(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


class Runner(CheckRunner):
    def __init__(self, args):
        super().__init__()
        self.source = pathlib.Path(args.source_dir).resolve()
        self.k8s = self.source / "deploy" / "k8s"
        self.overlay_dir = self.k8s / "overlays" / "cluster"
        self.stitchd = args.stitchd
        self.tools = pathlib.Path(args.python_tools)
        self.tools_python = None
        self.yaml = None
        self.base = None
        self.overlay = None
        self.job_pod = None

    # --- bookkeeping ---------------------------------------------------------------------

    def rel(self, path):
        try:
            return str(pathlib.Path(path).relative_to(self.source))
        except ValueError:
            return str(path)

    def load_all(self, path):
        try:
            with open(path) as f:
                return [d for d in self.yaml.safe_load_all(f) if d is not None]
        except self.yaml.YAMLError as e:
            raise CheckFailed("%s is not valid YAML: %s" % (self.rel(path), e))

    # --- tools ---------------------------------------------------------------------------

    def require_tools(self):
        problems = []
        try:
            import yaml
            self.yaml = yaml
        except ImportError:
            problems.append("PyYAML is missing for %s: install python3-yaml (scripts/setup)."
                            % sys.executable)
        if not os.access(self.stitchd, os.X_OK):
            problems.append("stitchd is not an executable: %s" % self.stitchd)
        for name in ("python", "python3"):
            if os.access(self.tools / name, os.X_OK):
                self.tools_python = str(self.tools / name)
                break
        if self.tools_python is None:
            problems.append("no python in --python-tools %s: run scripts/setup, which creates the "
                            "virtualenv .venv-tools/ with kubernetes-validate" % self.tools)
        else:
            p = subprocess.run([self.tools_python, "-c", "import kubernetes_validate.utils"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=60)
            if p.returncode != 0:
                problems.append("kubernetes-validate is not installed in %s (run "
                                "scripts/setup):\n%s" % (self.tools, p.stdout.strip()))
        if problems:
            raise CheckFailed("\n".join(problems))

    # --- rendering -------------------------------------------------------------------------

    def render(self, directory):
        """The objects `kubectl kustomize DIRECTORY` prints, for the features used here."""
        directory = pathlib.Path(directory)
        path = next((directory / n for n in KUSTOMIZATION_NAMES if (directory / n).is_file()),
                    None)
        if path is None:
            raise CheckFailed("no kustomization.yaml in %s" % self.rel(directory))
        docs = self.load_all(path)
        if len(docs) != 1 or not isinstance(docs[0], dict):
            raise CheckFailed("%s: expected one mapping" % self.rel(path))
        k = docs[0]
        unknown = sorted(set(k) - KUSTOMIZATION_KEYS)
        if unknown:
            raise CheckFailed("%s uses %s, which the test's loader does not implement (it reads "
                              "%s)" % (self.rel(path), ", ".join(unknown),
                                       ", ".join(sorted(KUSTOMIZATION_KEYS))))
        if k.get("kind", "Kustomization") != "Kustomization" or \
                k.get("apiVersion", "kustomize.config.k8s.io/v1beta1") != \
                "kustomize.config.k8s.io/v1beta1":
            raise CheckFailed("%s: not a kustomize.config.k8s.io/v1beta1 Kustomization"
                              % self.rel(path))
        objects = []
        for entry in k.get("resources") or []:
            target = (directory / entry).resolve()
            if target.is_dir():
                objects.extend(self.render(target))
            elif target.is_file():
                objects.extend(self.load_all(target))
            else:
                raise CheckFailed("%s: resource %r does not exist" % (self.rel(path), entry))
        for entry in k.get("patches") or []:
            if not isinstance(entry, dict) or set(entry) != {"path"}:
                raise CheckFailed("%s: patch %r: the test's loader implements only patches "
                                  "given by `path`" % (self.rel(path), entry))
            patch_path = directory / entry["path"]
            if not patch_path.is_file():
                raise CheckFailed("%s: patch %s does not exist" % (self.rel(path), entry["path"]))
            for patch in self.load_all(patch_path):
                meta = patch.get("metadata") or {}
                matches = [o for o in objects if o.get("apiVersion") == patch.get("apiVersion")
                           and o.get("kind") == patch.get("kind")
                           and o["metadata"].get("name") == meta.get("name")
                           and ("namespace" not in meta
                                or o["metadata"].get("namespace") == meta["namespace"])]
                if len(matches) != 1:
                    raise CheckFailed("%s: the patch of %s %s matches %d objects, not one"
                                      % (self.rel(patch_path), patch.get("kind"),
                                         meta.get("name"), len(matches)))
                strategic_merge(matches[0], patch)
        namespace = k.get("namespace")
        if namespace:
            for o in objects:
                if o.get("kind") == "Namespace":
                    if o["metadata"]["name"] != namespace:
                        raise CheckFailed("%s: Namespace %s differs from namespace: %s"
                                          % (self.rel(path), o["metadata"]["name"], namespace))
                elif o.get("kind") not in CLUSTER_SCOPED:
                    o["metadata"]["namespace"] = namespace
        seen = set()
        for o in objects:
            ident = (o.get("kind"), o["metadata"].get("namespace"), o["metadata"].get("name"))
            if ident in seen:
                raise CheckFailed("%s: %s %s/%s is defined twice" % ((self.rel(path),) + ident))
            seen.add(ident)
        return objects

    def render_all(self):
        self.base = self.render(self.k8s)
        self.overlay = self.render(self.overlay_dir)
        pods = self.load_all(self.k8s / "examples" / "job-pod.yaml")
        if len(pods) != 1 or pods[0].get("kind") != "Pod":
            raise CheckFailed("deploy/k8s/examples/job-pod.yaml must hold one Pod")
        self.job_pod = pods[0]
        for name, objects in (("base", self.base), ("overlays/cluster", self.overlay)):
            print("  %s: %s" % (name, ", ".join("%s/%s" % (o["kind"], o["metadata"]["name"])
                                                for o in objects)))

    def find(self, objects, kind, name=None):
        found = [o for o in objects if o.get("kind") == kind
                 and (name is None or o["metadata"].get("name") == name)]
        if len(found) != 1:
            raise CheckFailed("expected one %s%s, found %d"
                              % (kind, " " + name if name else "", len(found)))
        return found[0]

    def config_text(self, objects):
        cm = self.find(objects, "ConfigMap", "stitchd")
        text = (cm.get("data") or {}).get("stitchd.yaml")
        if not isinstance(text, str):
            raise CheckFailed("ConfigMap stitchd has no data key stitchd.yaml")
        return text

    def config(self, objects):
        try:
            config = self.yaml.safe_load(self.config_text(objects))
        except self.yaml.YAMLError as e:
            raise CheckFailed("stitchd.yaml in the ConfigMap is not valid YAML: %s" % e)
        if not isinstance(config, dict):
            raise CheckFailed("stitchd.yaml in the ConfigMap is not a mapping")
        return config

    def pod_spec(self, objects):
        return self.find(objects, "DaemonSet", "stitchd")["spec"]["template"]["spec"]

    def variants(self):
        return (("base", self.base), ("overlays/cluster", self.overlay))

    # --- schemas ---------------------------------------------------------------------------

    def check_schemas(self):
        objects, names, crds = [], [], 0
        for variant, rendered in self.variants():
            for o in rendered:
                if group_of(o.get("apiVersion", "")) in CRD_GROUPS:
                    crds += 1
                    continue
                objects.append(o)
                names.append(variant)
        objects.append(self.job_pod)
        names.append("examples/job-pod.yaml")
        with tempfile.TemporaryDirectory(prefix="stitch-k8s-") as tmp:
            path = pathlib.Path(tmp) / "objects.json"
            path.write_text(json.dumps(objects))
            p = subprocess.run([self.tools_python, "-c", VALIDATE_SCRIPT, str(path),
                                *KUBERNETES_VERSIONS], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=240)
        if p.returncode != 0:
            raise CheckFailed("kubernetes-validate did not run:\n%s" % p.stderr)
        results = json.loads(p.stdout)
        per_object = len(KUBERNETES_VERSIONS)
        problems, versions = [], set()
        for i, r in enumerate(results):
            where = "%s: %s/%s (Kubernetes %s)" % (names[i // per_object], r["kind"], r["name"],
                                                   r["version"])
            if "error" in r:
                problems.append("%s: %s" % (where, r["error"]))
            else:
                versions.add(r["validated"])
        if problems:
            raise CheckFailed("\n".join(problems))
        print("  %d objects valid against the Kubernetes %s schemas (strict); %d Prometheus "
              "Operator objects checked by hand" % (len(objects), " and ".join(sorted(versions)),
                                                      crds))

    def check_operator_objects(self):
        problems = []
        for variant, objects in self.variants():
            pm = self.find(objects, "PodMonitor", "stitchd")
            rule = self.find(objects, "PrometheusRule", "stitchd")
            for o in (pm, rule):
                if o.get("apiVersion") != "monitoring.coreos.com/v1":
                    problems.append("%s: %s has apiVersion %r" % (variant, o["kind"],
                                                                  o.get("apiVersion")))
                if set(o) - {"apiVersion", "kind", "metadata", "spec"}:
                    problems.append("%s: %s has unexpected top-level keys %s"
                                    % (variant, o["kind"], sorted(set(o) - {
                                        "apiVersion", "kind", "metadata", "spec"})))
            spec = pm.get("spec") or {}
            allowed = {"jobLabel", "selector", "namespaceSelector", "podMetricsEndpoints",
                       "podTargetLabels", "sampleLimit"}
            if set(spec) - allowed:
                problems.append("%s: PodMonitor spec has unknown keys %s"
                                % (variant, sorted(set(spec) - allowed)))
            if set(spec.get("selector") or {}) != {"matchLabels"}:
                problems.append("%s: PodMonitor selector must be matchLabels only" % variant)
            endpoints = spec.get("podMetricsEndpoints") or []
            if not endpoints:
                problems.append("%s: PodMonitor has no podMetricsEndpoints" % variant)
            endpoint_keys = {"port", "path", "scheme", "interval", "scrapeTimeout",
                             "relabelings", "metricRelabelings", "honorLabels"}
            for ep in endpoints:
                if set(ep) - endpoint_keys:
                    problems.append("%s: PodMonitor endpoint has unknown keys %s"
                                    % (variant, sorted(set(ep) - endpoint_keys)))
                if not isinstance(ep.get("port"), str):
                    problems.append("%s: PodMonitor endpoint port must name a container port"
                                    % variant)
                for key in ("interval", "scrapeTimeout"):
                    if key in ep and not re.fullmatch(r"(\d+(ms|s|m|h))+", str(ep[key])):
                        problems.append("%s: PodMonitor %s %r is not a duration"
                                        % (variant, key, ep[key]))
                for r in ep.get("relabelings") or []:
                    bad = set(r) - {"sourceLabels", "separator", "targetLabel", "regex",
                                    "modulus", "replacement", "action"}
                    if bad:
                        problems.append("%s: PodMonitor relabeling has unknown keys %s"
                                        % (variant, sorted(bad)))
            names = set()
            for g in (rule.get("spec") or {}).get("groups") or []:
                if g.get("name") in names:
                    problems.append("%s: rule group %r twice" % (variant, g.get("name")))
                names.add(g.get("name"))
                for r in g.get("rules") or []:
                    if ("record" in r) == ("alert" in r) or not str(r.get("expr", "")).strip():
                        problems.append("%s: a rule in group %r needs exactly one of record "
                                        "and alert, and an expr" % (variant, g.get("name")))
            if not names:
                problems.append("%s: the PrometheusRule has no groups" % variant)
        if problems:
            raise CheckFailed("\n".join(problems))

    # --- the PrometheusRule and deploy/prometheus/rules ------------------------------------

    def check_prometheus_rule(self):
        groups = []
        rule_files = sorted((self.source / "deploy" / "prometheus" / "rules").glob("*.yml"))
        if not rule_files:
            raise CheckFailed("no rule files in deploy/prometheus/rules")
        for path in rule_files:
            groups.extend((self.load_all(path)[0] or {}).get("groups") or [])
        problems = []
        for variant, objects in self.variants():
            rendered = self.find(objects, "PrometheusRule", "stitchd")["spec"]["groups"]
            if rendered != groups:
                problems.append("%s: the PrometheusRule differs from %s (%s); run "
                                "deploy/k8s/generate_prometheusrule.py"
                                % (variant, ", ".join(self.rel(p) for p in rule_files),
                                   first_difference(rendered, groups)))
        generator = self.k8s / "generate_prometheusrule.py"
        p = subprocess.run([sys.executable, str(generator), "--stdout"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        if p.returncode != 0:
            problems.append("%s failed:\n%s" % (self.rel(generator), p.stderr))
        elif p.stdout != (self.k8s / "prometheusrule.yaml").read_text():
            problems.append("deploy/k8s/prometheusrule.yaml is not what %s writes; run it and "
                            "commit the result" % self.rel(generator))
        if problems:
            raise CheckFailed("\n".join(problems))
        print("  %d groups from %d rule files" % (len(groups), len(rule_files)))

    # --- paths -------------------------------------------------------------------------------

    def host_path_of(self, pod_spec, ctr, path, what):
        """The hostPath volume mounted in ctr exactly at path, and the mount."""
        volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
        for m in ctr.get("volumeMounts") or []:
            if m["mountPath"].rstrip("/") == path.rstrip("/"):
                v = volumes.get(m["name"])
                if not v or "hostPath" not in v:
                    raise CheckFailed("%s %s is mounted from volume %r, not a hostPath"
                                      % (what, path, m["name"]))
                return v["hostPath"], m
        raise CheckFailed("no volume of container %r is mounted at %s (%s)"
                          % (ctr["name"], path, what))

    def check_paths(self):
        problems = []
        socket_host = None
        for variant, objects in self.variants():
            config = self.config(objects)
            spec = self.pod_spec(objects)
            ctr = container(spec, "stitchd")
            socket = str(config.get("socket", ""))
            data_dir = str(config.get("data_dir", ""))
            if not socket.startswith("/") or not data_dir.startswith("/"):
                raise CheckFailed("%s: socket and data_dir must be absolute paths in the config"
                                  % variant)
            try:
                sock_hp, sock_mount = self.host_path_of(spec, ctr, os.path.dirname(socket),
                                                        "the socket's directory")
                data_hp, data_mount = self.host_path_of(spec, ctr, data_dir, "data_dir")
            except CheckFailed as e:
                problems.append("%s: %s" % (variant, e))
                continue
            for hp, m, what in ((sock_hp, sock_mount, "socket directory"),
                                (data_hp, data_mount, "data_dir")):
                if hp.get("type") != "DirectoryOrCreate":
                    problems.append("%s: the %s hostPath has type %r, not DirectoryOrCreate"
                                    % (variant, what, hp.get("type")))
                if m.get("readOnly"):
                    problems.append("%s: the %s is mounted read-only" % (variant, what))
            if sock_hp["path"] != os.path.dirname(socket):
                problems.append("%s: the socket directory is hostPath %s but the daemon's socket "
                                "is %s" % (variant, sock_hp["path"], socket))
            socket_host = os.path.join(sock_hp["path"], os.path.basename(socket))
            # The init container hands exactly these directories to the daemon's user.
            inits = spec.get("initContainers") or []
            chowned = set()
            for init in inits:
                cmd = (init.get("command") or []) + (init.get("args") or [])
                if cmd and cmd[0] == "chown":
                    owner = cmd[1] if len(cmd) > 1 else ""
                    if owner != "%d:%d" % (STITCHD_UID, STITCHD_UID):
                        problems.append("%s: the init container chowns to %r, not %d:%d"
                                        % (variant, owner, STITCHD_UID, STITCHD_UID))
                    mounts = {m["mountPath"] for m in init.get("volumeMounts") or []}
                    for path in cmd[2:]:
                        if path not in mounts:
                            problems.append("%s: the init container chowns %s, which it does not "
                                            "mount" % (variant, path))
                        chowned.add(path)
            for path in (os.path.dirname(socket), data_dir):
                if path not in chowned:
                    problems.append("%s: no init container hands %s (a root-owned hostPath) to "
                                    "uid %d" % (variant, path, STITCHD_UID))
        # The example job mounts the same host directory and dials the socket in it.
        job_spec = self.job_pod["spec"]
        volumes = {v["name"]: v for v in job_spec.get("volumes") or []}
        sock_dir_host = os.path.dirname(socket_host) if socket_host else None
        found = False
        for ctr in job_spec.get("containers") or []:
            env = {e["name"]: e.get("value") for e in ctr.get("env") or []}
            address = env.get("STITCH_ADDRESS")
            if address is None:
                problems.append("job pod: container %r has no STITCH_ADDRESS" % ctr["name"])
                continue
            for m in ctr.get("volumeMounts") or []:
                hp = (volumes.get(m["name"]) or {}).get("hostPath")
                if hp and hp["path"] == sock_dir_host:
                    found = True
                    want = "unix://%s/%s" % (m["mountPath"].rstrip("/"),
                                             os.path.basename(socket_host))
                    if address != want:
                        problems.append("job pod: STITCH_ADDRESS is %r; the daemon's socket is "
                                        "%s there" % (address, want))
                    if not m.get("readOnly"):
                        problems.append("job pod: mount the socket directory read-only")
                    if hp.get("type") != "DirectoryOrCreate":
                        problems.append("job pod: the socket hostPath should be DirectoryOrCreate "
                                        "so that the job starts without a daemon")
        if not found:
            problems.append("job pod: no container mounts the host directory %s"
                            % sock_dir_host)
        if problems:
            raise CheckFailed("\n".join(problems))
        print("  socket %s on the host, in every pod that uses it" % socket_host)

    # --- ports -------------------------------------------------------------------------------

    def check_ports(self):
        problems = []
        for variant, objects in self.variants():
            config = self.config(objects)
            spec = self.pod_spec(objects)
            ctr = container(spec, "stitchd")
            ports = {p.get("name"): p.get("containerPort") for p in ctr.get("ports") or []}
            for key, name in (("grpc_listen", "grpc"), ("metrics_listen", "metrics")):
                host, port = parse_listen(config.get(key, ""), "%s: %s" % (variant, key))
                if host not in ("0.0.0.0", "[::]", ""):
                    problems.append("%s: %s listens on %s only; the kubelet's probes, the "
                                    "Service and Prometheus reach the pod IP" % (variant, key,
                                                                                 host))
                if ports.get(name) != port:
                    problems.append("%s: %s port %d but container port %r is %r"
                                    % (variant, key, port, name, ports.get(name)))
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                p = ctr.get(probe)
                if not p:
                    problems.append("%s: no %s" % (variant, probe))
                    continue
                # The gRPC port serves TLS only (check_tls) and the kubelet's grpc probes speak
                # plaintext; the metrics port's /healthz reports the same serving state.
                get = p.get("httpGet") or {}
                port = get.get("port")
                port = ports.get(port) if isinstance(port, str) else port
                handlers = sorted(k for k in ("grpc", "httpGet", "tcpSocket", "exec") if k in p)
                if handlers != ["httpGet"] or port != ports.get("metrics") or \
                        get.get("path") != "/healthz" or get.get("scheme", "HTTP") != "HTTP":
                    problems.append("%s: %s is %s; it must be an httpGet of /healthz on the "
                                    "metrics port: the gRPC port serves TLS only, which the "
                                    "kubelet's grpc probes do not speak"
                                    % (variant, probe, json.dumps(p, sort_keys=True)))
            svc = self.find(objects, "Service", "stitchd")
            svc_ports = {p.get("name"): p for p in svc["spec"].get("ports") or []}
            for name in ("grpc", "metrics"):
                sp = svc_ports.get(name)
                if not sp:
                    problems.append("%s: the Service has no port %r" % (variant, name))
                    continue
                target = sp.get("targetPort", sp.get("port"))
                target_port = ports.get(target) if isinstance(target, str) else target
                if target_port != ports.get(name) or sp.get("port") != ports.get(name):
                    problems.append("%s: Service port %s is %s -> %s; the container's is %s"
                                    % (variant, name, sp.get("port"), target, ports.get(name)))
            pm = self.find(objects, "PodMonitor", "stitchd")
            for ep in pm["spec"].get("podMetricsEndpoints") or []:
                if ep.get("port") not in ports or ports[ep["port"]] != ports.get("metrics"):
                    problems.append("%s: the PodMonitor scrapes port %r, not the container's "
                                    "metrics port" % (variant, ep.get("port")))
                if ep.get("path", "/metrics") != "/metrics":
                    problems.append("%s: the PodMonitor scrapes %s, not /metrics"
                                    % (variant, ep.get("path")))
        if problems:
            raise CheckFailed("\n".join(problems))

    # --- selectors and labels ----------------------------------------------------------------

    def check_selectors(self):
        problems = []
        for variant, objects in self.variants():
            ds = self.find(objects, "DaemonSet", "stitchd")
            labels = ds["spec"]["template"]["metadata"].get("labels") or {}
            if labels.get("app.kubernetes.io/name") != "stitchd":
                problems.append("%s: the pods are not labelled app.kubernetes.io/name=stitchd"
                                % variant)
            sel = ds["spec"]["selector"]
            if set(sel) != {"matchLabels"} or not labels_match(sel["matchLabels"], labels):
                problems.append("%s: the DaemonSet's selector %s does not match its pod labels"
                                % (variant, sel))
            svc = self.find(objects, "Service", "stitchd")
            if not labels_match(svc["spec"].get("selector"), labels):
                problems.append("%s: the Service's selector %s does not match the pod labels"
                                % (variant, svc["spec"].get("selector")))
            if svc["spec"].get("internalTrafficPolicy") != "Local":
                problems.append("%s: the Service's internalTrafficPolicy is not Local" % variant)
            pm = self.find(objects, "PodMonitor", "stitchd")
            if not labels_match((pm["spec"].get("selector") or {}).get("matchLabels"), labels):
                problems.append("%s: the PodMonitor's selector does not match the pod labels"
                                % variant)
            # The rules select job="stitchd" (deploy/prometheus/rules).
            job = labels.get(pm["spec"].get("jobLabel", ""))
            if job != "stitchd":
                problems.append("%s: the PodMonitor's jobLabel gives job=%r; the rules expect "
                                "job=\"stitchd\"" % (variant, job))
            relabel = pm["spec"]["podMetricsEndpoints"][0].get("relabelings") or []
            if not any(r.get("sourceLabels") == ["__meta_kubernetes_pod_node_name"]
                       and r.get("targetLabel") == "instance" for r in relabel):
                problems.append("%s: the PodMonitor does not name `instance` after the node, as "
                                "deploy/prometheus/prometheus.yml does" % variant)
            namespaces = {o["metadata"].get("namespace") for o in objects
                          if o["kind"] not in CLUSTER_SCOPED}
            if len(namespaces) != 1 or None in namespaces:
                problems.append("%s: the objects are in namespaces %s, not one" % (variant,
                                                                                 namespaces))
            sa = ds["spec"]["template"]["spec"].get("serviceAccountName")
            if sa and not any(o["kind"] == "ServiceAccount" and
                                   o["metadata"]["name"] == sa for o in objects):
                problems.append("%s: the DaemonSet uses ServiceAccount %s, which is not rendered"
                                % (variant, sa))
        if problems:
            raise CheckFailed("\n".join(problems))

    # --- the cluster tier's Secret -------------------------------------------------------------

    def mounted_file(self, pod_spec, ctr, path):
        """(volume, source, item) that puts the file `path` into ctr, or None."""
        volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
        for m in ctr.get("volumeMounts") or []:
            prefix = m["mountPath"].rstrip("/") + "/"
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix):]
            v = volumes.get(m["name"]) or {}
            sources = []
            if "projected" in v:
                sources = v["projected"].get("sources") or []
            elif "secret" in v:
                sources = [{"secret": v["secret"]}]
            elif "configMap" in v:
                sources = [{"configMap": v["configMap"]}]
            for source in sources:
                for kind in ("secret", "configMap"):
                    s = source.get(kind)
                    if s is None:
                        continue
                    items = s.get("items")
                    if items is None:
                        return m, v, kind, s, {"key": rest, "path": rest}
                    for item in items:
                        if item["path"] == rest:
                            return m, v, kind, s, item
        return None

    def check_cluster_secret(self):
        problems = []
        base_config = self.config(self.base)
        config = self.config(self.overlay)
        if any(k.startswith("cluster_") and base_config[k] not in ("", None)
               for k in base_config):
            problems.append("base: the cluster tier must stay off in the base (cluster_* keys "
                            "set: %s)" % sorted(k for k in base_config if k.startswith("cluster_")))
        if not config.get("cluster_nodes"):
            problems.append("overlays/cluster: cluster_nodes is not set")
        # Apart from the cluster tier the overlay's file is the base's (TLS included).
        rest = {k: v for k, v in config.items() if not k.startswith("cluster_")}
        if rest != base_config:
            diff = sorted(k for k in set(rest) | set(base_config)
                          if rest.get(k) != base_config.get(k))
            problems.append("overlays/cluster: stitchd.yaml differs from the base's in %s; only "
                            "cluster_* keys may differ" % diff)
        for key in ("cluster_password_file", "cluster_secret_file"):
            item, secret = self.check_secret_file("overlays/cluster", self.overlay, config, key,
                                                  problems)
            placeholder = ((secret or {}).get("stringData") or {}).get("secret")
            if item and item["key"] == "secret" and placeholder is not None and \
                    len(placeholder) >= 16:
                problems.append("overlays/cluster: the committed HMAC secret is %d bytes; keep "
                                "a placeholder under 16 bytes, which stitchd refuses, so that no "
                                "usable secret is committed" % len(placeholder))
        if problems:
            raise CheckFailed("\n".join(problems))

    def check_secret_file(self, variant, objects, config, key, problems):
        """Checks that the file `key` of a variant's config is a key of a Secret that variant
        renders, mounted read-only and readable by the daemon alone; returns (item, Secret),
        None where not found."""
        spec = self.pod_spec(objects)
        ctr = container(spec, "stitchd")
        secrets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Secret"}
        security = spec.get("securityContext") or {}
        path = config.get(key)
        if not path:
            problems.append("%s: %s is not set" % (variant, key))
            return None, None
        found = self.mounted_file(spec, ctr, path)
        if not found:
            problems.append("%s: %s %s is not a file any volume of the "
                            "container puts there" % (variant, key, path))
            return None, None
        mount, volume, kind, source, item = found
        if kind != "secret":
            problems.append("%s: %s comes from a %s, not a Secret" % (variant, key, kind))
            return None, None
        if not mount.get("readOnly"):
            problems.append("%s: the volume holding %s is not mounted "
                            "read-only" % (variant, key))
        secret = secrets.get(source.get("name") or source.get("secretName"))
        if secret is None:
            problems.append("%s: %s is from Secret %r, which is not rendered"
                            % (variant, key, source.get("name") or source.get("secretName")))
            return None, None
        keys = set(secret.get("stringData") or {}) | set(secret.get("data") or {})
        if item["key"] not in keys:
            problems.append("%s: %s is key %r of Secret %s, which has %s"
                            % (variant, key, item["key"], secret["metadata"]["name"],
                               sorted(keys)))
        mode = item.get("mode", source.get("defaultMode",
                                           (volume.get("projected") or {}).get("defaultMode",
                                                                                0o644)))
        if mode & 0o027:
            problems.append("%s: %s has mode %o: group-writable or readable by "
                            "others" % (variant, key, mode))
        if mode & 0o040 and security.get("fsGroup") != security.get("runAsGroup"):
            problems.append("%s: %s is group-readable, but the pod's fsGroup "
                            "is not the daemon's group" % (variant, key))
        return item, secret

    # --- TLS on the gRPC TCP port --------------------------------------------------------------

    def check_tls(self):
        """Every variant serves mutual TLS on the gRPC TCP port from a mounted Secret and
        refuses plaintext TCP; the committed Secret holds placeholders, not PEM."""
        problems, summary = [], []
        for variant, objects in self.variants():
            config = self.config(objects)
            if config.get("grpc_require_tls") is not True:
                problems.append("%s: grpc_require_tls is %r, not true: plaintext TCP must be "
                                "refused" % (variant, config.get("grpc_require_tls")))
            names = set()
            for key in TLS_FILE_KEYS:
                item, secret = self.check_secret_file(variant, objects, config, key, problems)
                if secret:
                    names.add(secret["metadata"]["name"])
                if item and secret and secret.get("type") not in ("Opaque", "kubernetes.io/tls"):
                    problems.append("%s: %s is in a Secret of type %r"
                                    % (variant, key, secret.get("type")))
                value = ((secret or {}).get("stringData") or {}).get((item or {}).get("key"))
                if value is None and (secret or {}).get("data") and item:
                    problems.append("%s: Secret %s holds %s as base64 data; keep the committed "
                                    "placeholder in stringData" % (variant,
                                                                   secret["metadata"]["name"],
                                                                   item["key"]))
                elif value is not None and "-----BEGIN" in value:
                    problems.append("%s: the committed %s holds PEM; keep a placeholder, which "
                                    "stitchd refuses, so that no usable key or certificate is "
                                    "committed" % (variant, key))
            host = parse_listen(config.get("grpc_listen", ""), "grpc_listen")[0]
            if host not in ("127.0.0.1", "[::1]", "localhost") and \
                    not config.get("tls_cert_file"):
                problems.append("%s: grpc_listen %s reaches beyond the node without TLS"
                                % (variant, config.get("grpc_listen")))
            if not config.get("tls_client_ca_file"):
                problems.append("%s: tls_client_ca_file is not set: any client that reaches the "
                                "port could make the node compile (mutual TLS)" % variant)
            summary.append("%s: mutual TLS from Secret %s, plaintext TCP refused"
                           % (variant, ", ".join(sorted(names))))
        if problems:
            raise CheckFailed("\n".join(problems))
        for line in summary:
            print("  " + line)

    # --- policies ----------------------------------------------------------------------------

    def check_daemonset_policy(self):
        problems = []
        for variant, objects in self.variants():
            ds = self.find(objects, "DaemonSet", "stitchd")
            spec = ds["spec"]["template"]["spec"]
            ctr = container(spec, "stitchd")
            config = self.config(objects)
            grace = spec.get("terminationGracePeriodSeconds", 30)
            drain = float(config.get("drain_seconds", 10))
            if not grace > drain:
                problems.append("%s: terminationGracePeriodSeconds %s is not above drain_seconds "
                                "%s" % (variant, grace, drain))
            strategy = ds["spec"].get("updateStrategy") or {}
            if strategy.get("type") != "RollingUpdate" or \
                    "maxUnavailable" not in (strategy.get("rollingUpdate") or {}):
                problems.append("%s: the update strategy must be RollingUpdate with "
                                "maxUnavailable" % variant)
            if (strategy.get("rollingUpdate") or {}).get("maxSurge", 0) not in (0, "0", "0%"):
                problems.append("%s: maxSurge would start a second daemon on a node, which fails "
                                "on the data dir and socket locks" % variant)
            if spec.get("priorityClassName") != "system-node-critical":
                problems.append("%s: priorityClassName is not system-node-critical" % variant)
            gpu_selector = (spec.get("nodeSelector") or {}).get("nvidia.com/gpu.present") == \
                "true" or "nodeAffinity" in (spec.get("affinity") or {})
            if not gpu_selector:
                problems.append("%s: the DaemonSet is not restricted to GPU nodes" % variant)
            pod_sc = spec.get("securityContext") or {}
            sc = dict(pod_sc)
            sc.update(ctr.get("securityContext") or {})
            want = {"runAsNonRoot": True, "runAsUser": STITCHD_UID, "runAsGroup": STITCHD_UID,
                    "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True}
            for key, value in want.items():
                if sc.get(key) != value:
                    problems.append("%s: the stitchd container's %s is %r, not %r"
                                    % (variant, key, sc.get(key), value))
            if (sc.get("capabilities") or {}).get("drop") != ["ALL"] or \
                    (sc.get("capabilities") or {}).get("add"):
                problems.append("%s: the stitchd container must drop ALL capabilities and add "
                                "none" % variant)
            if pod_sc.get("fsGroup") != STITCHD_UID:
                problems.append("%s: the pod's fsGroup is not %d" % (variant, STITCHD_UID))
            for init in spec.get("initContainers") or []:
                isc = init.get("securityContext") or {}
                if (isc.get("capabilities") or {}).get("drop") != ["ALL"] or \
                        isc.get("allowPrivilegeEscalation") is not False:
                    problems.append("%s: init container %s must drop ALL capabilities and "
                                    "forbid privilege escalation" % (variant, init["name"]))
            mode = str(config.get("socket_mode", "0666"))
            if int(mode[2:] if mode.startswith("0o") else mode, 8) != 0o666:
                problems.append("%s: socket_mode is %s; job pods run under any uid, so it must "
                                "be 0666" % (variant, mode))
            limit = ((ctr.get("resources") or {}).get("limits") or {}).get("memory")
            request = ((ctr.get("resources") or {}).get("requests") or {}).get("memory")
            if limit is None or request is None:
                problems.append("%s: the stitchd container needs a memory request and limit"
                                % variant)
            else:
                cache = stitchd_size(config.get("memory_cache_bytes", "256MiB"),
                                     "memory_cache_bytes")
                workers = int(config.get("workers", 0))
                if workers <= 0:
                    problems.append("%s: set workers explicitly: 0 means one per CPU of the node, "
                                    "unrelated to the pod's resources" % variant)
                need = cache + workers * WORKER_BYTES
                if quantity(limit, "memory limit") < need:
                    problems.append("%s: memory limit %s is below memory_cache_bytes + %d workers "
                                    "x 256 MiB = %d MiB" % (variant, limit, workers, need >> 20))
            if config.get("log_format") != "json":
                problems.append("%s: log_format should be json for the cluster's log pipeline"
                                % variant)
            env = {e["name"]: e for e in ctr.get("env") or []}
            node = ((env.get("NODE_NAME") or {}).get("valueFrom") or {}).get("fieldRef") or {}
            if node.get("fieldPath") != "spec.nodeName":
                problems.append("%s: NODE_NAME must come from the downward API (spec.nodeName)"
                                % variant)
            if "--node-name=$(NODE_NAME)" not in (ctr.get("args") or []):
                problems.append("%s: the args do not pass --node-name=$(NODE_NAME)" % variant)
        if problems:
            raise CheckFailed("\n".join(problems))

    # --- the daemon's parser -------------------------------------------------------------------

    def daemon_command(self, objects, config_path):
        """The container's command line, with --config pointing at config_path."""
        spec = self.pod_spec(objects)
        ctr = container(spec, "stitchd")
        command = ctr.get("command")
        if command and os.path.basename(command[0]) != "stitchd":
            raise CheckFailed("the stitchd container runs %s, not stitchd" % command[0])
        env = {}
        for e in ctr.get("env") or []:
            if "value" in e:
                env[e["name"]] = e["value"]
            elif ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") == \
                    "spec.nodeName":
                env[e["name"]] = "gpu-node-test"

        def expand(arg):  # Kubernetes' $(VAR) expansion; $$ escapes
            return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                          lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1),
                                                                           m.group(0)), arg)

        args = [expand(a) for a in (command or [])[1:] + (ctr.get("args") or [])]
        out, i, config_arg = [], 0, None
        while i < len(args):
            if args[i] == "--config" and i + 1 < len(args):
                config_arg = args[i + 1]
                out += ["--config", str(config_path)]
                i += 2
                continue
            if args[i].startswith("--config="):
                config_arg = args[i][len("--config="):]
                out.append("--config=" + str(config_path))
            else:
                out.append(args[i])
            i += 1
        if config_arg is None:
            raise CheckFailed("the stitchd container's args have no --config")
        found = self.mounted_file(spec, ctr, config_arg)
        if not found or found[2] != "configMap" or found[3].get("name") != "stitchd" or \
                found[4]["key"] != "stitchd.yaml":
            raise CheckFailed("--config %s is not the ConfigMap's stitchd.yaml as mounted in "
                              "the container" % config_arg)
        return [self.stitchd] + out, env

    def check_daemon_parser(self):
        problems = []
        for variant, objects in self.variants():
            text = self.config_text(objects)
            with tempfile.TemporaryDirectory(prefix="stitch-k8s-") as tmp:
                tmp = pathlib.Path(tmp)
                replace = {"data_dir": tmp / "data", "socket": tmp / "run" / "stitchd.sock"}
                for key in ("cluster_password_file", "cluster_secret_file"):
                    if re.search(r"(?m)^%s:" % key, text):
                        replace[key] = tmp / key
                        # What a mounted Secret holds; the parser only needs the path.
                        replace[key].write_text("0123456789abcdef0123456789abcdef\n")
                for key, value in replace.items():
                    text, n = re.subn(r"(?m)^%s:.*$" % key, '%s: "%s"' % (key, value), text)
                    if n != 1:
                        problems.append("%s: key %s appears %d times in stitchd.yaml"
                                        % (variant, key, n))
                config_path = tmp / "stitchd.yaml"
                config_path.write_text(text)
                try:
                    cmd, env = self.daemon_command(objects, config_path)
                except CheckFailed as e:
                    problems.append("%s: %s" % (variant, e))
                    continue
                cmd.append("--print-config")
                p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, timeout=60)
                if p.returncode != 0:
                    problems.append("%s: $ %s\nexit status %d\n%s" % (
                        variant, " ".join(cmd), p.returncode, (p.stderr + p.stdout).strip()))
                    continue
                printed = self.yaml.safe_load(p.stdout)
                want = dict(self.config(objects))
                want.update({k: str(v) for k, v in replace.items()})
                want["node_name"] = env.get("NODE_NAME")
                for key, value in want.items():
                    got = printed.get(key)
                    if key in ("memory_cache_bytes", "disk_cache_bytes"):
                        same = stitchd_size(got, key) == stitchd_size(value, key)
                    elif key == "drain_seconds":
                        same = float(got) == float(value)
                    else:
                        same = str(got) == str(value)
                    if not same and not (key == "target" and value == "auto"):
                        problems.append("%s: stitchd reads %s as %r, the ConfigMap says %r"
                                        % (variant, key, got, value))
                print("  %s: stitchd --print-config accepts it (%d keys, node_name %s)"
                      % (variant, len(self.config(objects)), printed.get("node_name")))
                if self.config(objects).get("grpc_require_tls") is not True:
                    problems.append("%s: grpc_require_tls is not true, so stitchd would serve "
                                    "plaintext TCP without its TLS files" % variant)
                else:
                    # The same config with its TLS files taken away must not serve plaintext.
                    bare = re.sub(r"(?m)^(%s):.*$" % "|".join(TLS_FILE_KEYS), "", text)
                    config_path.write_text(bare)
                    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True, timeout=60)
                    if p.returncode == 0 or "--grpc-require-tls" not in p.stderr or \
                            "plaintext TCP" not in p.stderr:
                        problems.append("%s: without its TLS files stitchd should refuse to "
                                        "serve plaintext TCP; it exited %d:\n%s"
                                        % (variant, p.returncode, (p.stderr + p.stdout).strip()))
                    else:
                        print("  %s: without the TLS files stitchd refuses: %s"
                              % (variant, p.stderr.strip()))
                self.check_placeholders_refused(variant, objects, text, cmd, tmp, problems)
        if problems:
            raise CheckFailed("\n".join(problems))

    def check_placeholders_refused(self, variant, objects, text, cmd, tmp, problems):
        """Starts the daemon (not --print-config) on the config with the committed Secrets'
        values in its TLS files, on loopback ports: it must refuse to start, naming a TLS key,
        so that an unedited copy of the manifests never serves."""
        config = self.config(objects)
        spec = self.pod_spec(objects)
        ctr = container(spec, "stitchd")
        replace = {"grpc_listen": "127.0.0.1:0", "metrics_listen": "127.0.0.1:0"}
        for key in TLS_FILE_KEYS:
            if not config.get(key):
                return  # check_tls says so
            found = self.mounted_file(spec, ctr, config[key])
            secret = next((o for o in objects if o["kind"] == "Secret" and found and
                           o["metadata"]["name"] == found[3].get("name")), None)
            value = ((secret or {}).get("stringData") or {}).get(found[4]["key"]) \
                if found else None
            if value is None:
                return  # check_tls says so
            replace[key] = tmp / ("placeholder-" + key)
            replace[key].write_text(value)
        for key, value in replace.items():
            text = re.sub(r"(?m)^%s:.*$" % key, '%s: "%s"' % (key, value), text)
        config_path = tmp / "stitchd.yaml"
        config_path.write_text(text)
        run = [a for a in cmd if a != "--print-config"]
        try:
            p = subprocess.run(run, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=30)
        except subprocess.TimeoutExpired:
            problems.append("%s: with the committed TLS Secret's placeholders stitchd started "
                            "and served for 30 s; they must be refused" % variant)
            return
        if p.returncode == 0 or not any(k in p.stderr for k in TLS_FILE_KEYS):
            problems.append("%s: with the committed TLS Secret's placeholders stitchd should "
                            "refuse to start, naming the TLS key; it exited %d:\n%s"
                            % (variant, p.returncode, (p.stderr + p.stdout).strip()))
        else:
            print("  %s: with the committed TLS placeholders stitchd refuses: %s"
                  % (variant, p.stderr.strip().splitlines()[-1]))

    # --- the Dockerfile ------------------------------------------------------------------------

    def check_dockerfile(self):
        path = self.source / "Dockerfile"
        if not path.is_file():
            raise CheckFailed("no Dockerfile at the repository root")
        text = path.read_text()
        problems = []
        stages = re.findall(r"(?mi)^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", text)
        args = dict(re.findall(r"(?m)^ARG\s+(\w+)=(\S+)", text))

        def image(ref):
            return re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), ref)

        names = {name: image(ref) for ref, name in stages}
        final = image(stages[-1][0]) if stages else ""
        for stage in ("builder",):
            if not names.get(stage, "").startswith("debian:bookworm"):
                problems.append("Dockerfile: the %s stage is not on debian:bookworm (%r)"
                                % (stage, names.get(stage)))
        if not final.startswith("debian:bookworm"):
            problems.append("Dockerfile: the runtime stage is not on debian:bookworm (%r)" % final)
        # RUN instructions, continuation lines joined.
        runs = [m.replace("\\\n", " ") for m in
                re.findall(r"(?m)^RUN\s((?:[^\n]*\\\n)*[^\n]*)", text)]
        for script in ("scripts/setup", "scripts/build"):
            if not any(re.search(r"(^|\s)%s(\s|$)" % re.escape(script), r) for r in runs):
                problems.append("Dockerfile: the builder does not run %s" % script)
        exposed = {int(p) for line in re.findall(r"(?m)^EXPOSE\s+(.*)$", text)
                   for p in re.findall(r"(\d+)", line)}
        users = re.findall(r"(?m)^USER\s+(\S+)", text)
        entry = re.findall(r"(?m)^ENTRYPOINT\s+(.*)$", text)
        spec = self.pod_spec(self.base)
        ctr = container(spec, "stitchd")
        ports = {p["containerPort"] for p in ctr.get("ports") or []}
        if exposed != ports:
            problems.append("Dockerfile: EXPOSE %s; the container ports are %s"
                            % (sorted(exposed), sorted(ports)))
        if not users or users[-1].split(":")[0] != str(STITCHD_UID):
            problems.append("Dockerfile: the image's USER is %r, not uid %d"
                            % (users[-1] if users else None, STITCHD_UID))
        try:
            program = json.loads(entry[-1])[0] if entry else None
        except (ValueError, IndexError, TypeError):
            program = None  # the shell form would not pass the pod's args to stitchd
        if not program or os.path.basename(program) != "stitchd":
            problems.append("Dockerfile: the ENTRYPOINT is not [\"…/stitchd\"] (exec form)")
        # stitchd's own grpc_listen default is loopback, which `docker run -p` cannot reach:
        # the image's CMD names an address of every interface of the container, on a port it
        # EXPOSEs.
        cmds = re.findall(r"(?m)^CMD\s+(.*)$", text)
        try:
            cmd = [str(a) for a in json.loads(cmds[-1])] if cmds else []
        except ValueError:
            cmd = None
        listen = None
        for i, a in enumerate(cmd or []):
            if a == "--grpc-listen" and i + 1 < len(cmd):
                listen = cmd[i + 1]
            elif a.startswith("--grpc-listen="):
                listen = a[len("--grpc-listen="):]
        if cmd is None:
            problems.append("Dockerfile: the CMD is not a JSON list (exec form)")
        elif listen is None:
            problems.append("Dockerfile: the CMD does not set --grpc-listen; stitchd's default "
                            "is loopback, which no published port reaches")
        else:
            try:
                host, port = parse_listen(listen, "the CMD's --grpc-listen")
                if host not in ("0.0.0.0", "[::]", "") or port not in exposed:
                    problems.append("Dockerfile: the CMD's --grpc-listen %s is not every "
                                    "interface on an EXPOSEd port" % listen)
            except CheckFailed as e:
                problems.append("Dockerfile: %s" % e)
        config = self.config(self.base)
        for d in (config["data_dir"], os.path.dirname(config["socket"])):
            if not re.search(r"install -d -o %d -g %d[^\n]*\s%s\b"
                             % (STITCHD_UID, STITCHD_UID, re.escape(d)), text):
                problems.append("Dockerfile: %s is not created owned by %d" % (d, STITCHD_UID))
        # The image the manifests run is the version this tree builds.
        p = subprocess.run([self.stitchd, "--version"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=30)
        version = p.stdout.split()[-1] if p.returncode == 0 and p.stdout.split() else None
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            tag = c["image"].rsplit(":", 1)[-1] if ":" in c["image"].rsplit("/", 1)[-1] else None
            if not c["image"].rsplit("/", 1)[-1].startswith("stitchd:") or tag != version:
                problems.append("daemonset.yaml: container %s runs %s; the image is stitchd:%s "
                                "(stitchd --version)" % (c["name"], c["image"], version))
        if problems:
            raise CheckFailed("\n".join(problems))

    # --- all -----------------------------------------------------------------------------

    def run(self):
        if not self.check("tools (PyYAML, stitchd, kubernetes-validate)", self.require_tools):
            return self.summary()
        if not self.check("render deploy/k8s and deploy/k8s/overlays/cluster", self.render_all):
            return self.summary()
        self.check("built-in objects against the Kubernetes schemas", self.check_schemas)
        self.check("PodMonitor and PrometheusRule structure", self.check_operator_objects)
        self.check("the PrometheusRule is deploy/prometheus/rules/*.yml",
                   self.check_prometheus_rule)
        self.check("socket and data paths: config, DaemonSet, job pod", self.check_paths)
        self.check("ports: config, container, probes, Service, PodMonitor", self.check_ports)
        self.check("selectors and labels", self.check_selectors)
        self.check("the overlay's secret files, Secret and mount", self.check_cluster_secret)
        self.check("TLS in base and overlay: files, Secret, mount; plaintext TCP refused",
                   self.check_tls)
        self.check("DaemonSet policy: grace period, updates, security, resources",
                   self.check_daemonset_policy)
        self.check("stitchd --print-config on the DaemonSet's args and ConfigMap",
                   self.check_daemon_parser)
        self.check("the Dockerfile agrees with the DaemonSet", self.check_dockerfile)
        return self.summary()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", required=True, help="the repository root")
    parser.add_argument("--stitchd", required=True, help="the stitchd binary whose parser runs")
    parser.add_argument("--python-tools", required=True,
                        help="bin directory of the virtualenv with kubernetes-validate "
                             "(.venv-tools/bin, made by scripts/setup)")
    return Runner(parser.parse_args()).run()


if __name__ == "__main__":
    sys.exit(main())
