"""Lowering of an ATen FX region to one HLO module: the signature stitchd compiles.

The regions come from AOTAutograd graphs after the decompositions in ``DECOMPOSITIONS``, so
they hold ATen core ops and a few prims. ``LOWERINGS`` is the one list of the ops a region
may hold: the partitioner asks it what is supported, and the lowering emits from it, so the
two cannot disagree. Every value carries the shape and dtype that shape propagation put on its
node (``meta["val"]`` in PyTorch 2.x, ``meta["tensor_meta"]`` in 1.13); symbolic sizes are
lowered at one binding of their symbols (``_shapes``), so the text always has exact shapes.

Arithmetic runs in the node's own result dtype, as PyTorch's type promotion makes it; sums,
means and variances of 16-bit floats accumulate in f32 and round once, as PyTorch's CUDA
reductions do.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from . import _shapes

aten = torch.ops.aten
prims = torch.ops.prims

DTYPES = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int64: "s64", torch.int32: "s32", torch.int8: "s8", torch.uint8: "u8",
    torch.bool: "pred",
}
FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class Unsupported(Exception):
    """A node the lowering cannot express; the message names the op and why."""


class Value:
    """An HLO value: its instruction name, static shape and dtype."""

    __slots__ = ("name", "shape", "dtype")

    def __init__(self, name: str, shape: Sequence[int], dtype: torch.dtype) -> None:
        self.name = name
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype


class Size(int):
    """A symbolic size's value in the binding a region is lowered at. A lowering that writes
    one into the text as a number (rather than a shape) makes the text hold for that binding
    only: the Emitter then says so (``Emitter.binding_specific``)."""


def static_meta(node: torch.fx.Node) -> Optional[Tuple[Tuple[int, ...], torch.dtype]]:
    """Returns the node's (shape, dtype) when it is one tensor of static shape, else None."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        shape = val.shape
        dtype = val.dtype
    else:
        tm = node.meta.get("tensor_meta")
        if tm is None or not hasattr(tm, "shape"):
            return None
        shape, dtype = tm.shape, tm.dtype
    if not all(isinstance(d, int) for d in shape):
        return None  # symbolic sizes: a dynamic shape
    return tuple(shape), dtype


# The symbolic scalars of PyTorch 2.x's dynamic shapes (1.13 has none).
_SYMBOLIC_SCALARS = tuple(getattr(torch, name) for name in ("SymInt", "SymFloat", "SymBool")
                          if hasattr(torch, name))


def is_size_arithmetic(node: torch.fx.Node) -> bool:
    """True when the node computes a symbolic size rather than a tensor: the ``sym_size`` calls
    and the Python arithmetic on them that graphs with dynamic shapes hold."""
    return isinstance(node.meta.get("val"), _SYMBOLIC_SCALARS)


def _shape_text(shape: Sequence[int], dtype: torch.dtype) -> str:
    return "%s[%s]" % (DTYPES[dtype], ",".join(str(d) for d in shape))


def _literal(value: Any, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype in FLOATS:
        v = float(value)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    return str(int(value))


class Emitter:
    """Builds the instructions of one HLO entry computation."""

    def __init__(self) -> None:
        self.lines: List[str] = []
        self.reducers: Dict[Tuple[str, torch.dtype], str] = {}
        self._count = 0
        # Why the text holds only at the sizes it was lowered at, beyond its shapes (a count
        # or a bound derived from a symbolic size); "" when it follows them.
        self.binding_specific = ""
        self.declared: List[Tuple[Tuple[int, ...], torch.dtype]] = []  # each parameter's

    def depends_on_sizes(self, why: str) -> None:
        """Notes that the text bakes in the value of a symbolic size."""
        self.binding_specific = self.binding_specific or why

    def emit(self, shape: Sequence[int], dtype: torch.dtype, op: str, operands: Sequence[Value],
             attrs: str = "") -> Value:
        """Appends ``name = shape op(operands), attrs`` and returns the new value."""
        self._count += 1
        name = "v%d" % self._count
        text = "  %s = %s %s(%s)" % (name, _shape_text(shape, dtype), op,
                                     ", ".join(o.name for o in operands))
        self.lines.append(text + (", " + attrs if attrs else ""))
        return Value(name, shape, dtype)

    def parameter(self, index: int, shape: Sequence[int], dtype: torch.dtype) -> Value:
        """Declares entry parameter ``index``."""
        self.declared.append((tuple(int(d) for d in shape), dtype))
        self._count += 1
        name = "p%d" % index
        self.lines.append("  %s = %s parameter(%d)" % (name, _shape_text(shape, dtype), index))
        return Value(name, shape, dtype)

    def constant(self, value: Any, dtype: torch.dtype, shape: Sequence[int] = ()) -> Value:
        """A scalar constant, broadcast to ``shape``."""
        scalar = self.emit((), dtype, "constant", [])
        # constant's literal goes inside the parentheses, which emit cannot express.
        self.lines[-1] = "  %s = %s constant(%s)" % (scalar.name, _shape_text((), dtype),
                                                     _literal(value, dtype))
        return self.broadcast_to(scalar, shape)

    def convert(self, v: Value, dtype: torch.dtype) -> Value:
        if v.dtype == dtype:
            return v
        return self.emit(v.shape, dtype, "convert", [v])

    def reshape(self, v: Value, shape: Sequence[int]) -> Value:
        shape = tuple(shape)
        if v.shape == shape:
            return v
        return self.emit(shape, v.dtype, "reshape", [v])

    def broadcast_to(self, v: Value, shape: Sequence[int]) -> Value:
        """NumPy broadcasting: trailing dimensions align, size-1 dimensions stretch."""
        shape = tuple(shape)
        if v.shape == shape:
            return v
        offset = len(shape) - len(v.shape)
        if offset < 0:
            raise Unsupported("cannot broadcast %s to %s" % (v.shape, shape))
        kept, kept_dims = [], []
        for i, d in enumerate(v.shape):
            target = shape[offset + i]
            if d == target:
                kept.append(d)
                kept_dims.append(offset + i)
            elif d != 1:
                raise Unsupported("cannot broadcast %s to %s" % (v.shape, shape))
        squeezed = self.reshape(v, kept)
        return self.emit(shape, v.dtype, "broadcast", [squeezed],
                         "dimensions={%s}" % ",".join(str(d) for d in kept_dims))

    def reducer(self, kind: str, dtype: torch.dtype) -> str:
        """The name of the scalar computation ``kind`` ("add", "maximum", "minimum")."""
        key = (kind, dtype)
        if key not in self.reducers:
            self.reducers[key] = "%s_%s" % (kind, DTYPES[dtype])
        return self.reducers[key]

    def reduce(self, v: Value, dims: Sequence[int], kind: str, init: Any) -> Value:
        dims = sorted({d % len(v.shape) for d in dims}) if v.shape else []
        out = tuple(d for i, d in enumerate(v.shape) if i not in dims)
        zero = self.constant(init, v.dtype)
        return self.emit(out, v.dtype, "reduce", [v, zero],
                         "dimensions={%s}, to_apply=%s" % (",".join(str(d) for d in dims),
                                                           self.reducer(kind, v.dtype)))

    def module(self, name: str, outputs: Sequence[Value]) -> str:
        """The whole module text, with ``outputs`` as the entry's (tuple) root."""
        parts = ["HloModule %s" % name, ""]
        for (kind, dtype), comp in sorted(self.reducers.items(), key=lambda kv: kv[1]):
            t = _shape_text((), dtype)
            parts += ["%s {" % comp, "  a = %s parameter(0)" % t, "  b = %s parameter(1)" % t,
                      "  ROOT r = %s %s(a, b)" % (t, kind), "}", ""]
        parts.append("ENTRY main {")
        parts += self.lines
        root = ", ".join(o.name for o in outputs)
        shapes = ", ".join(_shape_text(o.shape, o.dtype) for o in outputs)
        parts.append("  ROOT out = (%s) tuple(%s)" % (shapes, root))
        parts.append("}")
        return "\n".join(parts) + "\n"


# -- op lowerings --------------------------------------------------------------------------
# Each lowering takes (emitter, node, operand, out_shape, out_dtype), where operand(i) is the
# i-th argument lowered to a Value (python scalars stay scalars), and returns the node's Value.

Lowering = Callable[..., Value]
LOWERINGS: Dict[Any, Lowering] = {}


def _register(*targets: Any) -> Callable[[Lowering], Lowering]:
    def wrap(fn: Lowering) -> Lowering:
        for t in targets:
            if t is not None:
                LOWERINGS[t] = fn
        return fn
    return wrap


def _op(packet: Any, overload: str = "default") -> Any:
    """The ATen or prims overload, or None where this PyTorch lacks it."""
    return getattr(packet, overload, None) if packet is not None else None


def _maybe(namespace: Any, name: str) -> Any:
    try:
        return getattr(namespace, name)
    except (AttributeError, RuntimeError):
        return None


def _value(e: Emitter, x: Any, shape: Sequence[int], dtype: torch.dtype) -> Value:
    """An operand converted to ``dtype`` and broadcast to ``shape`` (scalars become
    constants)."""
    if isinstance(x, Value):
        return e.broadcast_to(e.convert(x, dtype), shape)
    if isinstance(x, Size):
        e.depends_on_sizes("a size used as a number")
    if isinstance(x, (bool, int, float)):
        return e.constant(x, dtype, shape)
    raise Unsupported("operand %r is neither a tensor nor a number" % (x,))


def _common_dtype(*xs: Any) -> torch.dtype:
    """PyTorch's promotion of the operands (tensors as dimensioned, numbers as scalars)."""
    probes = [torch.empty((1,), dtype=x.dtype) if isinstance(x, Value) else x for x in xs]
    result = probes[0]
    for p in probes[1:]:
        dtype = torch.result_type(result, p)
        result = torch.empty((1,), dtype=dtype)
    return result.dtype if isinstance(result, torch.Tensor) else torch.result_type(result, 0.0)


_UNARY = {
    "abs": "abs", "neg": "negate", "exp": "exponential", "log": "log", "log1p": "log-plus-one",
    "expm1": "exponential-minus-one", "tanh": "tanh", "sigmoid": "logistic", "sqrt": "sqrt",
    "rsqrt": "rsqrt", "erf": "erf", "sin": "sine", "cos": "cosine", "floor": "floor",
    "ceil": "ceil", "sign": "sign",
}


def _unary(hlo: str) -> Lowering:
    def lower(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
        return e.emit(shape, dtype, hlo, [_value(e, arg(0), shape, dtype)])
    return lower


for _name, _hlo in _UNARY.items():
    _register(_op(_maybe(aten, _name)), _op(_maybe(prims, _name)))(_unary(_hlo))


def _binary(hlo: str) -> Lowering:
    def lower(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
        a, b = arg(0), arg(1)
        alpha = node.kwargs.get("alpha", 1)
        vb = _value(e, b, shape, dtype)
        if alpha != 1:
            vb = e.emit(shape, dtype, "multiply", [vb, e.constant(alpha, dtype, shape)])
        return e.emit(shape, dtype, hlo, [_value(e, a, shape, dtype), vb])
    return lower


for _name, _hlo in (("add", "add"), ("sub", "subtract"), ("mul", "multiply"),
                    ("div", "divide"), ("maximum", "maximum"), ("minimum", "minimum"),
                    ("pow", "power"), ("atan2", "atan2")):
    packet = _maybe(aten, _name)
    for overload in ("Tensor", "Scalar", "Tensor_Scalar", "Tensor_Tensor", "default"):
        _register(_op(packet, overload))(_binary(_hlo))
    _register(_op(_maybe(prims, _name)))(_binary(_hlo))


@_register(_op(_maybe(aten, "rsub"), "Scalar"), _op(_maybe(aten, "rsub"), "Tensor"))
def _rsub(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    alpha = node.kwargs.get("alpha", 1)
    scaled = e.emit(shape, dtype, "multiply", [_value(e, arg(0), shape, dtype),
                                               e.constant(alpha, dtype, shape)])
    return e.emit(shape, dtype, "subtract", [_value(e, arg(1), shape, dtype), scaled])


@_register(_op(_maybe(aten, "reciprocal")))
def _reciprocal(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    return e.emit(shape, dtype, "divide", [e.constant(1, dtype, shape),
                                           _value(e, arg(0), shape, dtype)])


@_register(_op(_maybe(aten, "relu")))
def _relu(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    return e.emit(shape, dtype, "maximum", [_value(e, arg(0), shape, dtype),
                                            e.constant(0, dtype, shape)])


_DIRECTIONS = {"eq": "EQ", "ne": "NE", "lt": "LT", "le": "LE", "gt": "GT", "ge": "GE"}


def _compare(direction: str) -> Lowering:
    def lower(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
        a, b = arg(0), arg(1)
        common = _common_dtype(a, b)
        return e.emit(shape, torch.bool, "compare",
                      [_value(e, a, shape, common), _value(e, b, shape, common)],
                      "direction=" + direction)
    return lower


for _name, _dir in _DIRECTIONS.items():
    for overload in ("Tensor", "Scalar", "default"):
        _register(_op(_maybe(aten, _name), overload))(_compare(_dir))


@_register(_op(_maybe(aten, "where"), "self"), _op(_maybe(prims, "where")))
def _where(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    cond = _value(e, arg(0), shape, torch.bool)
    return e.emit(shape, dtype, "select", [cond, _value(e, arg(1), shape, dtype),
                                           _value(e, arg(2), shape, dtype)])


@_register(_op(_maybe(aten, "threshold_backward")))
def _threshold_backward(e: Emitter, node: Any, arg: Callable, shape: Any,
                        dtype: torch.dtype) -> Value:
    # grad where self > threshold, else 0: ReLU's backward.
    above = e.emit(shape, torch.bool, "compare",
                   [_value(e, arg(1), shape, dtype), e.constant(arg(2), dtype, shape)],
                   "direction=GT")
    return e.emit(shape, dtype, "select", [above, _value(e, arg(0), shape, dtype),
                                           e.constant(0, dtype, shape)])


@_register(_op(_maybe(aten, "clamp")), _op(_maybe(aten, "clamp_min")),
           _op(_maybe(aten, "clamp_max")), _op(_maybe(aten, "hardtanh")))
def _clamp(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    name = node.target.overloadpacket.__name__
    x = _value(e, arg(0), shape, dtype)
    if name == "clamp_min":
        lo, hi = arg(1), None
    elif name == "clamp_max":
        lo, hi = None, arg(1)
    elif name == "hardtanh":
        lo = arg(1) if len(node.args) > 1 else node.kwargs.get("min_val", -1.0)
        hi = arg(2) if len(node.args) > 2 else node.kwargs.get("max_val", 1.0)
    else:
        lo = arg(1) if len(node.args) > 1 else node.kwargs.get("min")
        hi = arg(2) if len(node.args) > 2 else node.kwargs.get("max")
    if lo is not None:
        x = e.emit(shape, dtype, "maximum", [x, _value(e, lo, shape, dtype)])
    if hi is not None:
        x = e.emit(shape, dtype, "minimum", [x, _value(e, hi, shape, dtype)])
    return x


@_register(_op(_maybe(aten, "clone")), _op(_maybe(aten, "alias")), _op(_maybe(aten, "detach")),
           _op(_maybe(aten, "lift_fresh_copy")), _op(_maybe(aten, "contiguous")))
def _identity(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    return _value(e, arg(0), shape, dtype)


@_register(_op(_maybe(aten, "_to_copy")), _op(_maybe(prims, "convert_element_type")),
           _op(_maybe(aten, "to"), "dtype"))
def _convert(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    x = arg(0)
    if not isinstance(x, Value):
        raise Unsupported("conversion of a number")
    return e.convert(x, dtype)


def _dims(node: Any, index: int, rank: int, name: str = "dim") -> List[int]:
    dims = node.args[index] if len(node.args) > index else node.kwargs.get(name)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % rank for d in dims}) if rank else []


def _reduction(kind: str, init: Callable[[torch.dtype], Any], mean: bool = False,
               dim_arg: int = 1) -> Lowering:
    def lower(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
        x = arg(0)
        dims = _dims(node, dim_arg, len(x.shape))
        accumulate = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
        if kind != "add":
            accumulate = dtype
        r = e.reduce(e.convert(x, accumulate), dims, kind, init(accumulate))
        if mean:
            _note_symbolic_count(e, node, dims, "mean")
            count = math.prod(x.shape[d] for d in dims)
            r = e.emit(r.shape, accumulate, "divide", [r, e.constant(count, accumulate, r.shape)])
        return e.reshape(e.convert(r, dtype), shape)  # keepdim puts back size-1 dimensions
    return lower


def _note_symbolic_count(e: Emitter, node: Any, dims: Sequence[int], what: str) -> None:
    """A mean or variance over a symbolic dimension divides by that size's value."""
    arg = node.args[0]
    meta = _shapes.symbolic_meta(arg) if isinstance(arg, torch.fx.Node) else None
    if meta is not None and any(not isinstance(meta[0][d], int) for d in dims):
        e.depends_on_sizes("a %s over a symbolic dimension" % what)


def _lowest(dtype: torch.dtype) -> Any:
    return -math.inf if dtype in FLOATS else torch.iinfo(dtype).min


def _highest(dtype: torch.dtype) -> Any:
    return math.inf if dtype in FLOATS else torch.iinfo(dtype).max


_register(_op(_maybe(aten, "sum"), "dim_IntList"), _op(_maybe(aten, "sum")),
          _op(_maybe(prims, "sum")))(_reduction("add", lambda t: 0))
_register(_op(_maybe(aten, "mean"), "dim"), _op(_maybe(aten, "mean")))(
    _reduction("add", lambda t: 0, mean=True))
_register(_op(_maybe(aten, "amax")), _op(_maybe(prims, "amax")))(_reduction("maximum", _lowest))
_register(_op(_maybe(aten, "amin")), _op(_maybe(prims, "amin")))(_reduction("minimum", _highest))


@_register(_op(_maybe(prims, "var")))
def _var(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    # sum((x - mean)^2) / (n - correction), in two passes as PyTorch computes it.
    x = arg(0)
    dims = _dims(node, 1, len(x.shape))
    correction = node.kwargs.get("correction", node.args[2] if len(node.args) > 2 else 0)
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    xv = e.convert(x, acc)
    _note_symbolic_count(e, node, dims, "variance")
    n = math.prod(x.shape[d] for d in dims)
    kept = tuple(d for i, d in enumerate(x.shape) if i not in dims)
    total = e.reduce(xv, dims, "add", 0)
    mean = e.emit(kept, acc, "divide", [total, e.constant(n, acc, kept)])
    kept_dims = [i for i in range(len(x.shape)) if i not in dims]
    mean_b = e.emit(x.shape, acc, "broadcast", [mean],
                    "dimensions={%s}" % ",".join(str(d) for d in kept_dims))
    centered = e.emit(x.shape, acc, "subtract", [xv, mean_b])
    square = e.emit(x.shape, acc, "multiply", [centered, centered])
    ss = e.reduce(square, dims, "add", 0)
    var = e.emit(kept, acc, "divide", [ss, e.constant(max(n - correction, 0), acc, kept)])
    return e.reshape(e.convert(var, dtype), shape)


@_register(_op(_maybe(aten, "view")), _op(_maybe(aten, "_unsafe_view")),
           _op(_maybe(aten, "reshape")), _op(_maybe(prims, "reshape")),
           _op(_maybe(aten, "unsqueeze")), _op(_maybe(aten, "squeeze"), "dim"),
           _op(_maybe(aten, "squeeze")), _op(_maybe(prims, "squeeze")),
           _op(_maybe(aten, "squeeze"), "dims"), _op(_maybe(aten, "_reshape_alias")))
def _reshape(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    return e.reshape(_value(e, arg(0), arg(0).shape, dtype), shape)


@_register(_op(_maybe(aten, "transpose"), "int"), _op(_maybe(aten, "permute")),
           _op(_maybe(aten, "t")), _op(_maybe(prims, "transpose")))
def _transpose(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    x = arg(0)
    rank = len(x.shape)
    name = node.target.overloadpacket.__name__
    if name == "permute" or str(node.target).startswith("prims."):
        perm = [d % rank for d in node.args[1]]
    else:
        d0, d1 = (node.args[1], node.args[2]) if len(node.args) > 2 else (0, 1)
        perm = list(range(rank))
        if rank >= 2:
            perm[d0 % rank], perm[d1 % rank] = perm[d1 % rank], perm[d0 % rank]
    if perm == list(range(rank)):
        return x
    return e.emit(shape, dtype, "transpose", [x],
                  "dimensions={%s}" % ",".join(str(d) for d in perm))


@_register(_op(_maybe(aten, "expand")), _op(_maybe(aten, "expand_as")))
def _expand(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    return e.broadcast_to(arg(0), shape)


@_register(_op(_maybe(prims, "broadcast_in_dim")))
def _broadcast_in_dim(e: Emitter, node: Any, arg: Callable, shape: Any,
                      dtype: torch.dtype) -> Value:
    x = arg(0)
    dims = list(node.args[2])
    # broadcast_in_dim may also stretch size-1 operand dimensions: drop those first.
    kept = [i for i, d in enumerate(x.shape) if d == shape[dims[i]]]
    squeezed = e.reshape(x, [x.shape[i] for i in kept])
    return e.emit(shape, dtype, "broadcast", [squeezed],
                  "dimensions={%s}" % ",".join(str(dims[i]) for i in kept))


@_register(_op(_maybe(aten, "full")), _op(_maybe(aten, "full_like")),
           _op(_maybe(aten, "zeros_like")), _op(_maybe(aten, "ones_like")),
           _op(_maybe(aten, "scalar_tensor")), _op(_maybe(aten, "zeros")),
           _op(_maybe(aten, "ones")))
def _fill(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    name = node.target.overloadpacket.__name__
    if name in ("zeros_like", "zeros"):
        value = 0
    elif name in ("ones_like", "ones"):
        value = 1
    elif name == "scalar_tensor":
        value = node.args[0]
    else:
        value = node.args[1]
    if not isinstance(value, (bool, int, float)):
        raise Unsupported("fill value %r" % (value,))
    return e.constant(value, dtype, shape)


def _index_arg(e: Emitter, node: Any, arg: Callable, i: int, default: int) -> int:
    """Argument ``i`` of a slice as an int (``default`` when absent or None)."""
    if len(node.args) <= i or node.args[i] is None:
        return default
    value = arg(i)
    if isinstance(value, Size):
        e.depends_on_sizes("a slice bound from a symbolic size")
    if isinstance(value, bool) or not isinstance(value, int):
        raise Unsupported("slice bound %r" % (value,))
    return int(value)


def _note_symbolic_dim(e: Emitter, value: Any, dim: int, what: str) -> None:
    """A slice or its gradient along a symbolic dimension computes its bounds from its size."""
    meta = _shapes.symbolic_meta(value) if isinstance(value, torch.fx.Node) else None
    if meta is not None and not isinstance(meta[0][dim], int):
        e.depends_on_sizes("a %s of a symbolic dimension" % what)


@_register(_op(_maybe(aten, "slice"), "Tensor"))
def _slice(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    x = arg(0)
    dim = (node.args[1] if len(node.args) > 1 else 0) % len(x.shape)
    _note_symbolic_dim(e, node.args[0], dim, "slice")
    size = x.shape[dim]
    start = _index_arg(e, node, arg, 2, 0)
    end = _index_arg(e, node, arg, 3, size)
    step = _index_arg(e, node, arg, 4, 1)
    start = max(0, min(size, start + size if start < 0 else start))
    end = max(start, min(size, end + size if end < 0 else end))
    spec = ",".join("[%d:%d:%d]" % ((start, end, step) if i == dim else (0, d, 1))
                    for i, d in enumerate(x.shape))
    return e.emit(shape, dtype, "slice", [x], "slice={%s}" % spec)


@_register(_op(_maybe(aten, "slice_backward")))
def _slice_backward(e: Emitter, node: Any, arg: Callable, shape: Any,
                    dtype: torch.dtype) -> Value:
    # The gradient of a slice: the slice's gradient padded with zeros back to the input's size.
    grad = arg(0)
    dim = node.args[2] % len(shape)
    _note_symbolic_dim(e, node, dim, "slice gradient")
    start, step = _index_arg(e, node, arg, 3, 0), _index_arg(e, node, arg, 5, 1)
    size = shape[dim]
    start = max(0, min(size, start + size if start < 0 else start))
    taken = grad.shape[dim]
    config = []
    for i, d in enumerate(shape):
        if i != dim:
            config.append("0_0")
        else:
            high = size - start - ((taken - 1) * step + 1) if taken else size - start
            config.append("%d_%d_%d" % (start, high, step - 1))
    return e.emit(shape, dtype, "pad", [e.convert(grad, dtype), e.constant(0, dtype)],
                  "padding=%s" % "x".join(config))


@_register(_op(_maybe(aten, "cat")))
def _cat(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    parts = [p for p in arg(0) if p.shape and 0 not in p.shape]
    dim = (node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)) % len(shape)
    parts = [e.convert(p, dtype) for p in parts]
    return e.emit(shape, dtype, "concatenate", parts, "dimensions={%d}" % dim)


# -- the region -----------------------------------------------------------------------------

def lowering_for(node: torch.fx.Node) -> Optional[Lowering]:
    """The lowering of a call_function node, or None when the op is not in the list."""
    if node.op != "call_function":
        return None
    return LOWERINGS.get(node.target)


def op_name(node: torch.fx.Node) -> str:
    """The op's name as users read it: ``aten.cumsum.default``."""
    target = node.target
    if isinstance(target, str):
        return target
    return str(target) if hasattr(target, "_schema") else getattr(target, "__name__", str(target))


@dataclasses.dataclass(frozen=True)
class Lowered:
    """One region as HLO at one binding of its sizes.

    Attributes:
        hlo: the module text; parameters are the region's tensor inputs in order.
        inputs: (shape, dtype) of each parameter, as declared (an input split for an outer
            extent is declared ``[extent, k, ...]``: the executor views it so).
        outputs: (shape, dtype) of each output, in order.
        binding_specific: why the text holds at this binding only, beyond its shapes (see
            Emitter); "" when every binding of the same shapes gives the same text.
    """

    hlo: str
    inputs: Tuple[Tuple[Tuple[int, ...], torch.dtype], ...]
    outputs: Tuple[Tuple[Tuple[int, ...], torch.dtype], ...]
    binding_specific: str = ""


def concrete_meta(node: torch.fx.Node, binding: Optional[Mapping[Any, int]] = None
                  ) -> Optional[Tuple[Tuple[int, ...], torch.dtype]]:
    """The node's (shape, dtype) when it is one tensor, its symbolic sizes evaluated at
    ``binding``; None for a non-tensor, or for symbolic sizes without a binding."""
    if binding is None:
        return static_meta(node)
    meta = _shapes.symbolic_meta(node)
    if meta is None:
        return None
    try:
        return tuple(_shapes.evaluate(d, binding) for d in meta[0]), meta[1]
    except KeyError:
        return None


def lower_region(graph_module: torch.fx.GraphModule, name: str,
                 binding: Optional[Mapping[Any, int]] = None,
                 splits: Optional[Mapping[int, int]] = None) -> Lowered:
    """Returns the HLO module of a fused region at ``binding`` (None for a region of static
    shapes): its tensor placeholders are parameters in order, its size placeholders the
    binding's values, its outputs the root tuple's elements in order. ``splits`` maps a
    parameter to k: it is declared with dimension 0 split into (d/k, k) and reshaped back (the
    same bytes), so that its dimension 0 is an outer extent (``_shapes.OuterRule``). Raises
    Unsupported naming the first node it cannot express."""
    e = Emitter()
    values: Dict[torch.fx.Node, Any] = {}
    inputs: List[Tuple[Tuple[int, ...], torch.dtype]] = []
    outputs: List[Value] = []
    for node in graph_module.graph.nodes:
        if node.op == "placeholder":
            k = len(inputs)
            values[node] = _lower_input(e, node, binding, k, (splits or {}).get(k, 1))
            if isinstance(values[node], Value):
                inputs.append(e.declared[-1])
        elif node.op == "call_function":
            values[node] = _lower_node(e, node, values, binding)
        elif node.op == "output":
            result = node.args[0]
            items = result if isinstance(result, (list, tuple)) else [result]
            for item in items:
                v = values.get(item)
                if not isinstance(v, Value):
                    raise Unsupported("output %s is not a tensor of the region" % (item,))
                outputs.append(v)
        else:
            raise Unsupported("%s node %s" % (node.op, node.name))
    return Lowered(e.module(name, outputs), tuple(inputs),
                   tuple((o.shape, o.dtype) for o in outputs), e.binding_specific)


def _lower_input(e: Emitter, node: torch.fx.Node, binding: Optional[Mapping[Any, int]],
                 index: int, split: int = 1) -> Any:
    """A placeholder: parameter ``index`` for a tensor (declared with dimension 0 split by
    ``split``), the Size it is bound to for a size."""
    scalar = _shapes.symbolic_scalar(node) if binding is not None else None
    if scalar is not None:
        try:
            return Size(_shapes.evaluate(scalar, binding))
        except KeyError as err:
            raise Unsupported("input %s: %s" % (node.name, err))
    meta = concrete_meta(node, binding)
    if meta is None:
        raise Unsupported("input %s has no static shape" % node.name)
    if meta[1] not in DTYPES:
        raise Unsupported("input %s has dtype %s" % (node.name, meta[1]))
    shape, dtype = meta
    if split > 1:
        if not shape or shape[0] % split:
            raise Unsupported("input %s %s: dimension 0 is not a multiple of %d"
                              % (node.name, shape, split))
        declared = (shape[0] // split, split) + tuple(shape[1:])
        return e.reshape(e.parameter(index, declared, dtype), shape)
    return e.parameter(index, shape, dtype)


def _lower_node(e: Emitter, node: torch.fx.Node, values: Dict[torch.fx.Node, Any],
                binding: Optional[Mapping[Any, int]] = None) -> Value:
    lower = lowering_for(node)
    if lower is None:
        raise Unsupported("unsupported op %s" % op_name(node))
    meta = concrete_meta(node, binding)
    if meta is None:
        raise Unsupported("%s (%s) has no static shape" % (node.name, op_name(node)))
    shape, dtype = meta
    if dtype not in DTYPES:
        raise Unsupported("%s (%s) has dtype %s" % (node.name, op_name(node), dtype))

    def operand(i: int) -> Any:
        a = node.args[i]
        if isinstance(a, (list, tuple)):
            return [values[x] if isinstance(x, torch.fx.Node) else x for x in a]
        return values[a] if isinstance(a, torch.fx.Node) else a

    return lower(e, node, operand, shape, dtype)
