"""The backend: AOTAutograd graphs in, memory-intensive regions replaced by stitched kernels.

Pipeline, for the forward and the backward graph alike:
  shapes (ShapeProp where the tracer left none) -> partition (_partition) -> lower each
  region to HLO (_lowering) -> ask the daemon for all regions at once -> replace each region
  that got a bundle by a StitchedRegion, which launches it through the device's executor and
  runs the region's own FX code whenever it cannot.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import logging
import threading
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.utils._pytree as pytree
from torch.fx.passes.shape_prop import ShapeProp

from ..client import DEFAULT_ADDRESS, Client, DaemonError
from . import _lowering, _partition, _shapes
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
    does, so that a LayerNorm's or a softmax's arithmetic joins the regions around it.
    GroupNorm is not among them: the lowering takes native_group_norm and its backward whole
    (PyTorch's decomposition reads its scales through as_strided)."""
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
    own FX code) when the call's sizes contradict the trace, the device has no executor, the
    bundle's target cannot run there, the daemon gives no bundle for the call's sizes, or the
    launch fails. Each such call is counted in the report with its reason.

    A region traced with symbolic sizes serves every call whose sizes bind its symbols
    (``_shapes.RegionShapes``). The first call at new sizes lowers the region at them; a
    bundle already held whose bucket serves the call's outer extent runs it as it is, and
    otherwise the daemon is asked (once per binding; its answer, or why there is none, is
    kept). ``bundles`` lists what the region holds."""

    #: Bindings one region remembers (most recent first); past them, the oldest is asked again.
    MAX_BINDINGS = 1024

    def __init__(self, fallback: torch.fx.GraphModule, info: RegionInfo, kernels: RegionKernels,
                 shapes: _shapes.RegionShapes, binding: Dict[Any, int], backend: "StitchBackend",
                 device: Optional[torch.device] = None,
                 runtimes: Optional[Dict[str, Any]] = None) -> None:
        super().__init__()
        self.fallback = fallback
        self.info = info
        self.kernels = kernels  # at the trace's sizes
        self.shapes = shapes
        self.device = device  # of the traced tensors
        self.runtimes = runtimes  # what jobs measured for the key, as the daemon answered
        self._binding = dict(binding)
        self._backend = backend
        _, self._tuple_output = _shapes.output_nodes(fallback)
        self._device_checks: Dict[torch.device, Optional[str]] = {}
        self._lock = threading.Lock()
        self._by_binding: "collections.OrderedDict[tuple, Any]" = collections.OrderedDict()
        self._by_binding[_binding_key(binding)] = kernels
        self._buckets: List[RegionKernels] = [kernels] if kernels.served else []

    def forward(self, *args: Any) -> Any:
        return self._run(args)[0]

    def _run(self, args: Sequence[Any]) -> Tuple[Any, Optional[RegionKernels], Any]:
        """:meth:`forward`'s result, the kernels launched and the executor that launched them
        (None, None where the region's own code ran)."""
        tensors, reason = self._tensor_args(args)
        kernels = None
        if reason is None:
            kernels, reason = self._kernels_for(args, tensors)
        if reason is not None:
            self._backend.report.fallback(reason[0], "%s: %s" % (self.info.name, reason[1]))
            return self.fallback(*args), None, None
        executor = self._executor
        try:
            outputs = executor.run(kernels, [a.contiguous() for a in tensors])
        except Exception as e:  # any failure leaves the step on PyTorch's code
            self._backend.report.fallback(LAUNCH_ERROR, "%s: %s" % (self.info.name, e))
            return self.fallback(*args), None, None
        last_path = getattr(executor, "last_launch_path", None)
        self._backend.report.count_stitched_call(path=last_path() if last_path else "python")
        self._backend.record_invocation(kernels.key)
        return (tuple(outputs) if self._tuple_output else outputs[0]), kernels, executor

    def call_split(self, tensors: Sequence[torch.Tensor], sizes: Sequence[int]) -> Any:
        """:meth:`forward` with the tensor inputs and the size inputs given apart, each in
        order (as the ``stitch::region`` op takes them)."""
        return self.run_split(tensors, sizes)[0]

    def run_split(self, tensors: Sequence[torch.Tensor], sizes: Sequence[int]
                  ) -> Tuple[Any, Optional[RegionKernels], Any]:
        """:meth:`call_split`'s result, the kernels launched and the executor that launched
        them (None, None where the region's own code ran)."""
        args: List[Any] = [None] * self.shapes.arity
        for k, t in zip(self.shapes.tensor_positions, tensors):
            args[k] = t
        for k, v in zip(self.shapes.size_positions, sizes):
            args[k] = int(v)
        return self._run(args)

    @property
    def input_specs(self) -> List[Any]:
        """Each input at the trace's sizes: ``(4, 64, torch.float32)`` for a tensor (its shape
        followed by its dtype), the int for a size."""
        specs = []
        for i in range(self.shapes.arity):
            spec = self.shapes.input_spec(i, self._binding)
            specs.append(tuple(spec[0]) + (spec[1],) if isinstance(spec, tuple) else spec)
        return specs

    @property
    def bundles(self) -> List[Tuple[str, Optional[Tuple[int, int]]]]:
        """The distinct bundles the region holds: (key, extents served or None)."""
        with self._lock:
            held = [k for k in self._by_binding.values() if isinstance(k, RegionKernels)]
        return sorted({(k.key, k.served) for k in held}, key=str)

    def launch(self, args: Sequence[Any]) -> List[torch.Tensor]:
        """Runs the stitched kernels on ``args`` (every input, sizes included) and returns the
        outputs; raises, naming why, where :meth:`forward` would run the region's own code
        instead."""
        tensors, reason = self._tensor_args(args)
        kernels = None
        if reason is None:
            kernels, reason = self._kernels_for(args, tensors)
        if reason is not None:
            raise RuntimeError("%s: %s" % reason)
        return self._executor.run(kernels, [a.contiguous() for a in tensors])

    # -- which kernels serve a call ------------------------------------------------------------
    def _tensor_args(self, args: Sequence[Any]) -> Tuple[List[Any], Optional[tuple]]:
        positions = self.shapes.tensor_positions
        tensors = [args[i] for i in positions if i < len(args)]
        if len(args) != self.shapes.arity or len(tensors) != len(positions) or not all(
                isinstance(a, torch.Tensor) for a in tensors):
            return [], (DYNAMIC_SHAPE, "arguments differ from the trace")
        return tensors, None

    def _kernels_for(self, args: Sequence[Any], tensors: Sequence[torch.Tensor]
                     ) -> Tuple[Optional[RegionKernels], Optional[tuple]]:
        binding, why = self.shapes.bind(args)
        if binding is None:
            return None, (DYNAMIC_SHAPE, why)
        for t, dtype in zip(tensors, self.shapes.tensor_dtypes):
            if t.dtype != dtype:
                return None, (DYNAMIC_SHAPE, "input %s is %s where the trace has %s" %
                              (tuple(t.shape), t.dtype, dtype))
        if not tensors:  # nothing says which device would run it
            return None, (NO_EXECUTOR, "the region reads no tensor")
        device = tensors[0].device
        self._executor = self._backend.executor_for(device)
        if self._executor is None:
            return None, (NO_EXECUTOR, "no executor for %s tensors (%s)" %
                          (device.type, self._backend.executor_note(device)))
        if device not in self._device_checks:
            self._device_checks[device] = self._executor.check(self.kernels.target, device)
        why = self._device_checks[device]
        if why:
            return None, (ARCH_MISMATCH, why)
        held = self._held(binding)
        return (held, None) if isinstance(held, RegionKernels) else (None, held)

    def _held(self, binding: Dict[Any, int]) -> Any:
        """The kernels for ``binding``, or (reason, why) there are none; asks the daemon at
        most once per binding remembered."""
        key = _binding_key(binding)
        with self._lock:
            if key in self._by_binding:
                self._by_binding.move_to_end(key, last=False)
                return self._by_binding[key]
        found = self._prepare(binding)
        with self._lock:
            self._by_binding[key] = found
            self._by_binding.move_to_end(key, last=False)
            while len(self._by_binding) > self.MAX_BINDINGS:
                self._by_binding.popitem(last=True)
        return found

    def _prepare(self, binding: Dict[Any, int]) -> Any:
        try:
            sig = _signature(self.fallback, self.info.name, self.shapes, binding,
                             self.shapes.outer)
        except _lowering.Unsupported as e:
            return (LOWERING, str(e))
        with self._lock:
            for k in self._buckets:
                if k.outer_parameters == sig.outer and k.served[0] <= sig.extent <= k.served[1]:
                    self._backend.report.count_new_size("bucket")
                    return sig.kernels(k.key, k.target, k.bundle, k.served)
        result = self._backend.client.compile(sig.lowered.hlo, self.kernels.target,
                                              outer_parameters=sig.outer)
        self._backend.report.count_new_size("daemon")
        result, sig = self._backend.covering(result, sig, self.kernels.target)
        if not result.ok:
            return (DAEMON, result.reason)
        kernels = sig.kernels(result.key, self.kernels.target, result.bundle, result.outer_extent)
        if kernels.served:
            with self._lock:
                self._buckets.append(kernels)
        return kernels


def _binding_key(binding: Dict[Any, int]) -> tuple:
    return tuple(sorted((str(s), v) for s, v in binding.items()))


@dataclasses.dataclass(frozen=True)
class _Signature:
    """A region's signature at one binding: the HLO, its outer parameters (empty for exact
    shapes) and the binding's outer extent (0 for exact shapes)."""

    lowered: "_lowering.Lowered"
    outer: Tuple[int, ...]
    extent: int

    def kernels(self, key: str, target: str, bundle: bytes,
                served: Optional[Tuple[int, int]]) -> RegionKernels:
        """The RegionKernels that run this signature with the bundle given."""
        return RegionKernels(key, target, bundle, self.lowered.hlo, self.lowered.outputs,
                             self.outer if served else (), served if self.outer else None,
                             self.lowered.inputs, self.extent if served else 0)


def _signature(sub: torch.fx.GraphModule, name: str, shapes: _shapes.RegionShapes,
               binding: Dict[Any, int], rule: Optional[_shapes.OuterRule]) -> _Signature:
    """Lowers ``sub`` at ``binding``, naming the outer parameters of ``rule`` unless the text
    bakes in a size's value (it then holds for this binding alone). Raises Unsupported."""
    lowered = _lowering.lower_region(sub, name.replace(".", "_"),
                                     binding if shapes.symbolic else None,
                                     rule.split_of() if rule else None)
    if rule is None or lowered.binding_specific:
        return _Signature(lowered, (), 0)
    return _Signature(lowered, rule.inputs, _shapes.evaluate(rule.extent, binding))


class StitchBackend:
    """A ``torch.compile`` backend (``torch.compile(model, backend=stitch.torch.backend)``),
    also used by :func:`optimize`.

    Args:
        client: the stitch Client; default: one connected to ``address`` on first use.
        address: the daemon's address when no client is given.
        target: the GPU target to compile for; default: the executor's device's
            architecture (which the daemon plans as its own device of it, e.g. an H200),
            else the daemon's own target.
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

    def _aot_compilers(self, batch: Tuple[int, int] = (0, 1)) -> tuple:
        make_boxed_func = _aot_autograd().make_boxed_func

        def compiler(kind: str) -> Callable:
            def compile_(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> Callable:
                return make_boxed_func(self.compile_graph(gm, inputs, kind, batch=batch))
            return compile_

        return compiler("forward"), compiler("backward")

    # -- one ATen graph -----------------------------------------------------------------------
    def compile_graph(self, graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any],
                      kind: str = "graph", leave_input_views: bool = False,
                      batch: Tuple[int, int] = (0, 1)) -> torch.fx.GraphModule:
        """Returns ``graph_module`` with its memory-intensive regions replaced by
        StitchedRegions where the daemon gave kernels. Never raises for what it cannot stitch:
        those parts stay PyTorch's, counted in ``report``. ``leave_input_views`` is
        ``_partition.partition``'s. Regions with symbolic sizes are compiled at the sizes the
        trace was made at, and bucketed where they can be (``_shapes``). ``batch``, for a graph
        traced at static sizes, is (batch, sequence) of its first input: inputs of a region
        whose dimension 0 is the batch, or batch x sequence rows, are sent as its outer
        parameters, so every batch of its bucket shares a bundle."""
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
            shapes = _shapes.RegionShapes(sub)
            rule = shapes.outer or shapes.static_outer_rule(*batch)
            sig, binding = self._lower(sub, info, shapes, rule)
            if sig is None:
                continue
            info.hlo = sig.lowered.hlo
            future = self.client.compile_async(sig.lowered.hlo, target, outer_parameters=sig.outer)
            pending.append((region, sub, info, shapes, binding, sig, future))
        for region, sub, info, shapes, binding, sig, future in pending:
            self._install(parts.graph_module, region, sub, info, future.result(), target,
                          device, shapes, binding, sig)
        parts.graph_module.recompile()
        with self._lock:
            self.graphs.append((name, parts.graph_module))
        LOG.debug("%s: %d regions, %d stitched", name, len(parts.regions),
                  sum(1 for r in self.report.regions if r.name.startswith(name + ".") and r.stitched))
        return parts.graph_module

    def _lower(self, sub: torch.fx.GraphModule, info: RegionInfo,
               shapes: _shapes.RegionShapes, rule: Optional[_shapes.OuterRule]
               ) -> Tuple[Optional[_Signature], Dict[Any, int]]:
        """The region's signature at the trace's sizes, and their binding; (None, {}) after
        counting why there is none."""
        binding: Optional[Dict[Any, int]] = {}
        why = ""
        if shapes.symbolic:
            binding, why = shapes.hint()
        try:
            if binding is None:
                raise _lowering.Unsupported(why)
            return _signature(sub, info.name, shapes, binding, rule), binding
        except _lowering.Unsupported as e:
            info.reason = str(e)
            reason = DYNAMIC_SHAPE if binding is None else LOWERING
            self.report.fallback(reason, "%s: %s" % (info.name, e))
            self.report.add_region(info)
            return None, {}

    def _install(self, gm: torch.fx.GraphModule, region: str, sub: torch.fx.GraphModule,
                 info: RegionInfo, result: Any, target: Optional[str],
                 device: Optional[torch.device], shapes: _shapes.RegionShapes,
                 binding: Dict[Any, int], sig: _Signature) -> None:
        result, sig = self.covering(result, sig, target)
        info.outcome = result.outcome
        if not result.ok:
            info.reason = result.reason
            self.report.fallback(DAEMON, "%s: %s" % (info.name, result.reason))
            self.report.add_region(info)
            return
        info.key, info.kernels, info.served = result.key, len(result.kernels), result.outer_extent
        kernels = sig.kernels(result.key, target or self.daemon_target(), result.bundle,
                              result.outer_extent)
        setattr(gm, region, StitchedRegion(sub, info, kernels, shapes, binding, self, device,
                                           result.runtimes))
        self.report.add_region(info)
        LOG.debug("%s: %s %s, %d kernels, ops %s", info.name, info.outcome, info.key[:12],
                  info.kernels, " ".join(info.ops))

    def covering(self, result: Any, sig: "_Signature", target: Optional[str]
                 ) -> Tuple[Any, "_Signature"]:
        """``result`` when its bundle serves the signature's extent; else (a bucket the
        planner could not follow is compiled for its top extent alone) the exact shapes'
        bundle and the exact signature."""
        if not result.ok or not sig.outer:
            return result, sig
        served = result.outer_extent
        if served is not None and served[0] <= sig.extent <= served[1]:
            return result, sig
        exact = _Signature(sig.lowered, (), 0)
        return self.client.compile(sig.lowered.hlo, target), exact

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

    def record_invocation(self, key: str, launches: int = 1) -> None:
        """Counts ``launches`` launches of ``key`` toward the daemon's savings metrics."""
        try:
            self.client.record_invocations(key, launches)
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
    StitchBackend, forward and backward. It shares the original's parameters.

    The graphs are specialized to one call's shapes, so each new signature (shapes, dtypes
    and devices of the arguments) is traced again, up to ``max_signatures`` of them; past
    that, a call with a new signature runs the original module, counted as a
    ``dynamic_shape`` fallback. Each trace names its batch, dimension 0 of the first tensor
    argument, as the regions' outer extent (inputs of a region whose dimension 0 is it, or
    batch x dimension 1 of that argument, as a [batch, sequence, ...] input's rows are): the
    daemon keys one bundle per power-of-two bucket of it, so a new batch size costs a trace
    here, not a compile on the node."""

    def __init__(self, module: torch.nn.Module, backend: StitchBackend,
                 max_signatures: int = 16) -> None:
        super().__init__()
        self.original = module
        self.backend = backend
        self.max_signatures = max_signatures
        self._compiled: Dict[tuple, Callable] = {}
        self._lock = threading.Lock()

    @property
    def report(self) -> Report:
        """The backend's report."""
        return self.backend.report

    @property
    def signatures(self) -> List[tuple]:
        """The signatures traced so far, in order."""
        with self._lock:
            return list(self._compiled)

    def forward(self, *args: Any) -> Any:
        signature = tuple((tuple(a.shape), a.dtype, a.device.type) if isinstance(a, torch.Tensor)
                          else type(a) for a in args)
        with self._lock:
            compiled = self._compiled.get(signature)
            if compiled is None and len(self._compiled) < self.max_signatures:
                compiled = self._compiled[signature] = self._trace(_batch_of(args))
        if compiled is None:
            self.backend.report.fallback(
                DYNAMIC_SHAPE, "call with %s; %d signatures are traced already" %
                (signature, self.max_signatures))
            return self.original(*args)
        return compiled(*args)

    def _trace(self, batch: Tuple[int, int]) -> Callable:
        fw, bw = self.backend._aot_compilers(batch)
        return _aot_autograd().aot_module(torch.fx.symbolic_trace(self.original),
                                          fw_compiler=fw, bw_compiler=bw,
                                          decompositions=_decompositions())


def _batch_of(args: Sequence[Any]) -> Tuple[int, int]:
    """(batch, sequence): dimensions 0 and 1 of the first tensor argument with a dimension
    (sequence 1 where it has one dimension); (0, 1) when none has."""
    for a in args:
        if isinstance(a, torch.Tensor) and a.dim() > 0:
            return int(a.shape[0]), int(a.shape[1]) if a.dim() > 1 else 1
    return 0, 1


def optimize(module: torch.nn.Module, backend: Optional[StitchBackend] = None,
             max_signatures: int = 16, **options: Any) -> OptimizedModule:
    """Returns ``module`` compiled with stitched kernels (see OptimizedModule, which traces
    up to ``max_signatures`` signatures of its arguments). ``options`` are StitchBackend's
    when no backend is given."""
    return OptimizedModule(module, backend or StitchBackend(**options), max_signatures)
