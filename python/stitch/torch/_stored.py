"""Regions whose 4-d tensors are stored channels-last.

Inductor lays a graph's convolutions out channels-last after the graph was traced row-major
(its layout optimization, on by default), and the pointwise and normalization work around
them follows: a region's 4-d NCHW tensors then arrive as NHWC storage. Such a region is
compiled a second time over that storage (``_lowering.lower_region`` with storage orders):
each 4-d input is declared as its NHWC storage and transposed to NCHW in its HLO, each output
is declared in the order it will be stored in and transposed into it; stitchd's compiler folds
the transposes into the ops between (``layout_transposes.h``), so the kernels read and write
the storage as it is.

An input the region reads through a reshape of another tensor (GroupNorm's ``view`` of its
input into groups, a weight's ``view`` to ``[1, C, 1, 1]``) is taken at its base instead, and
the reshape moves into the region: a reshape of a channels-last tensor has strides neither
row-major nor channels-last, while its base is one or the other. An output is stored so that
the reshapes that read it find channels-last strides (GroupNorm's backward gives its grouped
gradient back to ``[N, C, H, W]``); other 4-d outputs are stored channels-last.

The kernels timed against Inductor's take each argument in its predicted storage order: a
backward graph's tangents as traced (AOTAutograd gives them the traced strides), every other
4-d tensor channels-last. A call whose arguments are dense launches the kernels for their
orders on the storage (no copy), compiling them at the first call in orders other than the
predicted ones; a call with an argument that is no dense block takes the region's row-major
kernels on its inputs made from the arguments.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch

from . import _lowering, _shapes
from ._executor import RegionKernels


def storage_order(shape: Sequence[int], strides: Sequence[int]) -> Optional[_lowering.Order]:
    """The order in which a tensor of ``shape`` and ``strides`` lays out its dimensions,
    outermost first, where its elements are one dense block; None where they are not."""
    order = _order(strides)
    step = 1
    for d in reversed(order):
        if shape[d] != 1 and strides[d] != step:
            return None
        step *= shape[d]
    return order


def _argument_order(base: torch.fx.Node) -> Optional[_lowering.Order]:
    """The storage order a call argument is predicted to arrive in: a backward graph's
    tangents as traced (AOTAutograd gives them the traced strides), every other 4-d tensor
    channels-last (as Inductor lays them out), anything else row-major (None)."""
    val = base.meta["val"]
    if base.op == "placeholder" and base.name.startswith("tangents"):
        return _row_major_none(storage_order(tuple(val.shape), tuple(val.stride())))
    return _lowering.NHWC_OF_NCHW if val.dim() == 4 else None


def _channels_last_strides(shape: Sequence[int]) -> Tuple[int, ...]:
    """A 4-d tensor's strides stored channels-last; another's row-major."""
    x = torch.empty(tuple(shape), device="meta")
    return tuple(x.contiguous(memory_format=torch.channels_last).stride() if x.dim() == 4
                 else x.stride())


# -- the region with its inputs' reshapes folded in -------------------------------------------
def _base(arg: Any) -> Tuple[Any, Optional[Tuple[int, ...]]]:
    """The tensor a region input reshapes, and the input's shape where it is a reshape (the
    reshapes keep the elements' logical order, so one reshape of the base gives the input)."""
    shape = tuple(arg.meta["val"].shape) if isinstance(arg, torch.fx.Node) else None
    reshaped = False
    while isinstance(arg, torch.fx.Node) and arg.op == "call_function" and \
            arg.target in _lowering.RESHAPES and arg.args and \
            isinstance(arg.args[0], torch.fx.Node):
        arg, reshaped = arg.args[0], True
    return arg, shape if reshaped else None


def call_arguments(node: torch.fx.Node) -> List[Any]:
    """The tensors a stored region's call takes: each input's base, once each, in order of
    first use."""
    bases: List[Any] = []
    for a in node.args:
        base = _base(a)[0]
        if base not in bases:
            bases.append(base)
    return bases


Source = Tuple[int, Optional[Tuple[int, ...]]]  # an argument, and the shape it is reshaped to


def _folded(region_graph: torch.fx.GraphModule, node: torch.fx.Node, bases: List[Any]
            ) -> Tuple[torch.fx.GraphModule, Tuple[Source, ...]]:
    """The region's graph taking ``bases``, the :func:`call_arguments` of ``node``, with each
    input's reshape inside; and per region input, the argument it comes from and the shape it
    is reshaped to."""
    graph = torch.fx.Graph()
    placeholders = []
    for i, base in enumerate(bases):
        p = graph.placeholder("base%d" % i)
        p.meta["val"] = base.meta["val"]
        placeholders.append(p)
    env, sources = {}, []
    inputs = [n for n in region_graph.graph.nodes if n.op == "placeholder"]
    for p, a in zip(inputs, node.args):
        base, shape = _base(a)
        x = placeholders[bases.index(base)]
        if shape is not None:
            x = graph.call_function(torch.ops.aten.reshape.default, (x, list(shape)))
            x.meta["val"] = a.meta["val"]
        env[p] = x
        sources.append((bases.index(base), shape))
    for n in region_graph.graph.nodes:
        if n.op != "placeholder":
            env[n] = graph.node_copy(n, lambda x: env[x])
    return torch.fx.GraphModule(region_graph, graph), tuple(sources)


def _output_users(node: torch.fx.Node, k: int, several: bool) -> List[torch.fx.Node]:
    if not several:
        return list(node.users)
    return [u for g in node.users if g.args[1:2] == (k,) for u in g.users]


def _output_strides(node: torch.fx.Node, k: int, several: bool,
                    shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """Output ``k``'s strides: where every op that reads it reshapes it to one 4-d shape,
    those of a reshape of that shape stored channels-last, when such a reshape is dense; else
    stored channels-last if it is 4-d, row-major if not."""
    users = _output_users(node, k, several)
    shapes = {tuple(u.meta["val"].shape) for u in users
              if u.target in _lowering.RESHAPES and "val" in u.meta}
    if users and len(shapes) == 1 and all(u.target in _lowering.RESHAPES for u in users):
        (target,) = shapes
        if len(target) == 4:
            try:
                x = torch.empty(target, device="meta").contiguous(
                    memory_format=torch.channels_last).view(shape)
                if storage_order(shape, x.stride()) is not None:
                    return tuple(x.stride())
            except RuntimeError:  # no such view: the reshape would copy
                pass
    return _channels_last_strides(shape)


Orders = Tuple[Optional[_lowering.Order], ...]  # per argument; None: row-major


class StoredRegion:
    """A region's kernels over the storage Inductor gives it: ``kernels`` take each argument
    stored in its order of ``input_orders`` (the predicted orders, None for row-major) and
    write each output with ``output_strides``. A call whose arguments are dense in other
    orders gets kernels for those, compiled by ``compile_for`` at its first call (the same
    region over that storage, writing the same outputs). Thread-safe.

    ``graph`` is the region taking the call's arguments (the bases of its inputs' reshapes,
    :func:`call_arguments`), as the kernels do; ``sources`` gives, per input of the region's
    own graph, the argument it is made from and the shape it is reshaped to."""

    def __init__(self, graph: torch.fx.GraphModule, sources: Tuple[Source, ...],
                 input_orders: Orders, output_strides: Tuple[Tuple[int, ...], ...],
                 compile_for: Callable[[Orders], RegionKernels]) -> None:
        self.graph, self.sources = graph, sources
        self.input_orders, self.output_strides = input_orders, output_strides
        self._compile_for = compile_for
        self._lock = threading.Lock()
        shapes = [tuple(v.shape) for v in self._arguments()]
        self._variants: Dict[tuple, Union[RegionKernels, Exception]] = {}
        self.kernels = compile_for(input_orders)
        self._variants[_layout_key(input_orders, shapes)] = self.kernels

    def _arguments(self) -> List[Any]:
        return [n.meta["val"] for n in self.graph.graph.nodes if n.op == "placeholder"]

    @property
    def variants(self) -> int:
        """How many storage orders of the arguments have kernels."""
        with self._lock:
            return sum(not isinstance(v, Exception) for v in self._variants.values())

    @staticmethod
    def orders_of(arguments: Sequence[torch.Tensor]) -> Optional[Orders]:
        """Each argument's storage order (None for row-major), or None where an argument's
        elements are not one dense block."""
        orders = [storage_order(x.shape, x.stride()) for x in arguments]
        if any(o is None for o in orders):
            return None
        return tuple(_row_major_none(o) for o in orders)

    @property
    def takes_region_inputs(self) -> bool:
        """True when the call's arguments are the region's own inputs, in order."""
        return all(shape is None and i == k for k, (i, shape) in enumerate(self.sources))

    def region_inputs(self, arguments: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """The inputs of the region's own graph, made from the call's arguments (a reshape
        that cannot view its argument's storage copies it)."""
        return [arguments[i] if shape is None else arguments[i].reshape(shape)
                for i, shape in self.sources]

    def input_specs(self) -> List[Tuple[Any, ...]]:
        """(dims..., dtype) of each argument, as ``_random_inputs`` takes them."""
        return [tuple(v.shape) + (v.dtype,) for v in self._arguments()]

    def laid_out(self, arguments: Sequence[Any]) -> List[Any]:
        """``arguments`` (their values) stored in the predicted orders."""
        return [x if order is None else
                x.permute(*order).contiguous().permute(*_lowering.inverse(order))
                for x, order in zip(arguments, self.input_orders)]

    def run(self, executor: Any, arguments: Sequence[torch.Tensor], orders: Orders
            ) -> Tuple[List[torch.Tensor], RegionKernels]:
        """Launches the kernels for ``orders``, the storage orders of ``arguments``
        (:meth:`orders_of`); returns the outputs, each a view of its storage with
        ``output_strides``, and the kernels launched."""
        kernels = self._kernels_for(orders, [tuple(x.shape) for x in arguments])
        stored = [x.contiguous() if order is None else x.permute(*order)
                  for x, order in zip(arguments, orders)]
        outputs = executor.run(kernels, stored)
        return [o.permute(*_lowering.inverse(_order(s))) if o.dim() > 1 else o
                for o, s in zip(outputs, self.output_strides)], kernels

    def _kernels_for(self, orders: Orders, shapes: List[Tuple[int, ...]]) -> RegionKernels:
        """The kernels for ``orders``, compiled at the first call in them; raises (at every
        call) where they could not be compiled, and the call falls back."""
        key = _layout_key(orders, shapes)
        with self._lock:
            found = self._variants.get(key)
        if found is None:
            try:
                found = self._compile_for(orders)
            except Exception as e:  # kept, so that later calls do not compile again
                found = RuntimeError("no kernels over this storage: %s" % e)
            with self._lock:
                found = self._variants.setdefault(key, found)
        if isinstance(found, Exception):
            raise found
        return found

    def fake_outputs(self, outputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """Empty tensors like ``outputs``, with ``output_strides``."""
        return [torch.empty_strided(tuple(o.shape), s, dtype=o.dtype, device=o.device)
                for o, s in zip(outputs, self.output_strides)]


def _row_major_none(order: Optional[_lowering.Order]) -> Optional[_lowering.Order]:
    return None if order is None or order == tuple(range(len(order))) else order


def _layout_key(orders: Orders, shapes: Sequence[Tuple[int, ...]]) -> tuple:
    """What tells two calls' storage apart: each argument's dimensions of more than one
    element in their storage order (where a dimension of one element lies takes no room)."""
    return tuple(tuple(d for d in (o if o is not None else range(len(s))) if s[d] != 1)
                 for o, s in zip(orders, shapes))


def _order(strides: Sequence[int]) -> _lowering.Order:
    """Dimensions by stride, largest first (a stable sort: ties keep their logical order)."""
    return tuple(sorted(range(len(strides)), key=lambda d: -strides[d]))


def compile_stored(region: Any, node: torch.fx.Node,
                   client: Any) -> Union[StoredRegion, str]:
    """The channels-last variant of a StitchedRegion of static sizes, called at ``node`` of
    the graph being compiled, compiled by ``client``'s daemon for the region's target; or why
    there is none."""
    if region.shapes.symbolic or region.shapes.size_positions:
        return "its sizes are symbolic"
    bases = call_arguments(node)
    graph, sources = _folded(region.fallback, node, bases)
    arguments = {n for n in graph.graph.nodes if n.op == "placeholder"}
    for n in graph.graph.nodes:
        if n.op == "call_function" and "as_strided" in str(n.target) and \
                _reads_storage_of(n.args[0], arguments):
            # as_strided reads its input's storage at strides traced for row-major storage.
            return "%s reads storage at row-major strides" % n.target
    outputs, several = _shapes.output_nodes(region.fallback)
    strides = tuple(_output_strides(node, k, several, tuple(o.meta["val"].shape))
                    for k, o in enumerate(outputs))
    output_orders = [_order(s) for s in strides]
    name = region.info.name.replace(".", "_") + "_stored"
    target = region.kernels.target

    def compile_for(orders: Orders) -> RegionKernels:
        lowered = _lowering.lower_region(graph, name, input_orders=orders,
                                         output_orders=output_orders)
        result = client.compile(lowered.hlo, target)
        if not result.ok:
            raise RuntimeError("stitchd: %s" % result.reason)
        return RegionKernels(result.key, target, result.bundle, lowered.hlo, lowered.outputs,
                             inputs=lowered.inputs)

    try:
        return StoredRegion(graph, sources,
                            tuple(_argument_order(base) for base in bases),
                            strides, compile_for)
    except (_lowering.Unsupported, RuntimeError) as e:
        return str(e)


def _reads_storage_of(x: Any, arguments: set) -> bool:
    """True when ``x`` is a call argument or a reshape of one: a tensor whose storage is the
    argument's."""
    while isinstance(x, torch.fx.Node) and x not in arguments and \
            x.op == "call_function" and x.target in _lowering.RESHAPES:
        x = x.args[0]
    return x in arguments
