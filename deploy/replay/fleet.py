#!/usr/bin/env python3
"""A real local stitchd fleet for the fleet replay: a Redis Cluster, N daemons, Prometheus.

    with Fleet(workdir, pathlib.Path("build/daemon/stitchd"), daemons=4) as fleet:
        fleet.daemons[0].address          # "unix:///.../daemon-0/stitchd.sock"
        fleet.wait_for_scrape()
        fleet.query_sum("sum(stitch_cluster_writes_total)")

What it starts, all on loopback and all inside `workdir`:

- a Redis Cluster of 3 masters and no replicas from Debian's redis-server (package
  redis-server; redis-cli is in redis-tools), on ports the kernel had free whose cluster-bus
  ports (port + 10000) were free too, with cluster-node-timeout 1000, no persistence, an
  admin password on the default user and the ACL user "stitchd" limited to the commands
  stitchd's cluster tier sends (REDIS_USER_ACL, the same string as
  tests/support/redis_cluster.h's kRedisUserAcl);
- N stitchd processes, each with its own data dir, Unix socket, YAML config and log, on the
  cluster tier as that ACL user, with a random HMAC secret shared by all of them, gRPC on the
  Unix socket only and /metrics on a port the kernel picks;
- Prometheus (Debian's prometheus package) scraping every daemon each second as job
  "stitchd", with every deploy/prometheus/rules/*.yml loaded.

Leaving the `with` block (or a failed start) stops everything it started: the daemons with
SIGTERM (SIGKILL after 30 s), then Prometheus and the Redis nodes. Every child's stdout and
stderr go to log files in the work dir.

Standard library only, Python 3.11.
    python3 deploy/replay/fleet.py --stitchd build/daemon/stitchd --daemons 2
starts a fleet in a temporary dir, prints each daemon's address and metrics port and the
number of daemons Prometheus sees up, and tears it down.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import json
import os
import pathlib
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from typing import Callable, IO, Mapping

HERE = pathlib.Path(__file__).resolve().parent
SOURCE_DIR = HERE.parent.parent
DEFAULT_RULES_DIR = SOURCE_DIR / "deploy" / "prometheus" / "rules"

REDIS_MASTERS = 3
REDIS_ADMIN_PASSWORD = "admin-pw"
REDIS_USER = "stitchd"
REDIS_USER_PASSWORD = "stitchd-pw"
# What the cluster tier needs, nothing else: tests/support/redis_cluster.h, kRedisUserAcl.
REDIS_USER_ACL = ("on >stitchd-pw ~stitch:* resetchannels -@all +get +set +pexpire +del +ping "
                  "+auth +asking +cluster|slots")

DAEMON_STOP_GRACE_S = 30.0
DAEMON_START_TIMEOUT_S = 60.0
REDIS_START_TIMEOUT_S = 15.0
REDIS_CLUSTER_TIMEOUT_S = 30.0
PROMETHEUS_START_TIMEOUT_S = 60.0
SOCKET_PATH_MAX = 107  # sockaddr_un::sun_path less its terminating NUL

class FleetError(RuntimeError):
    """The fleet could not be started, queried or stopped as asked."""


@dataclasses.dataclass
class Daemon:
    """One running stitchd of the fleet."""
    index: int
    address: str  # "unix:///path/to/stitchd.sock", for gRPC clients
    metrics_port: int  # 127.0.0.1:<metrics_port>/metrics
    data_dir: pathlib.Path
    log: pathlib.Path  # the process's stdout and stderr
    pid: int

    @property
    def metrics_url(self) -> str:
        """The daemon's /metrics URL."""
        return "http://127.0.0.1:%d/metrics" % self.metrics_port


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------

def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _kernel_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pick_redis_port(taken: list[int]) -> int:
    """A port the kernel had free whose cluster-bus port (port + 10000) is free too."""
    for _ in range(200):
        port = _kernel_port()
        if port + 10000 > 65535:
            continue
        if any(t in (port, port + 10000) or t + 10000 == port for t in taken):
            continue
        if _port_free(port + 10000):
            return port
    raise FleetError("found no free loopback port whose cluster-bus port (+10000) is free")


def _tail(path: pathlib.Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return "(cannot read %s: %s)" % (path, e)
    return "\n".join(text.splitlines()[-lines:])


def _http_get(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def _yaml_value(value: object) -> str:
    """A YAML scalar: JSON's double-quoted strings are YAML's too."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(str(value))


def _stop_process(process: subprocess.Popen | None, grace: float,
                  sig: int = signal.SIGTERM) -> int | None:
    """Signals `process`, waits up to `grace` s, then SIGKILLs it. Returns its exit code
    (negative: the signal that ended it), None when there was no process."""
    if process is None:
        return None
    if process.poll() is None:
        try:
            process.send_signal(sig)
        except ProcessLookupError:
            pass
        try:
            return process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
    try:
        return process.wait(timeout=30)
    except subprocess.TimeoutExpired:  # unkillable (D state); nothing more to do
        return None


def _parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text format → {"name{labels}": value}, labels as the page prints them."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line and line.index("{") < (line.find(" ") if " " in line else len(line)):
            close = line.rindex("}")
            series, rest = line[:close + 1], line[close + 1:].split()
        else:
            series, *rest = line.split()
        if not rest:
            continue
        try:
            out[series] = float(rest[0])
        except ValueError:
            continue
    return out


# Fleets not yet torn down, stopped at interpreter exit as a last resort.
_LIVE_FLEETS: "weakref.WeakSet[Fleet]" = weakref.WeakSet()


@atexit.register
def _stop_live_fleets() -> None:
    for fleet in list(_LIVE_FLEETS):
        try:
            fleet.close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


# ---------------------------------------------------------------------------------------------
# The fleet
# ---------------------------------------------------------------------------------------------

class Fleet:
    """A Redis Cluster, `daemons` stitchd processes on it and a Prometheus scraping them.

    A context manager: `with Fleet(...) as fleet:` starts everything (see __enter__) and
    stops it all on exit. Attributes, valid inside the block:
      daemons         list[Daemon], index i is node "replay-node-<i>"
      cluster_seeds   "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
      prometheus_url  "http://127.0.0.1:<port>", or None without Prometheus
      redis_ports     the three masters' ports
      cluster_password_file, cluster_secret_file   the files the daemons read
    """

    def __init__(self, workdir: pathlib.Path, stitchd: pathlib.Path, daemons: int, *,
                 target: str = "sm_80", workers: int = 1, ptx_only: bool = True,
                 prometheus: str | None = "prometheus", rules_dir: pathlib.Path | None = None,
                 redis_server: str = "redis-server", redis_cli: str = "redis-cli",
                 log: Callable[[str], None] = print, log_level: str = "info",
                 extra_config: Mapping[str, object] | None = None) -> None:
        """Checks the arguments; starts nothing (that is __enter__'s job).

        `extra_config` adds or overrides stitchd YAML keys for every daemon (e.g.
        {"cluster_lease_ms": 5000}). Raises ValueError when daemons < 1 or workers < 1, and
        FleetError naming the binary and its Debian package when one is missing, or when
        the work dir's paths are too long for a Unix socket.
        """
        if daemons < 1:
            raise ValueError("a fleet needs at least one daemon, got %d" % daemons)
        if workers < 1:
            raise ValueError("workers must be at least 1, got %d" % workers)
        self.workdir = pathlib.Path(workdir).resolve()
        self.stitchd = pathlib.Path(stitchd).resolve()
        if not (self.stitchd.is_file() and os.access(self.stitchd, os.X_OK)):
            raise FleetError("stitchd binary not found or not executable at %s "
                             "(build it: scripts/build)" % self.stitchd)
        self.redis_server = self._which(redis_server, "redis-server")
        self.redis_cli = self._which(redis_cli, "redis-tools")
        self.prometheus_bin = (self._which(prometheus, "prometheus") if prometheus is not None
                               else None)
        self.rules_dir = pathlib.Path(rules_dir) if rules_dir is not None else DEFAULT_RULES_DIR
        self.rule_files = sorted(str(p.resolve()) for p in self.rules_dir.glob("*.yml"))
        if self.prometheus_bin is not None and not self.rule_files:
            raise FleetError("no *.yml rule files in %s" % self.rules_dir)
        self.n = daemons
        self.target = target
        self.workers = workers
        self.ptx_only = ptx_only
        self.log_level = log_level
        self.extra_config = dict(extra_config or {})
        self._log = log
        longest = self._daemon_dir(daemons - 1) / "stitchd.sock"
        if len(str(longest)) > SOCKET_PATH_MAX:
            raise FleetError("socket path %s is longer than %d bytes; use a shorter work dir"
                             % (longest, SOCKET_PATH_MAX))

        self.daemons: list[Daemon] = []
        self.cluster_seeds: str = ""
        self.redis_ports: list[int] = []
        self.prometheus_url: str | None = None
        self.cluster_password_file = self.workdir / "secrets" / "cluster-password"
        self.cluster_secret_file = self.workdir / "secrets" / "cluster-secret"
        self._redis: list[subprocess.Popen] = []
        self._procs: list[subprocess.Popen | None] = [None] * daemons
        self._metrics_ports: list[int] = [0] * daemons  # last port each index served on
        self._prometheus: subprocess.Popen | None = None
        self._prometheus_config: pathlib.Path | None = None
        self._files: list[IO] = []
        self._closed = True

    @staticmethod
    def _which(binary: str, package: str) -> str:
        """The binary's path; FleetError naming it and its Debian package when missing."""
        found = shutil.which(binary)
        if found is None:
            raise FleetError("%s not found: install Debian's %s package (apt-get install %s)"
                             % (binary, package, package))
        return found

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> "Fleet":
        """Starts the Redis Cluster, the daemons and Prometheus (unless prometheus=None), and
        returns self once all serve. On any failure stops what it started and raises
        FleetError (with the log tail of what failed)."""
        self._closed = False
        _LIVE_FLEETS.add(self)
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()
            self._start_redis()
            self._log("fleet: Redis Cluster up on %s (%.1f s)"
                      % (self.cluster_seeds, time.monotonic() - started))
            t = time.monotonic()
            self._write_secrets()
            self.daemons = self._start_daemons(list(range(self.n)))
            self._log("fleet: %d stitchd up (%.1f s)" % (self.n, time.monotonic() - t))
            if self.prometheus_bin is not None:
                t = time.monotonic()
                self._start_prometheus()
                self._log("fleet: Prometheus ready at %s (%.1f s)"
                          % (self.prometheus_url, time.monotonic() - t))
            self._log("fleet: started in %.1f s (work dir %s)"
                      % (time.monotonic() - started, self.workdir))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Stops everything (see close()); does not swallow the block's exception."""
        self.close()

    def close(self) -> None:
        """Stops the daemons (SIGTERM, SIGKILL after 30 s), then Prometheus, then the Redis
        nodes. Safe to call more than once and after a failed start; never raises for a
        process that is already gone."""
        if self._closed:
            return
        self._closed = True
        for i, process in enumerate(self._procs):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        end = time.monotonic() + DAEMON_STOP_GRACE_S
        for i, process in enumerate(self._procs):
            code = _stop_process(process, max(0.0, end - time.monotonic()))
            if process is not None and code not in (0, None):
                self._log("fleet: stitchd %d exited with %s (log %s)"
                          % (i, code, self._daemon_dir(i) / "stitchd.log"))
            self._procs[i] = None
        _stop_process(self._prometheus, 30.0)
        self._prometheus = None
        for process in self._redis:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self._redis:
            _stop_process(process, 10.0)
        self._redis = []
        for f in self._files:
            f.close()
        self._files = []
        _LIVE_FLEETS.discard(self)

    def _open_log(self, path: pathlib.Path) -> IO:
        f = open(path, "ab")
        self._files.append(f)
        return f

    def _spawn(self, argv: list[str], log_path: pathlib.Path) -> subprocess.Popen:
        # A session of its own: a ^C in the terminal reaches only this process, which then
        # stops the children in order.
        f = self._open_log(log_path)
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)

    # -- Redis Cluster --------------------------------------------------------------------------

    def _redis_dir(self, port: int) -> pathlib.Path:
        return self.workdir / "redis" / str(port)

    def _cli(self, port: int, *args: str, timeout: float = 10, user: str | None = None,
             password: str = REDIS_ADMIN_PASSWORD) -> subprocess.CompletedProcess:
        """redis-cli against 127.0.0.1:port (as the admin unless `user`)."""
        argv = [self.redis_cli, "-h", "127.0.0.1", "-p", str(port)]
        if user is not None:
            argv += ["--user", user]
        argv += list(args)
        env = dict(os.environ, REDISCLI_AUTH=password)
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired as e:
            return subprocess.CompletedProcess(argv, 124, e.stdout or "", "timed out")

    def _start_redis_node(self, port: int) -> subprocess.Popen:
        node_dir = self._redis_dir(port)
        node_dir.mkdir(parents=True, exist_ok=True)
        conf = node_dir / "redis.conf"
        conf.write_text("\n".join([
            "port %d" % port,
            "bind 127.0.0.1",
            "protected-mode yes",
            'dir "%s"' % node_dir,
            "daemonize no",
            "cluster-enabled yes",
            'cluster-config-file "%s"' % (node_dir / "nodes.conf"),
            "cluster-node-timeout 1000",
            "appendonly no",
            'save ""',
            'logfile "%s"' % (node_dir / "redis.log"),
            "requirepass %s" % REDIS_ADMIN_PASSWORD,
            "masterauth %s" % REDIS_ADMIN_PASSWORD,
            "user %s %s" % (REDIS_USER, REDIS_USER_ACL),
            "",
        ]))
        return self._spawn([self.redis_server, str(conf)], node_dir / "redis.out")

    def _start_redis(self) -> None:
        # Start the nodes; a node whose port was taken meanwhile is retried on another port.
        ports: list[int] = []
        for _ in range(REDIS_MASTERS):
            ports.append(_pick_redis_port(ports))
        procs = [self._start_redis_node(p) for p in ports]
        self._redis = procs
        for i in range(REDIS_MASTERS):
            for attempt in range(3):
                if self._wait_redis_ping(ports[i], procs[i]):
                    break
                node_dir = self._redis_dir(ports[i])
                if procs[i].poll() is None or attempt == 2:
                    _stop_process(procs[i], 5.0)
                    raise FleetError("Redis node 127.0.0.1:%d did not answer PING within %.0f s;"
                                     " log %s:\n%s" % (ports[i], REDIS_START_TIMEOUT_S,
                                                       node_dir / "redis.log",
                                                       _tail(node_dir / "redis.log")))
                self._log("fleet: Redis node on port %d exited (%s); retrying on another port"
                          % (ports[i], _tail(node_dir / "redis.log", 3).replace("\n", " | ")))
                ports[i] = _pick_redis_port(ports[:i] + ports[i + 1:])
                procs[i] = self._start_redis_node(ports[i])
        self.redis_ports = ports
        self.cluster_seeds = ",".join("127.0.0.1:%d" % p for p in ports)

        create_log = self.workdir / "redis" / "create.log"
        argv = [self.redis_cli, "--cluster", "create",
                *("127.0.0.1:%d" % p for p in ports),
                "--cluster-replicas", "0", "--cluster-yes"]
        env = dict(os.environ, REDISCLI_AUTH=REDIS_ADMIN_PASSWORD)
        with open(create_log, "wb") as out:
            try:
                rc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=env, timeout=60).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        if rc != 0:
            raise FleetError("redis-cli --cluster create failed (exit %d); %s:\n%s"
                             % (rc, create_log, _tail(create_log)))

        end = time.monotonic() + REDIS_CLUSTER_TIMEOUT_S
        for port in ports:
            while True:
                info = self._cli(port, "CLUSTER", "INFO").stdout
                if "cluster_state:ok" in info and "cluster_slots_ok:16384" in info:
                    break
                if time.monotonic() > end:
                    raise FleetError(
                        "Redis node 127.0.0.1:%d did not report cluster_state:ok within %.0f s;"
                        " CLUSTER INFO:\n%s\ncreate log %s:\n%s"
                        % (port, REDIS_CLUSTER_TIMEOUT_S, info.strip(), create_log,
                           _tail(create_log)))
                time.sleep(0.1)
        # The daemons' user can log in and reach every node (the ACL holds on each).
        for port in ports:
            r = self._cli(port, "PING", user=REDIS_USER, password=REDIS_USER_PASSWORD)
            if r.stdout.strip() != "PONG":
                raise FleetError("ACL user %s cannot PING 127.0.0.1:%d: %s%s"
                                 % (REDIS_USER, port, r.stdout, r.stderr))

    def _wait_redis_ping(self, port: int, process: subprocess.Popen) -> bool:
        end = time.monotonic() + REDIS_START_TIMEOUT_S
        while time.monotonic() < end:
            if process.poll() is not None:
                return False
            if self._cli(port, "PING", timeout=2).stdout.strip() == "PONG":
                return True
            time.sleep(0.05)
        return False

    # -- stitchd --------------------------------------------------------------------------------

    def _daemon_dir(self, i: int) -> pathlib.Path:
        return self.workdir / ("daemon-%d" % i)

    def _write_secrets(self) -> None:
        self.cluster_password_file.parent.mkdir(parents=True, exist_ok=True)
        for path, text in ((self.cluster_password_file, REDIS_USER_PASSWORD),
                           (self.cluster_secret_file, secrets.token_hex(32))):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text + "\n")

    def _write_daemon_config(self, i: int, metrics_port: int) -> pathlib.Path:
        d = self._daemon_dir(i)
        (d / "data").mkdir(parents=True, exist_ok=True)
        config = {
            "data_dir": str(d / "data"),
            "socket": str(d / "stitchd.sock"),
            "grpc_listen": "",
            "metrics_listen": "127.0.0.1:%d" % metrics_port,
            "target": self.target,
            "ptx_only": self.ptx_only,
            "workers": self.workers,
            "log_level": self.log_level,
            "cluster_nodes": self.cluster_seeds,
            "cluster_user": REDIS_USER,
            "cluster_password_file": str(self.cluster_password_file),
            "cluster_secret_file": str(self.cluster_secret_file),
            "node_name": "replay-node-%d" % i,
        }
        config.update(self.extra_config)
        path = d / "stitchd.yaml"
        path.write_text("# stitchd config written by deploy/replay/fleet.py\n" + "".join(
            "%s: %s\n" % (k, _yaml_value(v)) for k, v in config.items()))
        return path

    def _check_config(self, path: pathlib.Path) -> None:
        try:
            r = subprocess.run([str(self.stitchd), "--print-config", "--config", str(path)],
                               capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            raise FleetError("stitchd --print-config --config %s timed out" % path) from None
        if r.returncode != 0:
            raise FleetError("stitchd rejects %s: %s%s" % (path, r.stdout, r.stderr))

    def _start_daemons(self, indices: list[int]) -> list[Daemon]:
        """Starts the daemons `indices` at once and waits for all; returns them in order."""
        configs = {}
        for i in indices:
            configs[i] = self._write_daemon_config(i, self._metrics_ports[i])
            self._check_config(configs[i])
        for i in indices:
            d = self._daemon_dir(i)
            with open(d / "stitchd.log", "ab") as f:
                f.write(b"---- fleet.py: starting stitchd %d at %s\n"
                        % (i, time.strftime("%Y-%m-%dT%H:%M:%S").encode()))
            self._procs[i] = self._spawn([str(self.stitchd), "--config", str(configs[i])],
                                         d / "stitchd.log")
        out = []
        for i in indices:
            out.append(self._wait_daemon(i))
        return out

    def _wait_daemon(self, i: int) -> Daemon:
        process = self._procs[i]
        assert process is not None
        d = self._daemon_dir(i)
        info_path = d / "data" / "stitchd.json"
        log_path = d / "stitchd.log"
        end = time.monotonic() + DAEMON_START_TIMEOUT_S
        while True:
            code = process.poll()
            if code is not None:
                raise FleetError("stitchd %d exited with %d while starting; %s:\n%s"
                                 % (i, code, log_path, _tail(log_path)))
            try:
                info = json.loads(info_path.read_text())
            except (OSError, ValueError):
                info = None
            if isinstance(info, dict) and info.get("pid") == process.pid:
                port = int(info.get("metrics_port", 0))
                if port <= 0:
                    raise FleetError("stitchd %d serves no metrics port: %s" % (i, info))
                self._metrics_ports[i] = port
                return Daemon(index=i, address="unix://" + str(d / "stitchd.sock"),
                              metrics_port=port, data_dir=d / "data", log=log_path,
                              pid=process.pid)
            if time.monotonic() > end:
                raise FleetError("stitchd %d did not write %s with its pid %d within %.0f s;"
                                 " %s:\n%s" % (i, info_path, process.pid, DAEMON_START_TIMEOUT_S,
                                               log_path, _tail(log_path)))
            time.sleep(0.02)

    def stop_daemon(self, i: int) -> int:
        """Stops daemon `i` with SIGTERM (SIGKILL after 30 s) and returns its exit code
        (negative: killed by that signal). Its data dir stays for start_daemon. Raises
        IndexError for a bad index and FleetError when it is not running."""
        if not 0 <= i < self.n:
            raise IndexError("no daemon %d in a fleet of %d" % (i, self.n))
        process = self._procs[i]
        if process is None:
            raise FleetError("stitchd %d is not running" % i)
        code = _stop_process(process, DAEMON_STOP_GRACE_S)
        self._procs[i] = None
        return -1 if code is None else code

    def start_daemon(self, i: int) -> Daemon:
        """Starts daemon `i` again on its data dir, socket and (when it can still bind it) its
        previous metrics port, so Prometheus keeps scraping the same target; when it cannot,
        it takes a new port and Prometheus is reloaded with it. Returns the new Daemon (also
        put in self.daemons[i]). Raises FleetError if it is running or does not start."""
        if not 0 <= i < self.n:
            raise IndexError("no daemon %d in a fleet of %d" % (i, self.n))
        if self._procs[i] is not None and self._procs[i].poll() is None:
            raise FleetError("stitchd %d is already running (pid %d)" % (i, self._procs[i].pid))
        previous = self._metrics_ports[i]
        try:
            daemon = self._start_daemons([i])[0]
        except FleetError as e:
            if previous == 0:
                raise
            self._log("fleet: stitchd %d could not come back on metrics port %d (%s); "
                      "taking a new one" % (i, previous, str(e).splitlines()[0]))
            _stop_process(self._procs[i], 5.0)
            self._procs[i] = None
            self._metrics_ports[i] = 0
            daemon = self._start_daemons([i])[0]
        self.daemons[i] = daemon
        if daemon.metrics_port != previous and self._prometheus is not None:
            self._write_prometheus_config()
            self._prometheus.send_signal(signal.SIGHUP)  # reload the targets
        return daemon

    # -- Prometheus -----------------------------------------------------------------------------

    def _write_prometheus_config(self) -> pathlib.Path:
        pdir = self.workdir / "prometheus"
        pdir.mkdir(parents=True, exist_ok=True)
        targets = ["127.0.0.1:%d" % p for p in self._metrics_ports]
        config = pdir / "prometheus.yml"
        tmp = pdir / "prometheus.yml.tmp"
        tmp.write_text(
            "# written by deploy/replay/fleet.py\n"
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "rule_files: %s\n"
            "scrape_configs:\n"
            "  - job_name: stitchd\n"
            "    static_configs: [{targets: %s}]\n"
            % (json.dumps(self.rule_files), json.dumps(targets)))
        tmp.replace(config)
        self._prometheus_config = config
        return config

    def _start_prometheus(self) -> None:
        assert self.prometheus_bin is not None
        pdir = self.workdir / "prometheus"
        config = self._write_prometheus_config()
        log_path = pdir / "prometheus.log"
        for attempt in range(3):
            port = _kernel_port()
            url = "http://127.0.0.1:%d" % port
            self._prometheus = self._spawn(
                [self.prometheus_bin, "--config.file=" + str(config),
                 "--storage.tsdb.path=" + str(pdir / "tsdb"),
                 "--web.listen-address=127.0.0.1:%d" % port],
                log_path)
            end = time.monotonic() + PROMETHEUS_START_TIMEOUT_S
            while time.monotonic() < end and self._prometheus.poll() is None:
                try:
                    if "ready" in _http_get(url + "/-/ready", timeout=2).lower():
                        self.prometheus_url = url
                        return
                except OSError:
                    pass
                time.sleep(0.1)
            code = self._prometheus.poll()
            _stop_process(self._prometheus, 10.0)
            self._prometheus = None
            if code is None or attempt == 2 or "address already in use" not in _tail(log_path):
                raise FleetError("Prometheus did not become ready (%s); %s:\n%s"
                                 % ("exit %d" % code if code is not None else
                                    "timed out after %.0f s" % PROMETHEUS_START_TIMEOUT_S,
                                    log_path, _tail(log_path)))
            self._log("fleet: Prometheus port %d was taken; retrying" % port)

    # -- queries --------------------------------------------------------------------------------

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        """Runs an instant PromQL query now; returns (labels, value) for each series (one
        ({}, value) for a scalar result). Raises FleetError without Prometheus, when the query
        fails (bad expression, HTTP error, not JSON) or returns a range vector."""
        if self.prometheus_url is None:
            raise FleetError("this fleet runs without Prometheus")
        url = self.prometheus_url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            body = json.loads(_http_get(url, timeout=30))
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            try:
                detail = json.loads(detail).get("error", detail)
            except ValueError:
                pass
            raise FleetError("query %r failed: HTTP %d: %s" % (expr, e.code, detail)) from None
        except (OSError, ValueError) as e:
            raise FleetError("query %r failed: %s" % (expr, e)) from None
        if body.get("status") != "success":
            raise FleetError("query %r failed: %s" % (expr, body.get("error", body)))
        data = body["data"]
        kind, result = data.get("resultType"), data.get("result")
        if kind == "vector":
            return [(dict(r["metric"]), float(r["value"][1])) for r in result]
        if kind == "scalar":
            return [({}, float(result[1]))]
        raise FleetError("query %r gives a %s, not an instant vector" % (expr, kind))

    def query_sum(self, expr: str) -> float | None:
        """The sum of an instant query's values, or None while it has no series. Raises
        FleetError as query() does."""
        result = self.query(expr)
        if not result:
            return None
        return sum(value for _, value in result)

    def wait_for_scrape(self, timeout: float = 60) -> None:
        """Returns once Prometheus has scraped every target (every daemon's metrics port)
        after this call began, and every running daemon's last scrape succeeded (up == 1),
        so queries see the daemons' counters as of at least this call. Raises FleetError on
        timeout (naming the targets not yet scraped or down) or without Prometheus."""
        if self.prometheus_url is None:
            raise FleetError("this fleet runs without Prometheus")
        began = time.time()
        end = time.monotonic() + timeout
        want = {"127.0.0.1:%d" % p for p in self._metrics_ports if p}
        running = {"127.0.0.1:%d" % self._metrics_ports[i]
                   for i, p in enumerate(self._procs) if p is not None and p.poll() is None}
        missing: set[str] = set(want)
        while True:
            stamps = {labels.get("instance"): value
                      for labels, value in self.query('timestamp(up{job="stitchd"})')}
            ups = {labels.get("instance"): value
                   for labels, value in self.query('up{job="stitchd"}')}
            missing = {t for t in want if stamps.get(t, 0.0) <= began}
            down = {t for t in running if ups.get(t) != 1.0}
            if not missing and not down:
                return
            if time.monotonic() > end:
                raise FleetError("Prometheus did not scrape every daemon within %.0f s: not "
                                 "scraped since %.3f: %s; down: %s (targets: %s/targets)"
                                 % (timeout, began, sorted(missing) or "none",
                                    sorted(down) or "none", self.prometheus_url))
            time.sleep(0.2)

    def scrape(self, daemon: Daemon) -> dict[str, float]:
        """The daemon's own /metrics page now, as {"name{labels}": value} with the series
        names as the page prints them. Raises FleetError when the page cannot be read."""
        try:
            return _parse_metrics(_http_get(daemon.metrics_url))
        except OSError as e:
            raise FleetError("cannot scrape stitchd %d at %s: %s"
                             % (daemon.index, daemon.metrics_url, e)) from None


# ---------------------------------------------------------------------------------------------
# Self-check
# ---------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stitchd", required=True, type=pathlib.Path)
    parser.add_argument("--daemons", type=int, default=2)
    parser.add_argument("--target", default="sm_80")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--no-prometheus", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    args = parser.parse_args(argv)

    # SIGTERM/SIGHUP tear the fleet down as ^C does.
    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="stitchd-fleet-"))
    started = time.monotonic()
    try:
        with Fleet(workdir, args.stitchd, args.daemons, target=args.target,
                   workers=args.workers,
                   prometheus=None if args.no_prometheus else "prometheus") as fleet:
            print("fleet up in %.1f s; Redis Cluster %s" % (time.monotonic() - started,
                                                           fleet.cluster_seeds))
            for d in fleet.daemons:
                print("daemon %d: %s metrics 127.0.0.1:%d pid %d"
                      % (d.index, d.address, d.metrics_port, d.pid))
            if fleet.prometheus_url is not None:
                t = time.monotonic()
                fleet.wait_for_scrape()
                up = fleet.query_sum("count(up == 1)")
                print("Prometheus %s: count(up == 1) = %s (scraped in %.1f s)"
                      % (fleet.prometheus_url, None if up is None else "%g" % up,
                         time.monotonic() - t))
                if up != args.daemons:
                    print("FAIL: expected %d daemons up" % args.daemons)
                    return 1
            t = time.monotonic()
        print("fleet down in %.1f s" % (time.monotonic() - t))
    except FleetError as e:
        print("FAIL: %s" % e, file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        print("interrupted (%s); the fleet was stopped" % (e or "^C"), file=sys.stderr)
        return 130
    finally:
        if args.keep:
            print("work dir kept: %s" % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
