"""The backend: AOTAutograd graphs in, memory-intensive regions replaced by stitched kernels.

Pipeline, for the forward and the backward graph alike:
  shapes (ShapeProp where the tracer left none) -> partition (_partition) -> lower each
  region to HLO (_lowering) -> ask the daemon for all regions at once -> replace each region
  that got a bundle by a StitchedRegion, which launches it through the device's executor and
  runs the region's own FX code whenever it cannot.
"""

from __future__ import annotations

import copy
import logging
import threading
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.utils._pytree as pytree
from torch.fx.passes.shape_prop import ShapeProp

from ..client import DEFAULT_ADDRESS, Client, DaemonError
from . import _lowering, _partition
from ._executor import CudaExecutor, Executor, RegionKernels
from ._report import (ARCH_MISMATCH, DAEMON, DTYPE, DYNAMIC_SHAPE, LAUNCH_ERROR, LOWERING,
                      NO_EXECUTOR, UNSUPPORTED_OP, RegionInfo, Report)

LOG = logging.getLogger("stitch.torch")

_LEFT_OUT_REASONS = {"unsupported_op": UNSUPPORTED_OP, "dynamic_shape": DYNAMIC_SHAPE,
                     "dtype": DTYPE}


class _AotAutograd(NamedTuple):
    aot_module: Callable
    aot_module_simplified: Optional[Callable]
    make_boxed_func: Callable


def _aot_autograd() -> _AotAutograd:
    """AOTAutograd's entry points: ``torch._functorch``'s in PyTorch 2.x, whose
    ``aot_module_simplified`` takes Dynamo's graphs; ``functorch``'s in 1.13, where
    ``aot_module`` takes every graph and ``aot_module_simplified`` is None. The one place the
    backend asks which PyTorch it runs on."""
    try:
        from torch._functorch import aot_autograd as aot
        return _AotAutograd(aot.aot_module, aot.aot_module_simplified, aot.make_boxed_func)
    except ImportError:
        from functorch import compile as aot
        return _AotAutograd(aot.aot_module, None, aot.make_boxed_func)


def _decompositions() -> Dict[Any, Callable]:
    """The composite ops rewritten into the primitive ones the lowering knows, as Inductor
    does, so that a LayerNorm's or a softmax's arithmetic joins the regions around it."""
    from torch._decomp import get_decompositions
    aten = torch.ops.aten
    names = ["native_layer_norm", "native_layer_norm_backward", "gelu", "gelu_backward",
             "_softmax", "_softmax_backward_data", "_log_softmax", "_log_softmax_backward_data",
             "native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit",
             "_native_batch_norm_legit_functional", "addmm", "var_mean", "var",
             "native_dropout", "native_dropout_backward", "sigmoid_backward", "tanh_backward",
             "silu", "silu_backward", "hardtanh_backward", "leaky_relu", "leaky_relu_backward",
             "elu", "elu_backward", "mse_loss", "mse_loss_backward", "std", "logsumexp"]
    ops = []
    for name in names:
        try:
            ops.append(getattr(aten, name))
        except (AttributeError, RuntimeError):
            pass
    return get_decompositions(ops)


class StitchedRegion(torch.nn.Module):
    """One region of a compiled graph: launches its bundle, or runs ``fallback`` (the region's
    own FX code) when the call's shapes differ from the trace's, the device has no executor,
    the bundle's target cannot run there, or the launch fails. Each such call is counted in
    the report with its reason."""

    def __init__(self, fallback: torch.fx.GraphModule, info: RegionInfo, kernels: RegionKernels,
                 inputs: Sequence[Any], backend: "StitchBackend",
                 device: Optional[torch.device] = None,
                 runtimes: Optional[Dict[str, Any]] = None) -> None:
        super().__init__()
        self.fallback = fallback
        self.info = info
        self.kernels = kernels
        self.device = device  # of the traced tensors
        self.runtimes = runtimes  # what jobs measured for the key, as the daemon answered
        self._inputs = [tuple(shape) + (dtype,) for shape, dtype in inputs]
        self._backend = backend
        out = [n for n in fallback.graph.nodes if n.op == "output"][0]
        self._tuple_output = isinstance(out.args[0], (tuple, list))
        self._device_checks: Dict[torch.device, Optional[str]] = {}

    def forward(self, *args: Any) -> Any:
        reason = self._why_not_stitched(args)
        if reason is not None:
            self._backend.report.fallback(reason[0], "%s: %s" % (self.info.name, reason[1]))
            return self.fallback(*args)
        try:
            outputs = self._executor.run(self.kernels, [a.contiguous() for a in args])
        except Exception as e:  # any failure leaves the step on PyTorch's code
            self._backend.report.fallback(LAUNCH_ERROR, "%s: %s" % (self.info.name, e))
            return self.fallback(*args)
        self._backend.report.count_stitched_call()
        self._backend.record_invocation(self.kernels.key)
        return tuple(outputs) if self._tuple_output else outputs[0]

    @property
    def input_specs(self) -> List[tuple]:
        """Each input's traced shape followed by its dtype: ``(4, 64, torch.float32)``."""
        return list(self._inputs)

    def launch(self, args: Sequence[Any]) -> List[torch.Tensor]:
        """Runs the stitched kernels on ``args`` and returns the outputs; raises, naming why,
        where :meth:`forward` would run the region's own code instead."""
        reason = self._why_not_stitched(args)
        if reason is not None:
            raise RuntimeError("%s: %s" % reason)
        return self._executor.run(self.kernels, [a.contiguous() for a in args])

    def _why_not_stitched(self, args: Sequence[Any]) -> Optional[tuple]:
        if len(args) != len(self._inputs) or not all(isinstance(a, torch.Tensor) for a in args):
            return (DYNAMIC_SHAPE, "arguments differ from the trace")
        for a, spec in zip(args, self._inputs):
            if tuple(a.shape) + (a.dtype,) != spec:
                return (DYNAMIC_SHAPE, "input %s %s differs from the traced %s" %
                        (tuple(a.shape), a.dtype, spec))
        device = args[0].device
        self._executor = self._backend.executor_for(device)
        if self._executor is None:
            return (NO_EXECUTOR, "no executor for %s tensors (%s)" %
                    (device.type, self._backend.executor_note(device)))
        if device not in self._device_checks:
            self._device_checks[device] = self._executor.check(self.kernels.target, device)
        why = self._device_checks[device]
        return (ARCH_MISMATCH, why) if why else None


class StitchBackend:
    """A ``torch.compile`` backend (``torch.compile(model, backend=stitch.torch.backend)``),
    also used by :func:`optimize`.

    Args:
        client: the stitch Client; default: one connected to ``address`` on first use.
        address: the daemon's address when no client is given.
        target: the GPU target to compile for; default: the executor's device, else the
            daemon's own target.
        executors: device type -> Executor (or None for none). Default: the CUDA executor
            for ``"cuda"`` where the driver loads, nothing for other devices.
        fallback: what the job runs where stitch's kernels do not (``"eager"``,
            ``"inductor"``), for the client made here: the daemon prices savings against it.

    ``report`` says what was fused and why the rest was not. Thread-safe.
    """

    def __init__(self, client: Optional[Client] = None, address: str = DEFAULT_ADDRESS,
                 target: Optional[str] = None,
                 executors: Optional[Dict[str, Optional[Executor]]] = None,
                 fallback: str = "eager") -> None:
        self._client = client
        self._address = address
        self._fallback = fallback
        self.target = target
        self._executors: Dict[str, Optional[Executor]] = dict(executors or {})
        self._executor_notes: Dict[str, str] = {}
        self._daemon_target: Optional[str] = None
        self._lock = threading.Lock()
        self.report = Report()
        # Each compiled graph, by name ("forward0", "backward1"): print one's ``code`` to see
        # which regions became StitchedRegions.
        self.graphs: List[Tuple[str, torch.fx.GraphModule]] = []
        self._graph_count = 0

    # -- the torch.compile entry point ------------------------------------------------------
    def __call__(self, graph_module: torch.fx.GraphModule,
                 example_inputs: Sequence[Any]) -> Callable:
        """Compiles a Dynamo graph: AOTAutograd traces its forward and backward, and each is
        compiled by :meth:`compile_graph`."""
        fw, bw = self._aot_compilers()
        aot = _aot_autograd()
        graph_module, spec = _returning_tuple(graph_module)
        if aot.aot_module_simplified is not None:
            compiled = aot.aot_module_simplified(graph_module, example_inputs, fw_compiler=fw,
                                                 bw_compiler=bw, decompositions=_decompositions())
        else:
            compiled = aot.aot_module(graph_module, fw_compiler=fw, bw_compiler=bw,
                                      decompositions=_decompositions())
        if spec is None:
            return compiled
        return lambda *args: pytree.tree_unflatten(list(compiled(*args)), spec)

    def _aot_compilers(self) -> tuple:
        make_boxed_func = _aot_autograd().make_boxed_func

        def compiler(kind: str) -> Callable:
            def compile_(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> Callable:
                return make_boxed_func(self.compile_graph(gm, inputs, kind))
            return compile_

        return compiler("forward"), compiler("backward")

    # -- one ATen graph -----------------------------------------------------------------------
    def compile_graph(self, graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any],
                      kind: str = "graph", leave_input_views: bool = False
                      ) -> torch.fx.GraphModule:
        """Returns ``graph_module`` with its memory-intensive regions replaced by
        StitchedRegions where the daemon gave kernels. Never raises for what it cannot stitch:
        those parts stay PyTorch's, counted in ``report``. ``leave_input_views`` is
        ``_partition.partition``'s."""
        with self._lock:
            name = "%s%d" % (kind, self._graph_count)
            self._graph_count += 1
        _propagate_shapes(graph_module, example_inputs)
        parts = _partition.partition(graph_module, leave_input_views)
        for reason, explanation in parts.left_out:
            self.report.fallback(_LEFT_OUT_REASONS[reason], "%s: %s" % (name, explanation))
        device = _device_of(example_inputs)
        executor = self.executor_for(device) if device is not None else None
        target = self.target or (executor.device_target(device) if executor else None)
        pending = []
        for region in parts.regions:
            sub = getattr(parts.graph_module, region)
            info = RegionInfo("%s.%s" % (name, region), _region_ops(sub))
            try:
                info.hlo = _lowering.lower_region(sub, "%s_%s" % (name, region))
            except _lowering.Unsupported as e:
                info.reason = str(e)
                self.report.fallback(LOWERING, "%s: %s" % (info.name, e))
                self.report.add_region(info)
                continue
            pending.append((region, sub, info, self.client.compile_async(info.hlo, target)))
        for region, sub, info, future in pending:
            self._install(parts.graph_module, region, sub, info, future.result(), target, device)
        parts.graph_module.recompile()
        with self._lock:
            self.graphs.append((name, parts.graph_module))
        LOG.debug("%s: %d regions, %d stitched", name, len(parts.regions),
                  sum(1 for r in self.report.regions if r.name.startswith(name + ".") and r.stitched))
        return parts.graph_module

    def _install(self, gm: torch.fx.GraphModule, region: str, sub: torch.fx.GraphModule,
                 info: RegionInfo, result: Any, target: Optional[str],
                 device: Optional[torch.device]) -> None:
        info.outcome = result.outcome
        if not result.ok:
            info.reason = result.reason
            self.report.fallback(DAEMON, "%s: %s" % (info.name, result.reason))
            self.report.add_region(info)
            return
        info.key, info.kernels = result.key, len(result.kernels)
        placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
        out = [n for n in sub.graph.nodes if n.op == "output"][0].args[0]
        outs = out if isinstance(out, (tuple, list)) else [out]
        kernels = RegionKernels(result.key, target or self.daemon_target(), result.bundle,
                                info.hlo, tuple(_lowering.static_meta(o) for o in outs))
        inputs = [_lowering.static_meta(p) for p in placeholders]
        setattr(gm, region, StitchedRegion(sub, info, kernels, inputs, self, device,
                                           result.runtimes))
        self.report.add_region(info)
        LOG.debug("%s: %s %s, %d kernels, ops %s", info.name, info.outcome, info.key[:12],
                  info.kernels, " ".join(info.ops))

    # -- collaborators ------------------------------------------------------------------------
    @property
    def client(self) -> Client:
        """The stitch Client, connected on first use."""
        with self._lock:
            if self._client is None:
                self._client = Client(self._address, fallback=self._fallback)
            return self._client

    def daemon_target(self) -> str:
        """The daemon's own target, asked once."""
        if self._daemon_target is None:
            try:
                self._daemon_target = str(self.client.stats().get("target", ""))
            except DaemonError:
                return ""
        return self._daemon_target

    def executor_for(self, device: torch.device) -> Optional[Executor]:
        """The executor for ``device``'s type, made on first use; None where there is none."""
        with self._lock:
            if device.type not in self._executors:
                self._executors[device.type] = self._default_executor(device.type)
            return self._executors[device.type]

    def executor_note(self, device: torch.device) -> str:
        """Why ``device`` has no executor."""
        return self._executor_notes.get(device.type, "none registered")

    def _default_executor(self, device_type: str) -> Optional[Executor]:
        if device_type != "cuda":
            self._executor_notes[device_type] = "stitched kernels run on CUDA devices only"
            return None
        try:
            return CudaExecutor()
        except Exception as e:  # no driver: stitch.cuda has logged it once
            self._executor_notes[device_type] = str(e)
            return None

    def record_invocation(self, key: str) -> None:
        """Counts one launch of ``key`` toward the daemon's savings metrics."""
        try:
            self.client.record_invocations(key, 1)
        except Exception as e:  # usage accounting never fails a step
            LOG.debug("usage not recorded: %s", e)


def _returning_tuple(gm: torch.fx.GraphModule) -> Tuple[torch.fx.GraphModule, Any]:
    """Returns (gm, None) when ``gm`` returns a tuple or list, as Dynamo's graphs do; else a
    copy that returns its outputs flattened into a tuple, and the pytree spec that rebuilds
    them. PyTorch 2.x's aot_module_simplified refuses any other output, and a graph traced by
    other means (``torch.fx.symbolic_trace``) may return one tensor. The caller's graph is
    left as it was."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    if isinstance(output.args[0], (tuple, list)):
        return gm, None
    graph = copy.deepcopy(gm.graph)
    output = next(n for n in graph.nodes if n.op == "output")
    flat, spec = pytree.tree_flatten(output.args[0])
    output.args = (tuple(flat),)
    return torch.fx.GraphModule(gm, graph), spec


def _propagate_shapes(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> None:
    """Puts static shapes on the nodes when the tracer left none (PyTorch 1.x's AOTAutograd
    hands real tensors and no metadata; 2.x's nodes carry ``meta["val"]``)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if all("val" in n.meta or "tensor_meta" in n.meta for n in placeholders):
        return
    ShapeProp(gm).propagate(*example_inputs)


def _device_of(example_inputs: Sequence[Any]) -> Optional[torch.device]:
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            return x.device
    return None


def _region_ops(sub: torch.fx.GraphModule) -> List[str]:
    return [_lowering.op_name(n) for n in sub.graph.nodes if n.op == "call_function"]


class OptimizedModule(torch.nn.Module):
    """A module traced with ``torch.fx.symbolic_trace`` and compiled through AOTAutograd by a
    StitchBackend, forward and backward. It shares the original's parameters. Its graphs are
    specialized to the shapes of the first call: a call with other shapes runs the original
    module, counted as a ``dynamic_shape`` fallback."""

    def __init__(self, module: torch.nn.Module, backend: StitchBackend) -> None:
        super().__init__()
        fw, bw = backend._aot_compilers()
        self.original = module
        self.backend = backend
        self.compiled = _aot_autograd().aot_module(torch.fx.symbolic_trace(module),
                                                   fw_compiler=fw, bw_compiler=bw,
                                                   decompositions=_decompositions())
        self._signature: Optional[tuple] = None

    @property
    def report(self) -> Report:
        """The backend's report."""
        return self.backend.report

    def forward(self, *args: Any) -> Any:
        signature = tuple((tuple(a.shape), a.dtype, a.device.type) if isinstance(a, torch.Tensor)
                          else type(a) for a in args)
        if self._signature is None:
            self._signature = signature
        elif signature != self._signature:
            self.backend.report.fallback(
                DYNAMIC_SHAPE, "call with %s; the graphs are specialized to %s" %
                (signature, self._signature))
            return self.original(*args)
        return self.compiled(*args)


def optimize(module: torch.nn.Module, backend: Optional[StitchBackend] = None,
             **options: Any) -> OptimizedModule:
    """Returns ``module`` compiled with stitched kernels (see OptimizedModule). ``options``
    are StitchBackend's when no backend is given."""
    return OptimizedModule(module, backend or StitchBackend(**options))
