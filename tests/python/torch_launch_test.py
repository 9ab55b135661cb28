#!/usr/bin/env python3
"""stitch.torch's C++ launch path (the stitch::launch operator of libstitch_torch_launch.so,
loader/torch/launch_op.cc) against the loader's stand-in CUDA driver, with the pinned PyTorch
2.x of .venv-torch2/ (python_torch2_launch).

  torch_launch_test.py --stitchd PATH --stitchctl PATH --library PATH --fake-driver PATH
      --extension PATH [unittest arguments]

CI has no GPU: CPU tensors' pointers stand for device pointers (the operator's CPU kernel is
the same code as its CUDA one, less the device guard and PyTorch's current CUDA stream), and
the stand-in driver (tests/loader/fake_cuda_driver.cc) records each launch as a line of text
instead of running it. The tests check that a region launched through the operator issues
exactly the driver launches the Python path (ctypes over the loader) issues, with the outputs
allocated once in the graph's strides and no copy; that a buffer smaller than the bundle
declares is refused with the loader's message; that CudaExecutor.run launches from C++ at
sizes it launched before; and, with a real stitchd, that torch.compile's regions launch from
C++ after their first call under backend="stitch" (the graph calls stitch::launch) and under
stitch.torch's own backend, counted per path in the report and as invocations for the daemon;
that channels-last inputs launch the variant registered for that layout, on their storage;
and that a region between two convolutions, which Inductor lays out channels-last, launches
from C++ through stitch::launch_stored with no copy.
They print the host time per launch of both paths (on this machine's CPU, against the
stand-in driver, whose logging is part of both).
"""

import argparse
import contextlib
import ctypes
import os
import pathlib
import sys
import time
import unittest

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import torch_test as base  # noqa: E402  (its helpers, its daemon, its seed)
import cuda_test as bundles  # noqa: E402  (bundles in the protobuf wire format)

ARGS = argparse.Namespace()
FAKE = None  # the stand-in driver


def events(prefix=""):
    text = FAKE.stitch_fake_loader_events().decode()
    return [line for line in text.splitlines() if line.startswith(prefix)]


def launches(outputs=()):
    """The recorded launches as dicts of their fields, each output's data pointer in the
    arguments replaced by "out<i>" (fresh on each call), in order."""
    names = {str(t.data_ptr()): "out%d" % i for i, t in enumerate(outputs)}
    result = []
    for line in events("launch "):
        f = bundles.fields(line)
        f["args"] = ",".join(names.get(a, a) for a in f["args"].split(","))
        result.append(f)
    return result


def fake_executor():
    """stitch.torch's CUDA executor on the stand-in driver, for CPU tensors."""
    import stitch.cuda
    import stitch.torch

    class FakeDriverExecutor(stitch.torch.CudaExecutor):
        def device_target(self, device):
            return "sm_90"

        def check(self, target, device):
            return None

    return FakeDriverExecutor(stitch.cuda.Loader(ARGS.fake_driver))


@contextlib.contextmanager
def profiled_ops(counts):
    """Counts the ATen ops run inside, by name, into ``counts``."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        yield
    for e in prof.events():
        counts[e.name] = counts.get(e.name, 0) + 1


COPIES = ("aten::clone", "aten::copy_", "aten::contiguous", "aten::_to_copy")


def per_call_us(fn, calls):
    """Host microseconds per call of ``fn`` over ``calls`` calls, after 50 untimed ones; the
    stand-in driver's log is cleared between rounds so that it does not grow."""
    for _ in range(50):
        fn()
    FAKE.stitch_fake_loader_reset()
    best = float("inf")
    for _ in range(3):
        begin = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - begin) / calls * 1e6)
        FAKE.stitch_fake_loader_reset()
    return best


def masked(runs, reference):
    """``runs`` (one run's launches) with each argument at which ``reference`` (another run's
    launches of the same kernels) names an output replaced by "out": where each run wrote its
    outputs."""
    result = []
    for line, ref in zip(runs, reference):
        outs = [a.startswith("out") for a in ref["args"].split(",")]
        args = ["out" if o else a for a, o in zip(line["args"].split(","), outs)]
        result.append(dict(line, args=",".join(args)))
    return result


class OperatorTest(unittest.TestCase):
    """stitch::launch on a bundle made here: inputs of 16 floats, an output of 256 (two
    kernels, a temporary, a workspace)."""

    def setUp(self):
        import stitch.torch
        from stitch.torch import _launch
        FAKE.stitch_fake_loader_set_cc(9, 0)
        FAKE.stitch_fake_loader_set_context(1)
        FAKE.stitch_fake_loader_reset()
        self.assertEqual(_launch.status(), (True, ARGS.extension))
        self.executor = fake_executor()
        self.assertEqual(self.executor.launch_path, "cpp")
        self.kernels = stitch.torch.RegionKernels(
            "launch-sized", "sm_90", bundles.sized_bundle("launch-sized"), "",
            (((256,), torch.float32),))
        self.inputs = [torch.randn(16), torch.randn(4, 4)]

    def python_launch(self):
        """The Python path's launch (ctypes over the loader): its outputs and launches."""
        FAKE.stitch_fake_loader_reset()
        self.executor.launch_path = "python"
        try:
            outputs = self.executor.run(self.kernels, self.inputs)
        finally:
            self.executor.launch_path = "cpp"
        self.assertEqual(self.executor.last_launch_path(), "python")
        return outputs, launches(outputs)

    def native_region(self, outputs, fallback=""):
        from stitch.torch import _launch
        region = _launch.NativeRegion(fallback)
        loader, program = self.executor.native(self.kernels)
        self.assertTrue(region.add(self.inputs, [], outputs, loader, program, 0,
                                   self.kernels.key))
        return region

    def test_the_same_driver_launches_as_the_python_path(self):
        expected_outputs, expected = self.python_launch()
        self.assertEqual([l["fn"] for l in expected], ["scale", "add"])
        region = self.native_region(expected_outputs)
        FAKE.stitch_fake_loader_reset()
        counts = {}
        with profiled_ops(counts):
            outputs = region(self.inputs, [])
        got = launches(outputs)
        self.assertEqual(got, expected)  # function, grid, block, stream, every argument
        # The arguments are the tensors' data pointers in the bundle's order.
        self.assertEqual(got[0]["args"].split(",")[0], str(self.inputs[0].data_ptr()))
        self.assertEqual(got[1]["args"].split(",")[0], str(self.inputs[1].data_ptr()))
        self.assertEqual(got[1]["args"].split(",")[2], "out0")
        self.assertEqual(len(outputs), 1)
        self.assertEqual((tuple(outputs[0].shape), outputs[0].stride(), outputs[0].dtype),
                         ((256,), (1,), torch.float32))
        self.assertEqual(outputs[0].nbytes, 1024)  # the bundle's declared output 0
        self.assertNotIn(outputs[0].data_ptr(), [x.data_ptr() for x in self.inputs])
        self.assertEqual({n: counts.get(n, 0) for n in COPIES}, {n: 0 for n in COPIES})
        self.assertEqual(counts.get("aten::empty_strided"), 1, counts)
        self.assertEqual(region.counts(), (0, [("launch-sized", 1)]))

    def test_the_executor_launches_from_cpp_at_sizes_it_launched_before(self):
        _, expected = self.python_launch()
        first = self.executor.run(self.kernels, self.inputs)  # from Python: adds the sizes
        self.assertEqual(self.executor.last_launch_path(), "python")
        FAKE.stitch_fake_loader_reset()
        outputs = self.executor.run(self.kernels, self.inputs)
        self.assertEqual(self.executor.last_launch_path(), "cpp")
        self.assertEqual(launches(outputs), expected)
        self.assertEqual([(o.shape, o.stride()) for o in outputs],
                         [(o.shape, o.stride()) for o in first])
        # Other sizes launch from Python again (here refused by the loader: too small).
        with self.assertRaises(Exception) as caught:
            self.executor.run(self.kernels, [torch.randn(8), torch.randn(4, 4)])
        self.assertIn("input 0 is a 32-byte buffer", str(caught.exception))
        self.assertEqual(self.executor.last_launch_path(), "python")

    def test_an_output_that_is_an_input_is_a_copy_on_both_paths(self):
        # The bundle's second output is input 1's bytes (a reshape of it): no kernel writes
        # it, and PyTorch gets a tensor of its own, filled by the loader's copy, from either
        # path, so an in-place update of one never shows in the other.
        import stitch.torch
        data = bundles.sized_bundle("launch-alias") + bundles.field_bytes(
            12, bundles.buffer_spec(64, "f32[4,4]") + bundles.field_varint(4, 1))
        self.kernels = stitch.torch.RegionKernels(
            "launch-alias", "sm_90", data, "", (((256,), torch.float32), ((4, 4), torch.float32)))
        python_outputs, _ = self.python_launch()
        python_copies = events("copy ")
        region = self.native_region(python_outputs)
        FAKE.stitch_fake_loader_reset()
        native_outputs = region(self.inputs, [])
        self.assertEqual(len(events("launch ")), 2)
        inputs = [x.data_ptr() for x in self.inputs]
        for outputs, copies in ((python_outputs, python_copies),
                                (native_outputs, events("copy "))):
            self.assertEqual((tuple(outputs[1].shape), outputs[1].dtype), ((4, 4), torch.float32))
            self.assertNotIn(outputs[1].data_ptr(), inputs)
            self.assertEqual(copies, ["copy to=%d from=%d bytes=64 stream=0"
                                      % (outputs[1].data_ptr(), inputs[1])])

    def test_a_buffer_smaller_than_the_bundle_declares_is_refused(self):
        region = self.native_region([torch.empty(16)])  # the bundle writes 256 floats
        FAKE.stitch_fake_loader_reset()
        with self.assertRaises(RuntimeError) as caught:
            region(self.inputs, [])
        self.assertIn("INVALID_ARGUMENT: output 0 is a 64-byte buffer, but the bundle's "
                      "output 0 is f32[256] (1024 bytes)", str(caught.exception))
        self.assertEqual(events("launch "), [])
        # The variant is retired: the sizes are no longer served in C++.
        with self.assertRaises(RuntimeError) as caught:
            region(self.inputs, [])
        self.assertIn("no variant for the inputs' sizes and dtypes", str(caught.exception))

    def test_calls_it_cannot_serve_are_refused_without_a_fallback(self):
        region = self.native_region(self.python_launch()[0])
        cases = [([torch.randn(16), torch.randn(4, 8)[:, ::2]], "not one dense block"),
                 ([torch.randn(16), torch.randn(4, 4).t()], "no variant"),
                 ([torch.randn(16), torch.randn(4, 5)], "no variant"),
                 ([torch.randn(16).double(), torch.randn(4, 4)], "no variant")]
        for inputs, message in cases:
            with self.assertRaises(RuntimeError) as caught:
                region(inputs, [])
            self.assertIn(message, str(caught.exception))

    def test_channels_last_inputs_launch_the_variant_registered_for_their_layout(self):
        # A bundle compiled over NHWC storage (stitch.torch._stored) reads a channels-last
        # tensor's data as it lies: the variant registered with channels-last inputs and
        # outputs launches on such inputs with their own pointers, no copy, and allocates its
        # outputs channels-last; the same sizes row-major launch the row-major variant.
        from stitch.torch import _launch
        _, expected = self.python_launch()
        cl = torch.channels_last
        stored_in = [self.inputs[0], torch.randn(1, 4, 2, 2).contiguous(memory_format=cl)]
        rows_in = [self.inputs[0], stored_in[1].contiguous()]
        region = _launch.NativeRegion("")
        loader, program = self.executor.native(self.kernels)
        self.assertTrue(region.add(rows_in, [], [torch.empty(1, 64, 2, 2)], loader, program, 0,
                                   "rows"))
        self.assertTrue(region.add(stored_in, [], [torch.empty(1, 64, 2, 2).contiguous(
            memory_format=cl)], loader, program, 0, "stored"))
        FAKE.stitch_fake_loader_reset()
        counts = {}
        with profiled_ops(counts):
            outputs = region(stored_in, [])
        got = launches(outputs)
        self.assertEqual([dict(l, args="") for l in got], [dict(l, args="") for l in expected])
        self.assertEqual(got[1]["args"].split(",")[0], str(stored_in[1].data_ptr()))
        self.assertEqual(got[1]["args"].split(",")[2], "out0")
        self.assertEqual(outputs[0].stride(), (256, 1, 128, 64))
        self.assertEqual({n: counts.get(n, 0) for n in COPIES}, {n: 0 for n in COPIES})
        self.assertEqual(region.counts(), (0, [("rows", 0), ("stored", 1)]))
        outputs = region(rows_in, [])
        self.assertEqual(outputs[0].stride(), (256, 4, 2, 1))
        self.assertEqual(region.counts(), (0, [("rows", 1), ("stored", 0)]))
        # Any storage order of dense tensors (a reshape of a channels-last tensor stores its
        # dimensions in neither order above) keys a variant of its own, whose outputs are
        # allocated in the order registered.
        other_in = [self.inputs[0], torch.randn(1, 2, 2, 4).permute(0, 3, 2, 1)]
        self.assertTrue(region.add(other_in, [], [torch.empty(1, 2, 64, 2).permute(0, 2, 1, 3)],
                                   loader, program, 0, "other"))
        outputs = region(other_in, [])
        self.assertEqual(outputs[0].stride(), (256, 2, 128, 1))
        self.assertEqual(region.counts(), (0, [("rows", 0), ("stored", 0), ("other", 1)]))
        # A fourth order of the same sizes has no variant, and strides that are no dense block
        # are not launched; with no fallback, the call says why.
        fourth = torch.randn(1, 2, 4, 2).permute(0, 2, 1, 3)
        for inputs, message in [([self.inputs[0], fourth], "no variant"),
                                ([self.inputs[0], torch.randn(1, 4, 2, 4)[..., ::2]],
                                 "not one dense block")]:
            with self.assertRaises(RuntimeError) as caught:
                region(inputs, [])
            self.assertIn(message, str(caught.exception))
        with self.assertRaises(RuntimeError) as caught:
            _launch.NativeRegion("name", "elsewhere")
        self.assertIn('"region" or "region_stored", not "elsewhere"', str(caught.exception))

    def test_host_time_per_launch(self):
        outputs, _ = self.python_launch()
        region = self.native_region(outputs)
        run = lambda: self.executor.run(self.kernels, self.inputs)  # noqa: E731
        self.executor.launch_path = "python"
        try:
            python = per_call_us(run, 2000)
        finally:
            self.executor.launch_path = "cpp"
        executor = per_call_us(run, 2000)
        native = per_call_us(lambda: region(self.inputs, []), 2000)
        print("\nhost time per launch (this CPU, stand-in driver, a 2-kernel bundle): "
              "CudaExecutor.run from Python (ctypes) %.1f us, CudaExecutor.run through "
              "stitch::launch %.1f us, stitch::launch alone %.1f us" % (python, executor, native))


def fake_backend(executor):
    """A StitchBackend on the test's daemon and ``executor``, and the invocations it
    records, as (key, count)."""
    import stitch
    import stitch.torch
    client = stitch.Client(base.DAEMON.socket, compile_deadline_ms=300000)
    backend = stitch.torch.StitchBackend(client=client, executors={"cpu": executor})
    recorded = []
    record = backend.record_invocation
    backend.record_invocation = lambda key, n=1: (recorded.append((key, n)), record(key, n))
    return backend, recorded


def region_function(x, y):
    z = x * y + 1.0
    return torch.softmax(z, dim=-1) * torch.tanh(y)


class CompiledTest(unittest.TestCase):
    """Compiled functions whose stitched region launches on the stand-in driver."""

    def setUp(self):
        FAKE.stitch_fake_loader_set_cc(10, 0)  # loads the PTX (the stand-in reads its text)
        FAKE.stitch_fake_loader_set_context(1)
        FAKE.stitch_fake_loader_reset()
        g = torch.Generator().manual_seed(base.SEED)
        self.x, self.y = torch.randn(32, 64, generator=g), torch.randn(32, 64, generator=g)
        self.on_x_and_y = "%d,%d," % (self.x.data_ptr(), self.y.data_ptr())

    def test_the_eager_backend_launches_from_cpp_after_the_first_call(self):
        # backend=stitch.torch.backend: the graph is Python; the executor's run launches
        # through stitch::launch at sizes it launched before.
        executor = fake_executor()
        backend, recorded = fake_backend(executor)
        compiled = base.torch_compile(region_function, backend)
        first = compiled(self.x, self.y)
        python = [l for l in launches([first]) if l["args"].startswith(self.on_x_and_y)]
        self.assertTrue(python)
        FAKE.stitch_fake_loader_reset()
        out = compiled(self.x, self.y)
        got = launches([out])
        self.assertEqual(len(got), len(python))
        self.assertEqual(masked(got, got), masked(python, got))
        compiled(self.x, self.y)
        print("\n[%s]\n%s" % (self.id(), backend.report.summary()))
        self.assertEqual(backend.report.launch_paths, {"python": 1, "cpp": 2})
        self.assertEqual(sum(n for _, n in recorded), 3)

    def test_replaced_regions_launch_from_cpp(self):
        import stitch.torch
        from stitch.torch import _inductor
        from torch_inductor_test import StandInTimer
        executor = fake_executor()
        stitch_backend, recorded = fake_backend(executor)
        backend = stitch.torch.InductorStitchBackend(
            stitch_backend, timer=StandInTimer(stitched=1.0, inductor=2.0))
        x, y = self.x, self.y
        # The stand-in driver computes nothing: the outputs cannot agree with Inductor's.
        agree, _inductor._disagreement = _inductor._disagreement, lambda a, b: ""
        try:
            compiled = base.torch_compile(region_function, backend)
            # Compiles: stitch's side runs twice on random inputs (from Python, then through
            # the executor's stitch::launch); then the graph's stitch::launch has no variant
            # yet and hands the call to stitch::region, which adds it.
            first = compiled(x, y)
        finally:
            _inductor._disagreement = agree
        calls = [n for _, gm in backend.stitch.graphs for n in gm.graph.nodes
                 if n.op == "call_function" and "stitch." in str(n.target)]
        print("\n[%s]\n%s" % (self.id(), backend.report.summary()))
        self.assertEqual(len(backend.report.replaced()), 1, backend.report.summary())
        self.assertEqual([str(n.target) for n in calls], ["stitch.launch.default"])
        # Inductor would capture no launch in a CUDA graph (mode="reduce-overhead").
        self.assertIn(torch.Tag.cudagraph_unsafe, torch.ops.stitch.launch.default.tags)
        from torch._inductor.utils import is_cudagraph_unsafe_fx_node
        self.assertTrue(is_cudagraph_unsafe_fx_node(calls[0]))
        self.assertEqual(backend.report.launch_paths, {"cpp": 1})
        recorded_launches = launches([first])
        expected = [l for l in recorded_launches if l["args"].startswith(self.on_x_and_y)]
        k = len(expected)
        self.assertEqual(len(recorded_launches), 3 * k)
        self.assertTrue(expected[-1]["args"].endswith(",out0"), expected)
        # The Python path's launches on the timing inputs, and the C++ path's on the same.
        self.assertEqual(masked(recorded_launches[:k], expected),
                         masked(recorded_launches[k:2 * k], expected))
        FAKE.stitch_fake_loader_reset()
        counts = {}
        with profiled_ops(counts):
            out = compiled(x, y)
        self.assertEqual(launches([out]), expected)
        self.assertEqual((out.shape, out.stride(), out.dtype), (first.shape, first.stride(),
                                                                first.dtype))
        self.assertEqual({n: counts.get(n, 0) for n in COPIES}, {n: 0 for n in COPIES})
        for _ in range(3):
            compiled(x, y)
        self.assertEqual(backend.report.launch_paths, {"cpp": 5})
        self.assertEqual(backend.report.stitched_calls, 5)
        key = backend.report.replaced()[0].key
        self.assertEqual(sum(n for k, n in recorded if k == key), 5)
        self.assertTrue(stitch_backend.client.flush_usage())
        replacement = _inductor._NATIVE[calls[0].args[0]]
        self.assertEqual(replacement.native.counts(), (0, [(key, 0)]))  # all counted

        # A job that never reads its report: the interpreter's exit hook counts its C++
        # launches as invocations and flushes them to the daemon.
        from stitch.torch import _report
        compiled(x, y)
        compiled(x, y)
        self.assertEqual(backend.report._flushes, [stitch_backend.client.flush_usage])
        _report._sync_at_exit()
        self.assertEqual(sum(n for k, n in recorded if k == key), 7)
        self.assertEqual(replacement.native.counts(), (0, [(key, 0)]))
        self.assertEqual(backend.report.launch_paths, {"cpp": 7})

        # Inputs C++ cannot launch as they are go to the Python path, which copies them.
        strided = [torch.randn(tuple(reversed(x.shape))).t(), y]
        out = torch.ops.stitch.launch.default(calls[0].args[0], strided, [])[0]
        self.assertEqual((out.shape, out.stride()), (first.shape, first.stride()))
        self.assertEqual(backend.report.layout_copies, 1)
        self.assertEqual(backend.report.stitched_calls, 8)

        # What the compiled graph calls per region: stitch::region as it runs without the
        # C++ path against stitch::launch.
        native = replacement.native
        name = next(n for n, r in _inductor._REGIONS.items() if r is replacement)
        inputs = [torch.randn(a.meta["val"].shape) for a in calls[0].args[1]]
        replacement.native, executor.launch_path = None, "python"
        try:
            python = per_call_us(lambda: torch.ops.stitch.region.default(name, inputs, []),
                                 1000)
        finally:
            replacement.native, executor.launch_path = native, "cpp"
        torch.ops.stitch.launch.default(native.id, inputs, [])  # adds these sizes
        cpp = per_call_us(lambda: torch.ops.stitch.launch.default(native.id, inputs, []), 1000)
        print("host time per region call from the compiled graph (this CPU, stand-in driver): "
              "stitch::region (Python) %.1f us, stitch::launch (C++) %.1f us" % (python, cpp))


def conv_function(x, w, scale, shift):
    # shift is [1, C, 1, 1]: laid out the same row-major and channels-last.
    y = torch.nn.functional.conv2d(x, w, padding=1)
    z = torch.relu(y * scale[:, None, None] + shift) + y
    return torch.nn.functional.conv2d(z, w, padding=1)


def group_norm_function(x, w, gamma, beta):
    # GroupNorm reads the convolution's output through a view into groups, [2, 8, 6, 6] to
    # [2, 4, 2, 36]: on channels-last storage, a tensor stored in neither order.
    y = torch.nn.functional.conv2d(x, w, padding=1)
    z = torch.nn.functional.silu(torch.nn.functional.group_norm(y, 4, gamma, beta))
    return torch.nn.functional.conv2d(z, w, padding=1)


class ChannelsLastCompiledTest(unittest.TestCase):
    """Regions between convolutions, which Inductor lays out channels-last: under
    backend="stitch" the graph calls stitch::launch_stored, which launches the region's
    kernels over that storage from C++ after its first call, with no copy."""

    def compile_and_call(self, function, args):
        """(the backend, the daemon's recorded invocations, the compiled function, the graphs'
        stitch calls) after one call, with every region chosen for stitch."""
        import stitch.torch
        from stitch.torch import _inductor
        from torch_inductor_test import StandInTimer
        FAKE.stitch_fake_loader_set_cc(10, 0)
        FAKE.stitch_fake_loader_set_context(1)
        FAKE.stitch_fake_loader_reset()
        executor = fake_executor()
        stitch_backend, recorded = fake_backend(executor)
        backend = stitch.torch.InductorStitchBackend(
            stitch_backend, timer=StandInTimer(stitched=1.0, inductor=2.0))
        # The stand-in driver computes nothing: the outputs cannot agree with Inductor's.
        agree, _inductor._disagreement = _inductor._disagreement, lambda a, b: ""
        try:
            compiled = base.torch_compile(function, backend)
            compiled(*args)  # stitch::launch_stored has no variant yet: region_stored adds it
        finally:
            _inductor._disagreement = agree
        print("\n[%s]\n%s" % (self.id(), backend.report.summary()))
        calls = [n for _, gm in backend.stitch.graphs for n in gm.graph.nodes
                 if n.op == "call_function" and "stitch." in str(n.target)]
        return backend, recorded, compiled, calls

    def call_without_copies(self, compiled, args):
        """Calls ``compiled``: it launches kernels and copies no tensor."""
        FAKE.stitch_fake_loader_reset()
        counts = {}
        with profiled_ops(counts):
            compiled(*args)
        self.assertEqual({n: counts.get(n, 0) for n in COPIES}, {n: 0 for n in COPIES})
        self.assertTrue(events("launch "))

    def test_a_group_norms_regions_launch_from_cpp_on_the_convolutions_storage(self):
        from stitch.torch import _inductor
        g = torch.Generator().manual_seed(base.SEED)
        args = (torch.randn(2, 8, 6, 6, generator=g), torch.randn(8, 8, 3, 3, generator=g),
                torch.randn(8, generator=g), torch.randn(8, generator=g))
        backend, _, compiled, calls = self.compile_and_call(group_norm_function, args)
        self.assertGreater(len(calls), 0)
        self.assertEqual({str(n.target) for n in calls}, {"stitch.launch_stored.default"})
        for call in calls:  # the view into groups moved inside: the call takes the tensor
            self.assertTrue(all(t.meta["val"].dim() != 4 or tuple(t.meta["val"].shape) ==
                                (2, 8, 6, 6) for t in call.args[1]),
                            [tuple(t.meta["val"].shape) for t in call.args[1]])
        self.call_without_copies(compiled, args)
        self.assertEqual(backend.report.launch_paths, {"python": len(calls),
                                                       "cpp": len(calls)})
        self.assertEqual(backend.report.layout_copies, 0)
        stored = [_inductor._NATIVE[c.args[0]].stored for c in calls]
        self.assertTrue(all(s is not None and not s.takes_region_inputs for s in stored))

    def test_channels_last_regions_launch_from_cpp(self):
        from stitch.torch import _inductor
        g = torch.Generator().manual_seed(base.SEED)
        args = (torch.randn(2, 8, 6, 6, generator=g), torch.randn(8, 8, 3, 3, generator=g),
                torch.randn(8, generator=g), torch.randn(1, 8, 1, 1, generator=g))
        backend, recorded, compiled, calls = self.compile_and_call(conv_function, args)
        stitch_backend = backend.stitch
        self.assertEqual([str(n.target) for n in calls], ["stitch.launch_stored.default"])
        op = torch.ops.stitch.launch_stored.default
        self.assertIn(torch.Tag.flexible_layout, op.tags)
        self.assertIn(torch.Tag.cudagraph_unsafe, op.tags)
        replacement = _inductor._NATIVE[calls[0].args[0]]
        key = replacement.stored.kernels.key
        self.assertEqual(backend.report.replaced()[0].key, key)
        self.call_without_copies(compiled, args)
        compiled(*args)
        self.assertEqual(backend.report.launch_paths, {"python": 1, "cpp": 2})
        self.assertEqual(backend.report.layout_copies, 0)
        self.assertTrue(stitch_backend.client.flush_usage())
        self.assertEqual(sum(n for k, n in recorded if k == key), 3)

        # The operator on the region's inputs: channels-last ones launch the stored kernels on
        # their storage and give channels-last outputs.
        cl = torch.channels_last
        inputs = [torch.randn(a.meta["val"].shape) for a in calls[0].args[1]]
        stored = [x.contiguous(memory_format=cl) if x.dim() == 4 else x for x in inputs]
        self.assertEqual(sorted(tuple(x.shape) for x in stored if x.dim() == 4),
                         [(1, 8, 1, 1), (2, 8, 6, 6)])
        replacement.native.counts()
        FAKE.stitch_fake_loader_reset()
        out = op(replacement.native.id, stored, [])
        pointers = {str(x.data_ptr()) for x in stored}
        self.assertTrue(any(a in pointers for l in launches(out) for a in l["args"].split(",")))
        self.assertTrue(all(o.is_contiguous(memory_format=cl) for o in out if o.dim() == 4))
        self.assertEqual(replacement.native.counts(), (0, [(key, 1)]))
        # Row-major arguments have no variant yet: stitch::region_stored compiles kernels over
        # that storage, launches them with the outputs in the same strides, and registers
        # them, so the next such call launches from C++.
        out = op(replacement.native.id, inputs, [])
        self.assertTrue(all(o.is_contiguous(memory_format=cl) for o in out if o.dim() == 4))
        self.assertEqual(replacement.stored.variants, 2)
        fallbacks, _ = replacement.native.counts()
        self.assertEqual(fallbacks, 1)
        op(replacement.native.id, inputs, [])
        fallbacks, launched = replacement.native.counts()
        self.assertEqual(fallbacks, 0)
        self.assertEqual([n for k, n in launched if k != key], [1])


def main():
    global FAKE
    parser = argparse.ArgumentParser()
    parser.add_argument("--fake-driver", required=True)
    parser.add_argument("--extension", required=True)
    known, rest = parser.parse_known_args()
    ARGS.fake_driver = os.path.abspath(known.fake_driver)
    ARGS.extension = os.path.abspath(known.extension)
    os.environ["STITCH_TORCH_LAUNCH_LIBRARY"] = ARGS.extension
    FAKE = ctypes.CDLL(ARGS.fake_driver)
    FAKE.stitch_fake_loader_events.restype = ctypes.c_char_p
    for name in ("stitch_fake_loader_set_cc", "stitch_fake_loader_set_context"):
        getattr(FAKE, name).restype = None
    sys.argv = [sys.argv[0]] + rest
    base.main(module="__main__")


if __name__ == "__main__":
    main()
