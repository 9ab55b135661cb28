"""A real stitchd for the Python tests: started in a temporary directory on a Unix socket and
a TCP port chosen by the kernel, stopped with SIGTERM. Standard library only."""

import json
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time


class StitchdProcess:
    """One stitchd. ``socket`` and ``tcp`` are client addresses once started."""

    def __init__(self, stitchd, workers=2, extra_args=(), directory=None):
        self.stitchd = str(stitchd)
        # A caller-owned directory (data dir, socket and log inside) is reused by every
        # start and kept by stop(), so that a restart finds what the last run left there.
        self.directory = pathlib.Path(directory) if directory is not None else None
        self.workers = workers
        self.extra_args = list(extra_args)
        self.process = None
        self.tmp = None
        self.socket = self.tcp = None
        self.metrics_port = None

    def start(self, timeout=60):
        """Starts the daemon and waits until it has written its ports; raises with the tail of
        its log when it exits or does not serve in time."""
        self.tmp = self.directory or pathlib.Path(tempfile.mkdtemp(prefix="stitchd-py-"))
        data, sock = self.tmp / "data", self.tmp / "s.sock"
        with open(self.tmp / "stitchd.log", "a" if self.directory else "w") as log:
            self.process = subprocess.Popen(
                [self.stitchd, "--data-dir", str(data), "--socket", str(sock),
                 "--grpc-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                 "--workers", str(self.workers), "--log-level", "warn", *self.extra_args],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("stitchd exited with %s: %s" % (self.process.returncode,
                                                                   self.log()[-2000:]))
            try:
                info = json.loads((data / "stitchd.json").read_text())
                if info.get("pid") == self.process.pid:
                    self.socket = "unix://" + str(sock)
                    self.tcp = "127.0.0.1:%d" % info["grpc_port"]
                    self.metrics_port = info["metrics_port"]
                    return self
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("stitchd did not serve within %d s" % timeout)

    def log(self):
        """The daemon's log so far."""
        return (self.tmp / "stitchd.log").read_text() if self.tmp else ""

    def stop(self):
        """Stops the daemon (SIGTERM, then SIGKILL after 30 s) and removes its directory, unless
        the caller owns it."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.tmp is not None and self.directory is None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def kill(self):
        """Sends SIGKILL and reaps the process, leaving everything it wrote where it was."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if self.process is not None:
            self.process.wait()
