"""Lowering of an ATen FX region to one HLO module: the signature stitchd compiles.

The regions come from AOTAutograd graphs after the decompositions in ``DECOMPOSITIONS``, so
they hold ATen core ops and a few prims. ``LOWERINGS`` is the one list of the ops a region
may hold: the partitioner asks it what is supported, and the lowering emits from it, so the
two cannot disagree. Every value carries the shape and dtype that shape propagation put on its
node (``meta["val"]`` in PyTorch 2.x, ``meta["tensor_meta"]`` in 1.13); symbolic sizes are
lowered at one binding of their symbols (``_shapes``), so the text always has exact shapes.

Arithmetic runs in the node's own result dtype, as PyTorch's type promotion makes it; sums,
means and variances of 16-bit floats accumulate in f32 and round once, as PyTorch's CUDA
reductions do. Ops with several results (var_mean, native_group_norm and its backward) lower
to a tuple of values that the region's getitems take apart. An op lowered in some of its
forms only says which (``FORMS``), so that the partitioner leaves the others to PyTorch.
"""

from __future__ import annotations

import dataclasses
import math
import operator
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
# An op with several results (var_mean, native_group_norm) gets a tuple of shapes and one of
# dtypes (None for a result PyTorch does not compute) and returns a tuple of Values, which the
# region's getitem nodes take apart.

Lowering = Callable[..., Value]
LOWERINGS: Dict[Any, Lowering] = {}


# For an op lowered in some of its forms only: node -> why this one is not, or None. The
# partitioner asks (``unsupported_form``), so that such a node stays PyTorch's, with its reason,
# while the region around it is stitched.
FORMS: Dict[Any, Callable[[torch.fx.Node], Optional[str]]] = {}


def _register(*targets: Any, form: Optional[Callable[[torch.fx.Node], Optional[str]]] = None
              ) -> Callable[[Lowering], Lowering]:
    def wrap(fn: Lowering) -> Lowering:
        for t in targets:
            if t is not None:
                LOWERINGS[t] = fn
                if form is not None:
                    FORMS[t] = form
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


def _accumulation(dtype: torch.dtype) -> torch.dtype:
    """The dtype sums and statistics of ``dtype`` accumulate in: f32 for 16-bit floats."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _variance(e: Emitter, x: Value, dims: Sequence[int], correction: Any
              ) -> Tuple[Value, Value]:
    """(variance, mean) of ``x`` (already in its accumulation dtype) over ``dims``, with the
    reduced dimensions dropped: sum((x - mean)^2) / max(n - correction, 0), in two passes as
    PyTorch's reference computes it (n - correction <= 0 divides by zero: inf, or nan for a
    zero sum, as PyTorch gives)."""
    acc = x.dtype
    n = math.prod(x.shape[d] for d in dims)
    kept = tuple(d for i, d in enumerate(x.shape) if i not in dims)
    total = e.reduce(x, dims, "add", 0)
    mean = e.emit(kept, acc, "divide", [total, e.constant(n, acc, kept)])
    kept_dims = [i for i in range(len(x.shape)) if i not in dims]
    mean_b = e.emit(x.shape, acc, "broadcast", [mean],
                    "dimensions={%s}" % ",".join(str(d) for d in kept_dims))
    centered = e.emit(x.shape, acc, "subtract", [x, mean_b])
    square = e.emit(x.shape, acc, "multiply", [centered, centered])
    ss = e.reduce(square, dims, "add", 0)
    var = e.emit(kept, acc, "divide", [ss, e.constant(max(n - correction, 0), acc, kept)])
    return var, mean


def _correction(node: Any) -> Any:
    """The correction of a variance node, as each overload defines it: ``correction`` (absent
    or None means 1) for ``.correction`` and prims.var, ``unbiased`` (True means 1) for
    ``.dim`` and ``.default``."""
    overload = node.target._overloadname if hasattr(node.target, "_overloadname") else ""
    if str(node.target).startswith("prims."):
        value = node.args[2] if len(node.args) > 2 else node.kwargs.get("correction", 1)
        return 1 if value is None else value
    if overload in ("correction", "correction_names"):
        value = node.kwargs.get("correction")
        return 1 if value is None else value
    # aten.var.default(self, unbiased=True), aten.var.dim(self, dim, unbiased=True, keepdim)
    index = 1 if overload == "default" else 2
    unbiased = node.args[index] if len(node.args) > index else node.kwargs.get("unbiased", True)
    return 1 if (unbiased is None or unbiased) else 0


def _variance_dims(node: Any, rank: int) -> List[int]:
    """The reduced dimensions of a variance node: all for ``.default`` (which has no dim)."""
    if getattr(node.target, "_overloadname", "") == "default" and \
            not str(node.target).startswith("prims."):
        return list(range(rank))
    return _dims(node, 1, rank)


@_register(_op(_maybe(prims, "var")), _op(_maybe(aten, "var")),
           _op(_maybe(aten, "var"), "dim"), _op(_maybe(aten, "var"), "correction"))
def _var(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    # keepdim needs no argument here: the node's shape has its size-1 dimensions.
    x = arg(0)
    dims = _variance_dims(node, len(x.shape))
    _note_symbolic_count(e, node, dims, "variance")
    var, _ = _variance(e, e.convert(x, _accumulation(dtype)), dims, _correction(node))
    return e.reshape(e.convert(var, dtype), shape)


@_register(_op(_maybe(aten, "var_mean")), _op(_maybe(aten, "var_mean"), "dim"),
           _op(_maybe(aten, "var_mean"), "correction"))
def _var_mean(e: Emitter, node: Any, arg: Callable, shapes: Any, dtypes: Any) -> Tuple:
    # Two results, (variance, mean), of the same shape and dtype.
    x = arg(0)
    dims = _variance_dims(node, len(x.shape))
    _note_symbolic_count(e, node, dims, "variance")
    shape, dtype = _result_meta(node, shapes, dtypes, 0, 1)
    var, mean = _variance(e, e.convert(x, _accumulation(dtype)), dims, _correction(node))
    return tuple(e.reshape(e.convert(v, dtype), shape) for v in (var, mean))


def _result_meta(node: Any, shapes: Sequence[Any], dtypes: Sequence[Any], *indices: int
                 ) -> Tuple[Tuple[int, ...], torch.dtype]:
    """The (shape, dtype) that results ``indices`` of a node with several results share."""
    metas = {(tuple(shapes[i]), dtypes[i]) for i in indices if shapes[i] is not None}
    if len(metas) != 1:
        raise Unsupported("%s: results %s have shapes and dtypes %s" % (
            op_name(node), list(indices), sorted(str(m) for m in metas)))
    return next(iter(metas))


#: The ops that give their one tensor operand another shape, its elements in the same logical
#: order, whatever its strides: a view of a tensor stored in any order reads the same values.
RESHAPES = tuple(op for op in (
    _op(_maybe(aten, "view")), _op(_maybe(aten, "_unsafe_view")), _op(_maybe(aten, "reshape")),
    _op(_maybe(prims, "reshape")), _op(_maybe(aten, "unsqueeze")),
    _op(_maybe(aten, "squeeze"), "dim"), _op(_maybe(aten, "squeeze")),
    _op(_maybe(prims, "squeeze")), _op(_maybe(aten, "squeeze"), "dims")) if op is not None)


# _reshape_alias names the view's strides, which hold for a row-major operand only.
@_register(*RESHAPES, _op(_maybe(aten, "_reshape_alias")))
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
           _op(_maybe(aten, "ones")), _op(_maybe(aten, "fill"), "Scalar"),
           _op(_maybe(aten, "empty_like")))
def _fill(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    name = node.target.overloadpacket.__name__
    if name in ("zeros_like", "zeros", "empty_like"):  # empty_like's values are any values
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


@_register(operator.getitem)
def _getitem(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    # One result of an op with several (var_mean, native_group_norm): the region lowered
    # that op to a tuple of Values.
    results, index = arg(0), node.args[1]
    if not isinstance(results, tuple) or not isinstance(index, int) or \
            not -len(results) <= index < len(results):
        raise Unsupported("%s: element %r of %s" % (node.name, index, node.args[0]))
    v = results[index]
    if not isinstance(v, Value):
        raise Unsupported("%s: element %d of %s was not computed" % (node.name, index,
                                                                      node.args[0]))
    return e.reshape(e.convert(v, dtype), shape)


def _group_norm_shapes(x: Value, group: Any) -> Tuple[int, int, int, int]:
    """(N, C, HxW, C / group) of a group norm's (N, C, *) input."""
    if len(x.shape) < 2 or isinstance(group, bool) or not isinstance(group, int) or \
            group <= 0 or x.shape[1] % group:
        raise Unsupported("group norm of %s in %r groups" % (x.shape, group))
    n, c = x.shape[0], x.shape[1]
    hw = math.prod(x.shape[2:])
    if n * c * hw == 0:
        raise Unsupported("group norm of an empty tensor %s" % (x.shape,))
    return n, c, hw, c // group


def _channels(e: Emitter, v: Any, acc: torch.dtype, c: int) -> Optional[Value]:
    """A group norm's (C,) weight or bias in ``acc``; None stays None."""
    if v is None:
        return None
    if not isinstance(v, Value) or math.prod(v.shape) != c:
        raise Unsupported("group norm weight or bias %r for %d channels" % (
            v.shape if isinstance(v, Value) else v, c))
    return e.reshape(e.convert(v, acc), (c,))


@_register(_op(_maybe(aten, "native_group_norm")))
def _native_group_norm(e: Emitter, node: Any, arg: Callable, shapes: Any, dtypes: Any
                       ) -> Tuple:
    # (input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean, rstd), mean and rstd
    # (N, group). As ATen's kernels compute it, in f32 for 16-bit floats: the group's mean and
    # biased variance, rstd = rsqrt(var + eps), then out = x * a + b per (sample, channel),
    # with a = rstd * weight and b = bias - mean * a.
    x, weight, bias = arg(0), arg(1), arg(2)
    group, eps = node.args[6], node.args[7]
    if not isinstance(x, Value):
        raise Unsupported("group norm of %r" % (x,))
    if not isinstance(eps, (int, float)) or isinstance(eps, bool):
        raise Unsupported("group norm eps %r" % (eps,))
    n, c, hw, cpg = _group_norm_shapes(x, group)
    acc = _accumulation(x.dtype)
    xa = e.convert(x, acc)
    grouped = e.reshape(xa, (n, group, cpg * hw))
    var, mean = _variance(e, grouped, [2], 0)
    rstd = e.emit((n, group), acc, "rsqrt",
                  [e.emit((n, group), acc, "add", [var, e.constant(eps, acc, (n, group))])])
    nc = (n, group, cpg)

    def per_group(v: Value) -> Value:  # (N, group) to (N, group, C / group)
        return e.emit(nc, acc, "broadcast", [v], "dimensions={0,1}")

    def per_channel(v: Value) -> Value:  # (C,) to (N, group, C / group)
        return e.emit(nc, acc, "broadcast", [e.reshape(v, (group, cpg))], "dimensions={1,2}")

    a = per_group(rstd)
    w, bias = _channels(e, weight, acc, c), _channels(e, bias, acc, c)
    if w is not None:
        a = e.emit(nc, acc, "multiply", [a, per_channel(w)])
    b = e.emit(nc, acc, "negate", [e.emit(nc, acc, "multiply", [per_group(mean), a])])
    if bias is not None:
        b = e.emit(nc, acc, "add", [b, per_channel(bias)])
    full = (n, c, hw)
    a_full = e.emit(full, acc, "broadcast", [e.reshape(a, (n, c))], "dimensions={0,1}")
    b_full = e.emit(full, acc, "broadcast", [e.reshape(b, (n, c))], "dimensions={0,1}")
    y = e.emit(full, acc, "add", [e.emit(full, acc, "multiply", [e.reshape(xa, full), a_full]),
                                  b_full])
    results = []
    for v, shape, dtype in zip((y, mean, rstd), shapes, dtypes):
        results.append(None if shape is None else e.reshape(e.convert(v, dtype), shape))
    return tuple(results)


@_register(_op(_maybe(aten, "native_group_norm_backward")))
def _native_group_norm_backward(e: Emitter, node: Any, arg: Callable, shapes: Any,
                                dtypes: Any) -> Tuple:
    # (grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask) -> (grad_input,
    # grad_weight, grad_bias), each computed only where output_mask asks; PyTorch's own
    # decomposition of it (torch._decomp), in f32 for 16-bit floats.
    grad, x, mean, rstd, gamma = (arg(i) for i in range(5))
    group, mask = node.args[8], list(node.args[9])
    for v in (grad, x, mean, rstd):
        if not isinstance(v, Value):
            raise Unsupported("group norm gradient of %r" % (v,))
    n, c, hw, cpg = _group_norm_shapes(x, group)
    if grad.shape != x.shape or math.prod(mean.shape) != n * group or \
            math.prod(rstd.shape) != n * group:
        raise Unsupported("group norm gradient of %s, %s, statistics %s and %s" % (
            grad.shape, x.shape, mean.shape, rstd.shape))
    acc = _accumulation(x.dtype)
    full, ng, nc, ngc = (n, c, hw), (n, group), (n, c), (n, group, cpg)
    dy = e.reshape(e.convert(grad, acc), full)
    xa = e.reshape(e.convert(x, acc), full)
    mu = e.reshape(e.convert(mean, acc), ng)
    rs = e.reshape(e.convert(rstd, acc), ng)
    ds = e.reduce(e.emit(full, acc, "multiply", [dy, xa]), [2], "add", 0)  # (N, C)
    db = e.reduce(dy, [2], "add", 0)
    w = _channels(e, gamma, acc, c)
    results: List[Optional[Value]] = [None, None, None]

    def mul(a: Value, b: Value) -> Value:
        return e.emit(a.shape, acc, "multiply", [a, b])

    def by_group(v: Value) -> Value:  # (N, group) to (N, group, C / group)
        return e.emit(ngc, acc, "broadcast", [v], "dimensions={0,1}")

    if mask[0] and shapes[0] is not None:
        s = 1.0 / (hw * cpg)
        ds_w, db_w = ds, db
        if w is not None:
            wb = e.emit(nc, acc, "broadcast", [w], "dimensions={1}")
            ds_w, db_w = mul(ds, wb), mul(db, wb)
        ds_val = e.reduce(e.reshape(ds_w, ngc), [2], "add", 0)  # (N, group)
        db_val = e.reduce(e.reshape(db_w, ngc), [2], "add", 0)
        c1 = by_group(rs)  # (N, group, C / group)
        if w is not None:
            c1 = mul(c1, e.emit(ngc, acc, "broadcast", [e.reshape(w, (group, cpg))],
                                "dimensions={1,2}"))
        c2 = e.emit(ng, acc, "subtract", [mul(db_val, mu), ds_val])
        c2 = mul(mul(mul(mul(c2, rs), rs), rs), e.constant(s, acc, ng))
        c3 = e.emit(ng, acc, "subtract", [
            mul(e.emit(ng, acc, "negate", [c2]), mu),
            mul(mul(db_val, rs), e.constant(s, acc, ng))])
        g4 = (n, group, cpg, hw)

        def spread(v: Value, dims: str) -> Value:
            return e.emit(g4, acc, "broadcast", [v], "dimensions={%s}" % dims)

        d = e.emit(g4, acc, "add", [
            e.emit(g4, acc, "add", [mul(e.reshape(dy, g4), spread(c1, "0,1,2")),
                                    mul(e.reshape(xa, g4), spread(c2, "0,1"))]),
            spread(c3, "0,1")])
        results[0] = e.reshape(e.convert(d, dtypes[0]), shapes[0])
    if mask[1] and shapes[1] is not None:
        centered = e.emit(ngc, acc, "subtract", [e.reshape(ds, ngc),
                                                 mul(e.reshape(db, ngc), by_group(mu))])
        dg = e.reduce(mul(centered, by_group(rs)), [0], "add", 0)  # (group, C / group)
        results[1] = e.reshape(e.convert(dg, dtypes[1]), shapes[1])
    if mask[2] and shapes[2] is not None:
        results[2] = e.reshape(e.convert(e.reduce(db, [0], "add", 0), dtypes[2]), shapes[2])
    return tuple(results)


def _dim_index(e: Emitter, node: Any, arg: Callable, shape: Sequence[int], dim_at: int,
               index_at: int) -> Tuple[int, int]:
    """(dim, index) of a select or its gradient on a tensor of ``shape``, both made
    non-negative as PyTorch does; an index out of range is not lowered."""
    rank = len(shape)
    dim = node.args[dim_at]
    if isinstance(dim, bool) or not isinstance(dim, int) or not -rank <= dim < rank:
        raise Unsupported("%s: dimension %r of a %d-d tensor" % (op_name(node), dim, rank))
    dim %= rank
    index = arg(index_at)
    if isinstance(index, Size):
        e.depends_on_sizes("a select index from a symbolic size")
    if isinstance(index, bool) or not isinstance(index, int):
        raise Unsupported("%s: index %r" % (op_name(node), index))
    size = shape[dim]
    if not -size <= index < size:
        raise Unsupported("%s: index %d out of range for size %d" % (op_name(node), index, size))
    return dim, index % size


@_register(_op(_maybe(aten, "select"), "int"))
def _select(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    # x[..., index, ...]: a slice of width one along dim, then the dimension dropped.
    x = arg(0)
    dim, index = _dim_index(e, node, arg, x.shape, 1, 2)
    _note_symbolic_dim(e, node.args[0], dim, "select")
    spec = ",".join("[%d:%d:1]" % ((index, index + 1) if i == dim else (0, d))
                    for i, d in enumerate(x.shape))
    kept = tuple(1 if i == dim else d for i, d in enumerate(x.shape))
    return e.reshape(e.emit(kept, x.dtype, "slice", [x], "slice={%s}" % spec), shape)


def _placed(e: Emitter, src: Value, shape: Sequence[int], dim: int, index: int,
            dtype: torch.dtype) -> Value:
    """``src`` (``shape`` without ``dim``) at ``index`` of dimension ``dim``, zeros around."""
    one = tuple(1 if i == dim else d for i, d in enumerate(shape))
    config = "x".join("%d_%d" % ((index, shape[dim] - index - 1) if i == dim else (0, 0))
                      for i in range(len(shape)))
    return e.emit(shape, dtype, "pad", [e.reshape(e.convert(src, dtype), one),
                                        e.constant(0, dtype)], "padding=" + config)


@_register(_op(_maybe(aten, "select_backward")))
def _select_backward(e: Emitter, node: Any, arg: Callable, shape: Any,
                     dtype: torch.dtype) -> Value:
    # (grad, input_sizes, dim, index): the gradient of a select, zeros elsewhere.
    grad = arg(0)
    dim, index = _dim_index(e, node, arg, shape, 2, 3)
    _note_symbolic_dim(e, node, dim, "select gradient")
    return _placed(e, grad, shape, dim, index, dtype)


@_register(_op(_maybe(aten, "select_scatter")))
def _select_scatter(e: Emitter, node: Any, arg: Callable, shape: Any,
                    dtype: torch.dtype) -> Value:
    # (base, src, dim, index): base with its slice at index replaced by src.
    base, src = arg(0), arg(1)
    dim, index = _dim_index(e, node, arg, shape, 2, 3)
    _note_symbolic_dim(e, node, dim, "select_scatter")
    base = _value(e, base, shape, dtype)
    placed = _placed(e, _value(e, src, tuple(d for i, d in enumerate(shape) if i != dim),
                               dtype), shape, dim, index, dtype)
    position = e.emit(shape, torch.int64, "iota", [], "iota_dimension=%d" % dim)
    at = e.emit(shape, torch.bool, "compare", [position, e.constant(index, torch.int64, shape)],
                "direction=EQ")
    return e.emit(shape, dtype, "select", [at, placed, base])


def _layout(node: Any) -> Optional[Tuple[Tuple[int, ...], Tuple[int, ...], int]]:
    """(shape, strides, storage offset) of a node's tensor as eager PyTorch lays it out, from
    its traced value; None where they are unknown or symbolic."""
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return None
    try:
        layout = (tuple(val.shape), tuple(val.stride()), val.storage_offset())
    except Exception:  # a tensor without strides
        return None
    if not all(isinstance(d, int) for d in layout[0] + layout[1] + (layout[2],)):
        return None
    return layout


def _row_major(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """True when ``strides`` are those of a dense row-major tensor of ``shape`` (size-1
    dimensions may have any stride)."""
    expected = 1
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1 and s != expected:
            return False
        expected *= d
    return True


def _as_strided_args(node: torch.fx.Node) -> Any:
    """(flat start, size) of an as_strided that reads a row-major run of its input's elements,
    or why it does not."""
    args = list(node.args) + [None] * 4
    size, stride = args[1], args[2]
    offset = args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in list(size) + list(stride)):
        return "as_strided to sizes %s, strides %s" % (size, stride)
    if not _row_major(size, stride):
        return "as_strided to strides %s, not row-major for %s" % (tuple(stride), tuple(size))
    layout = _layout(args[0])
    if layout is None:
        return "as_strided of a tensor whose layout is unknown or symbolic"
    shape, strides, base = layout
    if not _row_major(shape, strides):
        return "as_strided of a tensor with strides %s, not row-major" % (strides,)
    start = (base if offset is None else offset) - base
    if not isinstance(start, int) or start < 0 or start + math.prod(size) > math.prod(shape):
        return "as_strided at offset %r outside its input" % (offset,)
    return start, tuple(size)


def _as_strided_form(node: torch.fx.Node) -> Optional[str]:
    found = _as_strided_args(node)
    return found if isinstance(found, str) else None


@_register(_op(_maybe(aten, "as_strided")), form=_as_strided_form)
def _as_strided(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    # Only as a reshape: a row-major view of a run of the row-major input's elements (as
    # Inductor's GroupNorm decomposition takes its (N, C) scales on the CPU).
    found = _as_strided_args(node)
    if isinstance(found, str):
        raise Unsupported(found)
    start, size = found
    x = arg(0)
    n = math.prod(x.shape)
    flat = e.reshape(x, (n,))
    if start or start + math.prod(size) != n:
        flat = e.emit((math.prod(size),), x.dtype, "slice", [flat],
                      "slice={[%d:%d:1]}" % (start, start + math.prod(size)))
    return e.reshape(e.convert(flat, dtype), shape)


def _number(e: Emitter, node: Any, x: Any, what: str) -> Any:
    if isinstance(x, Size):
        e.depends_on_sizes("an arange %s from a symbolic size" % what)
    if isinstance(x, bool) or not isinstance(x, (int, float)) or \
            (isinstance(x, float) and not math.isfinite(x)):
        raise Unsupported("%s: %s %r" % (op_name(node), what, x))
    return int(x) if isinstance(x, float) and x.is_integer() else x


@_register(_op(_maybe(aten, "arange")), _op(_maybe(aten, "arange"), "start"),
           _op(_maybe(aten, "arange"), "start_step"), _op(_maybe(prims, "iota")))
def _arange(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    # start + i * step for i below the node's length (its shape, which PyTorch computed from
    # end): in the result's integer dtype, exact; for floats, in the accumulation dtype (f32
    # for 16-bit floats) and rounded once, as PyTorch's CUDA kernel does (exact wherever the
    # values are integers below 2^24, as a mask's positions are).
    overload = getattr(node.target, "_overloadname", "")
    if str(node.target).startswith("prims."):
        start, step = node.kwargs.get("start", 0), node.kwargs.get("step", 1)
    elif overload == "default":
        start, step = 0, 1
    else:
        start = arg(0)
        step = arg(2) if len(node.args) > 2 else node.kwargs.get("step", 1)
    start, step = _number(e, node, start, "start"), _number(e, node, step, "step")
    if len(shape) != 1:
        raise Unsupported("%s of shape %s" % (op_name(node), shape))
    if dtype in FLOATS:
        acc = _accumulation(dtype)
    elif isinstance(start, float) or isinstance(step, float):
        raise Unsupported("%s: a fractional range in %s" % (op_name(node), dtype))
    elif dtype == torch.bool:
        raise Unsupported("%s in %s" % (op_name(node), dtype))
    else:
        acc = dtype
    i = e.emit(shape, acc, "iota", [], "iota_dimension=0")
    if step != 1:
        i = e.emit(shape, acc, "multiply", [i, e.constant(step, acc, shape)])
    if start != 0:
        i = e.emit(shape, acc, "add", [e.constant(start, acc, shape), i])
    return e.convert(i, dtype)


def _masked_fill_form(node: torch.fx.Node) -> Optional[str]:
    value, mask = node.args[2], node.args[1]
    meta = _shapes.symbolic_meta(node)
    mask_meta = _shapes.symbolic_meta(mask) if isinstance(mask, torch.fx.Node) else None
    if mask_meta is None or mask_meta[1] != torch.bool:
        return "masked_fill with a mask of %s" % (mask_meta[1] if mask_meta else repr(mask))
    if isinstance(value, torch.fx.Node) or meta is None or meta[1] in FLOATS:
        return None
    if not isinstance(value, (bool, int, float)):
        return "masked_fill value %r" % (value,)
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        return "masked_fill of %s with %r" % (meta[1], value)
    return None


@_register(_op(_maybe(aten, "masked_fill"), "Scalar"), _op(_maybe(aten, "masked_fill"), "Tensor"),
           form=_masked_fill_form)
def _masked_fill(e: Emitter, node: Any, arg: Callable, shape: Any, dtype: torch.dtype) -> Value:
    # value where mask, else self: mask and self broadcast to the result's shape, value cast
    # to self's dtype (a number, or a tensor of one element).
    value = arg(2)
    if isinstance(value, Value):
        if math.prod(value.shape) != 1:
            raise Unsupported("masked_fill with a value of shape %s" % (value.shape,))
        value = e.reshape(value, ())
    elif not isinstance(value, (bool, int, float)):
        raise Unsupported("masked_fill value %r" % (value,))
    elif dtype not in FLOATS and (isinstance(value, float) and
                                  (not math.isfinite(value) or value != int(value))):
        raise Unsupported("masked_fill of %s with %r" % (dtype, value))
    mask = arg(1)
    if not isinstance(mask, Value) or mask.dtype != torch.bool:
        raise Unsupported("masked_fill with a mask of %s" % (
            mask.dtype if isinstance(mask, Value) else repr(mask)))
    return e.emit(shape, dtype, "select", [e.broadcast_to(mask, shape),
                                           _value(e, value, shape, dtype),
                                           _value(e, arg(0), shape, dtype)])


# -- the region -----------------------------------------------------------------------------

def lowering_for(node: torch.fx.Node) -> Optional[Lowering]:
    """The lowering of a call_function node, or None when the op is not in the list."""
    if node.op != "call_function":
        return None
    return LOWERINGS.get(node.target)


def unsupported_form(node: torch.fx.Node) -> Optional[str]:
    """Why the lowering of ``node``'s op does not take this node's arguments, or None."""
    check = FORMS.get(node.target) if node.op == "call_function" else None
    return check(node) if check is not None else None


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


#: A storage order: a tensor's logical dimensions in the order its storage lays them out,
#: outermost first. A 4-d NCHW tensor stored channels-last is stored in order NHWC_OF_NCHW.
Order = Tuple[int, ...]
NHWC_OF_NCHW: Order = (0, 2, 3, 1)


def lower_region(graph_module: torch.fx.GraphModule, name: str,
                 binding: Optional[Mapping[Any, int]] = None,
                 splits: Optional[Mapping[int, int]] = None,
                 input_orders: Sequence[Optional[Order]] = (),
                 output_orders: Sequence[Optional[Order]] = ()) -> Lowered:
    """Returns the HLO module of a fused region at ``binding`` (None for a region of static
    shapes): its tensor placeholders are parameters in order, its size placeholders the
    binding's values, its outputs the root tuple's elements in order. ``splits`` maps a
    parameter to k: it is declared with dimension 0 split into (d/k, k) and reshaped back (the
    same bytes), so that its dimension 0 is an outer extent (``_shapes.OuterRule``). An input
    or output with an order in ``input_orders`` or ``output_orders`` (by position; None or
    absent: row-major) is declared as its storage in that order and transposed to and from its
    logical value in the module, which stitchd's compiler folds into the ops between. Raises
    Unsupported naming the first node it cannot express."""
    e = Emitter()
    values: Dict[torch.fx.Node, Any] = {}
    inputs: List[Tuple[Tuple[int, ...], torch.dtype]] = []
    outputs: List[Value] = []
    for node in graph_module.graph.nodes:
        if node.op == "placeholder":
            k = len(inputs)
            values[node] = _lower_input(e, node, binding, k, (splits or {}).get(k, 1),
                                        _at(input_orders, k))
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
                outputs.append(_stored(e, v, _at(output_orders, len(outputs))))
        else:
            raise Unsupported("%s node %s" % (node.op, node.name))
    return Lowered(e.module(name, outputs), tuple(inputs),
                   tuple((o.shape, o.dtype) for o in outputs), e.binding_specific)


def _at(orders: Sequence[Optional[Order]], k: int) -> Optional[Order]:
    return orders[k] if k < len(orders) else None


def inverse(order: Order) -> Order:
    """The permutation that undoes ``order``: a stored tensor's logical dimensions."""
    result = [0] * len(order)
    for i, d in enumerate(order):
        result[d] = i
    return tuple(result)


def _permutation(order: Optional[Order], shape: Sequence[Any],
                 what: str = "a value") -> Optional[Order]:
    """``order`` where it lays ``what``, of ``shape``, out other than row-major, else None;
    raises Unsupported where it is no permutation of the value's dimensions."""
    if order is None or tuple(order) == tuple(range(len(shape))):
        return None
    if sorted(order) != list(range(len(shape))):
        raise Unsupported("storage order %s for %s of shape %s" % (tuple(order), what,
                                                                  tuple(shape)))
    return tuple(order)


def _stored(e: Emitter, v: Value, order: Optional[Order]) -> Value:
    """``v`` transposed into its storage ``order``; as it is where that is row-major."""
    perm = _permutation(order, v.shape)
    if perm is None:
        return v
    return e.emit(tuple(v.shape[d] for d in perm), v.dtype, "transpose", [v],
                  "dimensions={%s}" % ",".join(str(d) for d in perm))


def _lower_input(e: Emitter, node: torch.fx.Node, binding: Optional[Mapping[Any, int]],
                 index: int, split: int = 1, order: Optional[Order] = None) -> Any:
    """A placeholder: parameter ``index`` for a tensor (declared with dimension 0 split by
    ``split``, or as its storage in ``order``), the Size it is bound to for a size."""
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
    perm = _permutation(order, shape, "input %s" % node.name)
    if perm is not None:
        stored = tuple(shape[d] for d in perm)
        return _stored(e, e.parameter(index, stored, dtype), inverse(perm))
    return e.parameter(index, shape, dtype)


def _concrete(node: torch.fx.Node, meta: Tuple[Tuple[Any, ...], torch.dtype],
              binding: Optional[Mapping[Any, int]]) -> Tuple[Tuple[int, ...], torch.dtype]:
    """One result's (dims, dtype) of a node with several, its sizes evaluated at
    ``binding``."""
    dims, dtype = meta
    if dtype not in DTYPES:
        raise Unsupported("%s (%s) has a result of dtype %s" % (node.name, op_name(node), dtype))
    try:
        if binding is None:
            if not all(isinstance(d, int) for d in dims):
                raise KeyError("symbolic sizes")
            return tuple(dims), dtype
        return tuple(_shapes.evaluate(d, binding) for d in dims), dtype
    except KeyError:
        raise Unsupported("%s (%s) has a result with no static shape" % (node.name,
                                                                         op_name(node)))


def _lower_node(e: Emitter, node: torch.fx.Node, values: Dict[torch.fx.Node, Any],
                binding: Optional[Mapping[Any, int]] = None) -> Value:
    lower = lowering_for(node)
    if lower is None:
        raise Unsupported("unsupported op %s" % op_name(node))
    elements = _shapes.element_metas(node)
    if elements is not None:  # several results: a shape and a dtype each, None where absent
        metas = [None if m is None else _concrete(node, m, binding) for m in elements]
        returns = getattr(getattr(node.target, "_schema", None), "returns", ())
        metas += [None] * (len(returns) - len(metas))  # results no getitem takes
        shape: Any = tuple(None if m is None else m[0] for m in metas)
        dtype: Any = tuple(None if m is None else m[1] for m in metas)
    else:
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
