#!/usr/bin/env python3
"""The Python package `stitch` against a real stitchd.

  client_test.py --stitchd PATH [--library PATH | --installed] [unittest arguments]

With --library, the package is imported from the repository's python/ folder and loads the
given libstitch_client.so (through STITCH_CLIENT_LIBRARY). With --installed, the package must
come installed into the running interpreter with its own bundled library (install_test.sh runs
this file so, from a fresh virtualenv). The test starts one stitchd in a temporary directory,
on a Unix socket and a TCP port, and stops it at the end. Standard library only.
"""

import argparse
import concurrent.futures
import json
import os
import pathlib
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from stitchd_process import StitchdProcess  # noqa: E402

SOURCE_DIR = pathlib.Path(__file__).resolve().parents[2]
HLO_DIR = SOURCE_DIR / "testdata" / "corpus" / "hlo" / "extracted"

ARGS = argparse.Namespace()
DAEMON = {}  # process, tmp, socket, tcp, metrics_port
stitch = None  # the package, imported in main()


def hlo(name):
    return (HLO_DIR / name).read_text()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_daemon():
    process = StitchdProcess(ARGS.stitchd).start()
    DAEMON.update(process=process, tmp=process.tmp, socket=process.socket, tcp=process.tcp,
                  metrics_port=process.metrics_port)


def stop_daemon():
    if "process" in DAEMON:
        DAEMON["process"].stop()


def setUpModule():
    start_daemon()


def tearDownModule():
    stop_daemon()


def run_cli(*args, check=True):
    """Runs `python -m stitch ARGS` with this interpreter and package; returns the process."""
    env = dict(os.environ)
    if not ARGS.installed:
        env["PYTHONPATH"] = str(SOURCE_DIR / "python")
    done = subprocess.run([sys.executable, "-m", "stitch", *args], capture_output=True,
                          text=True, timeout=120, env=env, cwd=tempfile.gettempdir())
    if check and done.returncode != 0:
        raise AssertionError("python -m stitch %s: exit %d\n%s%s" % (
            " ".join(args), done.returncode, done.stdout, done.stderr))
    return done


class PackageTest(unittest.TestCase):
    def test_package_and_library(self):
        lib_path = stitch._lib.library_path()
        self.assertTrue((pathlib.Path(stitch.__file__).parent / "py.typed").is_file())
        if ARGS.installed:
            self.assertNotIn(str(SOURCE_DIR / "python"), stitch.__file__,
                             "the installed package, not the source tree's")
            self.assertEqual(lib_path.parent, pathlib.Path(stitch.__file__).resolve().parent,
                             "the bundled library")
        nm = shutil.which("nm")
        if nm is None:
            self.skipTest("no nm to list the library's symbols")
        out = subprocess.run([nm, "-D", "--defined-only", str(lib_path)], capture_output=True,
                             text=True, check=True).stdout
        symbols = [line.split()[-1] for line in out.splitlines() if line.strip()]
        exported = [s for s in symbols if not s.startswith("stitch_")]
        self.assertIn("stitch_client_compile_hlo", symbols)
        self.assertIn("stitch_client_stats", symbols)
        # Only the C ABI (and the version node the script defines, if listed).
        self.assertEqual([s for s in exported if s not in ("VERS_1.0",)], [])


class ClientTest(unittest.TestCase):
    def test_compile_then_lookup_over_unix_socket(self):
        module = hlo("layernorm_fwd_2d1_f32.hlo")
        with stitch.Client(DAEMON["socket"]) as client:
            r = client.compile(module)
            self.assertEqual(r.outcome, "compiled", r.reason)
            self.assertTrue(r.ok)
            self.assertEqual(r.reason, "")
            self.assertEqual(len(r.key), 64)
            self.assertGreater(len(r.bundle), 0)
            self.assertGreater(len(r.kernels), 0)
            for k in r.kernels:
                self.assertIsInstance(k, stitch.Kernel)
                name, ptx, cubin = k  # a (name, ptx, cubin) tuple
                self.assertIn(".entry " + name, ptx)
                self.assertIsInstance(cubin, bytes)
            again = client.lookup(module)
            self.assertEqual(again.outcome, "hit_local", again.reason)
            self.assertEqual(again.key, r.key)
        # Another client (another job) finds it in the daemon's memory tier, by its own key.
        with stitch.Client(DAEMON["socket"], lookup_deadline_ms=2000) as other:
            hit = other.lookup(module)
            self.assertEqual(hit.outcome, "hit_memory", hit.reason)
            self.assertEqual(hit.key, r.key)
            self.assertEqual([k.name for k in hit.kernels], [k.name for k in r.kernels])
            self.assertEqual(hit.bundle, r.bundle)
            entry = other.get_entry(r.key)
            self.assertEqual(entry.outcome, "hit_memory", entry.reason)
            self.assertEqual(entry.bundle, r.bundle)
            missing = other.get_entry("0" * 64)
            self.assertEqual(missing.outcome, "fallback")
            self.assertEqual(missing.code, "NOT_FOUND", missing.reason)
            self.assertIn(r.key, [e["key"] for e in other.list_entries()])

    def test_tcp_and_a_lookup_miss(self):
        with stitch.Client(DAEMON["tcp"], lookup_deadline_ms=2000) as client:
            miss = client.lookup(hlo("layernorm_fwd_4d3_f32.hlo"))
            self.assertEqual(miss.outcome, "fallback")
            self.assertTrue(miss.reason.startswith("NOT_FOUND"), miss.reason)
            self.assertFalse(miss.ok)
            self.assertEqual((miss.kernels, miss.bundle, miss.key), ([], b"", ""))
            r = client.compile(hlo("layernorm_fwd_4d3_f32.hlo"), target="sm_80")
            self.assertEqual(r.outcome, "compiled", r.reason)
            self.assertEqual(client.stats()["target"] != "", True)

    def test_compile_async(self):
        names = ["layernorm_fwd_4d12_f32.hlo", "bn_stats_reduce_mof_f16.hlo",
                 "convert_into_reduce_bf16_1024x8192.hlo"]
        with stitch.Client(DAEMON["socket"]) as client:
            futures = [client.compile_async(hlo(n)) for n in names]
            for f in futures:
                self.assertIsInstance(f, concurrent.futures.Future)
            results = [f.result(timeout=60) for f in futures]
            for n, r in zip(names, results):
                self.assertIn(r.outcome, ("compiled", "hit_memory"), "%s: %s" % (n, r.reason))
                self.assertGreater(len(r.kernels), 0)
            self.assertEqual(len({r.key for r in results}), len(names))
            # A failure is a fallback in the future too, not an exception.
            bad = client.compile_async("HloModule broken\nENTRY e {").result(timeout=60)
            self.assertEqual(bad.outcome, "fallback")
            with self.assertRaises(TypeError):
                client.compile_async(42)

    def test_usage_measured_times_and_stats(self):
        module = hlo("rmsnorm_diamond_f32.hlo")
        with stitch.Client(DAEMON["socket"], fallback="xla") as client:
            r = client.compile(module)
            self.assertTrue(r.ok, r.reason)
            before = client.stats()
            client.record_invocations(r.key, 700)
            client.record_time(r.key, "stitched", 5 * 20e-6, samples=5)
            client.record_time(r.key, "fallback", 4 * 45e-6, samples=4)
            self.assertTrue(client.flush_usage())
            self.assertTrue(client.flush_usage(), "nothing pending is a success")
            stats = client.stats()
            self.assertEqual(stats["invocations_reported"] - before["invocations_reported"], 700)
            self.assertGreaterEqual(stats["runtime_keys"], 1)
            self.assertIsInstance(stats["invocations_reported"], int)
            self.assertGreater(stats["gpu_seconds_saved"], 0)
            runtimes = {rt["key"]: rt for rt in client.list_runtimes()}
            self.assertIn(r.key, runtimes)
            rt = runtimes[r.key]
            self.assertEqual(rt["stitched"]["samples"], 5)
            self.assertEqual(rt["fallback"]["xla"]["samples"], 4)
            self.assertAlmostEqual(rt["stitched"]["seconds_sum"], 100e-6)
            self.assertEqual(rt["invocations"], 700)
            self.assertIsNone(r.runtimes, "the first answer came before any timing")
            self.assertIsNone(client.compile(module).runtimes, "an in-process hit asks no one")
            # should_time_fallback samples one call in 100.
            sampled = sum(client.should_time_fallback() for _ in range(300))
            self.assertEqual(sampled, 3)
        csv = run_cli("runtimes", "--daemon", DAEMON["socket"], "--csv").stdout.splitlines()
        self.assertEqual(csv[0].split(",")[:3], ["key", "target", "kernels"])
        rows = [line.split(",") for line in csv[1:] if line.startswith(r.key)]
        self.assertEqual(sorted(row[2] for row in rows), ["stitched", "xla"])
        self.assertEqual({row[9] for row in rows}, {"700"})
        # Another job's client reads the timings with the kernels, without timing again.
        with stitch.Client(DAEMON["socket"], lookup_deadline_ms=10000) as other:
            again = other.lookup(module)
            self.assertTrue(again.ok, again.reason)
            self.assertEqual(again.runtimes["key"], r.key)
            self.assertEqual(again.runtimes["stitched"]["samples"], 5)
            self.assertAlmostEqual(again.runtimes["fallback"]["xla"]["seconds_sum"], 180e-6)

    def test_extract_then_compile_and_look_up_the_signatures(self):
        text = hlo("batchnorm_grad_op.hlo") + "\n// -----\n" + hlo("rmsnorm_diamond_f32.hlo")
        with stitch.Client(DAEMON["socket"]) as client:
            sigs = client.extract(text)
            self.assertGreaterEqual(len(sigs), 2, sigs)
            self.assertEqual(len({s.name for s in sigs}), len(sigs), "names are unique")
            for s in sigs:
                self.assertIsInstance(s, stitch.Signature)
                self.assertRegex(s.name, r"\.sg\d+$")
                self.assertGreater(s.nodes, s.parameters)
                self.assertGreater(s.parameters, 0)
                self.assertGreater(s.outputs, 0)
            self.assertEqual(client.extract(text), sigs, "extraction is deterministic")
            # A Signature is a compile argument as it is, and as its graph bytes.
            results = [client.compile(s) for s in sigs]
            for s, r in zip(sigs, results):
                self.assertIn(r.outcome, ("compiled", "hit_memory"), "%s: %s" % (s.name, r.reason))
        with stitch.Client(DAEMON["socket"], lookup_deadline_ms=2000) as other:
            for s, r in zip(sigs, results):
                hit = other.lookup(s.graph)
                self.assertEqual(hit.outcome, "hit_memory", hit.reason)
                self.assertEqual(hit.key, r.key)
            with self.assertRaises(stitch.DaemonError) as caught:
                other.extract("HloModule m\nENTRY e {\n  ROOT x = f32[4] add(y, y)\n}\n")
            self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
            self.assertIn("request:3", caught.exception.reason)
            with self.assertRaises(TypeError):
                other.extract(b"HloModule m")

    def test_an_outer_extent_makes_every_batch_of_a_bucket_share_one_bundle(self):
        def row_softmax(rows):
            return ("HloModule rows_%d\n\nadd {\n  a = f32[] parameter(0)\n"
                    "  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\n"
                    "ENTRY main {\n  x = f32[%d,32]{1,0} parameter(0)\n"
                    "  e = f32[%d,32]{1,0} exponential(x)\n  zero = f32[] constant(0)\n"
                    "  s = f32[%d]{0} reduce(e, zero), dimensions={1}, to_apply=add\n"
                    "  b = f32[%d,32]{1,0} broadcast(s), dimensions={0}\n"
                    "  ROOT d = f32[%d,32]{1,0} divide(e, b)\n}\n") % ((rows,) * 6)
        with stitch.Client(DAEMON["socket"]) as client:
            keys = set()
            for rows in (9, 13, 16):
                sigs = client.extract(row_softmax(rows), outer_extent=rows)
                self.assertEqual(len(sigs), 1, sigs)
                r = client.compile(sigs[0])
                self.assertTrue(r.ok, r.reason)
                keys.add(r.key)
            self.assertEqual(len(keys), 1, "9, 13 and 16 rows share the bucket (8, 16]")
            exact = {client.compile(client.extract(row_softmax(rows))[0]).key for rows in (9, 13)}
            self.assertEqual(len(exact), 2, "without an extent, each shape is its own key")
            self.assertFalse(exact & keys)
            with self.assertRaises(ValueError):
                client.extract(row_softmax(9), outer_extent=-1)
            with self.assertRaises(TypeError):
                client.extract(row_softmax(9), outer_extent=9.0)

    def test_outer_parameters_on_hlo_text_share_the_buckets_bundle(self):
        def row_softmax(rows):
            return ("HloModule generic_rows_%d\n\nadd {\n  a = f32[] parameter(0)\n"
                    "  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\n"
                    "ENTRY main {\n  x = f32[%d,48]{1,0} parameter(0)\n"
                    "  e = f32[%d,48]{1,0} exponential(x)\n  zero = f32[] constant(0)\n"
                    "  s = f32[%d]{0} reduce(e, zero), dimensions={1}, to_apply=add\n"
                    "  b = f32[%d,48]{1,0} broadcast(s), dimensions={0}\n"
                    "  ROOT d = f32[%d,48]{1,0} divide(e, b)\n}\n") % ((rows,) * 6)
        seed = int(os.environ.get("STITCH_TEST_SEED", random.randrange(1 << 32)))
        print("outer parameters: seed %d" % seed, file=sys.stderr)
        # Two row counts of the bucket (16, 32], drawn from the logged seed.
        first, second = random.Random(seed).sample(range(17, 33), 2)
        with stitch.Client(DAEMON["socket"]) as client:
            r = client.compile(row_softmax(first), outer_parameters=(0,))
            self.assertEqual(r.outcome, "compiled", r.reason)
            self.assertEqual(r.outer_extent, (17, 32))
            again = client.compile(row_softmax(second), outer_parameters=[0])
            self.assertEqual(again.outcome, "hit_memory", again.reason)
            self.assertEqual(again.key, r.key, "%d and %d rows share a bucket" % (first, second))
            self.assertEqual(again.outer_extent, (17, 32))
            self.assertIn("outer_extent=(17, 32)", repr(again))
            local = client.lookup(row_softmax(second), outer_parameters=(0,))
            self.assertEqual(local.outcome, "hit_local", local.reason)
            self.assertEqual(local.outer_extent, (17, 32))
            done = client.compile_async(row_softmax(first), None, iter([0])).result(60)
            self.assertEqual(done.key, r.key, done.reason)
            # The same text without outer parameters is an exact bundle of its own.
            exact = client.compile(row_softmax(first))
            self.assertTrue(exact.ok, exact.reason)
            self.assertNotEqual(exact.key, r.key)
            self.assertIsNone(exact.outer_extent)
            # Numbers the module does not have are the daemon's refusal, naming them.
            bad = client.compile(row_softmax(first), outer_parameters=(4,))
            self.assertEqual(bad.code, "INVALID_ARGUMENT", bad.reason)
            self.assertIn("outer parameter 4", bad.reason)
            self.assertIsNone(bad.outer_extent)
            # A graph names its own outer parameters; the keyword is for HLO text.
            sig = client.extract(row_softmax(first))[0]
            for subgraph in (sig, sig.graph):
                with self.assertRaises(ValueError):
                    client.compile(subgraph, outer_parameters=(0,))
                with self.assertRaises(ValueError):
                    client.compile_async(subgraph, outer_parameters=(0,))
            self.assertTrue(client.compile(sig, outer_parameters=()).ok)
            for wrong in ((0.0,), (True,), ("0",), "0", 0, None):
                with self.assertRaises(TypeError, msg=repr(wrong)):
                    client.compile(row_softmax(first), outer_parameters=wrong)
                with self.assertRaises(TypeError, msg=repr(wrong)):
                    client.lookup(row_softmax(first), outer_parameters=wrong)
                with self.assertRaises(TypeError, msg=repr(wrong)):
                    client.compile_async(row_softmax(first), outer_parameters=wrong)
            for negative in ((-1,), (0, -2), (1 << 63,)):
                with self.assertRaises(ValueError, msg=repr(negative)):
                    client.compile(row_softmax(first), outer_parameters=negative)
                with self.assertRaises(ValueError, msg=repr(negative)):
                    client.compile_async(row_softmax(first), outer_parameters=negative)

    def test_malformed_input_falls_back(self):
        with stitch.Client(DAEMON["socket"]) as client:
            r = client.compile("HloModule broken\nENTRY e { ROOT x = f32[4] nonsense( }\n")
            self.assertEqual(r.outcome, "fallback")
            self.assertEqual(r.code, "INVALID_ARGUMENT", r.reason)
            g = client.compile(b"\xff\xff\xff\xff not a graph")
            self.assertEqual(g.outcome, "fallback")
            self.assertEqual(g.code, "INVALID_ARGUMENT", g.reason)
            empty = client.compile("")
            self.assertEqual(empty.code, "INVALID_ARGUMENT", empty.reason)

    def test_daemon_down_falls_back_within_the_deadline(self):
        with tempfile.TemporaryDirectory(prefix="stitch-py-") as tmp:
            for address in (os.path.join(tmp, "nobody.sock"), "127.0.0.1:%d" % free_port()):
                with stitch.Client(address, lookup_deadline_ms=50,
                                   compile_deadline_ms=300) as client:
                    start = time.monotonic()
                    r = client.lookup(hlo("layernorm_fwd_2d1_f32.hlo"))
                    self.assertLess(time.monotonic() - start, 0.5)
                    self.assertEqual(r.outcome, "fallback")
                    self.assertIn(r.code, ("UNAVAILABLE", "DEADLINE_EXCEEDED"), r.reason)
                    start = time.monotonic()
                    r = client.compile(hlo("layernorm_fwd_2d1_f32.hlo"))
                    self.assertLess(time.monotonic() - start, 1.0)
                    self.assertEqual(r.code, "UNAVAILABLE", r.reason)
                    self.assertEqual(client.compile_async("HloModule m").result(10).outcome,
                                     "fallback")
                    client.record_invocations("k" * 64, 3)
                    self.assertFalse(client.flush_usage(), "kept for the next flush")
                    with self.assertRaises(stitch.DaemonError) as caught:
                        client.stats()
                    self.assertEqual(caught.exception.code, "UNAVAILABLE")

    def test_programmer_errors_raise(self):
        client = stitch.Client(DAEMON["socket"])
        with self.assertRaises(TypeError):
            client.compile(42)
        with self.assertRaises(TypeError):
            client.compile("HloModule m", target=90)
        with self.assertRaises(ValueError):
            client.record_time("k", "stitched", -1.0)
        with self.assertRaises(ValueError):
            client.record_time("k", "stitched", 1e-5, samples=0)
        with self.assertRaises(ValueError):
            client.record_time("k", "cudnn", 1e-5)
        with self.assertRaises(ValueError):
            client.set_fallback("tensorrt")
        with self.assertRaises(ValueError):
            client.record_invocations("k", -1)
        with self.assertRaises(ValueError):
            stitch.Client(DAEMON["socket"], lookup_deadline_ms=0)
        client.set_fallback("inductor")
        client.set_fallback(None)
        client.close()
        client.close()
        self.assertTrue(client.closed)
        with self.assertRaises(stitch.ClientClosedError):
            client.compile("HloModule m")
        with self.assertRaises(stitch.ClientClosedError):
            client.stats()


def make_certificates(directory):
    """A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate of
    the CA, made with the openssl command line; returns {name: path}."""
    d = pathlib.Path(directory)
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)

    openssl("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.pem", "-days", "30",
            "-subj", "/CN=stitch python test CA")
    for name, ext in (("server", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
                      ("client", "extendedKeyUsage=clientAuth")):
        (d / (name + ".ext")).write_text(ext + "\n")
        openssl("req", *key, "-keyout", name + ".key", "-out", name + ".csr", "-subj",
                "/CN=" + name)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "30", "-out", name + ".pem", "-extfile",
                name + ".ext")
    return {n: str(d / n) for n in ("ca.pem", "server.pem", "server.key", "client.pem",
                                    "client.key")}


class TlsTest(unittest.TestCase):
    """stitch.Client's tls_* arguments against a daemon that requires client certificates."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="stitch-py-tls-")
        cls.certs = make_certificates(cls.tmp)
        cls.daemon = StitchdProcess(ARGS.stitchd, extra_args=(
            "--tls-cert-file", cls.certs["server.pem"], "--tls-key-file",
            cls.certs["server.key"], "--tls-client-ca-file", cls.certs["ca.pem"],
            "--grpc-require-tls")).start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_client_certificate_is_accepted(self):
        c = self.certs
        with stitch.Client(self.daemon.tcp, tls_ca=c["ca.pem"], tls_cert=c["client.pem"],
                           tls_key=pathlib.Path(c["client.key"])) as client:
            r = client.compile(hlo("layernorm_fwd_4d3_f32.hlo"), target="sm_80")
            self.assertIn(r.outcome, ("compiled", "hit_memory"), r.reason)
            self.assertNotEqual(client.stats()["target"], "")

    def test_without_a_client_certificate_the_call_falls_back(self):
        for kwargs in ({"tls_ca": self.certs["ca.pem"]}, {}):
            with stitch.Client(self.daemon.tcp, **kwargs) as client:
                r = client.compile(hlo("layernorm_fwd_4d3_f32.hlo"), target="sm_80")
                self.assertEqual(r.outcome, "fallback")
                self.assertTrue(r.reason.startswith("UNAVAILABLE"), (kwargs, r.reason))
                with self.assertRaises(stitch.DaemonError):
                    client.stats()

    def test_unreadable_files_and_half_a_key_pair(self):
        missing = os.path.join(self.tmp, "missing.pem")
        with stitch.Client(self.daemon.tcp, tls_ca=missing) as client:
            r = client.compile(hlo("layernorm_fwd_4d3_f32.hlo"), target="sm_80")
            self.assertTrue(r.reason.startswith("FAILED_PRECONDITION"), r.reason)
            self.assertIn(missing, r.reason)
        with self.assertRaises(ValueError):
            stitch.Client(self.daemon.tcp, tls_cert=self.certs["client.pem"])
        with self.assertRaises(TypeError):
            stitch.Client(self.daemon.tcp, tls_ca=3)


class CommandLineTest(unittest.TestCase):
    def test_stats_json(self):
        stats = json.loads(run_cli("stats", "--daemon", DAEMON["socket"], "--json").stdout)
        self.assertIn("compiles", stats)
        self.assertIn("runtime_keys", stats)
        self.assertEqual(list(stats), sorted(stats), "keys sorted, as stitchctl prints them")
        text = run_cli("stats", "--daemon", DAEMON["socket"]).stdout
        self.assertIn("version: \"", text)

    def test_compile_lookup_and_cache(self):
        path = str(HLO_DIR / "layernorm_fwd_4d3_f16_convert.hlo")
        out = run_cli("compile", path, "--daemon", DAEMON["socket"]).stdout.split()
        self.assertIn(out[0], ("compiled", "hit_memory"))
        key = out[1]
        self.assertEqual(len(key), 64)
        self.assertIn("kernel(s)", out)
        j = json.loads(run_cli("lookup", path, "--daemon", DAEMON["tcp"], "--json").stdout)
        self.assertEqual((j["source"], j["key"]), ("hit_memory", key))
        self.assertGreater(j["kernels"][0]["ptx_bytes"], 0)
        listing = run_cli("cache", "ls", "--daemon", DAEMON["socket"]).stdout
        self.assertIn(key, listing)
        with tempfile.TemporaryDirectory() as tmp:
            bundle = os.path.join(tmp, "b.pb")
            got = run_cli("cache", "get", key, "--daemon", DAEMON["socket"], "--out", bundle)
            self.assertIn("wrote", got.stdout)
            self.assertGreater(os.path.getsize(bundle), 0)

    def test_failures_exit_1_with_one_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "bad.hlo")
            pathlib.Path(bad).write_text("HloModule bad\nENTRY e { nonsense }\n")
            done = run_cli("compile", bad, "--daemon", DAEMON["socket"], check=False)
            self.assertEqual(done.returncode, 1)
            self.assertEqual(len(done.stderr.strip().splitlines()), 1, done.stderr)
            self.assertIn("INVALID_ARGUMENT", done.stderr)
            down = run_cli("stats", "--daemon", os.path.join(tmp, "nobody.sock"), check=False)
            self.assertEqual(down.returncode, 1)
            self.assertIn("UNAVAILABLE", down.stderr)


def main():
    global stitch
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stitchd", required=True)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--library", help="a built libstitch_client.so (source-tree package)")
    source.add_argument("--installed", action="store_true",
                        help="use the package installed into this interpreter")
    args, rest = parser.parse_known_args()
    ARGS.__dict__.update(vars(args))
    if not os.access(args.stitchd, os.X_OK):
        print("FAIL: stitchd not found at %r" % args.stitchd)
        sys.exit(1)
    if args.installed:
        os.environ.pop("STITCH_CLIENT_LIBRARY", None)
    else:
        sys.path.insert(0, str(SOURCE_DIR / "python"))
        os.environ["STITCH_CLIENT_LIBRARY"] = os.path.abspath(args.library)
    import stitch as package  # noqa: E402 (the path is chosen above)
    import stitch._lib  # noqa: F401,E402
    stitch = package
    print("stitch package: %s, library: %s" % (stitch.__file__, stitch._lib.library_path()))
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
