"""Partitioning of an ATen FX graph into the memory-intensive regions stitchd compiles.

A node joins a region when the lowering has it (``_lowering.LOWERINGS``), its sizes are static
or symbolic sizes with an example value (``_shapes``: not ones that depend on the data), and
its dtypes are ones stitchd compiles. The getitems of an op with several results (var_mean,
native_group_norm) join that op's region. PyTorch's own ``CapabilityBasedPartitioner``
groups the supported nodes into the largest regions that create no cycle through the nodes
left out; regions with no arithmetic (views and copies only) are left to PyTorch, since a
kernel for them saves nothing, and so are regions that read no tensor.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Collection, Dict, List, Optional, Tuple

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

from . import _lowering, _shapes

# Ops left to PyTorch by design, not counted as fallbacks: matrix products, convolutions and
# gathers, which its libraries run better than a memory-intensive kernel would, and random
# numbers, so that a stitched model draws the same ones as eager.
FRAMEWORK_OPS = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "matmul", "convolution", "convolution_backward",
    "_convolution", "cudnn_convolution", "embedding", "embedding_dense_backward", "linear",
    "addbmm", "dot", "mv", "index_select", "gather", "scatter", "scatter_add", "index",
    "index_put", "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
    "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d",
    "avg_pool2d_backward", "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward",
    "rand", "rand_like", "randn", "randn_like", "bernoulli", "randint", "normal", "uniform",
})

# Ops that only move or copy data: a region of these alone is not worth a kernel.
DATA_MOVEMENT_OPS = frozenset({
    "view", "_unsafe_view", "_reshape_alias", "reshape", "unsqueeze", "squeeze", "transpose", "permute", "t",
    "expand", "expand_as", "broadcast_in_dim", "clone", "alias", "detach", "lift_fresh_copy",
    "contiguous", "slice", "cat", "_to_copy", "convert_element_type", "to", "full", "full_like",
    "zeros_like", "ones_like", "scalar_tensor", "zeros", "ones", "select", "select_backward",
    "select_scatter", "arange", "iota", "getitem", "as_strided", "fill", "empty_like",
})


def _packet_name(node: torch.fx.Node) -> str:
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    return getattr(packet, "__name__", "") if packet is not None else getattr(target, "__name__", "")


def _tensor_inputs(node: torch.fx.Node) -> List[torch.fx.Node]:
    return [a for a in node.all_input_nodes if _shapes.symbolic_meta(a) is not None]


def why_not_supported(node: torch.fx.Node) -> Optional[Tuple[str, str]]:
    """Returns None when ``node`` may join a region, else (kind, explanation) with kind one of
    "framework" (left to the framework by design), "unsupported_op", "dynamic_shape" or
    "dtype"."""
    if node.op != "call_function":
        return ("framework", "not an op")
    if node.target is operator.getitem:
        # An element of an op's several results joins that op's region; of any other op's
        # (a convolution's gradients), it stays with the framework.
        source = node.args[0]
        if not (isinstance(source, torch.fx.Node) and source.op == "call_function"
                and source.target is not operator.getitem
                and _shapes.element_metas(source) is not None
                and why_not_supported(source) is None):
            return ("framework", "an element of a tuple")
    elif _lowering.is_size_arithmetic(node):
        return ("framework", "size arithmetic")
    name = _packet_name(node)
    if name in FRAMEWORK_OPS:
        return ("framework", _lowering.op_name(node))
    if name == "copy_" and isinstance(node.args[0], torch.fx.Node) and \
            node.args[0].op == "placeholder":
        # A region's kernels write fresh tensors: the write of a value a region computes into
        # the graph's input (a module buffer's update, batch norm's running statistics in
        # training) is left to the framework, as the functionalized graph asks.
        return ("framework", "%s writes input %s" % (_lowering.op_name(node),
                                                     node.args[0].name))
    if _lowering.lowering_for(node) is None:
        return ("unsupported_op", "unsupported op %s" % _lowering.op_name(node))
    form = _lowering.unsupported_form(node)
    if form is not None:
        return ("unsupported_op", "unsupported form of %s: %s" % (_lowering.op_name(node), form))
    elements = _shapes.element_metas(node)
    if elements is not None:  # several results: each must be one the lowering can write
        if not _shapes.elements_have_example_sizes(node):
            return ("dynamic_shape", "%s has a size that depends on the data" % node.name)
        for meta in elements:
            if meta is not None and meta[1] not in _lowering.DTYPES:
                return ("dtype", "%s has a result of dtype %s" % (node.name, meta[1]))
    for v in ([] if elements is not None else [node]) + _tensor_inputs(node):
        meta = _shapes.symbolic_meta(v)
        if meta is None:
            return ("dynamic_shape", "%s has no shape" % v.name)
        if not _shapes.has_example_sizes(v):
            return ("dynamic_shape", "%s has a size that depends on the data" % v.name)
        if meta[1] not in _lowering.DTYPES:
            return ("dtype", "%s has dtype %s" % (v.name, meta[1]))
    return None


class _RegionSupport(OperatorSupport):
    def __init__(self, leave_input_views: bool) -> None:
        super().__init__()
        self._leave_input_views = leave_input_views
        self._input_views: Dict[torch.fx.Node, bool] = {}
        self._output_views: Dict[torch.fx.Node, bool] = {}

    def is_node_supported(self, submodules: Dict[str, torch.nn.Module],
                          node: torch.fx.Node) -> bool:
        if why_not_supported(node) is not None:
            return False
        return not (self._leave_input_views and
                    (self._is_input_view(node) or self._is_output_view(node)))

    def _is_input_view(self, node: torch.fx.Node) -> bool:
        """True for a view or copy of the graph's inputs or of nodes outside every region,
        through data movement only: it computes nothing a region could fuse."""
        if node not in self._input_views:
            self._input_views[node] = _packet_name(node) in DATA_MOVEMENT_OPS and all(
                why_not_supported(a) is not None or self._is_input_view(a)
                for a in node.all_input_nodes)
        return self._input_views[node]

    def _is_output_view(self, node: torch.fx.Node) -> bool:
        """True for a view or copy read only outside every region, through data movement
        only (an activation's transpose before its matmul)."""
        if node not in self._output_views:
            self._output_views[node] = _packet_name(node) in DATA_MOVEMENT_OPS and all(
                why_not_supported(u) is not None or self._is_output_view(u)
                for u in node.users)
        return self._output_views[node]


@dataclasses.dataclass
class Partitioning:
    """A graph with its regions fused into submodules.

    Attributes:
        graph_module: the graph; each region is a ``call_module`` of ``regions[i]``.
        regions: the names of the region submodules, in graph order.
        left_out: for each node left to the framework for a reason other than "framework":
            (kind, explanation), in graph order.
    """

    graph_module: torch.fx.GraphModule
    regions: List[str]
    left_out: List[Tuple[str, str]]


def partition(graph_module: torch.fx.GraphModule,
              leave_input_views: bool = False) -> Partitioning:
    """Fuses the memory-intensive regions of ``graph_module`` (whose nodes carry shape
    metadata) into submodules. The result is a function of the graph alone: the same graph
    gives the same regions in the same order.

    With ``leave_input_views``, views of the graph's inputs and of nodes outside the regions
    (a weight's transpose before its matmul), and views read only outside the regions (an
    activation's transpose before its matmul), stay outside too, so that a region never
    returns a strided view that the graph around it would read in place."""
    left_out = []
    for node in graph_module.graph.nodes:
        if node.op == "call_function":
            reason = why_not_supported(node)
            if reason is not None and reason[0] != "framework":
                left_out.append(reason)
    partitioner = CapabilityBasedPartitioner(graph_module, _RegionSupport(leave_input_views),
                                             allows_single_node_partition=True)
    order = {node: i for i, node in enumerate(graph_module.graph.nodes)}
    worth = [p for p in partitioner.propose_partitions()
             if any(_packet_name(n) not in DATA_MOVEMENT_OPS for n in p.nodes)
             and _reads_a_tensor(p.nodes)]
    for p in worth:
        # In graph order, which is topological: the fuser copies nodes in the order given,
        # and a set's order would change the region's text from one run to the next.
        p.nodes = dict.fromkeys(sorted(p.nodes, key=order.__getitem__))
    worth.sort(key=lambda p: order[next(iter(p.nodes))])
    fused = partitioner.fuse_partitions(worth)
    regions = _name_regions(fused)
    _carry_metadata(fused)
    return Partitioning(fused, regions, left_out)


def _reads_a_tensor(nodes: Collection[torch.fx.Node]) -> bool:
    """True when the nodes read a tensor from outside them. Those that read none (an arange
    and the arithmetic on it, cut off from the tensors it meets) compute the same values at
    every call: they are left to PyTorch, as a kernel with no input is not launched."""
    return any(a not in nodes and _shapes.symbolic_meta(a) is not None
               for n in nodes for a in n.all_input_nodes)


def _name_regions(gm: torch.fx.GraphModule) -> List[str]:
    """Renames the fused submodules ``region0``, ``region1``, ... in graph order (the
    partitioner numbers them in an order of its own)."""
    calls = [n for n in gm.graph.nodes
             if n.op == "call_module" and str(n.target).startswith("fused_")]
    modules = [getattr(gm, n.target) for n in calls]
    for n in calls:
        delattr(gm, n.target)
    names = []
    for i, (n, module) in enumerate(zip(calls, modules)):
        n.target = "region%d" % i
        setattr(gm, n.target, module)
        names.append(n.target)
    gm.recompile()
    return names


def _carry_metadata(gm: torch.fx.GraphModule) -> None:
    """Gives the nodes fusion made the shapes of the nodes they stand for: each region's
    placeholders those of its call's arguments, and the getitems of a region's results
    those of the region's outputs. Fusion copies neither."""
    for node in gm.graph.nodes:
        if node.op == "call_module" and node.target.startswith("region"):
            sub = getattr(gm, node.target)
            placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
            for placeholder, arg in zip(placeholders, node.args):
                if isinstance(arg, torch.fx.Node) and not _has_meta(placeholder):
                    placeholder.meta.update(arg.meta)
            outs, several = _shapes.output_nodes(sub)
            if not several and isinstance(outs[0], torch.fx.Node):
                node.meta.update(outs[0].meta)
        elif (node.op == "call_function" and node.target is operator.getitem
              and isinstance(node.args[0], torch.fx.Node)
              and node.args[0].op == "call_module" and not _has_meta(node)):
            sub = getattr(gm, node.args[0].target, None)
            if sub is None:
                continue
            outs, several = _shapes.output_nodes(sub)
            if several and isinstance(outs[node.args[1]], torch.fx.Node):
                node.meta.update(outs[node.args[1]].meta)


def _has_meta(node: torch.fx.Node) -> bool:
    return "val" in node.meta or "tensor_meta" in node.meta
