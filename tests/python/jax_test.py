#!/usr/bin/env python3
"""stitch.jax against a real stitchd: the signatures of a jitted Flax BERT-base training step.

  jax_test.py --stitchd PATH --library PATH [unittest arguments]

Runs under the interpreter of .venv-models/ (JAX, Flax and Optax, pinned in
tools/requirements-models.txt; scripts/setup creates it). The package is imported from the
repository's python/ folder with the given libstitch_client.so, and the training step is
tools/make_model_hlo.py's BERT-base (12 layers of width 768, 12 heads, FFN 3072, masked-LM
loss, AdamW with global-norm clipping) at batch 2, sequence 32. One stitchd
(stitchd_process.py) serves the whole module.
"""

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import textwrap
import unittest

from stitchd_process import StitchdProcess

SOURCE_DIR = pathlib.Path(__file__).resolve().parents[2]
BATCH, SEQ = 2, 32

ARGS = argparse.Namespace()
DAEMON = {}  # process (a StitchdProcess), socket
stitch = None  # the package, imported in main()
make_model_hlo = None  # tools/make_model_hlo.py, imported in main()


def setUpModule():
    DAEMON["process"] = StitchdProcess(ARGS.stitchd).start()
    DAEMON["socket"] = DAEMON["process"].socket


def tearDownModule():
    if "process" in DAEMON:
        DAEMON["process"].stop()


def client(**kwargs):
    """A client of the module's daemon with deadlines a loaded 2-core machine meets."""
    kwargs.setdefault("compile_deadline_ms", 300_000)
    kwargs.setdefault("lookup_deadline_ms", 10_000)
    return stitch.Client(DAEMON["socket"], **kwargs)


# The other process of the pre-warm test: a job that computes its own signatures of the same
# step and looks each one up. It prints one JSON line: [[name, outcome, key, reason], ...].
LOOKUP_JOB = textwrap.dedent("""
    import json, sys
    sys.path[:0] = [sys.argv[1] + "/python", sys.argv[1] + "/tools"]
    import make_model_hlo
    import stitch, stitch.jax
    built = make_model_hlo.build_bert(int(sys.argv[3]), int(sys.argv[4]))
    with stitch.Client(sys.argv[2], lookup_deadline_ms=10000,
                       compile_deadline_ms=120000) as c:
        sigs = stitch.jax.signatures(built.step, *built.args, client=c)
        out = []
        for s in sigs:
            r = c.lookup(s)
            out.append([s.name, r.outcome, r.key, r.reason])
    print(json.dumps(out))
""")


class BertTrainingStepTest(unittest.TestCase):
    def test_signatures_compile_then_another_process_hits_every_one(self):
        built = make_model_hlo.build_bert(BATCH, SEQ)
        text = stitch.jax.hlo_text(built.step, *built.args)
        self.assertTrue(text.startswith("HloModule jit_step"), text[:80])
        self.assertEqual(re.findall(r"\bcall\(", text), [], "nested jits are inlined")
        # BERT-base with its masked-LM head: about 110M parameters.
        self.assertEqual(built.params, 109_514_298)

        with client(async_workers=4) as c:
            before = c.stats()
            sigs = stitch.jax.signatures(built.step, *built.args, client=c)
            self.assertEqual(sigs, c.extract(text), "signatures() extracts hlo_text()")
            self.assertGreater(len(sigs), 12, "at least one subgraph per layer")
            names = [s.name for s in sigs]
            self.assertEqual(names, ["jit_step.sg%d" % i for i in range(len(sigs))])
            for s in sigs:
                self.assertGreater(s.nodes, s.parameters, s)
                self.assertGreater(s.outputs, 0, s)
                self.assertGreater(len(s.graph), 0, s)

            report = stitch.jax.warm(built.step, *built.args, client=c, max_in_flight=4)
            after = c.stats()

        print("\n    BERT-base step (batch %d, seq %d): %d signatures, largest %d nodes; "
              "warm %s" % (BATCH, SEQ, len(sigs), max(s.nodes for s in sigs), report),
              file=sys.stderr)
        self.assertEqual(report.signatures, sigs)
        self.assertEqual(report.fallbacks, [], "every signature compiles")
        self.assertTrue(report.ok)
        self.assertEqual(sum(report.outcomes.values()), len(sigs))
        self.assertEqual(set(report.outcomes) - {"compiled", "hit_memory"}, set(),
                         report.outcomes)
        self.assertEqual(len(report.keys), len(sigs))
        for key in report.keys:
            self.assertRegex(key, r"^[0-9a-f]{64}$")
        distinct = set(report.keys)
        # Repeated layers give identical signatures: one compile per distinct key, the rest
        # are hits or joined the same compile.
        self.assertLess(len(distinct), len(sigs))
        self.assertEqual(after["compiles"] - before["compiles"], len(distinct))
        self.assertGreaterEqual(report.outcomes.get("compiled", 0), len(distinct))
        self.assertEqual(after["entries"] - before["entries"], len(distinct))

        done = subprocess.run(
            [sys.executable, "-c", LOOKUP_JOB, str(SOURCE_DIR), DAEMON["socket"], str(BATCH),
             str(SEQ)], capture_output=True, text=True, timeout=600)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        looked_up = json.loads(done.stdout.strip().splitlines()[-1])
        self.assertEqual([n for n, _, _, _ in looked_up], names)
        for (name, outcome, key, reason), expected_key in zip(looked_up, report.keys):
            self.assertEqual(outcome, "hit_memory", "%s: %s" % (name, reason))
            self.assertEqual(key, expected_key, name)


class SmallFunctionsTest(unittest.TestCase):
    def test_matrix_multiplies_only_have_no_signatures(self):
        import jax
        import jax.numpy as jnp

        def matmuls(a, b):
            return (a @ b) @ b.T

        a = jax.ShapeDtypeStruct((16, 32), jnp.float32)
        b = jax.ShapeDtypeStruct((32, 8), jnp.float32)
        with client() as c:
            self.assertEqual(stitch.jax.signatures(matmuls, a, b, client=c), [])
            report = stitch.jax.warm(matmuls, a, b, client=c)
        self.assertEqual((report.signatures, report.outcomes, report.keys), ([], {}, []))
        self.assertTrue(report.ok)

    def test_nested_jits_are_one_signature(self):
        import jax
        import jax.numpy as jnp

        @jax.jit
        def gelu_residual(x, y):
            # jax.nn.gelu and jnp.where are jits of their own: lowered as is they become HLO
            # calls, which the extractor would treat as boundaries.
            return jnp.where(x > 0, jax.nn.gelu(x), y) + y

        x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
        with client() as c:
            sigs = stitch.jax.signatures(gelu_residual, x, x, client=c)
            plain = c.extract(gelu_residual.lower(x, x).as_text(dialect="hlo"))
        self.assertEqual(len(sigs), 1, sigs)
        self.assertEqual(sigs[0].parameters, 2)
        self.assertEqual(sigs[0].outputs, 1)
        self.assertGreater(len(plain), 1, "without inlining the calls split the work")

    def test_static_arguments_and_keywords(self):
        import jax
        import jax.numpy as jnp

        def scaled_softmax(x, power, *, scale):
            return jax.nn.softmax(x ** power * scale, axis=-1)

        x = jax.ShapeDtypeStruct((4, 64), jnp.float32)
        scale = jax.ShapeDtypeStruct((), jnp.float32)
        with client() as c:
            two = stitch.jax.signatures(scaled_softmax, x, 2, static_argnums=(1,), scale=scale,
                                        client=c)
            three = stitch.jax.signatures(scaled_softmax, x, 3, static_argnums=-1,
                                          scale=scale, client=c)
        self.assertEqual(len(two), 1)
        self.assertEqual(len(three), 1)
        # The static power is baked into the graph; x and the scale are its parameters.
        self.assertNotEqual(two[0].graph, three[0].graph)
        self.assertEqual(two[0].parameters, 2)
        with self.assertRaises(ValueError):
            stitch.jax.hlo_text(scaled_softmax, x, 2, static_argnums=(5,), scale=scale)


    def test_an_outer_extent_warms_one_bundle_per_bucket_of_batch_sizes(self):
        import jax
        import jax.numpy as jnp

        def softmax_residual(x, y):
            return jax.nn.softmax(x, axis=-1) + y

        keys = []
        with client() as c:
            for batch in (5, 7, 8, 9):
                x = jax.ShapeDtypeStruct((batch, 96), jnp.float32)
                report = stitch.jax.warm(softmax_residual, x, x, client=c, outer_extent=batch)
                self.assertTrue(report.ok, report.fallbacks)
                self.assertEqual(len(report.keys), 1, report)
                keys.append(report.keys[0])
        # 5, 7 and 8 share the bucket (4, 8]; 9 is in (8, 16].
        self.assertEqual(len(set(keys[:3])), 1, keys)
        self.assertNotEqual(keys[3], keys[0])


class ErrorsTest(unittest.TestCase):
    def test_malformed_text_raises_daemon_error_naming_the_line(self):
        with client() as c:
            with self.assertRaises(stitch.DaemonError) as caught:
                c.extract("HloModule m\nENTRY e {\n  a = f32[4] parameter(0)\n"
                          "  ROOT b = f32[4] add(a, nowhere)\n}\n")
            self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
            self.assertIn("request:4", caught.exception.reason)
            self.assertIn("nowhere", caught.exception.reason)
            with self.assertRaises(stitch.DaemonError) as empty:
                c.extract("")
            self.assertEqual(empty.exception.code, "INVALID_ARGUMENT")
            with self.assertRaises(TypeError):
                c.extract(b"HloModule m")

    def test_unreachable_daemon_raises_rather_than_falling_back(self):
        import jax
        import jax.numpy as jnp

        x = jax.ShapeDtypeStruct((4,), jnp.float32)
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaises(stitch.DaemonError) as caught:
                stitch.jax.signatures(jnp.exp, x, address="unix://%s/nobody.sock" % tmp)
        self.assertEqual(caught.exception.code, "UNAVAILABLE")

    def test_import_stitch_needs_no_jax(self):
        probe = ("import sys; sys.path.insert(0, sys.argv[1]); import stitch, stitch.jax; "
                 "print('jax' in sys.modules)")
        done = subprocess.run([sys.executable, "-c", probe, str(SOURCE_DIR / "python")],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.strip(), "False")


def main():
    global stitch, make_model_hlo
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stitchd", required=True)
    parser.add_argument("--library", required=True, help="a built libstitch_client.so")
    args, rest = parser.parse_known_args()
    ARGS.__dict__.update(vars(args))
    if not os.access(args.stitchd, os.X_OK):
        print("FAIL: stitchd not found at %r" % args.stitchd)
        sys.exit(1)
    sys.path[:0] = [str(SOURCE_DIR / "python"), str(SOURCE_DIR / "tools")]
    os.environ["STITCH_CLIENT_LIBRARY"] = os.path.abspath(args.library)
    import stitch as package  # noqa: E402 (the path is chosen above)
    import stitch.jax  # noqa: F401,E402
    import make_model_hlo as models  # noqa: E402
    stitch = package
    make_model_hlo = models
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
