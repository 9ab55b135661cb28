#!/usr/bin/env python3
"""``torch.compile(model, backend="stitch")`` against a real stitchd, with the pinned PyTorch
2.x of .venv-torch2/ (python_torch2_inductor).

  torch_inductor_test.py --stitchd PATH --stitchctl PATH --library PATH [unittest arguments]

Inductor compiles the MLP block for the CPU; the regions stitch's daemon compiled run on the
compiler's host emulator (tests/python/emulator_executor.py), since CI has no GPU. A stand-in
timer steers each region's choice: stitch timed faster replaces Inductor's kernels, slower
keeps them. Both sides really run on every timed region, and their outputs must agree before
any choice is made. Inputs and weights are random from a seed that is printed, and replayed
from STITCH_TEST_SEED.
"""

import copy
import pathlib
import sys
import unittest

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import torch_test as base  # noqa: E402  (its helpers, its daemon, its seed)
from torch_models import LayerNormGeluMlp  # noqa: E402

# Inductor's CPU code and stitch's kernels round differently (fused multiply-adds, the order of
# sums, exp); the compiler's own tolerance, ten times over.
TOLERANCE = 1e-4


class StandInTimer:
    """Answers fixed seconds per side after running it once, as if it had timed it."""

    repeats = 5  # the samples each side's time is reported with

    def __init__(self, stitched, inductor):
        self.answers = {"stitched": stitched, "inductor": inductor}
        self.sides = []

    def seconds(self, side, run, device):
        run()
        self.sides.append(side)
        return self.answers[side]


class SimulatedCuda:
    """torch.cuda's Event, _sleep and synchronize over a simulated timeline: the host's clock
    advances by each call's host seconds, and the GPU runs what was issued in order, each item
    from the later of its issue and the GPU's end of the previous one. An event completes when
    the GPU reaches it."""

    CYCLES_PER_MS = 1.5e6

    def __init__(self):
        self.host = 0.0
        self.gpu_free = 0.0
        self.sleeps = []

    def issue(self, seconds):
        self.gpu_free = max(self.host, self.gpu_free) + seconds

    def call(self, host_seconds, device_seconds, waits=False):
        """One launch: ``host_seconds`` on the CPU, then ``device_seconds`` on the GPU; with
        ``waits``, the host then waits for the GPU (a synchronizing call)."""
        self.host += host_seconds
        self.issue(device_seconds)
        if waits:
            self.synchronize()

    def _sleep(self, cycles):
        self.sleeps.append(cycles)
        self.host += 1e-6
        self.issue(cycles / self.CYCLES_PER_MS / 1e3)

    def synchronize(self, device=None):
        self.host = max(self.host, self.gpu_free)

    def Event(self, enable_timing=False):
        return SimulatedEvent(self)


class SimulatedEvent:
    def __init__(self, cuda):
        self.cuda, self.at = cuda, None

    def record(self):
        self.at = max(self.cuda.host, self.cuda.gpu_free)

    def query(self):
        return self.cuda.host >= self.at

    def synchronize(self):
        self.cuda.host = max(self.cuda.host, self.at)

    def elapsed_time(self, end):
        return (end.at - self.at) * 1e3


class NoTimer:
    """Fails any timing: for a backend that must decide from the daemon's records alone."""

    def seconds(self, side, run, device):
        raise AssertionError("timed %s although the daemon held the timings" % side)


class CorruptingExecutor:
    """The emulator, with every output off by one: kernels that must never be chosen."""

    def __init__(self, inner):
        self.inner = inner
        self.runs = inner.runs

    def device_target(self, device):
        return self.inner.device_target(device)

    def check(self, target, device):
        return self.inner.check(target, device)

    def run(self, kernels, inputs):
        return [o + 1 for o in self.inner.run(kernels, inputs)]


def inductor_backend(timer, batch, corrupt=False, client=None):
    import stitch
    import stitch.torch
    stitch_backend, executor = base.make_backend(client=client)
    if corrupt:
        executor = CorruptingExecutor(executor)
        stitch_backend._executors["cpu"] = executor
    backend = stitch.torch.InductorStitchBackend(stitch_backend, timer=timer)
    module = LayerNormGeluMlp()
    x = torch.randn(batch, 8, 64, generator=torch.Generator().manual_seed(base.SEED + batch))
    return backend, executor, module, x


def region_calls(backend):
    """The stitch::region calls of the graphs the backend handed to Inductor."""
    return [n for _, gm in backend.stitch.graphs for n in gm.graph.nodes
            if n.op == "call_function" and "stitch.region" in str(n.target)]


def stats():
    import stitch
    with stitch.Client(base.DAEMON.socket) as client:
        return client.stats()


class InductorBackendTest(unittest.TestCase):
    """The per-region choice between Inductor's kernels and stitch's."""

    def step(self, backend, module, x):
        eager = copy.deepcopy(module)
        compiled = base.torch_compile(module, backend)
        expected_out, expected_grads = base.run_step(eager, [x])
        out, grads = base.run_step(compiled, [x])
        print("\n[%s] seed %d\n%s" % (self.id(), base.SEED, backend.report.summary()))
        self.assertLessEqual(base.max_relative_error(expected_out, out), TOLERANCE)
        for i, (e, a) in enumerate(zip(expected_grads, grads)):
            self.assertLessEqual(base.max_relative_error(e, a), TOLERANCE, "gradient %d" % i)
        return compiled

    def timed_step(self, stitched, inductor, batch):
        """One step of the MLP block under a StandInTimer that gives each side ``stitched``
        and ``inductor`` seconds; returns (timer, backend, executor, compiled, x)."""
        timer = StandInTimer(stitched=stitched, inductor=inductor)
        backend, executor, module, x = inductor_backend(timer, batch=batch)
        compiled = self.step(backend, module, x)
        self.assertGreater(len(backend.report.choices), 1, "forward and backward regions")
        return timer, backend, executor, compiled, x

    def test_device_timer_takes_the_median_after_warming_up(self):
        import stitch.torch
        calls = []
        seconds = stitch.torch.DeviceTimer(warmup=2, repeats=5).seconds(
            "inductor", lambda: calls.append(1), torch.device("cpu"))
        self.assertEqual(len(calls), 7)
        self.assertGreater(seconds, 0)
        self.assertLess(seconds, 1)

    def test_device_timer_times_the_gpu_not_the_host_issuing_the_calls(self):
        # On a simulated timeline: a call of 150 us of host time for 5 us of GPU work is 5 us
        # (the calls issued behind a sleep, which grows until the host gets ahead), one of 2 us
        # for 40 us is 40 us, and a call that waits for the GPU is its host and GPU time (but
        # for the first of each batch of 10, whose host time the sleep hides).
        import stitch.torch
        cuda = torch.device("cuda")
        for host, device, expected in ((150e-6, 5e-6, 5e-6), (2e-6, 40e-6, 40e-6)):
            sim = SimulatedCuda()
            timer = stitch.torch.DeviceTimer(warmup=1, repeats=3, cuda=sim)
            seconds = timer.seconds("stitched", lambda: sim.call(host, device), cuda)
            self.assertAlmostEqual(seconds, expected, delta=1e-9)
        sim = SimulatedCuda()
        timer = stitch.torch.DeviceTimer(warmup=1, repeats=3, cuda=sim)
        seconds = timer.seconds("inductor", lambda: sim.call(150e-6, 5e-6, waits=True), cuda)
        self.assertAlmostEqual(seconds, (5e-6 + 9 * 155e-6) / 10, delta=1e-9)
        # Two sleeps measure the sleep's clock; three rounds are lengthened, then the three
        # rounds timed keep the longest sleep.
        rounds = sim.sleeps[2:]
        self.assertEqual([c / rounds[0] for c in rounds], [1, 4, 16, 64, 64, 64])

    def test_registered_as_stitch(self):
        import stitch.torch
        from torch._dynamo import lookup_backend
        self.assertIs(lookup_backend("stitch"), stitch.torch.inductor)

    def test_faster_stitch_replaces_the_regions(self):
        before = stats()
        timer, backend, executor, compiled, x = self.timed_step(1e-6, 2e-6, batch=3)
        report = backend.report
        self.assertEqual([c.winner for c in report.choices], ["stitch"] * len(report.choices))
        self.assertEqual({(c.reason, c.decided_by) for c in report.choices}, {("faster", "timed")})
        # Each timed region ran both sides, once checked and once timed.
        self.assertEqual(len(timer.sides), 2 * len(report.choices))
        self.assertEqual(len(region_calls(backend)), len(report.choices))
        # Inductor would capture no region in a CUDA graph (mode="reduce-overhead"): it
        # partitions its graphs around them.
        from torch._inductor.utils import is_cudagraph_unsafe_fx_node
        self.assertTrue(all(is_cudagraph_unsafe_fx_node(n) for n in region_calls(backend)))
        # The step itself launched every region once, on top of the checks and the timings.
        self.assertEqual(len(executor.runs), 3 * len(report.choices))
        self.assertTrue(all(run["report"]["pass"] for run in executor.runs))
        # No copy was added around a stitched region: inputs and outputs kept their strides.
        self.assertEqual(report.layout_copies, 0)
        base.run_step(compiled, [x])
        self.assertEqual(len(executor.runs), 4 * len(report.choices))
        # The timings reached the daemon; the launches are savings on a measured basis.
        self.assertTrue(backend.stitch.client.flush_usage())
        after = stats()
        self.assertGreater(after["gpu_seconds_saved_measured"],
                           before.get("gpu_seconds_saved_measured", 0))
        self.assertEqual(after.get("gpu_seconds_lost", 0), before.get("gpu_seconds_lost", 0))

    def test_slower_stitch_keeps_inductor(self):
        before = stats()
        timer, backend, executor, compiled, x = self.timed_step(2e-6, 1e-6, batch=5)
        report = backend.report
        self.assertEqual(report.replaced(), [])
        self.assertEqual({(c.winner, c.reason) for c in report.choices}, {("inductor", "slower")})
        self.assertEqual(region_calls(backend), [], "Inductor compiled every region itself")
        runs = len(executor.runs)
        self.assertEqual(runs, 2 * len(report.choices), "only the checks and the timings")
        base.run_step(compiled, [x])
        self.assertEqual(len(executor.runs), runs, "nothing stitched runs in a step")
        self.assertTrue(backend.stitch.client.flush_usage())
        after = stats()
        self.assertEqual(after.get("gpu_seconds_saved_measured", 0),
                         before.get("gpu_seconds_saved_measured", 0), "a kept region saves nothing")
        self.assertEqual(after.get("gpu_seconds_lost", 0), before.get("gpu_seconds_lost", 0),
                         "and costs nothing")

    def test_a_second_job_reuses_the_daemons_choice(self):
        import stitch
        first, _, module, x = inductor_backend(StandInTimer(stitched=1e-6, inductor=2e-6), 7)
        self.step(first, module, x)
        self.assertTrue(first.stitch.client.flush_usage())
        # Another job: its own client (no in-process cache of the first's answers).
        client = stitch.Client(base.DAEMON.socket, compile_deadline_ms=300000)
        second, executor, module, x = inductor_backend(NoTimer(), 7, client=client)
        self.step(second, module, x)
        self.assertEqual([(c.key, c.winner) for c in second.report.choices],
                         [(c.key, c.winner) for c in first.report.choices])
        self.assertEqual({c.decided_by for c in second.report.choices}, {"daemon"})
        self.assertEqual(len(executor.runs), len(second.report.choices), "one launch each")

    def test_a_recompile_with_symbolic_sizes_keeps_the_stitched_regions(self):
        """Batch 10, then 12: Dynamo recompiles with a symbolic batch, Inductor compiles the
        graph with symbolic sizes, and the regions stitch wins stay stitch's: called with
        the batch's sizes, with no dynamic_shape fallback, at every later batch. (Batches no
        other test uses: the daemon keeps each key's timings for the next job.)"""
        timer = StandInTimer(stitched=1e-6, inductor=2e-6)
        backend, executor, module, x = inductor_backend(timer, batch=10)
        eager = copy.deepcopy(module)
        compiled = base.torch_compile(module, backend)
        g = torch.Generator().manual_seed(base.SEED + 11)
        for batch in (10, 12, 13, 21):
            x = torch.randn(batch, 8, 64, generator=g)
            expected_out, expected_grads = base.run_step(eager, [x])
            out, grads = base.run_step(compiled, [x])
            self.assertLessEqual(base.max_relative_error(expected_out, out), TOLERANCE,
                                 "batch %d" % batch)
            for i, (e, a) in enumerate(zip(expected_grads, grads)):
                self.assertLessEqual(base.max_relative_error(e, a), TOLERANCE,
                                     "gradient %d at batch %d" % (i, batch))
        report = backend.report
        print("\n[%s] seed %d\n%s" % (self.id(), base.SEED, report.summary()))
        # Nothing is left out, the LayerNorm's statistics (Inductor keeps var_mean) included,
        # at the symbolic batch too.
        self.assertEqual(dict(report.fallbacks), {}, report.details)
        self.assertIn("aten.var_mean.correction",
                      [op for r in report.regions if r.name.startswith("forward2") for op in r.ops])
        symbolic = [n for n in region_calls(backend) if n.args[2]]
        self.assertGreater(len(symbolic), 0, "regions of the symbolic graphs, with their sizes")
        self.assertEqual({c.winner for c in report.choices}, {"stitch"})
        for run in executor.runs:
            self.assertTrue(run["report"]["pass"], run)
        self.assertGreater(report.new_sizes["bucket"], 0, "12 and 13 share the bucket (9, 16)")

    def test_kernels_whose_outputs_disagree_are_never_chosen(self):
        timer = StandInTimer(stitched=1e-6, inductor=2e-6)
        backend, executor, module, x = inductor_backend(timer, batch=9, corrupt=True)
        self.step(backend, module, x)
        report = backend.report
        self.assertGreater(len(report.choices), 1)
        self.assertEqual({(c.winner, c.reason) for c in report.choices}, {("inductor", "mismatch")})
        self.assertTrue(all("differs from Inductor's" in c.detail for c in report.choices))
        self.assertEqual(timer.sides, [], "nothing timed")
        self.assertEqual(region_calls(backend), [])


class StorageOrderTest(unittest.TestCase):
    """Tensors stored in any order of their dimensions (``stitch.torch._stored``): their
    order read from sizes and strides, and a region lowered over such storage, on random
    orders from the logged seed, against the same graph run eagerly."""

    @staticmethod
    def stored(shape, order, g):
        """A random tensor of ``shape`` whose storage lays its dimensions out in ``order``."""
        from stitch.torch import _lowering
        stored = torch.randn([shape[d] for d in order], generator=g)
        return stored.permute(*_lowering.inverse(order))

    def test_the_order_of_a_dense_tensor_is_read_from_its_strides(self):
        from stitch.torch import _stored
        g = torch.Generator().manual_seed(base.SEED + 21)
        for _ in range(200):
            rank = int(torch.randint(1, 6, (), generator=g))
            shape = [int(d) for d in torch.randint(1, 5, (rank,), generator=g)]
            order = tuple(int(d) for d in torch.randperm(rank, generator=g))
            x = self.stored(shape, order, g)
            found = _stored.storage_order(x.shape, x.stride())
            self.assertIsNotNone(found, (shape, order))
            self.assertTrue(x.permute(*found).is_contiguous(), (shape, order, found))
            wide = [d for d in order if shape[d] > 1]
            self.assertEqual([d for d in found if shape[d] > 1], wide, (shape, order))
            if wide:  # every other element of a dimension: no dense block
                step = [slice(None)] * rank
                step[wide[-1]] = slice(None, None, 2)
                gaps = self.stored([d * 2 if i == wide[-1] else d for i, d in enumerate(shape)],
                                   order, g)[tuple(step)]
                self.assertIsNone(_stored.storage_order(gaps.shape, gaps.stride()),
                                  (shape, order, gaps.stride()))

    def test_a_region_lowered_over_stored_tensors_reads_and_writes_them_as_they_lie(self):
        from torch.fx.experimental.proxy_tensor import make_fx
        from stitch.torch import _lowering
        from stitch.torch._executor import RegionKernels

        def f(x, w):
            y = x * w + 1.0
            return y, y.sum(dim=1)

        g = torch.Generator().manual_seed(base.SEED + 22)
        stitch_backend, executor = base.make_backend()
        shape = (2, 6, 3, 4)
        for case in range(4):
            x_order = tuple(int(d) for d in torch.randperm(4, generator=g))
            y_order = tuple(int(d) for d in torch.randperm(4, generator=g))
            x, w = self.stored(shape, x_order, g), torch.randn(1, 6, 1, 4, generator=g)
            gm = make_fx(f, tracing_mode="fake")(x, w)
            lowered = _lowering.lower_region(gm, "stored%d" % case,
                                             input_orders=[x_order, None],
                                             output_orders=[y_order, None])
            result = stitch_backend.client.compile(lowered.hlo, "sm_90")
            self.assertTrue(result.ok, result.reason)
            kernels = RegionKernels(result.key, "sm_90", result.bundle, lowered.hlo,
                                    lowered.outputs, inputs=lowered.inputs)
            y_stored, total = executor.run(kernels, [x.permute(*x_order), w])
            self.assertEqual(tuple(y_stored.shape), tuple(shape[d] for d in y_order))
            y = y_stored.permute(*_lowering.inverse(y_order))
            expected_y, expected_total = f(x, w)
            seed = "seed %d, orders %s %s" % (base.SEED, x_order, y_order)
            self.assertLessEqual(base.max_relative_error(expected_y, y), base.F32_TOLERANCE,
                                 seed)
            self.assertLessEqual(base.max_relative_error(expected_total, total),
                                 base.F32_TOLERANCE, seed)
        for run in executor.runs:
            self.assertTrue(run["report"]["pass"], run)


if __name__ == "__main__":
    base.main()
