"""``torch.compile(model, backend="stitch")``: Inductor compiles the model, and stitch replaces
only the regions whose kernels are measured faster than Inductor's.

Dynamo, AOTAutograd, Inductor's decompositions and passes all run as they do for
``backend="inductor"``. Inductor's inner compile, which turns each forward and backward ATen
graph into kernels, is wrapped: before Inductor sees a graph, stitch's StitchBackend finds its
regions and gets their bundles from the node's stitchd, and each region with a bundle is
decided:

- from the daemon, when jobs have already timed the key against Inductor on this target (the
  compile's answer carries those timings) no longer than ``retime_after_seconds`` ago;
- else by running both on random inputs of the region's shapes: Inductor's kernels for the
  region alone and stitch's. Outputs that disagree keep Inductor's; otherwise both are timed,
  and the timings go to the daemon, which keeps them per key (and so per target) for every
  later job on the node.

A region whose kernels beat Inductor's by ``margin`` becomes one call of an op that Inductor
runs as an opaque kernel between its own; every other region goes back into the graph node for
node, and Inductor compiles it exactly as it would have without stitch. The op is
``stitch::launch``, the C++ launch path (``_launch``), where its library is loaded and the
region's executor has a native launch; else ``stitch::region``, which launches from Python.
``stitch::launch`` hands each call it cannot serve to ``stitch::region``, which launches it and
registers the variant, so that later calls at those sizes stay in C++. A region whose 4-d
tensors Inductor lays out channels-last is decided on its kernels over that storage
(``_stored``) and called through ``stitch::launch_stored`` (C++) or ``stitch::region_stored``
(Python), which take the tensors as Inductor laid them out.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import itertools
import logging
import operator
import statistics
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from . import _launch, _shapes, _stored
from ._backend import StitchBackend, StitchedRegion
from ._report import LAUNCH_ERROR, RegionChoice, Report

LOG = logging.getLogger("stitch.torch")

#: A choice older than this is timed again by the next job that compiles the region: a week,
#: so a driver, library or stitchd upgrade is noticed within one, and a node re-times each
#: region at most once a week.
RETIME_AFTER_SECONDS = 7 * 24 * 3600
#: Stitch replaces a region only when its kernels take at most (1 - margin) of Inductor's time,
#: so that run-to-run noise (about 1% on a busy GPU) cannot flip a choice back and forth.
WIN_MARGIN = 0.03
#: The relative error (tensor_compare's measure) beyond which the two outputs disagree: stitch
#: and Inductor round differently (approximate exp, fused multiply-adds, sum order), never by
#: more than this on inputs of unit scale.
AGREEMENT = {torch.float32: 1e-3, torch.float64: 1e-6}
AGREEMENT_16_BIT = 5e-2

_REGIONS: Dict[str, "_Replacement"] = {}
_NATIVE: Dict[int, "_Replacement"] = {}  # by stitch::launch region number
_REGIONS_LOCK = threading.Lock()
_OPS: Dict[str, Any] = {}  # stitch::region and stitch::region_stored, by name, once defined
_NATIVE_OPS: Dict[str, Any] = {}  # stitch::launch and stitch::launch_stored, once faked
_BACKEND_IDS = itertools.count()


class RegionTimer:
    """Times one side of a region: ``seconds(side, run, device)`` returns the seconds one call
    of ``run`` takes on ``device``; ``side`` is ``"stitched"`` or ``"inductor"``. Tests stand
    in a timer that answers without running, to steer the choice."""

    def seconds(self, side: str, run: Callable[[], Any], device: torch.device) -> float:
        raise NotImplementedError


class DeviceTimer(RegionTimer):
    """The seconds the device spends on one call. On CUDA: the median, over ``repeats``
    rounds after ``warmup`` untimed calls, of CUDA events around ``batch`` calls issued back to
    back while the GPU is kept busy by a sleep, so that the events time the GPU's work for the
    calls and not the host's issuing them. Off CUDA: the median of the host clock around each
    of ``repeats`` calls.

    Device time is what a replaced region costs a compiled graph whose launches run ahead of
    the GPU: there each side's launch overhead overlaps the GPU's work, and the Python around
    the timed calls (Inductor's compile of the region alone, the executor's Python path) is
    not what the graph calls. A round whose sleep ended before the host had issued its calls
    is timed again behind a sleep four times as long (three times at most per side); a call
    that waits for the GPU never gets ahead of it, and is then timed with its host time, a
    bound from above. ``cuda`` stands in for ``torch.cuda`` (its ``Event``, ``_sleep`` and
    ``synchronize``) in tests."""

    #: The first sleep of a round, in milliseconds: 10 calls of 200 us of host time each.
    SLEEP_MS = 2.0
    #: How many times a sleep is lengthened (x4 each) before rounds are taken as they come.
    LONGER_SLEEPS = 3

    def __init__(self, warmup: int = 3, repeats: int = 20, batch: int = 10,
                 cuda: Any = None) -> None:
        self.warmup = warmup
        self.repeats = repeats
        self.batch = batch
        self._cuda = cuda
        self._cycles_per_ms: Optional[float] = None

    def seconds(self, side: str, run: Callable[[], Any], device: torch.device) -> float:
        for _ in range(self.warmup):
            run()
        if device.type != "cuda":
            times = []
            for _ in range(self.repeats):
                begin = time.perf_counter()
                run()
                times.append(time.perf_counter() - begin)
            return statistics.median(times)
        cuda = self._cuda if self._cuda is not None else torch.cuda
        # The sleep and the events go to the current stream of the region's device, where its
        # calls launch.
        on_device = torch.cuda.device(device) if self._cuda is None else contextlib.nullcontext()
        with on_device:
            cuda.synchronize()
            sleep_ms, longer, times = self.SLEEP_MS, 0, []
            while len(times) < self.repeats:
                seconds, ahead = self._round(cuda, run, sleep_ms)
                if not ahead and longer < self.LONGER_SLEEPS:
                    sleep_ms, longer = sleep_ms * 4, longer + 1
                    continue
                times.append(seconds)
        return statistics.median(times)

    def _round(self, cuda: Any, run: Callable[[], Any], sleep_ms: float) -> Tuple[float, bool]:
        """Seconds per call over one batch issued behind a sleep of ``sleep_ms``, and whether
        the host issued the whole batch before the GPU woke."""
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        cuda._sleep(int(sleep_ms * self._cycles(cuda)))
        start.record()
        for _ in range(self.batch):
            run()
        end.record()
        ahead = not start.query()  # the GPU was still asleep when the batch was issued
        end.synchronize()
        return start.elapsed_time(end) / 1000.0 / self.batch, ahead

    def _cycles(self, cuda: Any) -> float:
        """The sleep's cycles per millisecond, measured once per timer."""
        if self._cycles_per_ms is None:
            cycles = 10 ** 7
            cuda._sleep(cycles // 10)  # loads the kernel
            start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            start.record()
            cuda._sleep(cycles)
            end.record()
            end.synchronize()
            self._cycles_per_ms = cycles / max(start.elapsed_time(end), 1e-3)
        return self._cycles_per_ms


@dataclasses.dataclass(frozen=True)
class _OutputSpec:
    """One output as the graph traced it; ``shape`` and ``stride`` are None where its sizes
    are symbolic (the output is then dense row-major at the call's sizes)."""

    shape: Optional[Tuple[int, ...]]
    stride: Optional[Tuple[int, ...]]
    dtype: torch.dtype


@dataclasses.dataclass
class _Replacement:
    """What the ``stitch::region`` op runs for one replaced region."""

    region: StitchedRegion
    outputs: List[_OutputSpec]
    report: Report
    backend: Optional[StitchBackend] = None
    #: The region on the C++ launch path, where the graph calls stitch::launch.
    native: Optional[_launch.NativeRegion] = None
    #: Its kernels over channels-last storage, where the graph calls stitch::region_stored.
    stored: Optional[_stored.StoredRegion] = None

    def run(self, inputs: Sequence[torch.Tensor], sizes: Sequence[int],
            register: bool = True) -> List[torch.Tensor]:
        """``stitch::region``: the region on its inputs, its outputs with the traced strides.
        ``register``: hand the call's sizes to the C++ launch path (only where ``inputs`` are
        the op's own arguments)."""
        dense = True
        for x in inputs:
            if not x.is_contiguous():  # the executor reads a dense copy
                self.report.count_layout_copy()
                dense = False
        result, kernels, executor = self.region.run_split(inputs, sizes)
        result = list(result) if isinstance(result, (tuple, list)) else [result]
        # The op's contract: fresh tensors with the declared strides, never an input's storage
        # (the region's own FX code, run on a fallback, may return a view).
        storages = {x.untyped_storage().data_ptr() for x in inputs}
        out = []
        for r, spec in zip(result, self.outputs):
            declared = spec.stride if spec.stride is not None else _dense_strides(r.shape)
            if r.untyped_storage().data_ptr() in storages or tuple(r.stride()) != declared:
                r = torch.empty_strided(tuple(r.shape), declared, dtype=spec.dtype,
                                        device=r.device).copy_(r)
                self.report.count_layout_copy()
                dense = False
            out.append(r)
        if register and self.native is not None and kernels is not None and dense and \
                all(r.is_contiguous() for r in out):
            self._add_variant(inputs, sizes, out, kernels, executor)
        return out

    def run_stored(self, inputs: Sequence[torch.Tensor],
                   sizes: Sequence[int]) -> List[torch.Tensor]:
        """``stitch::region_stored``, on the stored region's arguments
        (``_stored.call_arguments``): dense arguments run the stored kernels for their storage
        orders, on the storage as it is, and give outputs stored as ``stored.output_strides``
        say; any other call runs as :meth:`run` on the region's inputs made from them (its
        outputs row-major), as the fake kernel says."""
        stored = self.stored
        if stored is None:
            return self.run(inputs, sizes)
        orders = stored.orders_of(inputs)
        if orders is None:
            return self.run(stored.region_inputs(inputs), sizes,
                            register=stored.takes_region_inputs)
        executor = self.backend.executor_for(inputs[0].device) if self.backend else None
        try:
            if executor is None:
                raise RuntimeError("no executor for %s tensors" % inputs[0].device.type)
            out, kernels = stored.run(executor, inputs, orders)
        except Exception as e:  # the region's own code, laid out as the call promised
            self.report.fallback(LAUNCH_ERROR, "%s: %s" % (self.region.info.name, e))
            rows = self.run([x.contiguous() for x in stored.region_inputs(inputs)], sizes,
                            register=False)
            return [f.copy_(r) for r, f in zip(rows, stored.fake_outputs(rows))]
        self.report.count_stitched_call(path="python")
        if self.backend is not None:
            self.backend.record_invocation(kernels.key)
        if self.native is not None:
            self._add_variant(inputs, sizes, out, kernels, executor)
        return out

    def fake_stored(self, inputs: Sequence[torch.Tensor],
                    sizes: Sequence[Any]) -> List[torch.Tensor]:
        """The outputs' metadata of :meth:`run_stored`."""
        outputs = self.fake(inputs, sizes)
        if self.stored is None or self.stored.orders_of(inputs) is None:
            return outputs
        return self.stored.fake_outputs(outputs)

    def _add_variant(self, inputs: Sequence[torch.Tensor], sizes: Sequence[int],
                     outputs: Sequence[torch.Tensor], kernels: Any, executor: Any) -> None:
        """Hands the call's sizes to the C++ launch path: its next calls at them launch there,
        allocating outputs like ``outputs``."""
        try:
            native = executor.native(kernels) if executor is not None else None
            if native is not None:
                self.native.add(inputs, sizes, outputs, native[0], native[1],
                                kernels.extent if kernels.served else 0, kernels.key)
        except Exception as e:  # the Python path goes on serving these sizes
            LOG.debug("%s: not on the C++ launch path: %s", self.region.info.name, e)

    def sync(self) -> None:
        """Counts the C++ launch path's launches into the report and the daemon's usage."""
        if self.native is None:
            return
        _, launches = self.native.counts()
        for key, n in launches:
            if n:
                self.report.count_stitched_call(n, "cpp")
                if self.backend is not None:
                    self.backend.record_invocation(key, n)

    def fake(self, inputs: Sequence[torch.Tensor], sizes: Sequence[Any]) -> List[torch.Tensor]:
        """The outputs' metadata for the inputs' (possibly symbolic) sizes."""
        device = inputs[0].device if inputs else torch.device("cpu")
        if all(s.shape is not None for s in self.outputs):
            return [torch.empty_strided(s.shape, s.stride, dtype=s.dtype, device=device)
                    for s in self.outputs]
        shapes_ = self.region.shapes
        args: List[Any] = [None] * shapes_.arity
        for k, x in zip(shapes_.tensor_positions, inputs):
            args[k] = x
        for k, v in zip(shapes_.size_positions, sizes):
            args[k] = v
        symbols = shapes_.symint_binding(args)
        shapes = [tuple(_shapes.evaluate_symint(d, symbols) for d in dims)
                  for dims in _output_dims(self.region.fallback)]
        return [torch.empty(shape, dtype=s.dtype, device=device)
                for shape, s in zip(shapes, self.outputs)]


def _dense_strides(shape: Sequence[int]) -> Tuple[int, ...]:
    strides, step = [], 1
    for d in reversed(tuple(shape)):
        strides.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(strides))


def _output_dims(sub: torch.fx.GraphModule) -> List[Tuple[Any, ...]]:
    return [_shapes.symbolic_meta(o)[0] for o in _shapes.output_nodes(sub)[0]]


def region_op_tags(layout: Optional[Any] = None) -> Tuple[Any, ...]:
    """The tags of ``stitch::region`` and ``stitch::launch``: Inductor keeps the tensors'
    strides as traced (``stitch::region_stored`` passes ``torch.Tag.flexible_layout``: the
    tensors as Inductor laid them out), and, where this PyTorch has the tag, captures none in a
    CUDA graph (``cudagraph_unsafe``). A region's first launch on a stream allocates its temporaries
    there, which stream capture forbids, and a call at new sizes runs Python; with the tag,
    Inductor's CUDA graphs (``mode="reduce-overhead"``) leave the regions out: its graph
    partitions around them, or, without partitions, runs without CUDA graphs."""
    unsafe = getattr(torch.Tag, "cudagraph_unsafe", None)
    layout = torch.Tag.needs_fixed_stride_order if layout is None else layout
    return (layout,) + ((unsafe,) if unsafe is not None else ())


def _replacement_op(op: str, tags: Tuple[Any, ...], run: str, fake: str) -> Any:
    """Defines ``stitch::<op>(str name, Tensor[] inputs, SymInt[] sizes) -> Tensor[]`` on first
    use: a call runs the ``run`` method of the region registered as ``name``, and its ``fake``
    method gives the outputs' metadata."""
    with _REGIONS_LOCK:
        if op in _OPS:
            return _OPS[op]

        @torch.library.custom_op("stitch::" + op, mutates_args=(), tags=tags)
        def call(name: str, inputs: List[torch.Tensor], sizes: List[int]) -> List[torch.Tensor]:
            return getattr(_REGIONS[name], run)(inputs, sizes)

        @call.register_fake
        def _(name: str, inputs: List[torch.Tensor], sizes: List[int]) -> List[torch.Tensor]:
            return getattr(_REGIONS[name], fake)(inputs, sizes)

        _OPS[op] = getattr(torch.ops.stitch, op).default
        return _OPS[op]


def _region_op() -> Any:
    """The ``stitch::region`` op: Inductor calls it as an extern kernel with the tensor inputs
    in the strides the graph traced, and the region's size inputs (none for static sizes)."""
    return _replacement_op("region", region_op_tags(), "run", "fake")


def _region_stored_op() -> Any:
    """The ``stitch::region_stored`` op of regions with kernels over channels-last storage
    (``_stored``): Inductor calls it with the tensors as it laid them out, and lays its outputs
    out as the fake kernel gives them."""
    return _replacement_op("region_stored", region_op_tags(torch.Tag.flexible_layout),
                           "run_stored", "fake_stored")


def _native_op(stored: bool = False) -> Any:
    """The ``stitch::launch(int region, Tensor[] inputs, SymInt[] sizes) -> Tensor[]`` op of
    the C++ launch path, or with ``stored`` ``stitch::launch_stored`` (the same launch, for
    regions with kernels over channels-last storage), with its fake kernel (the outputs'
    metadata) registered on first use. Calls C++ cannot serve go to ``stitch::region`` or
    ``stitch::region_stored``, defined here first."""
    fallback = _region_stored_op if stored else _region_op
    fallback()
    op = "launch_stored" if stored else "launch"
    with _REGIONS_LOCK:
        if op in _NATIVE_OPS:
            return _NATIVE_OPS[op]
        fake = "fake_stored" if stored else "fake"

        @torch.library.register_fake("stitch::" + op)
        def _(region: int, inputs: List[torch.Tensor], sizes: List[Any]) -> List[torch.Tensor]:
            return getattr(_NATIVE[region], fake)(inputs, sizes)

        _NATIVE_OPS[op] = getattr(torch.ops.stitch, op).default
        return _NATIVE_OPS[op]


class InductorStitchBackend:
    """The ``"stitch"`` backend of ``torch.compile``: Inductor, with stitch's kernels in the
    regions where they are measured faster.

    Args:
        stitch: the StitchBackend that finds the regions and gets their bundles (its client,
            executors and report); default: one with ``options``.
        timer: times each side of a region that has no recent choice; default DeviceTimer().
        margin: the fraction of Inductor's time stitch must save to replace a region.
        retime_after_seconds: the age past which the daemon's timings are measured again.

    ``report.choices`` says, per region, which kernels run and why. Thread-safe.
    """

    def __init__(self, stitch: Optional[StitchBackend] = None,
                 timer: Optional[RegionTimer] = None, margin: float = WIN_MARGIN,
                 retime_after_seconds: float = RETIME_AFTER_SECONDS, **options: Any) -> None:
        self.stitch = stitch or StitchBackend(fallback="inductor", **options)
        self.timer = timer or DeviceTimer()
        self.margin = margin
        self.retime_after_seconds = retime_after_seconds
        self._id = "b%d" % next(_BACKEND_IDS)

    @property
    def report(self) -> Report:
        """The StitchBackend's report, with the choices in ``report.choices``."""
        return self.stitch.report

    def __call__(self, graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        from torch._inductor.compile_fx import compile_fx
        # Inductor's FX graph cache would hand a later process code that calls regions by
        # names only this process registered.
        return compile_fx(graph_module, example_inputs, inner_compile=self._inner_compile,
                          config_patches={"fx_graph_cache": False})

    def _inner_compile(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                       **kwargs: Any) -> Any:
        from torch._inductor.compile_fx import compile_fx_inner
        kind = "backward" if kwargs.get("is_backward") else "forward"
        gm = self.choose(gm, example_inputs, kind,
                         channels_last=_lays_out_channels_last(gm, kwargs.get("is_inference")))
        return compile_fx_inner(gm, example_inputs, **kwargs)

    # -- one graph ---------------------------------------------------------------------------
    def choose(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
               kind: str = "graph", channels_last: bool = False) -> torch.fx.GraphModule:
        """Returns ``gm`` with each region stitch wins replaced by a ``stitch::region`` call
        and every other node as it was. ``channels_last``: Inductor will lay the graph's
        convolutions out channels-last, so a region next to one would need a copy."""
        client = self.stitch.client
        client.set_fallback("inductor")  # the timings reported below are Inductor's
        fused = self.stitch.compile_graph(gm, example_inputs, kind, leave_input_views=True)
        for node in list(fused.graph.nodes):
            if node.op != "call_module" or not str(node.target).startswith("region"):
                continue
            module = getattr(fused, node.target)
            if isinstance(module, StitchedRegion):
                choice, stored = self._choose_region(module, node, channels_last)
                self.report.add_choice(choice)
                if choice.winner == "stitch":
                    _replace(fused, node, module, *self._register(module, stored),
                             tensors=_stored.call_arguments(node) if stored else None)
                    continue
            _inline(fused, node, module.fallback if isinstance(module, StitchedRegion) else module)
        for name in [n for n, _ in fused.named_children() if n.startswith("region")]:
            delattr(fused, name)
        if not client.flush_usage():  # the choices stand; only their sharing waits
            LOG.debug("%s: timings not reported yet; the next flush retries", kind)
        fused.graph.lint()
        fused.recompile()
        return fused

    def _register(self, region: StitchedRegion,
                  stored: Optional[_stored.StoredRegion] = None) -> Tuple[Any, tuple]:
        """Registers a replaced region; returns the op its call runs and the op's first
        arguments: ``stitch::launch`` (``stitch::launch_stored`` with ``stored``) and the
        region's number on the C++ launch path where its device's executor has one, else
        ``stitch::region`` (``stitch::region_stored``) and its name."""
        name = "%s.%s" % (self._id, region.info.name)
        specs = [_OutputSpec(tuple(v.shape), tuple(v.stride()), v.dtype)
                 if not region.shapes.symbolic else _OutputSpec(None, None, v.dtype)
                 for v in _outputs(region.fallback)[0]]
        replacement = _Replacement(region, specs, self.report, self.stitch, stored=stored)
        with _REGIONS_LOCK:
            _REGIONS[name] = replacement
        executor = (self.stitch.executor_for(region.device) if region.device is not None
                    else None)
        native = getattr(executor, "launch_path", "python") == "cpp" and (
            _launch.stored_available() if stored is not None else _launch.available())
        if not native:
            return (_region_stored_op() if stored is not None else _region_op()), (name,)
        op = _native_op(stored=stored is not None)
        replacement.native = _launch.NativeRegion(
            name, "region_stored" if stored is not None else "region")
        with _REGIONS_LOCK:
            _NATIVE[replacement.native.id] = replacement
        self.report.add_source(replacement.sync, flush=self.stitch.client.flush_usage)
        return op, (replacement.native.id,)

    # -- one region --------------------------------------------------------------------------
    def _choose_region(self, region: StitchedRegion, node: torch.fx.Node,
                       channels_last: bool = False
                       ) -> Tuple[RegionChoice, Optional[_stored.StoredRegion]]:
        """The choice for one region, and its kernels over channels-last storage where those
        are what would run."""
        choice = RegionChoice(region.info.name, region.kernels.key)
        layout = _layout_problem(node, region.fallback)
        if layout:
            return choice.keep("layout", layout), None
        if channels_last and _channels_last_problem(node, region.fallback):
            return self._choose_stored(choice, region, node)
        if self._decide_from_daemon(choice, region):
            return choice, None
        try:
            self._time(choice, region)
        except Exception as e:  # a region that cannot be run or timed stays Inductor's
            return choice.keep("launch_error", str(e)), None
        return choice, None

    def _choose_stored(self, choice: RegionChoice, region: StitchedRegion, node: torch.fx.Node
                       ) -> Tuple[RegionChoice, Optional[_stored.StoredRegion]]:
        """A region whose 4-d tensors Inductor lays out channels-last: its kernels over that
        storage, timed against Inductor's on inputs stored so."""
        stored = (_stored.compile_stored(region, node, self.stitch.client)
                  if hasattr(torch.Tag, "flexible_layout")
                  else "this PyTorch's ops cannot take tensors as Inductor lays them out")
        if isinstance(stored, str):
            return choice.keep("layout", "its 4-d tensors are stored channels-last here, and "
                               "it has no kernels over that storage: %s" % stored), None
        choice.key = stored.kernels.key
        try:
            self._time(choice, region, stored)
        except Exception as e:
            return choice.keep("launch_error", str(e)), None
        return choice, stored

    def _decide_from_daemon(self, choice: RegionChoice, region: StitchedRegion) -> bool:
        runtimes = region.runtimes or {}
        stitched = runtimes.get("stitched") or {}
        inductor = (runtimes.get("fallback") or {}).get("inductor") or {}
        age = time.time() - float(runtimes.get("last_report_unix_seconds", 0))
        if not stitched.get("samples") or not inductor.get("samples") or \
                age > self.retime_after_seconds:
            return False
        choice.decided_by = "daemon"
        self._decide(choice, stitched["seconds_sum"] / stitched["samples"],
                     inductor["seconds_sum"] / inductor["samples"])
        return True

    def _time(self, choice: RegionChoice, region: StitchedRegion,
              stored: Optional[_stored.StoredRegion] = None) -> None:
        # On a thread of its own: Inductor's compile of the region alone must not see the
        # tracing context, fake tensors and shape environment of the graph being compiled,
        # which are per thread.
        with concurrent.futures.ThreadPoolExecutor(1, "stitch-timing") as pool:
            timings = pool.submit(self._run_both, region, stored).result()
        choice.decided_by = "timed"
        if isinstance(timings, str):
            choice.keep("mismatch", timings)
            return
        stitched, inductor = timings
        self._decide(choice, stitched, inductor)
        samples = getattr(self.timer, "repeats", 1)
        client = self.stitch.client
        client.record_time(choice.key, "stitched", stitched * samples, samples)
        client.record_time(choice.key, "fallback", inductor * samples, samples)

    def _run_both(self, region: StitchedRegion,
                  stored: Optional[_stored.StoredRegion] = None) -> Any:
        """Returns (stitched seconds, Inductor seconds) per call on random inputs, or why the
        two sides' outputs disagree. For ``stored``, the inputs are its call's arguments, stored
        in their predicted orders, and Inductor compiles its graph, which takes them."""
        from torch._inductor.compile_fx import compile_fx
        device = region.device
        if stored is None:
            graph, inputs = region.fallback, _random_inputs(region.input_specs, device)
        else:
            graph = stored.graph
            inputs = stored.laid_out(_random_inputs(stored.input_specs(), device))
        compiled = compile_fx(_standalone(graph), inputs)

        def run_inductor() -> Any:
            return compiled(*inputs)

        def run_stitched() -> Any:
            if stored is None:
                return region.launch(inputs)
            return stored.run(self.stitch.executor_for(device), inputs,
                              stored.orders_of(inputs))[0]

        disagreement = _disagreement(run_stitched(), run_inductor())
        if disagreement:
            return disagreement
        return (self.timer.seconds("stitched", run_stitched, device),
                self.timer.seconds("inductor", run_inductor, device))

    def _decide(self, choice: RegionChoice, stitched: float, inductor: float) -> None:
        choice.stitched_seconds, choice.inductor_seconds = stitched, inductor
        if stitched <= (1.0 - self.margin) * inductor:
            choice.winner, choice.reason = "stitch", "faster"
        else:
            choice.keep("slower", "%.3g s against Inductor's %.3g s" % (stitched, inductor))


def _outputs(sub: torch.fx.GraphModule) -> Tuple[List[torch.Tensor], bool]:
    """The traced values of a region's outputs, in order, and whether it returns a tuple."""
    nodes, returns_tuple = _shapes.output_nodes(sub)
    return [o.meta["val"] for o in nodes], returns_tuple


def _layout_problem(node: torch.fx.Node, sub: torch.fx.GraphModule) -> str:
    """Why the region's call cannot keep the traced layouts without a copy, or ``""``: stitch's
    kernels read and write dense row-major tensors."""
    for a in node.args:
        val = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
        if isinstance(val, torch.Tensor) and not val.is_contiguous():
            return "input %s has strides %s" % (a.name, tuple(val.stride()))
    for i, val in enumerate(_outputs(sub)[0]):
        if not isinstance(val, torch.Tensor) or not val.is_contiguous():
            return "output %d is not a dense row-major tensor" % i
    return ""


def _lays_out_channels_last(gm: torch.fx.GraphModule, is_inference: Optional[bool]) -> bool:
    """True when Inductor's layout optimization will make this graph's 4-d tensors
    channels-last, after the graph was traced row-major: its own decision for a graph with
    convolutions; for a backward graph (convolution_backward only, where Inductor decides
    nothing), whenever the optimization is on, since the forward's activations it reads come
    channels-last."""
    try:
        from torch._inductor import config
        from torch._inductor.graph import GraphLowering
        if not config.layout_optimization:
            return False
        backward = torch.ops.aten.convolution_backward.default
        if any(n.target is backward for n in gm.graph.nodes):
            return True
        return bool(GraphLowering.decide_layout_opt(gm, is_inference=bool(is_inference)))
    except Exception as e:  # another PyTorch: assume the layouts stay as traced
        LOG.debug("layout optimization unknown: %s", e)
        return False


def _channels_last_problem(node: torch.fx.Node, sub: torch.fx.GraphModule) -> str:
    """In a graph Inductor lays out channels-last, why the region's call would take a copy, or
    ``""``: Inductor gives the convolutions' 4-d tensors, and the pointwise work it derives
    from them, channels-last strides after the graph was traced row-major, while stitch's
    kernels read and write dense row-major tensors."""
    for a in node.args:
        val = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
        if isinstance(val, torch.Tensor) and val.dim() >= 4:
            return "input %s is 4-d, which Inductor lays out channels-last here" % a.name
    for i, val in enumerate(_outputs(sub)[0]):
        if isinstance(val, torch.Tensor) and val.dim() >= 4:
            return "output %d is 4-d, which Inductor lays out channels-last here" % i
    return ""


def _replace(gm: torch.fx.GraphModule, node: torch.fx.Node, region: StitchedRegion,
             op: Any, first: tuple, tensors: Optional[List[Any]] = None) -> None:
    """Replaces the region's call_module by one call of ``op`` (``stitch::launch`` or
    ``stitch::region``) with the arguments ``first`` and the region's tensors (or
    ``tensors``, a stored region's arguments) and sizes."""
    vals, returns_tuple = _outputs(region.fallback)
    if tensors is None:
        tensors = [node.args[k] for k in region.shapes.tensor_positions]
    sizes = [node.args[k] for k in region.shapes.size_positions]
    with gm.graph.inserting_before(node):
        call = gm.graph.call_function(op, first + (tensors, sizes))
    call.meta["val"] = vals
    if returns_tuple:
        for user in list(node.users):  # getitems, which index the op's list alike
            user.args = (call,) + tuple(user.args[1:])
    else:
        with gm.graph.inserting_after(call):
            first = gm.graph.call_function(operator.getitem, (call, 0))
        first.meta["val"] = vals[0]
        node.replace_all_uses_with(first)
    gm.graph.erase_node(node)


def _inline(gm: torch.fx.GraphModule, node: torch.fx.Node, sub: torch.fx.GraphModule) -> None:
    """Puts a region's own nodes back in place of its call_module."""
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    env = dict(zip(placeholders, node.args))
    with gm.graph.inserting_before(node):
        out = gm.graph.graph_copy(sub.graph, env)
    if isinstance(out, (tuple, list)):
        for user in list(node.users):
            user.replace_all_uses_with(out[user.args[1]])
            gm.graph.erase_node(user)
    else:
        node.replace_all_uses_with(out)
    gm.graph.erase_node(node)


def _standalone(sub: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of a region's graph that Inductor can compile on its own."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(sub.graph, {})
    graph.output(out)
    for n in graph.nodes:
        n.meta = {}
    return torch.fx.GraphModule(sub, graph)


def _random_inputs(specs: Sequence[Any], device: torch.device) -> List[Any]:
    """Random tensors for ``specs`` (each a tensor's dims then dtype; a size as it is)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    inputs = []
    for spec in specs:
        if not isinstance(spec, tuple):  # a size
            inputs.append(spec)
            continue
        shape, dtype = spec[:-1], spec[-1]
        if dtype.is_floating_point:
            x = torch.randn(shape, generator=g, dtype=torch.float32).to(dtype)
        elif dtype == torch.bool:
            x = torch.rand(shape, generator=g) > 0.5
        else:
            x = torch.randint(0, 8, shape, generator=g).to(dtype)
        inputs.append(x.to(device))
    return inputs


def _disagreement(stitched: Any, inductor: Any) -> str:
    """Why the two sides' outputs differ, or ``""`` when they agree."""
    a = list(stitched) if isinstance(stitched, (tuple, list)) else [stitched]
    b = list(inductor) if isinstance(inductor, (tuple, list)) else [inductor]
    if len(a) != len(b):
        return "%d outputs against Inductor's %d" % (len(a), len(b))
    for i, (x, y) in enumerate(zip(a, b)):
        if tuple(x.shape) != tuple(y.shape) or x.dtype != y.dtype:
            return "output %d is %s %s, Inductor's %s %s" % (i, tuple(x.shape), x.dtype,
                                                           tuple(y.shape), y.dtype)
        if not x.is_floating_point():
            if not torch.equal(x, y):
                return "output %d differs" % i
            continue
        e, s = y.detach().double().cpu(), x.detach().double().cpu()
        finite = torch.isfinite(e)
        if not torch.equal(finite, torch.isfinite(s)):
            return "output %d has non-finite values where Inductor's has none, or the reverse" % i
        if not finite.any():
            continue
        floor = max(1.0, float(e[finite].pow(2).mean().sqrt()))
        error = float(((s - e).abs() / e.abs().clamp(min=floor))[finite].max())
        bound = AGREEMENT.get(x.dtype, AGREEMENT_16_BIT)
        if error > bound:
            return "output %d differs from Inductor's by %.3g (bound %.3g)" % (i, error, bound)
    return ""
