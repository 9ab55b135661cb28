#!/usr/bin/env python3
"""stitch.torch against a real stitchd, with Debian's PyTorch 1.13 and torchvision
(python_torch) or with the pinned PyTorch 2.x of .venv-torch2/ (python_torch2).

  torch_test.py --stitchd PATH --stitchctl PATH --library PATH [unittest arguments]

Each model is compiled by ``stitch.torch.optimize`` (torch.fx.symbolic_trace, then
AOTAutograd's forward and backward graphs); under PyTorch 2.x, the BERT layer by
``torch.compile`` as well (Dynamo's graph, FakeTensor metadata), and the MLP block with symbolic
sizes (``dynamic=True``). The regions are compiled by the daemon, and run on the compiler's host
emulator through the test-only EmulatorExecutor, since CI has no GPU. The outputs and gradients
must match PyTorch eager within the compiler's own tolerance. The lowering tests run ATen
graphs written by hand (each overload and argument form of the ops lowered for GroupNorm and
the GPT-2 block) stitched against the same graphs run eagerly, and a GroupNorm and causal-mask
model through optimize(). The fallback tests check that the framework's result comes back
with a counted reason. Inputs and weights are random from a seed
that is printed, and replayed from STITCH_TEST_SEED.
"""

import argparse
import copy
import os
import pathlib
import sys
import time
import unittest

import torch

SOURCE_DIR = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(SOURCE_DIR / "python"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(SOURCE_DIR / "bench" / "gpu"))

from torch_models import BertLayer, CumsumBlock, LayerNormGeluMlp, resnet_block  # noqa: E402

ARGS = argparse.Namespace()
DAEMON = None
SEED = int(os.environ.get("STITCH_TEST_SEED", int(time.time()) % 100000))

# The compiler's tolerance for f32 outputs (compiler/reference/src/tensor_compare.cc: relative
# to max(|expected|, the RMS of the expected tensor, 1)), four times over for outputs that
# come out of long sums, as OutputTolerance allows, and once more for each graph the value
# crossed (the forward, then the backward).
F32_TOLERANCE = 1e-5


def max_relative_error(expected, actual):
    """The compiler's error measure (tensor_compare.cc) on two tensors."""
    e, a = expected.detach().double(), actual.detach().double()
    floor = max(1.0, float(e[torch.isfinite(e)].pow(2).mean().sqrt()) if e.numel() else 0.0)
    return float(((a - e).abs() / e.abs().clamp(min=floor)).max()) if e.numel() else 0.0


# -- helpers -------------------------------------------------------------------------------------
def make_backend(client=None, capability=(9, 0), **options):
    import stitch.torch
    from emulator_executor import EmulatorExecutor
    executor = EmulatorExecutor(ARGS.stitchctl, capability)
    client = client or stitch.Client(DAEMON.socket, compile_deadline_ms=300000)
    return stitch.torch.StitchBackend(client=client, executors={"cpu": executor},
                                      **options), executor


def run_step(model, inputs):
    """One forward and backward: returns the output and the gradients of the inputs that
    require them and of the parameters, in a fixed order."""
    inputs = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
    out = model(*inputs)
    weights = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
    (out * weights).sum().backward()
    grads = [x.grad for x in inputs if x.grad is not None]
    grads += [p.grad for _, p in sorted(model.named_parameters())]
    return out.detach(), grads


class Case:
    def __init__(self, name, module, inputs):
        self.name, self.module, self.inputs = name, module, inputs


def cases():
    g = torch.Generator().manual_seed(SEED)
    torch.manual_seed(SEED)
    mask = torch.ones(2, 16)
    mask[1, 12:] = 0
    bert = BertLayer().eval()  # dropout off, so eager and stitched draw no random numbers
    return [
        Case("mlp", LayerNormGeluMlp(), [torch.randn(4, 8, 64, generator=g)]),
        Case("bert_layer", bert, [torch.randn(2, 16, 64, generator=g), mask]),
        Case("resnet_block", resnet_block(), [torch.randn(2, 16, 8, 8, generator=g)]),
    ]


# torch.compile exists from PyTorch 2.0. The tests of it are defined only there, not skipped
# under 1.13, since a skipped test fails the run.
HAS_TORCH_COMPILE = hasattr(torch, "compile")


def torch_compile(module, backend, **options):
    import torch._dynamo
    torch._dynamo.reset()  # no graph cached by an earlier test's compile of the same code
    return torch.compile(module, backend=backend, **options)


# -- tests ---------------------------------------------------------------------------------------
class FxPathTest(unittest.TestCase):
    """Each model: stable partitioning, regions that compile, and stitched regions executed on
    the emulator that match eager, forward and backward."""

    maxDiff = None

    def check_model(self, case, compile_module=None):
        import stitch.torch
        eager = copy.deepcopy(case.module)
        backend, executor = make_backend()
        stitched = (compile_module or stitch.torch.optimize)(case.module, backend=backend)
        expected_out, expected_grads = run_step(eager, case.inputs)
        out, grads = run_step(stitched, case.inputs)
        report = backend.report
        print("\n[%s] seed %d\n%s" % (case.name, SEED, report.summary()))

        self.assertGreater(len(report.regions), 0)
        for region in report.regions:
            self.assertIn(region.outcome, ("compiled", "hit_memory", "hit_disk", "hit_local"),
                          "%s: %s" % (region.name, region.reason))
            self.assertEqual(len(region.key), 64)
            self.assertGreater(region.kernels, 0)
        self.assertEqual(dict(report.fallbacks), {}, report.details)
        # Every region of the forward and the backward ran stitched, once.
        self.assertEqual(report.stitched_calls, len(report.regions))
        self.assertEqual(len(executor.runs), len(report.regions))
        for run in executor.runs:
            self.assertTrue(run["report"]["pass"], run)
        self.assertTrue(any(r.name.startswith("backward") for r in report.regions),
                        "the backward graph has regions")

        error = max_relative_error(expected_out, out)
        self.assertLessEqual(error, 4 * F32_TOLERANCE, "%s output" % case.name)
        self.assertEqual(len(grads), len(expected_grads))
        for i, (e, a) in enumerate(zip(expected_grads, grads)):
            self.assertIsNotNone(a, "gradient %d" % i)
            error = max_relative_error(e, a)
            self.assertLessEqual(error, 8 * F32_TOLERANCE, "%s gradient %d" % (case.name, i))
        return report

    def check_stable(self, index, report):
        """A second compile of the same model, made again from the seed, partitions
        identically: same signatures, keys and order."""
        import stitch
        import stitch.torch
        backend = stitch.torch.StitchBackend(
            client=stitch.Client(DAEMON.socket, compile_deadline_ms=300000), executors={})
        case = cases()[index]
        stitch.torch.optimize(case.module, backend=backend)(
            *[x.clone().requires_grad_(x.is_floating_point()) for x in case.inputs]
        ).sum().backward()
        self.assertEqual([(r.name, r.hlo, r.key) for r in backend.report.regions],
                         [(r.name, r.hlo, r.key) for r in report.regions])
        # The second compile found every signature in the daemon's cache.
        self.assertTrue(all(r.outcome.startswith("hit") for r in backend.report.regions))

    def test_mlp_block(self):
        report = self.check_model(cases()[0])
        self.check_stable(0, report)
        ops = [op for r in report.regions for op in r.ops]
        # The LayerNorm's statistics and the GELU's erf are stitched; the matmuls are not.
        self.assertIn("aten.erf.default", ops)
        self.assertTrue(any("var" in op or "sum" in op for op in ops))
        self.assertFalse(any(op.startswith("aten.mm") for op in ops))

    def test_bert_layer(self):
        report = self.check_model(cases()[1])
        self.check_stable(1, report)
        ops = [op for r in report.regions for op in r.ops]
        self.assertIn("aten.exp.default", ops)  # the softmax
        self.assertFalse(any(op.startswith("aten.bmm") for op in ops))

    def test_resnet_block(self):
        report = self.check_model(cases()[2])
        self.check_stable(2, report)
        ops = [op for r in report.regions for op in r.ops]
        self.assertFalse(any("convolution" in op for op in ops))

    if HAS_TORCH_COMPILE:
        def test_torch_compile(self):
            """The entry point users call on PyTorch 2.x: Dynamo's graph through
            aot_module_simplified, every node's shape from its FakeTensor."""
            report = self.check_model(cases()[1], compile_module=torch_compile)
            ops = [op for r in report.regions for op in r.ops]
            self.assertIn("aten.exp.default", ops)
            self.assertFalse(any(op.startswith("aten.bmm") for op in ops))

    def test_backend_entry_point(self):
        """stitch.torch.backend's signature, as torch.compile calls it: (GraphModule,
        example inputs)."""
        case = cases()[0]
        backend, executor = make_backend()
        gm = torch.fx.symbolic_trace(copy.deepcopy(case.module))
        compiled = backend(gm, case.inputs)
        out = compiled(*case.inputs)
        self.assertLessEqual(max_relative_error(case.module(*case.inputs), out),
                             4 * F32_TOLERANCE)
        self.assertGreater(backend.report.stitched_calls, 0)


def stats():
    import stitch
    with stitch.Client(DAEMON.socket) as client:
        return client.stats()


def bucket_of(extent):
    """The daemon's power-of-two bucket of an extent (shape_class.h's BucketOf)."""
    top = 1
    while top < extent:
        top *= 2
    return (top // 2 + 1, top) if top > 2 else (top, top)


if HAS_TORCH_COMPILE:
    class SymbolicSizesTest(unittest.TestCase):
        """torch.compile with Dynamo's symbolic sizes: a job whose batch varies keeps its
        stitched regions, one bundle per bucket of the batch."""

        def steps(self, compiled, eager, shapes):
            g = torch.Generator().manual_seed(SEED + 7)
            for shape in shapes:
                x = torch.randn(*shape, generator=g)
                expected_out, expected_grads = run_step(eager, [x])
                out, grads = run_step(compiled, [x])
                self.assertLessEqual(max_relative_error(expected_out, out), 4 * F32_TOLERANCE,
                                     "output at %s" % (shape,))
                for i, (e, a) in enumerate(zip(expected_grads, grads)):
                    self.assertLessEqual(max_relative_error(e, a), 8 * F32_TOLERANCE,
                                         "gradient %d at %s" % (i, shape))

        def symbolic_regions(self, backend):
            import stitch.torch
            return [m for _, gm in backend.graphs for m in gm.modules()
                    if isinstance(m, stitch.torch.StitchedRegion) and m.shapes.symbolic]

        def test_a_recompile_with_symbolic_sizes_keeps_every_region_stitched(self):
            """Batch 4, then 3: Dynamo recompiles with a symbolic batch. Every later batch
            runs stitched kernels, and each region holds one bundle per bucket its batches
            fell in."""
            import random
            backend, executor = make_backend()
            case = cases()[0]
            eager = copy.deepcopy(case.module)
            compiled = torch_compile(copy.deepcopy(case.module), backend)
            batches = [4, 3, 5, 7] + random.Random(SEED).sample(range(9, 40), 3)
            compiles_before = stats()["compiles"]
            self.steps(compiled, eager, [(b, 8, 64) for b in batches])
            report = backend.report
            print("\n[batches %s] seed %d\n%s" % (batches, SEED, report.summary()))
            self.assertEqual(dict(report.fallbacks), {}, report.details)
            self.assertEqual(report.fallbacks["dynamic_shape"], 0)
            for run in executor.runs:
                self.assertTrue(run["report"]["pass"], run)
            regions = self.symbolic_regions(backend)
            self.assertGreater(len(regions), 0, "Dynamo recompiled with symbolic sizes")
            self.assertTrue(any(r.info.name.startswith("backward") for r in regions))
            buckets = {bucket_of(b) for b in batches[1:]}
            held_bundles = 0
            for region in regions:
                held = region.bundles
                served = [s for _, s in held if s is not None]
                self.assertEqual(len(served), len(set(served)), "%s: one bundle per bucket %s"
                                 % (region.info.name, held))
                self.assertTrue(set(served) <= buckets, "%s %s" % (region.info.name, served))
                held_bundles += len(held)
            self.assertGreater(report.new_sizes["bucket"], 0, "5 and 7 share (5, 8)")
            # The daemon compiled no more than the regions hold, and the static first graph's.
            self.assertLessEqual(stats()["compiles"] - compiles_before,
                                 held_bundles + len(report.regions))

        def test_sequence_lengths_compile_per_length_and_stay_stitched(self):
            """A varying sequence length (dimension 1) cannot be bucketed: each length gets
            exact kernels, and every call still runs stitched."""
            backend, executor = make_backend()
            case = cases()[0]
            eager = copy.deepcopy(case.module)
            compiled = torch_compile(copy.deepcopy(case.module), backend)
            self.steps(compiled, eager, [(2, 8, 64), (2, 5, 64), (2, 11, 64)])
            report = backend.report
            self.assertEqual(dict(report.fallbacks), {}, report.details)
            regions = self.symbolic_regions(backend)
            self.assertGreater(len(regions), 0)
            for region in regions:
                self.assertTrue(all(s is None for _, s in region.bundles), region.bundles)
            for run in executor.runs:
                self.assertTrue(run["report"]["pass"], run)

        def test_a_bundle_that_does_not_serve_the_extent_is_replaced_by_exact_shapes(self):
            """Where the daemon's bundle does not serve the call's extent (a bucket the
            planner could not follow is compiled for its top alone), the region asks for its
            exact shapes instead of launching kernels the loader would refuse."""
            import stitch.torch._backend as backend_module
            from stitch.torch import _lowering
            backend, executor = make_backend()
            hlo = ("HloModule rows\n\nENTRY main {\n  p0 = f32[5,16] parameter(0)\n"
                   "  e = f32[5,16] exponential(p0)\n  ROOT out = (f32[5,16]) tuple(e)\n}\n")
            lowered = _lowering.Lowered(hlo, (((5, 16), torch.float32),),
                                        (((5, 16), torch.float32),))
            bucketed = backend.client.compile(hlo, "sm_90", outer_parameters=(0,))
            self.assertEqual(bucketed.outer_extent, (5, 8))
            inside = backend_module._Signature(lowered, (0,), 5)
            self.assertIs(backend.covering(bucketed, inside, "sm_90")[0], bucketed)
            outside = backend_module._Signature(lowered, (0,), 9)
            result, sig = backend.covering(bucketed, outside, "sm_90")
            self.assertTrue(result.ok, result)
            self.assertIsNone(result.outer_extent)
            self.assertNotEqual(result.key, bucketed.key)
            self.assertEqual(sig.outer, ())

        def test_dynamic_true_stitches_from_the_first_call(self):
            backend, executor = make_backend()
            case = cases()[0]
            eager = copy.deepcopy(case.module)
            compiled = torch_compile(copy.deepcopy(case.module), backend, dynamic=True)
            self.steps(compiled, eager, [(4, 8, 64), (6, 8, 64)])
            report = backend.report
            self.assertEqual(dict(report.fallbacks), {}, report.details)
            self.assertGreater(len(self.symbolic_regions(backend)), 0)
            self.assertEqual(report.stitched_calls, 2 * len(report.regions))


# -- the lowerings of single ATen ops --------------------------------------------------------------
aten = torch.ops.aten


def aten_graph(build, count):
    """A GraphModule of ATen ops: ``build(graph, *placeholders)`` adds them and returns the
    outputs. Written by hand, so that each overload and argument form is the one named."""
    import operator
    graph = torch.fx.Graph()
    placeholders = [graph.placeholder("x%d" % i) for i in range(count)]

    def call(op, *args, **kwargs):
        return graph.call_function(op, args, kwargs)

    def item(node, i):
        return graph.call_function(operator.getitem, (node, i))

    graph.output(tuple(build(call, item, *placeholders)))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def assert_close(test, expected, actual, tolerance, what):
    """Same shape, dtype, and non-finite values in the same places (nan, inf of the same
    sign); the finite ones within the compiler's error measure."""
    test.assertEqual((tuple(actual.shape), actual.dtype), (tuple(expected.shape), expected.dtype),
                     what)
    if not expected.is_floating_point():
        test.assertTrue(torch.equal(expected, actual), "%s: %s against %s" % (what, actual,
                                                                               expected))
        return
    e, a = expected.double(), actual.double()
    test.assertTrue(torch.equal(torch.isnan(e), torch.isnan(a)), "%s: nan" % what)
    finite = torch.isfinite(e)
    test.assertTrue(torch.equal(e[~finite & ~torch.isnan(e)], a[~finite & ~torch.isnan(e)]),
                    "%s: inf" % what)
    test.assertLessEqual(max_relative_error(e[finite], a[finite]), tolerance, what)


# Outputs of f16: both sides accumulate in f32 and round once, so they differ by about a
# rounding of the result (2^-11 relative). (The emulator's executor passes tensors through
# numpy, which has no bf16.)
F16_TOLERANCE = 2 ** -9


if hasattr(aten, "var_mean") and hasattr(aten.var_mean, "correction"):
    VARIANCE_CORRECTION = aten.var_mean.correction
else:
    VARIANCE_CORRECTION = None


class LoweringTest(unittest.TestCase):
    """Each op lowered for issue 28's models (var_mean and var in every overload, GroupNorm's
    forward and backward, select and its gradient, arange, masked_fill), in ATen graphs
    written by hand with the argument forms PyTorch defines (negative dims, keepdim,
    corrections, results left uncomputed, integer and float ranges, scalar and tensor fill
    values, 16-bit floats): every region compiles and runs on the emulator, and matches the
    same graph run by PyTorch eager on random inputs."""

    def check_graph(self, name, gm, inputs, ops, tolerance=4 * F32_TOLERANCE, tolerances=None):
        """Compiles ``gm`` with the backend: every region stitched, nothing left out, each
        op of ``ops`` in a region, each output against eager's."""
        expected = gm(*inputs)
        backend, executor = make_backend()
        compiled = backend.compile_graph(copy.deepcopy(gm), inputs, name)
        out = compiled(*inputs)
        report = backend.report
        print("\n[%s] seed %d\n%s" % (name, SEED, report.summary()))
        self.assertEqual(dict(report.fallbacks), {}, report.details)
        self.assertGreater(len(report.regions), 0)
        for region in report.regions:
            self.assertTrue(region.stitched, "%s: %s" % (region.name, region.reason))
        self.assertEqual(report.stitched_calls, len(report.regions))
        for run in executor.runs:
            self.assertTrue(run["report"]["pass"], run)
        stitched = {op for r in report.regions for op in r.ops}
        self.assertEqual(set(ops) - stitched, set(), "ops not stitched")
        self.assertEqual(len(out), len(expected))
        for i, (e, a) in enumerate(zip(expected, out)):
            assert_close(self, e, a, (tolerances or {}).get(i, tolerance), "%s output %d" % (name, i))
        return report

    def test_var_mean_and_var(self):
        g = torch.Generator().manual_seed(SEED)
        x = torch.randn(3, 5, 7, generator=g) * 3 + 1
        one = torch.randn(4, 1, generator=g)
        xh = (torch.randn(6, 40, generator=g) * 2 + 5).half()
        correction = "correction" if VARIANCE_CORRECTION is not None else None

        def build(call, item, x, one, xh):
            outs = []
            pairs = [
                call(aten.var_mean.dim, x, [1], False, True),  # unbiased=False, keepdim
                call(aten.var_mean.dim, x, [-2]),  # unbiased by default
                call(aten.var_mean.default, x),
                call(aten.var_mean.default, x, False),
            ]
            if correction:
                pairs += [
                    call(aten.var_mean.correction, x, [2], correction=0, keepdim=True),
                    call(aten.var_mean.correction, x, [-1, 0], correction=None),  # 1
                    call(aten.var_mean.correction, x, None, correction=2),  # every dim
                    # n - correction = 0: 0 / 0, nan, as PyTorch gives.
                    call(aten.var_mean.correction, one, [1], correction=1),
                    call(aten.var_mean.correction, xh, [1], correction=0, keepdim=True),
                ]
            for pair in pairs:
                outs += [call(aten.mul.Tensor, item(pair, 0), 1.0), item(pair, 1)]
            # Only the mean used: the variance is computed and dropped.
            outs.append(call(aten.add.Tensor, item(call(aten.var_mean.dim, x, [0, 2]), 1), 1.0))
            outs.append(call(aten.var.dim, x, [0, -1], True, True))
            outs.append(call(aten.var.default, x, False))
            if correction:
                outs.append(call(aten.var.correction, x, [1], correction=0))
            return outs

        gm = aten_graph(build, 3)
        ops = ["aten.var_mean.dim", "aten.var_mean.default", "aten.var.dim", "aten.var.default"]
        f16 = {}
        if correction:
            ops += ["aten.var_mean.correction", "aten.var.correction"]
            f16 = {16: F16_TOLERANCE, 17: F16_TOLERANCE}
        self.check_graph("var_mean", gm, [x, one, xh], ops, tolerances=f16)

    def test_group_norm_forward_and_backward(self):
        g = torch.Generator().manual_seed(SEED + 1)
        x = torch.randn(2, 8, 5, 3, generator=g) * 2 + 0.5
        w, b = torch.rand(8, generator=g) + 0.5, torch.randn(8, generator=g)
        dy = torch.randn(2, 8, 5, 3, generator=g)
        y = torch.randn(3, 6, 7, generator=g)  # 3-d: (N, C, L), no weight or bias
        dz = torch.randn(3, 6, 7, generator=g)

        def build(call, item, x, w, b, dy, y, dz):
            fw = call(aten.native_group_norm.default, x, w, b, 2, 8, 15, 4, 1e-5)
            out, mean, rstd = item(fw, 0), item(fw, 1), item(fw, 2)
            bw = call(aten.native_group_norm_backward.default, dy, x, mean, rstd, w, 2, 8, 15, 4,
                      [True, True, True])
            plain = call(aten.native_group_norm.default, y, None, None, 3, 6, 7, 2, 1e-3)
            # The input's gradient alone, without a weight; then the weight's and the
            # bias's alone (a frozen input).
            bw_x = call(aten.native_group_norm_backward.default, dz, y, item(plain, 1),
                        item(plain, 2), None, 3, 6, 7, 2, [True, False, False])
            bw_w = call(aten.native_group_norm_backward.default, dy, x, mean, rstd, w, 2, 8, 15,
                        4, [False, True, True])
            return [out, mean, rstd, item(bw, 0), item(bw, 1), item(bw, 2), item(plain, 0),
                    item(plain, 1), item(plain, 2), item(bw_x, 0), item(bw_w, 1), item(bw_w, 2)]

        gm = aten_graph(build, 6)
        self.check_graph("group_norm", gm, [x, w, b, dy, y, dz],
                         ["aten.native_group_norm.default",
                          "aten.native_group_norm_backward.default"], tolerance=8 * F32_TOLERANCE)

    def test_select_arange_and_masked_fill(self):
        g = torch.Generator().manual_seed(SEED + 2)
        x = torch.randn(3, 5, 7, generator=g)
        grad = torch.randn(3, 7, generator=g)
        mask = torch.rand(3, 5, 7, generator=g) > 0.5
        value = torch.randn((), generator=g)
        scores = torch.randn(2, 5, 5, generator=g)
        cpu = torch.device("cpu")

        def build(call, item, x, grad, mask, value, scores):
            long = dict(dtype=torch.int64, device=cpu)
            positions = call(aten.arange.default, 5, **long)
            later = call(aten.gt.Tensor, call(aten.unsqueeze.default, positions, 0),
                         call(aten.unsqueeze.default, positions, 1))  # (5, 5) causal mask
            steps = call(aten.arange.start_step, 1, 20, 3, **long)  # 1, 4, ..., 19
            halves = call(aten.arange.start_step, 0.5, 4.0, 0.5, dtype=torch.float32, device=cpu)
            shifted = call(aten.arange.start, -2, 5, **long)
            row = call(aten.select.int, call(aten.select.int, x, 0, 1), 0, 2)  # (7,)
            outs = [
                call(aten.mul.Tensor, call(aten.select.int, x, 1, 2), 2.0),
                call(aten.mul.Tensor, call(aten.select.int, x, -1, -3), 2.0),
                call(aten.mul.Tensor, call(aten.select.int, x, 0, -1), 2.0),
                call(aten.mul.Tensor, call(aten.select_backward.default, grad, [3, 5, 7], 1, 2),
                     2.0),
                call(aten.mul.Tensor, call(aten.select_backward.default, grad, [3, 5, 7], -2, -1),
                     2.0),
                # Ranges, each meeting a tensor (a region that reads none stays PyTorch's).
                call(aten.add.Tensor, call(aten.mul.Tensor, positions, 3),
                     call(aten.select.int, row, 0, 0)),
                call(aten.mul.Tensor, steps, call(aten.gt.Scalar, row, 0.0)),  # int64
                call(aten.add.Tensor, row, steps),
                call(aten.add.Tensor, call(aten.mul.Tensor, halves, 3.0), row),
                call(aten.add.Tensor, call(aten.mul.Tensor, shifted, -1), row),
                # The causal mask over a (5, 5) score, -inf above the diagonal.
                call(aten.masked_fill.Scalar, call(aten.mul.Tensor, scores, 0.125), later,
                     float("-inf")),
                call(aten.masked_fill.Scalar, call(aten.mul.Tensor, x, 2.0), mask, 3),
                call(aten.masked_fill.Tensor, call(aten.mul.Tensor, x, 2.0), mask, value),
                # A mask that broadcasts, and integer and boolean tensors.
                call(aten.masked_fill.Scalar, call(aten.mul.Tensor, x, 2.0),
                     call(aten.unsqueeze.default, call(aten.select.int, later, 0, 1), 1), -1.5),
                call(aten.masked_fill.Scalar, call(aten.mul.Tensor, shifted, 2),
                     call(aten.gt.Scalar, row, 0.0), -7),
                call(aten.masked_fill.Scalar, call(aten.gt.Scalar, x, 0.0), mask, True),
            ]
            if hasattr(aten, "select_scatter"):
                outs.append(call(aten.mul.Tensor, call(aten.select_scatter.default, x, grad, 1, -2),
                                 2.0))
            if hasattr(torch.ops.prims, "iota"):
                outs.append(call(aten.add.Tensor, row, call(
                    torch.ops.prims.iota.default, 7, start=2, step=3, dtype=torch.int64,
                    device=cpu, requires_grad=False)))
            return outs

        gm = aten_graph(build, 5)
        self.check_graph("select_arange_masked_fill", gm, [x, grad, mask, value, scores],
                         ["aten.select.int", "aten.select_backward.default",
                          "aten.arange.default", "aten.arange.start", "aten.arange.start_step",
                          "aten.masked_fill.Scalar", "aten.masked_fill.Tensor"])

    def test_what_cannot_be_lowered_stays_pytorchs_with_its_reason(self):
        """Forms the lowerings do not take stay PyTorch's, each counted with its reason, and
        the regions around them are stitched: a fractional fill of an integer tensor (which
        PyTorch truncates), an as_strided that is not a reshape of its row-major input."""
        cpu = torch.device("cpu")

        def build(call, item, x, y):
            positions = call(aten.arange.default, 6, dtype=torch.int64, device=cpu)
            filled = call(aten.masked_fill.Scalar, positions, call(aten.gt.Scalar, x, 0.0), 2.5)
            strided = call(aten.as_strided.default, call(aten.mul.Tensor, y, 2.0), [3, 2], [1, 3])
            return [call(aten.add.Tensor, filled, 1), call(aten.exp.default, strided)]

        gm = aten_graph(build, 2)
        g = torch.Generator().manual_seed(SEED + 3)
        x, y = torch.randn(6, generator=g), torch.randn(2, 3, generator=g)
        backend, executor = make_backend()
        out = backend.compile_graph(copy.deepcopy(gm), [x, y], "unsupported_forms")(x, y)
        for e, a in zip(gm(x, y), out):
            assert_close(self, e, a, 4 * F32_TOLERANCE, "unsupported_forms")
        report = backend.report
        print("\n[unsupported forms] seed %d\n%s" % (SEED, report.summary()))
        self.assertEqual(dict(report.fallbacks), {"unsupported_op": 2}, report.details)
        details = " ".join(d for _, d in report.details)
        self.assertIn("masked_fill of torch.int64 with 2.5", details)
        self.assertIn("as_strided to strides (1, 3), not row-major", details)
        self.assertGreater(len(report.regions), 0)
        self.assertTrue(all(r.stitched for r in report.regions))
        self.assertEqual(report.stitched_calls, len(report.regions))


def causal_positions(x):
    """0, 1, ... along x's dimension 1 (a function torch.fx.symbolic_trace keeps whole, as
    PyTorch 1.13's cannot trace arange of a traced size; AOTAutograd traces into it)."""
    return torch.arange(x.shape[1], device=x.device)


torch.fx.wrap("causal_positions")


class GroupNormAndMask(torch.nn.Module):
    """GroupNorm with weight and bias, without, with its weight frozen and with both frozen
    (so its backward computes only the input's and the bias's gradients, or only the
    input's); a causal mask from positions
    (arange, masked_fill with -inf) over rows selected from one tensor (select, and
    select_backward in the gradient); a fill with a value computed in the graph."""

    def __init__(self):
        super().__init__()
        self.affine = torch.nn.GroupNorm(4, 8)
        self.plain = torch.nn.GroupNorm(2, 6, affine=False, eps=1e-3)
        self.frozen = torch.nn.GroupNorm(3, 6)
        self.frozen.weight.requires_grad_(False)
        self.fixed = torch.nn.GroupNorm(2, 6)  # the input's gradient alone
        self.fixed.requires_grad_(False)

    def forward(self, x, y, s):
        a = torch.nn.functional.silu(self.affine(x))
        b = self.plain(y) * self.frozen(y) + self.fixed(y)
        q, k = s[:, 0], s.select(1, -1)
        position = causal_positions(q)
        scores = (q * k).masked_fill(position[None, :] > position[:, None], float("-inf"))
        scores = scores.softmax(dim=-1)
        filled = s[:, 1].masked_fill(s[:, 1] > 0.5, scores.amax().detach())
        return torch.cat([a.reshape(-1), b.reshape(-1), scores.reshape(-1), filled.reshape(-1)])


class GroupNormAndMaskTest(unittest.TestCase):
    """Through ``stitch.torch.optimize`` (AOTAutograd's forward and backward): GroupNorm,
    whose native_group_norm and native_group_norm_backward the regions now hold, and the
    GPT-2 block's causal mask and selects, every region stitched on the emulator, the output
    and every gradient against eager."""

    def test_every_region_stitched_and_matching_eager(self):
        import stitch.torch
        g = torch.Generator().manual_seed(SEED + 4)
        module = GroupNormAndMask()
        with torch.no_grad():
            for p in module.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5 + 1)
        inputs = [torch.randn(2, 8, 5, 3, generator=g), torch.randn(3, 6, 7, generator=g),
                  torch.randn(2, 3, 6, 6, generator=g)]
        eager = copy.deepcopy(module)
        backend, executor = make_backend()
        stitched = stitch.torch.optimize(module, backend=backend)
        expected_out, expected_grads = run_step(eager, inputs)
        out, grads = run_step(stitched, inputs)
        report = backend.report
        print("\n[group norm and mask] seed %d\n%s" % (SEED, report.summary()))
        self.assertEqual(dict(report.fallbacks), {}, report.details)
        for region in report.regions:
            self.assertTrue(region.stitched, "%s: %s" % (region.name, region.reason))
        self.assertEqual(report.stitched_calls, len(report.regions))
        for run in executor.runs:
            self.assertTrue(run["report"]["pass"], run)
        ops = {op for r in report.regions for op in r.ops}
        for op in ("aten.native_group_norm.default", "aten.native_group_norm_backward.default",
                   "aten.select.int", "aten.select_backward.default", "aten.arange.default",
                   "aten.masked_fill.Scalar", "aten.masked_fill.Tensor"):
            self.assertIn(op, ops)
        self.assertLessEqual(max_relative_error(expected_out, out), 4 * F32_TOLERANCE)
        self.assertEqual(len(grads), len(expected_grads))
        # x, y and s; affine's, fixed's and frozen's parameters by name: fixed's and frozen's
        # weight have none, nor fixed's bias.
        self.assertEqual([e is None for e in expected_grads],
                         [False] * 5 + [True, True, False, True])
        for i, (e, a) in enumerate(zip(expected_grads, grads)):
            if e is None:
                self.assertIsNone(a, "gradient %d" % i)
                continue
            self.assertLessEqual(max_relative_error(e, a), 8 * F32_TOLERANCE, "gradient %d" % i)


class FallbackTest(unittest.TestCase):
    """Each way a region cannot run stitched gives PyTorch's own result and a counted reason."""

    def eager_and_stitched(self, module, inputs, backend):
        import stitch.torch
        expected = module(*inputs).detach()
        out = stitch.torch.optimize(copy.deepcopy(module), backend=backend)(*inputs).detach()
        return expected, out

    def test_daemon_down(self):
        import stitch
        dead = stitch.Client("unix://" + str(pathlib.Path(DAEMON.tmp) / "nobody.sock"),
                             compile_deadline_ms=2000)
        backend, executor = make_backend(client=dead)
        case = cases()[0]
        expected, out = self.eager_and_stitched(case.module, case.inputs, backend)
        self.assertLessEqual(max_relative_error(expected, out), F32_TOLERANCE)
        report = backend.report
        self.assertGreater(report.fallbacks["daemon"], 0)
        self.assertEqual(report.fallbacks["daemon"], len(report.regions))
        self.assertTrue(all(r.reason.startswith("UNAVAILABLE") for r in report.regions),
                        [r.reason for r in report.regions])
        self.assertEqual(report.stitched_calls, 0)
        self.assertEqual(executor.runs, [])

    def test_unsupported_op(self):
        backend, executor = make_backend()
        x = torch.randn(4, 32, generator=torch.Generator().manual_seed(SEED))
        expected, out = self.eager_and_stitched(CumsumBlock(), [x], backend)
        self.assertLessEqual(max_relative_error(expected, out), 4 * F32_TOLERANCE)
        report = backend.report
        self.assertEqual(report.fallbacks["unsupported_op"], 1, report.details)
        self.assertIn("aten.cumsum", " ".join(d for _, d in report.details))
        # The work around it is still stitched.
        self.assertGreater(report.stitched_calls, 0)
        self.assertTrue(all("cumsum" not in op for r in report.regions for op in r.ops))

    def test_a_new_batch_size_is_traced_again_and_shares_the_buckets(self):
        """optimize(): a call at another batch size is traced again, not left to the
        original module; regions that follow the batch name it, so the daemon answers a batch
        of the same power-of-two bucket from the bundle it compiled for the first."""
        import stitch.torch
        backend, executor = make_backend()
        case = cases()[0]
        eager = copy.deepcopy(case.module)
        stitched = stitch.torch.optimize(copy.deepcopy(case.module), backend=backend)
        run_step(stitched, case.inputs)  # batch 4: the bucket (3, 4]
        stitched.zero_grad(set_to_none=True)
        first = list(backend.report.regions)
        other = torch.randn(3, 8, 64, generator=torch.Generator().manual_seed(SEED + 1))
        expected_out, expected_grads = run_step(eager, [other])
        out, grads = run_step(stitched, [other])
        report = backend.report
        print("\n[optimize, batch 4 then 3] seed %d\n%s" % (SEED, report.summary()))
        self.assertEqual(dict(report.fallbacks), {}, report.details)
        self.assertEqual(len(stitched.signatures), 2)
        self.assertLessEqual(max_relative_error(expected_out, out), 4 * F32_TOLERANCE)
        for i, (e, a) in enumerate(zip(expected_grads, grads)):
            self.assertLessEqual(max_relative_error(e, a), 8 * F32_TOLERANCE, "gradient %d" % i)
        second = report.regions[len(first):]
        self.assertEqual(len(second), len(first))
        bucketed = [r for r in second if r.served is not None]
        self.assertGreater(len(bucketed), 0, "a region follows the batch")
        for r in bucketed:
            self.assertEqual(r.served, (3, 4), r.name)
            self.assertIn(r.key, {f.key for f in first}, "%s: the first batch's bundle" % r.name)
            self.assertTrue(r.outcome.startswith("hit"), "%s: %s" % (r.name, r.outcome))
        for run in executor.runs:
            self.assertTrue(run["report"]["pass"], run)

    def test_signatures_past_the_limit_run_the_original_module(self):
        import stitch.torch
        backend, executor = make_backend()
        case = cases()[0]
        module = copy.deepcopy(case.module)
        stitched = stitch.torch.optimize(module, backend=backend, max_signatures=1)
        stitched(*case.inputs)
        calls = backend.report.stitched_calls
        other = torch.randn(3, 8, 64, generator=torch.Generator().manual_seed(SEED + 1))
        out = stitched(other).detach()
        self.assertTrue(torch.equal(out, module(other).detach()), "the module's own result")
        self.assertEqual(backend.report.fallbacks["dynamic_shape"], 1)
        self.assertEqual(backend.report.stitched_calls, calls, "nothing stitched for it")

    def test_region_guard_on_shapes(self):
        """A region called with inputs other than the trace's runs its own FX code."""
        import stitch.torch
        backend, executor = make_backend()
        case = cases()[0]
        stitch.torch.optimize(copy.deepcopy(case.module), backend=backend)(*case.inputs)
        regions = [m for _, gm in backend.graphs for m in gm.modules()
                   if isinstance(m, stitch.torch.StitchedRegion)]
        self.assertGreater(len(regions), 0)
        runs = len(executor.runs)
        args = [torch.zeros(spec[:-1], dtype=torch.float64) for spec in regions[0].input_specs]
        try:
            regions[0](*args)
        except Exception:  # the region's own code may reject them, as eager would
            pass
        self.assertEqual(backend.report.fallbacks["dynamic_shape"], 1)
        self.assertEqual(len(executor.runs), runs, "nothing launched")

    def test_arch_mismatch(self):
        backend, executor = make_backend(capability=(8, 0), target="sm_90")
        case = cases()[0]
        expected, out = self.eager_and_stitched(case.module, case.inputs, backend)
        self.assertLessEqual(max_relative_error(expected, out), F32_TOLERANCE)
        report = backend.report
        self.assertTrue(all(r.stitched for r in report.regions), "the daemon compiled them")
        self.assertEqual(report.fallbacks["arch_mismatch"], len(report.regions))
        self.assertIn("sm_90", " ".join(d for _, d in report.details))
        self.assertEqual(executor.runs, [], "nothing launched")

    def test_no_executor_for_the_device(self):
        import stitch
        import stitch.torch
        backend = stitch.torch.StitchBackend(
            client=stitch.Client(DAEMON.socket, compile_deadline_ms=300000))
        case = cases()[0]
        expected, out = self.eager_and_stitched(case.module, case.inputs, backend)
        self.assertLessEqual(max_relative_error(expected, out), F32_TOLERANCE)
        self.assertEqual(backend.report.fallbacks["no_executor"], len(backend.report.regions))


def main(module="__main__"):
    """Starts a stitchd, runs ``module``'s tests against it (torch_test's own, or those of a
    file that imports it as its base), stops it; exits 1 on any failure or skip."""
    global DAEMON
    parser = argparse.ArgumentParser()
    parser.add_argument("--stitchd", required=True)
    parser.add_argument("--stitchctl", required=True)
    parser.add_argument("--library", required=True)
    known, rest = parser.parse_known_args()
    ARGS.__dict__.update(vars(known))
    os.environ["STITCH_CLIENT_LIBRARY"] = known.library
    print("torch %s, seed %d (STITCH_TEST_SEED replays it)" % (torch.__version__, SEED))
    from stitchd_process import StitchdProcess
    DAEMON = StitchdProcess(known.stitchd).start()
    try:
        program = unittest.main(module=module, argv=[sys.argv[0]] + rest, exit=False,
                                verbosity=2)
    finally:
        DAEMON.stop()
    result = program.result
    sys.exit(0 if result.wasSuccessful() and not result.skipped else 1)


if __name__ == "__main__":
    main()
