"""The sizes a region's kernels serve: static shapes, or Dynamo's symbolic ones.

A region cut from a graph traced with symbolic sizes (``torch.compile`` after a recompile, or
``dynamic=True``) holds sizes such as ``s0`` and ``8*s0``. Each call binds the symbols from
its inputs' sizes (a *binding*); the region is lowered to HLO at that binding, so the daemon
always sees exact shapes. Where the rule of ``compiler/ir/include/stitch/ir/shape_class.h``
can hold (one symbol, and it appears only in dimension 0 of the region's tensors), the
lowering also names as outer parameters the inputs whose dimension 0 is the symbolic extent,
and the daemon compiles one bundle per power-of-two bucket of it: every later binding inside
that bucket launches the same bundle without asking the daemon again.

Every expression here is sympy's, as PyTorch's ShapeEnv writes it; the symbols are bound from
dimensions that are a symbol or a whole multiple of one (``s0``, ``8*s0``).
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

Dim = Any  # an int, or a sympy expression of the trace's symbols
Binding = Mapping[Any, int]  # sympy Symbol -> its value in one call


def _expr(size: Any) -> Dim:
    """An int for a static size, the sympy expression for a symbolic one."""
    if isinstance(size, int):
        return size
    node = getattr(size, "node", None)
    return node.expr if node is not None and hasattr(node, "expr") else size


def _hint(size: Any) -> Optional[int]:
    """The example value Dynamo traced a symbolic size at; None where it has none."""
    if isinstance(size, int):
        return size
    hint = getattr(getattr(size, "node", None), "hint", None)
    return int(hint) if hint is not None else None


def output_nodes(gm: torch.fx.GraphModule) -> Tuple[List[torch.fx.Node], bool]:
    """A graph's outputs, in order, and whether it returns a tuple of them."""
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    if isinstance(out, (tuple, list)):
        return list(out), True
    return [out], False


def symbolic_meta(node: torch.fx.Node) -> Optional[Tuple[Tuple[Dim, ...], torch.dtype]]:
    """The node's (dims, dtype) when it is one tensor: each dim an int or a sympy expression."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return tuple(_expr(d) for d in val.shape), val.dtype
    tm = node.meta.get("tensor_meta")
    if tm is not None and hasattr(tm, "shape"):
        return tuple(_expr(d) for d in tm.shape), tm.dtype
    return None


def element_metas(node: torch.fx.Node
                  ) -> Optional[List[Optional[Tuple[Tuple[Dim, ...], torch.dtype]]]]:
    """For a node whose value is a tuple of tensors (an op with several results, such as
    ``var_mean``): each element's (dims, dtype), None for an element that is no tensor (an
    output the op was asked not to compute). None for any other node."""
    val = node.meta.get("val")
    if not isinstance(val, (tuple, list)):
        val = node.meta.get("tensor_meta")  # 1.13: a TensorMetadata per tensor
        if not isinstance(val, (tuple, list)) or hasattr(val, "shape"):
            return _metas_of_getitems(node)
    metas: List[Optional[Tuple[Tuple[Dim, ...], torch.dtype]]] = []
    for element in val:
        if isinstance(element, torch.Tensor) or (element is not None
                                                 and hasattr(element, "shape")
                                                 and hasattr(element, "dtype")):
            metas.append((tuple(_expr(d) for d in element.shape), element.dtype))
        else:
            metas.append(None)
    return metas


def _metas_of_getitems(node: torch.fx.Node
                       ) -> Optional[List[Optional[Tuple[Tuple[Dim, ...], torch.dtype]]]]:
    """The results' (dims, dtype) from the getitems that take them apart, for a node with no
    metadata of its own whose every user is a getitem (PyTorch 1.13's ShapeProp leaves an
    op's tuple of results unannotated); None for a result no getitem takes."""
    if "val" in node.meta or "tensor_meta" in node.meta or not node.users:
        return None
    found: Dict[int, Optional[Tuple[Tuple[Dim, ...], torch.dtype]]] = {}
    for user in node.users:
        if user.op != "call_function" or user.target is not operator.getitem or \
                not isinstance(user.args[1], int) or user.args[1] < 0:
            return None
        meta = symbolic_meta(user)
        if meta is None:
            return None
        found[user.args[1]] = meta
    return [found.get(i) for i in range(max(found) + 1)]


def elements_have_example_sizes(node: torch.fx.Node) -> bool:
    """For a node with several results (``element_metas``), True when every size of each
    tensor among them has a value Dynamo traced it at."""
    val = node.meta.get("val")
    if not isinstance(val, (tuple, list)):
        return element_metas(node) is not None
    return all(_hint(d) is not None for element in val if isinstance(element, torch.Tensor)
               for d in element.shape)


def has_example_sizes(node: torch.fx.Node) -> bool:
    """True when every size of the node's tensor has a value Dynamo traced it at."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return symbolic_meta(node) is not None
    return all(_hint(d) is not None for d in val.shape)


def symbolic_scalar(node: torch.fx.Node) -> Optional[Dim]:
    """The expression of a node that is one symbolic integer (a size the graph passes on)."""
    val = node.meta.get("val")
    if isinstance(val, int) and not isinstance(val, bool):
        return val
    if hasattr(torch, "SymInt") and isinstance(val, torch.SymInt):
        return _expr(val)
    return None


def evaluate(dim: Dim, binding: Binding) -> int:
    """The value of ``dim`` under ``binding``; KeyError names a symbol it leaves unbound."""
    if isinstance(dim, int):
        return dim
    free = [s for s in dim.free_symbols if s not in binding]
    if free:
        raise KeyError("size %s: %s unbound" % (dim, ", ".join(sorted(map(str, free)))))
    return int(dim.xreplace(dict(binding)))


def evaluate_symint(dim: Dim, sizes: Mapping[Any, Any]) -> Any:
    """``dim`` computed from ``sizes`` (symbol -> SymInt or int) with Python arithmetic, so
    that a fake tensor's symbolic sizes give symbolic results. Supports the sums and products
    of symbols and integers that sizes of tensors are; ValueError for anything else."""
    if isinstance(dim, int):
        return dim
    if dim.is_Integer:
        return int(dim)
    if dim.is_Symbol:
        return sizes[dim]
    if dim.is_Add or dim.is_Mul:
        parts = [evaluate_symint(a, sizes) for a in dim.args]
        result = parts[0]
        for p in parts[1:]:
            result = result + p if dim.is_Add else result * p
        return result
    raise ValueError("size %s is not a sum of products of sizes" % dim)


def _bind_dim(dim: Dim, size: int, binding: Dict[Any, int]) -> Optional[str]:
    """Binds the symbol of a dim that is ``c*s`` (c >= 1) from its value; returns why the value
    contradicts the binding, or None."""
    if isinstance(dim, int):
        return None if dim == size else "size %d where the trace has %d" % (size, dim)
    coefficient, rest = dim.as_coeff_Mul()
    if not rest.is_Symbol or not coefficient.is_Integer or int(coefficient) < 1:
        return None  # checked once every symbol is bound
    c = int(coefficient)
    if size % c:
        return "size %d is not a multiple of %d (%s)" % (size, c, dim)
    value = size // c
    if binding.setdefault(rest, value) != value:
        return "%s is both %d and %d" % (rest, binding[rest], value)
    return None


@dataclasses.dataclass(frozen=True)
class OuterRule:
    """How a region follows one outer extent.

    Attributes:
        extent: the extent: ``c*s`` for the region's symbol, or an int for a region of static
            sizes traced at that batch.
        inputs: the positions, among the region's tensor inputs (its HLO parameters), of those
            whose dimension 0 follows the extent: the outer parameters.
        splits: for each of ``inputs``, k where dimension 0 is k times the extent (rows of
            batch x sequence); such an input is declared ``[extent, k, ...]`` and reshaped
            back, so that its dimension 0 is the extent, as outer parameters' must be.
    """

    extent: Dim
    inputs: Tuple[int, ...]
    splits: Tuple[int, ...]

    def split_of(self) -> Dict[int, int]:
        """Parameter -> k, for the inputs declared ``[extent, k, ...]``."""
        return {p: k for p, k in zip(self.inputs, self.splits) if k > 1}


class RegionShapes:
    """The sizes of one region: its inputs' dims, the symbols they hold, how a call binds
    them, and whether the region can be bucketed (``outer``). Immutable after construction;
    thread-safe."""

    def __init__(self, region: torch.fx.GraphModule) -> None:
        placeholders = [n for n in region.graph.nodes if n.op == "placeholder"]
        self.arity = len(placeholders)
        self.tensor_positions: Tuple[int, ...] = tuple(
            i for i, p in enumerate(placeholders) if symbolic_meta(p) is not None)
        self._inputs: List[Union[Tuple[Tuple[Dim, ...], torch.dtype], Dim, None]] = [
            symbolic_meta(p) if i in self.tensor_positions else symbolic_scalar(p)
            for i, p in enumerate(placeholders)]
        self._hints = [self._hint_of(p) for p in placeholders]
        #: The dtype of each tensor input, in tensor-input order.
        self.tensor_dtypes = tuple(self._inputs[i][1] for i in self.tensor_positions)
        tensors = [symbolic_meta(n) for n in region.graph.nodes if n.op != "output"]
        self._tensor_dims = [m[0] for m in tensors if m is not None]
        self.symbols = frozenset(s for dims in self._tensor_dims for d in dims
                                 if not isinstance(d, int) for s in d.free_symbols)
        self.size_positions: Tuple[int, ...] = tuple(
            i for i in range(self.arity) if i not in self.tensor_positions)
        self.outer: Optional[OuterRule] = self._outer_rule()

    @property
    def symbolic(self) -> bool:
        """True when the region's sizes hold symbols."""
        return bool(self.symbols)

    @staticmethod
    def _hint_of(p: torch.fx.Node) -> Any:
        val = p.meta.get("val")
        if isinstance(val, torch.Tensor):
            return tuple(_hint(d) for d in val.shape)
        return _hint(val)

    def hint(self) -> Tuple[Optional[Dict[Any, int]], str]:
        """The binding the trace was made at, or None and why it has none (sizes without an
        example value, e.g. ones that depend on the data)."""
        if any(h is None or (isinstance(h, tuple) and None in h) for h in self._hints):
            return None, "a size without an example value"
        return self.bind([torch.Size(h) if isinstance(h, tuple) else h for h in self._hints])

    def bind(self, args: Sequence[Any]) -> Tuple[Optional[Dict[Any, int]], str]:
        """Binds the symbols from one call's inputs (a tensor or its size for each tensor
        input, an int for each size input) and checks every size against the trace; returns
        (binding, "") or (None, why not)."""
        if len(args) != self.arity:
            return None, "%d inputs where the trace has %d" % (len(args), self.arity)
        binding: Dict[Any, int] = {}
        for dims, value in self._pairs(args):
            if len(value) != len(dims):
                return None, "rank %d where the trace has %d" % (len(value), len(dims))
            for d, size in zip(dims, value):
                why = _bind_dim(d, int(size), binding)
                if why:
                    return None, why
        unbound = sorted(str(s) for s in self.symbols if s not in binding)
        if unbound:
            return None, "no input's size gives %s" % ", ".join(unbound)
        for dims, value in self._pairs(args):
            if tuple(int(x) for x in value) != tuple(evaluate(d, binding) for d in dims):
                return None, "input %s differs from the traced %s" % (tuple(value), dims)
        return binding, ""

    def symint_binding(self, args: Sequence[Any]) -> Dict[Any, Any]:
        """Each symbol as one call's inputs give it (as :meth:`bind` takes them), with Python
        arithmetic: fake tensors' symbolic sizes give symbolic values. KeyError for a symbol
        no input gives as a symbol or a whole multiple of one."""
        found: Dict[Any, Any] = {}
        for dims, value in self._pairs(args):
            for d, size in zip(dims, value):
                if isinstance(d, int):
                    continue
                coefficient, rest = d.as_coeff_Mul()
                if rest.is_Symbol and coefficient.is_Integer and rest not in found:
                    found[rest] = size if int(coefficient) == 1 else size // int(coefficient)
        missing = [str(s) for s in self.symbols if s not in found]
        if missing:
            raise KeyError("no input's size gives %s" % ", ".join(sorted(missing)))
        return found

    def _pairs(self, args: Sequence[Any]) -> List[Tuple[Tuple[Dim, ...], Tuple[Any, ...]]]:
        """(traced dims, the call's sizes) per input; a size input is a one-dim pair."""
        pairs = []
        for i, (spec, arg) in enumerate(zip(self._inputs, args)):
            if i in self.tensor_positions:
                pairs.append((spec[0], tuple(arg.shape if isinstance(arg, torch.Tensor) else arg)))
            elif spec is not None:
                pairs.append(((spec,), (arg,)))
        return pairs

    def input_spec(self, position: int, binding: Binding) -> Any:
        """Placeholder ``position`` at ``binding``: (shape, dtype) for a tensor, the int for a
        size."""
        spec = self._inputs[position]
        if position in self.tensor_positions:
            return tuple(evaluate(d, binding) for d in spec[0]), spec[1]
        return evaluate(spec, binding) if spec is not None else None

    def static_outer_rule(self, batch: int, sequence: int = 1) -> Optional[OuterRule]:
        """For a region of static sizes traced at ``batch`` (and ``sequence``, the next
        dimension of the same input): the inputs whose dimension 0 is the batch, or batch x
        sequence rows. None for a symbolic region or when no input has either."""
        if self.symbolic or batch < 1:
            return None
        inputs, splits = [], []
        for k, position in enumerate(self.tensor_positions):
            dims = self._inputs[position][0]
            if dims and dims[0] == batch:
                inputs.append(k)
                splits.append(1)
            elif dims and sequence > 1 and dims[0] == batch * sequence:
                inputs.append(k)
                splits.append(sequence)
        return OuterRule(batch, tuple(inputs), tuple(splits)) if inputs else None

    def _outer_rule(self) -> Optional[OuterRule]:
        """The outer extent and the inputs that carry it, when the region has one symbol s
        and it appears only in dimension 0, as a whole multiple of s; None otherwise (each
        binding then compiles exactly)."""
        if len(self.symbols) != 1:
            return None
        for dims in self._tensor_dims:
            if any(not isinstance(d, int) for d in dims[1:]):
                return None
            if dims and not isinstance(dims[0], int) and _coefficient(dims[0]) is None:
                return None
        specs = [self._inputs[i][0] for i in self.tensor_positions]
        varying = [k for k, dims in enumerate(specs) if dims and not isinstance(dims[0], int)]
        if not varying:
            return None
        coefficients = [_coefficient(specs[k][0]) for k in varying]
        # The extent is the least multiple any tensor of the region has in dimension 0, so
        # that every dimension 0 is a whole number of extents.
        least = min(_coefficient(dims[0]) for dims in self._tensor_dims
                    if dims and not isinstance(dims[0], int))
        if any(_coefficient(dims[0]) % least for dims in self._tensor_dims
               if dims and not isinstance(dims[0], int)):
            return None
        symbol = next(iter(self.symbols))
        return OuterRule(least * symbol, tuple(varying), tuple(c // least for c in coefficients))


def _coefficient(dim: Dim) -> Optional[int]:
    """c for a dim that is ``c*s`` with c >= 1 a whole number, else None."""
    coefficient, rest = dim.as_coeff_Mul()
    if rest.is_Symbol and coefficient.is_Integer and int(coefficient) >= 1:
        return int(coefficient)
    return None
