#!/usr/bin/env python3
"""The GPU step benchmark's models through stitch.torch against a real stitchd, and the
benchmark's own plumbing, on the CPU (python_torch2_models, with the pinned PyTorch 2.x of
.venv-torch2/).

  torch_models_test.py --stitchd PATH --stitchctl PATH --library PATH [unittest arguments]

bench/gpu/torch_step_bench.py runs only on a CUDA GPU, which CI does not have; this catches
before a GPU run what can be caught without one:

- the models it adds to torch_step_bench.py (a GPT-2 block, torchvision's ResNet-50
  Bottleneck, a GroupNorm block), built at the benchmark's small sizes, compiled by
  ``stitch.torch.optimize``: every region compiles, runs on the compiler's host emulator
  (tests/python/emulator_executor.py, which also checks it against the reference
  interpreter), and the output and every gradient match eager's in f32;
- the GroupNorm block under ``backend="stitch"``'s InductorStitchBackend, with Inductor
  compiling for the CPU and a stand-in timer that makes stitch win every region, so that the
  graphs Inductor's own decompositions give (GroupNorm's backward among them) are lowered and
  checked too;
- the BERT layer (the varying-batch row's model) at a batch that varies, under
  ``torch.compile(backend=StitchBackend)``: the recompiled graph's symbolic regions;
- the benchmark's argument parsing, model table, correctness check, timing loop, rows, table
  and JSON (rewritten after each row), failed rows, the varying-batch row and the time budget,
  with stand-in backends on CPU tensors.

Inputs and weights are random from a seed that is printed, and replayed from STITCH_TEST_SEED
(torch_test.py's).
"""

import contextlib
import copy
import io
import json
import math
import pathlib
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import torch_test as base  # noqa: E402  (its helpers, its daemon, its seed)
import torch_step_bench as bench  # noqa: E402  (bench/gpu, on the path torch_test made)
from torch_inductor_test import StandInTimer, region_calls  # noqa: E402

F32 = base.F32_TOLERANCE
# Inductor's CPU code and stitch's kernels round differently: the compiler's tolerance, ten
# times over (as torch_inductor_test.py).
INDUCTOR_TOLERANCE = 1e-4

# The ops each model's regions must hold, stitched rather than left to PyTorch: the GPT-2
# block's queries, keys and values selected from one projection and its causal mask built
# from positions; GroupNorm's forward and backward, which the eager-based backend lowers as
# they are (PyTorch's own decomposition of the forward reads its scales through as_strided).
STITCHED_OPS = {
    "gpt2_block": {"aten.select.int", "aten.select_backward.default", "aten.arange.default",
                   "aten.masked_fill.Scalar"},
    "resnet50_bottleneck": set(),
    "groupnorm_block": {"aten.native_group_norm.default",
                        "aten.native_group_norm_backward.default"},
}


def small(name, **options):
    """The benchmark's model ``name`` at its small size, from the test's seed."""
    return bench.SPEC_BY_NAME[name].build(torch, True, seed=base.SEED, **options)


def check_grads(test, name, expected_grads, grads, tolerance):
    """Every gradient present, and within ``tolerance`` of eager's."""
    test.assertEqual(len(grads), len(expected_grads))
    for i, (e, a) in enumerate(zip(expected_grads, grads)):
        test.assertIsNotNone(a, "%s gradient %d" % (name, i))
        test.assertLessEqual(base.max_relative_error(e, a), tolerance,
                             "%s gradient %d" % (name, i))


class ModelsTest(unittest.TestCase):
    """Each new model of the benchmark, stitched and run on the emulator, against eager."""

    def check_optimized(self, name):
        import stitch.torch
        module, inputs = small(name)
        module.train()
        eager = copy.deepcopy(module)
        backend, executor = base.make_backend()
        stitched = stitch.torch.optimize(module, backend=backend)
        expected_out, expected_grads = base.run_step(eager, inputs)
        out, grads = base.run_step(stitched, inputs)
        report = backend.report
        print("\n[%s] seed %d\n%s" % (name, base.SEED, report.summary()))
        self.assertGreater(len(report.regions), 0)
        for region in report.regions:
            self.assertTrue(region.stitched, "%s: %s" % (region.name, region.reason))
            self.assertGreater(region.kernels, 0)
        self.assertEqual(dict(report.fallbacks), {}, report.details)
        ops = {op for r in report.regions for op in r.ops}
        self.assertEqual(STITCHED_OPS[name] - ops, set(), "not stitched")
        self.assertEqual(report.stitched_calls, len(report.regions))
        self.assertEqual(len(executor.runs), len(report.regions))
        for run in executor.runs:
            self.assertTrue(run["report"]["pass"], run)
        self.assertTrue(any(r.name.startswith("backward") for r in report.regions))
        self.assertLessEqual(base.max_relative_error(expected_out, out), 4 * F32, name)
        check_grads(self, name, expected_grads, grads, 8 * F32)
        return [op for r in report.regions for op in r.ops]

    def test_gpt2_block(self):
        ops = self.check_optimized("gpt2_block")
        self.assertIn("aten.tanh.default", ops)  # GELU's tanh form
        self.assertIn("aten.exp.default", ops)  # the softmax
        self.assertIn("aten.amax.default", ops)
        self.assertFalse(any(op.startswith(("aten.bmm", "aten.mm")) for op in ops))

    def test_resnet50_bottleneck(self):
        ops = self.check_optimized("resnet50_bottleneck")
        self.assertFalse(any("convolution" in op for op in ops))
        self.assertIn("aten.rsqrt.default", ops)  # batch norm's statistics

    def test_groupnorm_block(self):
        ops = self.check_optimized("groupnorm_block")
        self.assertFalse(any("convolution" in op for op in ops))
        self.assertTrue(any("sigmoid" in op or "exp" in op for op in ops), "SiLU")

    def test_bert_layer_at_a_varying_batch(self):
        """The varying-batch row's model: batch 3, then 2 (Dynamo recompiles with a symbolic
        batch), then 4, all stitched with eager's results."""
        import stitch.torch
        backend, executor = base.make_backend()
        module, inputs = small("bert_base_layer", batch=4)
        eager = copy.deepcopy(module).eval()
        compiled = base.torch_compile(copy.deepcopy(module).eval(), backend)
        for batch in (3, 2, 4):
            sliced = [x[:batch] for x in inputs]
            expected_out, expected_grads = base.run_step(eager, sliced)
            out, grads = base.run_step(compiled, sliced)
            self.assertLessEqual(base.max_relative_error(expected_out, out), 4 * F32,
                                 "batch %d" % batch)
            check_grads(self, "batch %d" % batch, expected_grads, grads, 8 * F32)
        report = backend.report
        print("\n[bert layer, batches 3, 2, 4] seed %d\n%s" % (base.SEED, report.summary()))
        self.assertEqual(dict(report.fallbacks), {}, report.details)
        symbolic = [m for _, gm in backend.graphs for m in gm.modules()
                    if isinstance(m, stitch.torch.StitchedRegion) and m.shapes.symbolic]
        self.assertGreater(len(symbolic), 0, "Dynamo recompiled with a symbolic batch")
        for run in executor.runs:
            self.assertTrue(run["report"]["pass"], run)


def on_inductor(name, layout_optimization):
    """One step of the benchmark's model ``name`` under backend="stitch", stitch timed
    faster, with Inductor's layout optimization on or off; returns (backend, executor, eager's
    (output, gradients), the step's)."""
    import stitch.torch
    from torch._inductor import config
    module, inputs = small(name)
    eager = copy.deepcopy(module)
    stitch_backend, executor = base.make_backend()
    backend = stitch.torch.InductorStitchBackend(
        stitch_backend, timer=StandInTimer(stitched=1e-6, inductor=2e-6))
    with config.patch(layout_optimization=layout_optimization):
        compiled = base.torch_compile(module, backend)
        got = base.run_step(compiled, inputs)
    print("\n[%s on Inductor, layout optimization %s] seed %d\n%s" % (
        name, layout_optimization, base.SEED, backend.report.summary()))
    return backend, executor, base.run_step(eager, inputs), got


def check_every_region_replaced(test, name, result):
    """Checks an ``on_inductor`` step: its results match eager's, every region was replaced
    as faster, nothing was left out, no call copied, and every launch matched the interpreter
    on the emulator. Returns the report."""
    backend, executor, (expected_out, expected_grads), (out, grads) = result
    report = backend.report
    test.assertLessEqual(base.max_relative_error(expected_out, out), INDUCTOR_TOLERANCE)
    check_grads(test, name, expected_grads, grads, INDUCTOR_TOLERANCE)
    choices = [(c.region, c.winner, c.reason, c.detail) for c in report.choices]
    test.assertGreater(len(report.choices), 3, choices)
    test.assertEqual({(c.winner, c.reason) for c in report.choices}, {("stitch", "faster")},
                     choices)
    test.assertEqual(dict(report.fallbacks), {}, report.details)
    test.assertEqual(report.layout_copies, 0)
    for run in executor.runs:
        test.assertTrue(run["report"]["pass"], run)
    return report


class GroupNormOnInductorTest(unittest.TestCase):
    """backend="stitch" on the GroupNorm block, with Inductor's layout optimization off (so
    its tensors keep the traced row-major strides): Inductor's decompositions turn GroupNorm's
    backward into reductions that stitch lowers. With stitch timed faster (a stand-in timer;
    both sides still run and are compared), every region is replaced, runs on the emulator
    with no copy around it, and the step matches eager. One compile, shared by the tests."""

    @classmethod
    def setUpClass(cls):
        cls.backend, cls.executor, cls.expected, cls.got = on_inductor("groupnorm_block", False)

    def test_every_region_replaced_and_the_step_matches_eager(self):
        (expected_out, expected_grads), (out, grads) = self.expected, self.got
        report = self.backend.report
        self.assertLessEqual(base.max_relative_error(expected_out, out), INDUCTOR_TOLERANCE)
        check_grads(self, "groupnorm_block", expected_grads, grads, INDUCTOR_TOLERANCE)
        # Nothing is left out: GroupNorm's statistics (var_mean) and the scales Inductor's
        # decomposition reads through as_strided are stitched too.
        self.assertEqual(dict(report.fallbacks), {}, report.details)
        forward = [op for r in report.regions if r.name.startswith("forward") for op in r.ops]
        self.assertIn("aten.var_mean.correction", forward)
        self.assertIn("aten.as_strided.default", forward)
        self.assertGreater(len(report.choices), 1)
        self.assertEqual({(c.winner, c.reason) for c in report.choices}, {("stitch", "faster")},
                         [(c.region, c.reason, c.detail) for c in report.choices])
        self.assertEqual(len(region_calls(self.backend)), len(report.choices))
        for run in self.executor.runs:
            self.assertTrue(run["report"]["pass"], run)
        backward = [op for r in report.regions if r.name.startswith("backward") for op in r.ops]
        self.assertIn("aten.sum.dim_IntList", backward, "GroupNorm's backward reductions")

    def test_no_layout_copy(self):
        self.assertEqual(self.backend.report.layout_copies, 0)


class GroupNormChannelsLastTest(unittest.TestCase):
    """The same block with Inductor's layout optimization on (its default; on the CPU it always
    applies): Inductor lays the convolutions' 4-d tensors, and what it computes from them,
    out channels-last after the graph was traced row-major. A region with 4-d tensors is
    compiled again over that storage (``stitch.torch._stored``) and called through
    ``stitch::region_stored``, which takes the tensors as Inductor laid them out. GroupNorm's
    regions read their input through a view into groups (``[2, 32, 8, 8]`` to ``[2, 8, 4,
    64]``), whose strides on channels-last storage are neither row-major nor channels-last, and
    their weights through views to ``[1, 8, 4, 1]``: their calls take the viewed tensors, the
    views move inside, and the backward's grouped gradient is stored so that its view back to
    ``[2, 32, 8, 8]`` is channels-last. Every region is replaced, each call launches its
    channels-last kernels on the storage with no copy, every launch matches the interpreter on
    the emulator, and the step matches eager."""

    def test_every_region_runs_on_the_storage_inductor_lays_out(self):
        from stitch.torch import _inductor, _lowering
        result = on_inductor("groupnorm_block", True)
        backend, executor = result[:2]
        report = check_every_region_replaced(self, "groupnorm_block", result)
        self.assertEqual(len(report.choices), 5)
        calls = region_calls(backend)
        self.assertEqual(len(calls), 5)
        strides = {}
        for call in calls:
            self.assertEqual(str(call.target), "stitch.region_stored.default")
            for t in call.args[1]:  # the views into groups and of the weights moved inside
                self.assertNotIn(t.target, _lowering.RESHAPES, (call.args[0], t.name))
            stored = _inductor._REGIONS[call.args[0]].stored
            values, _ = _inductor._outputs(stored.graph)
            for v, s in zip(values, stored.output_strides):
                strides.setdefault(tuple(v.shape), set()).add(s)
        # GroupNorm's output channels-last, and its grouped gradient stored so that the view
        # back to [2, 32, 8, 8] is channels-last:
        self.assertEqual(strides[(2, 32, 8, 8)], {(2048, 1, 256, 32)}, strides)
        self.assertEqual(strides[(2, 8, 4, 64)], {(2048, 4, 1, 32)}, strides)
        # Each replaced region's channels-last kernels ran twice while it was chosen (compared
        # with Inductor's, then under the stand-in timer) and once for each stitched call.
        keys = {c.key for c in report.choices}
        launches = [r for r in executor.runs if r["key"] in keys]
        self.assertEqual(report.stitched_calls, 5)
        self.assertEqual(len(launches), 2 * 5 + report.stitched_calls)
        # A call whose arguments lie in other orders (here row-major) gets kernels compiled for
        # them at its first call, with the same outputs in the same strides, and no copy.
        call = next(c for c in calls if any(t.meta["val"].dim() == 4 for t in c.args[1]))
        replacement = _inductor._REGIONS[call.args[0]]
        g = torch.Generator().manual_seed(base.SEED + 3)
        rows = [torch.randn(tuple(t.meta["val"].shape), generator=g) for t in call.args[1]]
        got = torch.ops.stitch.region_stored.default(call.args[0], rows, [])
        self.assertEqual(replacement.stored.variants, 2)
        expected = replacement.region.fallback(*replacement.stored.region_inputs(rows))
        expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        for e, a, s in zip(expected, got, replacement.stored.output_strides):
            self.assertLessEqual(base.max_relative_error(e, a), F32)
            self.assertEqual(tuple(a.stride()), s)
        self.assertEqual(report.layout_copies, 0)
        for run in executor.runs:
            self.assertTrue(run["report"]["pass"], run)


class ResNetChannelsLastTest(unittest.TestCase):
    """The ResNet BasicBlock (convolutions, batch norm in training, ReLU, residual) under
    backend="stitch", stitch timed faster, with Inductor's layout optimization on: each region
    is compiled over the storage orders predicted for its arguments, and its outputs are laid
    out as predicted, so the regions after it find their arguments in the predicted orders too
    (the backward's ReLU mask among them). Every region is replaced, each with the one set of
    kernels, no call copies, every launch matches the interpreter on the emulator, and the
    step matches eager."""

    def test_every_region_runs_on_its_arguments_storage_without_a_copy(self):
        from stitch.torch import _inductor
        result = on_inductor("resnet_basic_block", True)
        backend = result[0]
        # Nothing is left out: the running statistics' writes into the module's buffers are
        # Inductor's by design, not fallbacks.
        report = check_every_region_replaced(self, "resnet_basic_block", result)
        self.assertEqual(report.stitched_calls, len(report.choices))
        calls = region_calls(backend)
        stored = [_inductor._REGIONS[c.args[0]].stored for c in calls]
        self.assertTrue(all(s is not None for s in stored))
        self.assertEqual([s.variants for s in stored], [1] * len(stored))


# -- the benchmark's plumbing, on the CPU, with stand-in backends ---------------------------------
class Perturbed(torch.nn.Module):
    """A module's output, off by ``delta`` relative: a stitched step that must fail its row."""

    def __init__(self, module, delta):
        super().__init__()
        self.module, self.delta = module, delta

    def forward(self, *args):
        return self.module(*args) * (1 + self.delta)


class OneElementOff(torch.nn.Module):
    """A module's output with one element, the first call's smallest in magnitude (a ReLU
    output at zero), moved by ``offset`` times the larger of the output's RMS and 1:
    max_relative_error's measure then finds it off by ``offset`` whatever the test's seed
    makes of the output. What a ReLU input within rounding of zero does when it goes the
    other way."""

    def __init__(self, module, offset):
        super().__init__()
        self.module, self.offset, self.index = module, offset, None

    def forward(self, *args):
        out = self.module(*args)
        flat = out.detach().flatten().double()
        if self.index is None:
            self.index = int(flat.abs().argmin())
        floor = max(flat.pow(2).mean().sqrt().item(), 1.0)
        moved = torch.zeros_like(out).flatten()
        moved[self.index] = self.offset * floor
        return out + moved.view_as(out)


def stand_in_backends(delta=0.0, report=None, dynamo=False, inductor_delta=0.0):
    """Inductor: the module itself, its output off by ``inductor_delta``. Stitch: the module,
    its output off by ``delta``, with ``report``; with ``dynamo``, torch.compile with Dynamo's
    "eager" backend (a real Dynamo graph, and its recompile at a second batch) where the row
    asks for automatic dynamic shapes, and the module itself where it asks for fixed ones."""

    def inductor(module):
        return (Perturbed(module, inductor_delta) if inductor_delta else module), None

    def stitched(module, dynamic=None):
        if dynamo and dynamic is None:
            module = torch.compile(module, backend="eager")
        return (Perturbed(module, delta) if delta else module), report

    return bench.Backends(inductor, stitched)


def a_report():
    """A Report with one region replaced and one kept, as InductorStitchBackend writes them."""
    import stitch.torch
    report = stitch.torch.Report()
    win = stitch.torch.RegionChoice("forward0.region1", "k1", decided_by="timed",
                                    stitched_seconds=10e-6, inductor_seconds=15e-6)
    win.winner, win.reason = "stitch", "faster"
    report.add_choice(win)
    report.add_choice(stitch.torch.RegionChoice(
        "backward1.region0", "k2", decided_by="timed", stitched_seconds=30e-6,
        inductor_seconds=20e-6).keep("slower", "3e-05 s against Inductor's 2e-05 s"))
    report.count_stitched_call(3, "cpp")  # the replaced region's calls, launched from C++
    return report


def bench_args(*argv):
    return bench.parse_args(["--small", "--warmup", "0", "--repeats", "10", "--host-repeats",
                             "2", "--budget-s", "0", "--seed", str(base.SEED), *argv])


class DumpRegionsToolTest(unittest.TestCase):
    """tools/dump_torch_regions.py, which wrote testdata/torch_regions/, on the GroupNorm
    block at its small size against the test's daemon: it writes every region it compiled,
    row-major and over channels-last storage, each HLO module that stitchctl compiles, and the
    step runs Inductor's kernels alone."""

    def test_writes_every_compiled_region(self):
        import importlib.util
        import subprocess
        path = pathlib.Path(__file__).resolve().parents[2] / "tools" / "dump_torch_regions.py"
        spec = importlib.util.spec_from_file_location("dump_torch_regions", path)
        tool = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tool)
        with tempfile.TemporaryDirectory() as out:
            stderr = io.StringIO()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
                self.assertEqual(tool.main(["--daemon", base.DAEMON.socket, "--model",
                                            "groupnorm_block", "--out", out, "--small"]), 0)
            files = sorted(pathlib.Path(out).glob("*.hlo"))
            names = [f.name.split("_", 1)[1] for f in files]
            self.assertIn("forward0_region0.hlo", names)
            self.assertIn("forward0_region0_stored.hlo", names)
            self.assertIn("backward1_region0_stored.hlo", names)
            self.assertIn("inductor (launch_error)", stderr.getvalue())
            for f in files:
                self.assertTrue(f.read_text().startswith("HloModule " + f.stem.split("_", 1)[1]))
                done = subprocess.run([base.ARGS.stitchctl, "compile", "--no-cubin", str(f)],
                                      capture_output=True, text=True, timeout=600)
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertIn("modeled", done.stdout)


class BenchTest(unittest.TestCase):
    """torch_step_bench.py's parts that run without a GPU."""

    def setUp(self):
        import torch._dynamo
        torch._dynamo.reset()

    def test_arguments(self):
        args = bench.parse_args([])
        self.assertEqual([s.name for s in args.specs], [s.name for s in bench.SPECS])
        self.assertEqual(args.specs[:4], [bench.SPEC_BY_NAME[n] for n in (
            "bert_base_layer", "gpt2_block", "groupnorm_block", "resnet50_bottleneck")])
        self.assertEqual((args.dtype, args.vary, args.warm, args.budget_s),
                         ("f32", [32, 28, 24, 20], [30, 26], 240.0))
        args = bench.parse_args(["--models", "gpt2_block,bert_base_layer", "--dtype", "bf16"])
        self.assertEqual([s.name for s in args.specs], ["gpt2_block", "bert_base_layer"])
        self.assertEqual(args.dtype, "bf16")
        for wrong in (["--models", "gpt3"], ["--models", ","], ["--dtype", "f16"],
                      ["--warm-batches", "32,30"], ["--vary-batches", "32,x"],
                      ["--repeats", "0"], ["--host-repeats", "0"]):
            with contextlib.redirect_stderr(io.StringIO()) as err, \
                    self.assertRaises(SystemExit, msg=wrong):
                bench.parse_args(wrong)
            self.assertIn("error", err.getvalue())

        # compute-sanitizer's run checks two steps rather than timing blocks of ten.
        self.assertEqual(bench.parse_args(["--warmup", "1", "--repeats", "2"]).repeats, 2)

    def test_the_default_run_fits_its_budget_as_estimated(self):
        default = bench.parse_args([])
        self.assertLessEqual(sum(s.estimate_s for s in default.specs[:4]), default.budget_s)

    def test_every_model_builds_at_its_small_size(self):
        for spec in bench.SPECS:
            module, inputs = spec.build(torch, True, seed=base.SEED)
            again, same = spec.build(torch, True, seed=base.SEED)
            for x, y in zip(inputs, same):
                self.assertTrue(torch.equal(x, y), "%s: inputs from the seed" % spec.name)
            for (n, p), (_, q) in zip(module.named_parameters(), again.named_parameters()):
                self.assertTrue(torch.equal(p, q), "%s: %s from the seed" % (spec.name, n))
            out = module(*inputs)
            self.assertEqual(out.shape, inputs[0].shape, spec.name)  # residual blocks
            out.sum().backward()
            self.assertTrue(all(p.grad is not None for p in module.parameters()), spec.name)
            _, inputs = spec.build(torch, True, batch=5, seed=base.SEED)
            self.assertEqual(inputs[0].shape[0], 5, spec.name)

    def test_max_relative_error_is_the_tests_measure(self):
        g = torch.Generator().manual_seed(base.SEED)
        e = torch.randn(64, generator=g) * 3
        a = e + torch.randn(64, generator=g) * 1e-3
        self.assertAlmostEqual(bench.max_relative_error(torch, e, a), base.max_relative_error(e, a))
        self.assertEqual(bench.max_relative_error(torch, e, e[:32]), math.inf)
        nan = a.clone()
        nan[3] = math.nan
        self.assertEqual(bench.max_relative_error(torch, e, nan), math.inf)

    def test_rows_table_and_json(self):
        """Two models: the header, then each row with its region lines, and the JSON holds
        each row by the time it is printed."""
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "steps.json"
            args = bench_args("--models", "gpt2_block,resnet_basic_block", "--json", str(path))
            lines, seen = [], []

            def out(line):
                lines.append(line)
                if path.exists():
                    seen.append([r["model"] for r in json.loads(path.read_text())["rows"]])

            rows = bench.run(torch, args, stand_in_backends(report=a_report()),
                             torch.device("cpu"), {"device": "cpu"}, out=out)
            data = json.loads(path.read_text())
        self.assertEqual(lines[0], bench.HEADER)
        self.assertTrue(lines[0].startswith("model"))
        self.assertEqual([r["model"] for r in rows], ["gpt2_block", "resnet_basic_block"])
        self.assertEqual(data["device"], "cpu")
        self.assertEqual([r["model"] for r in data["rows"]], ["gpt2_block", "resnet_basic_block"])
        self.assertIn(["gpt2_block"], seen, "the first row was written before the second ran")
        for row in rows:
            self.assertNotIn("failed", row)
            self.assertEqual(row["stitch_error"], 0.0)
            self.assertEqual(row["inductor_error"], 0.0)
            for k in ("eager_ms", "inductor_ms", "stitch_ms", "host_inductor_ms",
                      "host_stitch_ms"):
                self.assertGreater(row[k], 0, k)
            self.assertFalse(row["host_stitch_waited"])
            self.assertEqual(set(row["compile_s"]), {"eager", "inductor", "stitch"})
        gpt2 = [line for line in lines if line.startswith("gpt2_block")]
        self.assertEqual(len(gpt2), 1)
        self.assertEqual(gpt2[0].split()[-2:], ["1", "1"], "replaced, kept")
        self.assertIn("  replaced (1, 5.0 us timed savings a step): forward0.region1 1.5x", lines)
        self.assertIn("  kept by Inductor (1): backward1.region0 slower 0.667x", lines)
        self.assertIn("  stitched calls by path {'cpp': 3}", lines)
        self.assertAlmostEqual(rows[0]["choices"][0]["gain"], 1.5)

    def test_memory_a_released_model_still_holds_is_noted_under_its_row(self):
        class Memory:
            """Allocated bytes that grow by what each model leaves behind."""

            def __init__(self, leaks):
                self.leaks, self.now, self.starts = list(leaks), 0, 0

            def start(self):
                self.starts += 1
                return self.now

            def peak(self):
                return self.now + (1 << 30)

            def allocated(self):
                if self.leaks:  # read once per row, after its release
                    self.now += self.leaks.pop(0)
                return self.now

        mib = 1 << 20
        memory = Memory([200 * mib, 0])
        lines = []
        rows = bench.run(torch, bench_args("--models", "gpt2_block,resnet_basic_block"),
                         stand_in_backends(), torch.device("cpu"), {}, out=lines.append,
                         memory=memory)
        self.assertEqual(memory.starts, 2)
        self.assertEqual(rows[0]["memory"], {"before_mib": 0.0, "peak_mib": 1024.0,
                                             "held_after_release_mib": 200.0})
        self.assertEqual(rows[1]["memory"]["before_mib"], 200.0)
        self.assertEqual(rows[1]["memory"]["held_after_release_mib"], 200.0)
        noted = [line for line in lines if "memory:" in line]
        self.assertEqual(noted, ["  memory: peak 1024 MiB, 200 MiB held after its release "
                                 "(0 before)"], "the leaking model alone")
        # Without a probe (a CPU run) rows carry no memory figures.
        rows = bench.run(torch, bench_args("--models", "gpt2_block"), stand_in_backends(),
                         torch.device("cpu"), {}, out=lines.append)
        self.assertNotIn("memory", rows[0])

    def test_a_stitched_step_off_eager_fails_its_row_not_the_run(self):
        args = bench_args("--models", "groupnorm_block,resnet_basic_block")
        lines = []
        rows = bench.run(torch, args, stand_in_backends(delta=1e-2), torch.device("cpu"), {},
                         out=lines.append)
        self.assertEqual(len(rows), 2)
        for row in rows:
            self.assertRegex(row["failed"], r"^stitch's (output|gradient of .+) is off by 0\.01 ")
            self.assertNotIn("stitch_ms", row, "nothing timed")
        self.assertTrue(lines[1].startswith("groupnorm_block") and "FAILED" in lines[1])
        # A model that raises fails its row too.
        broken = bench.Backends(lambda m: (_ for _ in ()).throw(RuntimeError("no compiler")),
                                stand_in_backends().stitch)
        with contextlib.redirect_stderr(io.StringIO()):
            rows = bench.run(torch, bench_args("--models", "gpt2_block"), broken,
                             torch.device("cpu"), {}, out=lines.append)
        self.assertEqual(rows[0]["failed"], "RuntimeError: no compiler")

    def test_a_stitched_step_that_matches_inductors_passes_where_both_are_off_eager(self):
        lines = []
        rows = bench.run(torch, bench_args("--models", "groupnorm_block"),
                         stand_in_backends(delta=1e-2, inductor_delta=1e-2),
                         torch.device("cpu"), {}, out=lines.append)
        row = rows[0]
        self.assertNotIn("failed", row)
        self.assertGreater(row["stitch_error"], row["tolerance"])
        self.assertLessEqual(row["stitch_vs_inductor_error"], row["tolerance"])
        self.assertGreater(row["stitch_ms"], 0)
        self.assertTrue(any("stitch's step is off Inductor's by" in line for line in lines))
        # Off Inductor's step as well as eager's, it fails.
        rows = bench.run(torch, bench_args("--models", "groupnorm_block"),
                         stand_in_backends(delta=1e-2, inductor_delta=-1e-2),
                         torch.device("cpu"), {}, out=lines.append)
        self.assertRegex(rows[0]["failed"], r"^stitch's .* is off by 0\.01 ")

    def test_one_element_off_passes_as_close_to_float64_as_eager(self):
        """One output element off eager's by three times the tolerance: the row passes on
        the float64 check, and its note counts the one element. The same offset on every
        element fails."""
        args = bench_args("--models", "resnet_basic_block")
        offset = 3 * bench.TOLERANCE["f32"]
        lines = []
        backends = bench.Backends(lambda m: (m, None),
                                  lambda m, dynamic=None: (OneElementOff(m, offset), None))
        row = bench.run(torch, args, backends, torch.device("cpu"), {}, out=lines.append)[0]
        self.assertNotIn("failed", row)
        self.assertGreater(row["stitch_error"], row["tolerance"])
        self.assertEqual(row["stitch_worst"], "output")
        f = row["float64"]
        self.assertEqual((f["elements_off"], f["tensor"]), (1, "output"))
        self.assertLessEqual(f["stitch_rms"], f["bound"])
        self.assertLess(f["eager_rms"], 1e-6, "float32 against float64 on the CPU")
        self.assertTrue(any("(1 of %d elements beyond the tolerance)" % f["elements"] in line
                            for line in lines), lines)
        # Every element off by as much: far from the float64 step, it fails.
        rows = bench.run(torch, args, stand_in_backends(delta=offset), torch.device("cpu"), {},
                         out=lines.append)
        self.assertRegex(rows[0]["failed"], r"^stitch's .* is off by ")
        self.assertGreater(rows[0]["float64"]["stitch_rms"], rows[0]["float64"]["bound"])
        self.assertGreater(rows[0]["float64"]["elements_off"], 1)

    def test_timing_fewer_steps_than_a_block(self):
        calls = []
        ms = bench.step_ms(torch, lambda: calls.append(1), torch.device("cpu"), 1, 2)
        self.assertEqual(len(calls), 3, "one warm-up step, then one block of two")
        self.assertGreaterEqual(ms, 0)

    def test_varying_batch_row(self):
        args = bench_args("--models", "bert_base_layer_varying_batch")
        lines = []
        rows = bench.run(torch, args, stand_in_backends(dynamo=True), torch.device("cpu"), {},
                         out=lines.append)
        row = rows[0]
        self.assertNotIn("failed", row)
        self.assertEqual([b["batch"] for b in row["per_batch"]], [16, 14, 12, 10])
        self.assertEqual(row["warm_batches"], [15, 13])
        self.assertEqual(len(row["compile_s"]["fixed"]), 4)
        ratios = [b["ratio"] for b in row["per_batch"]]
        self.assertTrue(all(r > 0 for r in ratios))
        self.assertAlmostEqual(row["geomean_ratio"], math.exp(sum(map(math.log, ratios)) / 4))
        self.assertTrue(lines[1].startswith("bert_base_layer_varying_batch"), lines)
        self.assertIn("geomean", lines[1])

    def test_the_budget_skips_what_would_not_fit(self):
        now = [0.0]
        budget = bench.Budget(100, clock=lambda: now[0])
        self.assertTrue(budget.fits(100))
        self.assertFalse(budget.fits(101))
        now[0] = 20.0
        budget.done(40, 20)  # ran in half its estimate: later estimates count half
        self.assertTrue(budget.fits(160))
        self.assertFalse(budget.fits(161))
        self.assertIn("80 s", budget.why_not(160))
        self.assertTrue(bench.Budget(0).fits(1e9))
        args = bench_args("--models", "gpt2_block", "--budget-s", "1")
        rows = bench.run(torch, args, stand_in_backends(), torch.device("cpu"), {},
                         out=lambda line: None)
        self.assertIn("budget", rows[0]["skipped"])
        self.assertEqual(bench.format_row(rows[0])[0].split()[:2], ["gpt2_block", "skipped:"])


if __name__ == "__main__":
    base.main()
