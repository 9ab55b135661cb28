#!/usr/bin/env python3
"""The disk tier's durability against a real stitchd.

  durability_test.py --stitchd PATH --library PATH [--entries N] [--kills K] [unittest args]

Kill9Test writes --entries distinct entries under concurrent load and kill -9s the daemon
--kills times at points drawn from a logged seed (STITCH_TEST_SEED replays one): most while
2-6 writers compile and a reader re-reads old entries, one in five while the daemon restarts
after such a kill. stitchd
answers a compile only after the bundle is in RocksDB's write-ahead log (written, not
fsynced: README, "Durability"), so a killed process loses nothing it acknowledged: after every
restart each acknowledged key must come back from disk with the very bundle bytes the compile
returned, nothing may be dropped as corrupt, and the restart must get past the stale lock
files, socket and stitchd.json the killed daemon left.

DiskFullTest runs the daemon on a small tmpfs (ENOSPC for real), fills it, and checks that
compiles still answer, the daemon stays up and logs and counts every failed cache write
(stitch_cache_write_errors_total), and that writes land again once space is freed.

Standard library only, plus the `stitch` package from python/ over --library.
"""

import argparse
import hashlib
import json
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from stitchd_process import StitchdProcess  # noqa: E402

SOURCE_DIR = pathlib.Path(__file__).resolve().parents[2]
ARGS = argparse.Namespace()
stitch = None  # the package, imported in main()

OPS = ("add", "multiply", "maximum", "subtract")


def module(i):
    """The i-th HLO module: small and elementwise, so it compiles in milliseconds, and distinct
    for every i (its shape and constant differ), so every i is its own cache key."""
    n = 64 + i
    return ("HloModule durability_%d\n"
            "ENTRY e {\n"
            "  p = f32[%d] parameter(0)\n"
            "  c = f32[] constant(%d)\n"
            "  b = f32[%d] broadcast(c), dimensions={}\n"
            "  ROOT r = f32[%d] %s(p, b)\n"
            "}\n") % (i, n, i % 97, n, n, OPS[i % len(OPS)])


def digest(data):
    return hashlib.sha256(data).hexdigest()


def scrape(port):
    """Returns {name: summed value} over the daemon's /metrics samples (labels summed)."""
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read()
    out = {}
    for line in text.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


def metric(port, name, labels):
    """Returns the value of the one sample of `name` whose labels include `labels`, or None."""
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read()
    for line in text.decode().splitlines():
        if line.startswith(name + "{") and all('%s="%s"' % kv in line for kv in labels.items()):
            return float(line.rsplit(" ", 1)[1])
        if line.startswith(name + " ") and not labels:
            return float(line.rsplit(" ", 1)[1])
    return None


def seed_from_env():
    value = os.environ.get("STITCH_TEST_SEED")
    return int(value) if value else random.SystemRandom().randrange(1 << 32)


class Kill9Test(unittest.TestCase):
    def setUp(self):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="stitchd-kill9-"))
        self.daemon = StitchdProcess(ARGS.stitchd, workers=2, directory=self.dir)

    def tearDown(self):
        self.daemon.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def verify(self, acked, round_no):
        """Every acknowledged key comes back from the restarted daemon's disk tier with the
        bytes its compile returned; nothing was dropped as corrupt."""
        with stitch.Client(self.daemon.socket, lookup_deadline_ms=20000) as client:
            for key, want in acked.items():
                got = client.get_entry(key)
                self.assertTrue(got.ok, "round %d: acknowledged key %s is gone: %s\n%s" % (
                    round_no, key, got.reason, self.daemon.log()[-3000:]))
                self.assertEqual(got.outcome, "hit_disk", "round %d: key %s" % (round_no, key))
                self.assertEqual(digest(got.bundle), want,
                                 "round %d: key %s served other bytes than acknowledged" % (
                                     round_no, key))
        totals = scrape(self.daemon.metrics_port)
        self.assertEqual(totals.get("stitch_cache_corrupt_entries_total", 0.0), 0.0,
                         "round %d: entries were dropped as corrupt" % round_no)
        disk = metric(self.daemon.metrics_port, "stitch_cache_entries", {"tier": "disk"})
        self.assertIsNotNone(disk)
        self.assertGreaterEqual(disk, len(acked), "round %d" % round_no)

    def assert_stale_state(self, dead_pid, round_no):
        """What kill -9 leaves behind, which the next start must get past."""
        data = self.dir / "data"
        for path in (data / "stitchd.lock", data / "cache" / "LOCK", self.dir / "s.sock",
                     self.dir / "s.sock.lock"):
            self.assertTrue(path.exists(), "round %d: %s should be left behind" % (round_no, path))
        info = json.loads((data / "stitchd.json").read_text())
        self.assertEqual(info["pid"], dead_pid, "round %d: stitchd.json is not the dead one's"
                         % round_no)

    def test_acknowledged_entries_survive_kill_9(self):
        seed = seed_from_env()
        entries, kills = ARGS.entries, ARGS.kills
        print("durability_kill9: seed=%d entries=%d kills=%d (replay: STITCH_TEST_SEED=%d)"
              % (seed, entries, kills, seed), flush=True)
        rng = random.Random(seed)
        acked = {}  # key -> sha256 of the acknowledged bundle bytes
        next_index = [0]
        lock = threading.Lock()
        restart_seconds = []
        started = time.time()

        # One kill in five lands while the daemon restarts (RocksDB replaying its WAL, the store
        # rebuilding its index, the socket being taken over) rather than while it writes.
        write_rounds = kills - kills // 5
        restart_kills = set(rng.sample(range(1, write_rounds + 1), kills // 5))
        early_kills = 0
        self.daemon.start()
        for round_no in range(1, write_rounds + 1):
            remaining = entries - len(acked)
            rounds_left = write_rounds - round_no + 1
            quota = max(1, remaining // rounds_left)
            # Kill once this round has acknowledged `threshold` entries, a little later still,
            # so that writes are in flight at the kill.
            threshold = min(remaining, rng.randint(max(1, quota // 2), max(1, quota * 3 // 2)))
            if round_no == write_rounds:
                threshold = remaining
            delay = rng.uniform(0, 0.03)
            writers = rng.randint(2, 6)
            self.run_round(acked, next_index, lock, threshold, delay, writers, rng, round_no)
            dead = self.daemon.process.pid
            self.assert_stale_state(dead, round_no)
            if round_no in restart_kills:
                early_kills += self.kill_while_starting(rng.uniform(0, 0.2))
            t = time.time()
            self.daemon.start(timeout=60)
            restart_seconds.append(time.time() - t)
            self.assertNotEqual(self.daemon.process.pid, dead)
            self.verify(acked, round_no)

        self.assertGreaterEqual(len(acked), entries)
        # The recovered locks are held again: a second daemon on the same directory is refused,
        # naming the live one.
        second = subprocess.run(
            [ARGS.stitchd, "--data-dir", str(self.dir / "data"), "--socket",
             str(self.dir / "s.sock"), "--grpc-listen", "127.0.0.1:0", "--metrics-listen",
             "127.0.0.1:0"], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(second.returncode, 0)
        self.assertIn("pid %d" % self.daemon.process.pid, second.stdout + second.stderr)
        # And the last one still stops cleanly.
        self.daemon.process.send_signal(signal.SIGTERM)
        self.assertEqual(self.daemon.process.wait(timeout=60), 0, self.daemon.log()[-3000:])
        print("durability_kill9: seed=%d: %d entries acknowledged, %d kills (%d while "
              "restarting, %d of them before it served), all present and intact after every "
              "restart; restarts took at most %.2f s; %.1f s in all"
              % (seed, len(acked), kills, len(restart_kills), early_kills,
                 max(restart_seconds), time.time() - started), flush=True)

    def kill_while_starting(self, delay):
        """Starts the daemon and kill -9s it `delay` seconds later, serving or not yet;
        returns True when it was killed before it served."""
        dead = self.daemon.process.pid

        def kill():
            # start() sets the new process first, then waits for it to serve.
            deadline = time.time() + 60
            while self.daemon.process.pid == dead and time.time() < deadline:
                time.sleep(0.001)
            time.sleep(delay)
            self.daemon.process.kill()

        killer = threading.Thread(target=kill)
        killer.start()
        early = False
        try:
            self.daemon.start(timeout=60)
        except RuntimeError:
            early = True  # killed before it served
        killer.join()
        self.daemon.kill()
        self.assertNotEqual(self.daemon.process.pid, dead)
        return early

    def run_round(self, acked, next_index, lock, threshold, delay, writers, rng, round_no):
        """Compiles new modules from `writers` threads while one thread re-reads old entries
        (each read rewrites the key's LRU record), and kill -9s the daemon once `threshold`
        entries of this round are acknowledged and `delay` seconds more have passed."""
        done = threading.Event()
        this_round = [0]
        reached = threading.Event()
        errors = []
        old_keys = list(acked)
        reader_rng = random.Random(rng.randrange(1 << 32))
        client = stitch.Client(self.daemon.socket, compile_deadline_ms=60000,
                               lookup_deadline_ms=20000)

        def write():
            while not done.is_set():
                with lock:
                    i = next_index[0]
                    next_index[0] += 1
                result = client.compile(module(i))
                if not result.ok:
                    # Only the kill may fail a compile.
                    if not done.is_set():
                        errors.append("module %d: %s" % (i, result.reason))
                    return
                with lock:
                    acked[result.key] = digest(result.bundle)
                    this_round[0] += 1
                    if this_round[0] >= threshold:
                        reached.set()

        def read():
            while old_keys and not done.is_set():
                key = reader_rng.choice(old_keys)
                got = client.get_entry(key)
                if got.ok and digest(got.bundle) != acked[key]:
                    errors.append("key %s served other bytes than acknowledged" % key)

        threads = [threading.Thread(target=write) for _ in range(writers)]
        threads.append(threading.Thread(target=read))
        for t in threads:
            t.start()
        try:
            self.assertTrue(reached.wait(timeout=300), "round %d: too slow" % round_no)
            time.sleep(delay)
        finally:
            done.set()
            self.daemon.kill()
            for t in threads:
                t.join()
            client.close()
        self.assertEqual(errors, [], "round %d" % round_no)


class DiskFullTest(unittest.TestCase):
    # RocksDB (default options) preallocates 70.4 MB for each WAL file, which would keep the
    # first writes off a full disk, and it clears a full disk's error only once 64 MiB (its
    # reserve for a memtable flush) are free. At 70 MiB the preallocation fails, so writes hit
    # ENOSPC as soon as the disk is full, and freeing the ballast frees more than the reserve.
    SIZE_MB = 70

    def setUp(self):
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="stitchd-full-"))
        self.mount = self.root / "data"
        self.mount.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm" % self.SIZE_MB, "tmpfs",
                               str(self.mount)], capture_output=True, text=True)
        # Not a skip: without a small filesystem the test cannot show anything, so it fails.
        self.assertEqual(done.returncode, 0, "cannot mount a tmpfs (the test needs root): %s"
                         % done.stderr)
        self.mounted = True
        self.daemon = StitchdProcess(ARGS.stitchd, workers=2, directory=self.root,
                                     extra_args=["--log-level", "info"])

    def tearDown(self):
        self.daemon.stop()
        if self.mounted:
            subprocess.run(["umount", str(self.mount)], check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def fill(self):
        """Fills the filesystem up to its last byte; returns the file doing it."""
        ballast = self.mount / "ballast"
        fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for size in (1 << 20, 4096, 1):
                try:
                    while True:
                        os.write(fd, b"\0" * size)
                except OSError:
                    pass
        finally:
            os.close(fd)
        return ballast

    def test_compiles_answer_on_a_full_disk(self):
        # The helper's data dir, <root>/data, is the tmpfs.
        self.daemon.start()
        port = self.daemon.metrics_port
        with stitch.Client(self.daemon.socket, compile_deadline_ms=60000) as client:
            first = client.compile(module(0))
            self.assertEqual(first.outcome, "compiled", first.reason)
            self.assertEqual(metric(port, "stitch_cache_write_errors_total", {"tier": "disk"}), 0)

            ballast = self.fill()
            failed_before = 0.0
            bundles = {}
            for i in range(1, 41):
                r = client.compile(module(i))
                self.assertEqual(r.outcome, "compiled", "module %d on a full disk: %s" % (
                    i, r.reason))
                self.assertGreater(len(r.kernels), 0)
                bundles[r.key] = digest(r.bundle)
            self.assertIsNone(self.daemon.process.poll(), "stitchd died on a full disk")
            failed = metric(port, "stitch_cache_write_errors_total", {"tier": "disk"})
            self.assertIsNotNone(failed, "no stitch_cache_write_errors_total{tier=\"disk\"}")
            # Each compile's disk write failed, and each is counted and logged.
            self.assertGreaterEqual(failed - failed_before, len(bundles), self.daemon.log()[-3000:])
            self.assertGreaterEqual(self.daemon.log().count("cache write failed for"),
                                    len(bundles))
            # What could not be stored is still served, from memory.
            for key, want in bundles.items():
                got = client.get_entry(key)
                self.assertTrue(got.ok, got.reason)
                self.assertEqual(digest(got.bundle), want)
            self.assertTrue(client.get_entry(first.key).ok)

            # Space returns: writes land on disk again and the count stops growing.
            ballast.unlink()
            deadline = time.time() + 60
            landed = None
            i = 100
            while time.time() < deadline:
                errors = metric(port, "stitch_cache_write_errors_total", {"tier": "disk"})
                disk = metric(port, "stitch_cache_entries", {"tier": "disk"})
                r = client.compile(module(i))
                self.assertTrue(r.ok, r.reason)
                # This compile's write landed: no new failure, one more entry on disk.
                if (metric(port, "stitch_cache_write_errors_total", {"tier": "disk"}) == errors
                        and metric(port, "stitch_cache_entries", {"tier": "disk"}) == disk + 1):
                    landed = (r.key, digest(r.bundle))
                    break
                i += 1
                time.sleep(0.2)
            self.assertIsNotNone(landed, "writes did not resume after space was freed:\n"
                                 + self.daemon.log()[-3000:])
            self.assertIn("succeed again", self.daemon.log())
        # After a restart (memory empty) the entry written after the disk recovered is read
        # back from disk, intact.
        self.daemon.process.send_signal(signal.SIGTERM)
        self.assertEqual(self.daemon.process.wait(timeout=60), 0, self.daemon.log()[-3000:])
        self.daemon.start()
        with stitch.Client(self.daemon.socket) as client:
            got = client.get_entry(landed[0])
            self.assertEqual(got.outcome, "hit_disk", got.reason)
            self.assertEqual(digest(got.bundle), landed[1])


def main():
    global stitch
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stitchd", required=True)
    parser.add_argument("--library", required=True)
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--kills", type=int, default=20)
    args, rest = parser.parse_known_args()
    ARGS.__dict__.update(vars(args))
    os.environ["STITCH_CLIENT_LIBRARY"] = str(pathlib.Path(args.library).resolve())
    sys.path.insert(0, str(SOURCE_DIR / "python"))
    import stitch as package  # noqa: E402
    stitch = package
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
