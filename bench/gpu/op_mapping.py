"""The mapping from stitch ops to framework operations, shared by every backend.

compiler/SEMANTICS.md fixes what each op computes; this module says how to compute it with an
array framework, once for NumPy, JAX and PyTorch alike. A backend (array_backends.py,
torch_backend.py) supplies only what genuinely differs between frameworks: how each dtype is
stored, the spelling of a few functions, and the ops that a framework lacks for some dtype and
has to emulate (PyTorch has no usable u32 or u64, for one).
"""

from stitch_graph import BINARY, BITS, COMBINERS, FLOATS, UNARY, UNSIGNED, literal_values

# Elementwise ops whose function has the same name in numpy, jax.numpy and torch.
COMMON_FUNCTIONS = {"EXP": "exp", "LOG": "log", "LOG1P": "log1p", "EXPM1": "expm1",
                    "TANH": "tanh", "SQRT": "sqrt", "SIN": "sin", "COS": "cos", "TAN": "tan",
                    "FLOOR": "floor", "CEIL": "ceil", "MAX": "maximum", "MIN": "minimum",
                    "AND": "bitwise_and", "OR": "bitwise_or", "XOR": "bitwise_xor"}


class Backend:
    """Evaluates one stitch op at a time on the framework namespace `xp` (numpy, jax.numpy or
    torch), which must provide the functions of COMMON_FUNCTIONS and where, abs, sign, trunc,
    isfinite, logical_not, logical_and, logical_xor and fmod with their NumPy meaning.

    A subclass adds to `self.functions` and `self.comparisons` the framework's spelling of the
    other elementwise ops (ROUND_NEAREST_EVEN, CBRT, LOGISTIC, RSQRT, ERF, NOT, POW, ATAN2; EQ
    to GE) and implements the framework's primitives:

      storage(dtype)                the element type that holds `dtype`
      astype(x, store)              x converted to the element type `store`
      full(dims, value, dtype), array(values, dtype)
                                    a constant filled with one value, or from a flat list
      indices(count)                0, 1, ..., count - 1 as int64
      reshape(x, dims), broadcast_to(x, dims), transpose(x, permutation),
      concatenate(xs, axis), flip(x, axes)
      set_slice(base, index, x)     a copy of `base` with `x` written at `index`
      popcount(x, dtype), shift(op, a, b, dtype), int_div(a, b, dtype), int_rem(a, b, dtype)
                                    with SEMANTICS.md's results for every integer input
      float_to_int(x, dst)          truncate toward zero, saturate, NaN -> 0
      bitcast(x, src, dst)
      reduce_parity(x, dims), reduce_all(x, dims), reduce_any(x, dims)
                                    over pred: the sum modulo 2, and, or
      reduce_sum(x, dims, dtype), reduce_prod(x, dims, dtype), reduce_max(x, dims),
      reduce_min(x, dims)           wrapping integer sums and products in their width
      reduce_bitwise(kind, x, dims, dtype)
                                    REDUCE_AND and REDUCE_OR over integers
      rng_uniform(seed, node)
      to_numpy(x, dtype), from_numpy(a, dtype)
                                    transfers to and from the host, for `check` and `time`

    and may override output(x), a graph output laid out densely in row-major order.
    """

    name = "backend"

    # Unsigned dtypes that the framework holds in the signed type of the same width. The bits
    # are the same, so only the ops whose result depends on signedness must know: compare,
    # max and min (here, through signed_order) and the framework's own division, shifts and
    # conversions.
    UNSIGNED_IN_SIGNED_STORAGE = ()

    def __init__(self, xp):
        self.xp = xp
        self.functions = {op: getattr(xp, name) for op, name in COMMON_FUNCTIONS.items()}
        self.comparisons = {}

    # The primitives that have a sensible default.
    def round_float(self, x, dtype):
        """Rounds a float value to `dtype` where the storage does not already do so."""
        return x

    def reduce_bitwise(self, kind, x, dims, dtype):
        raise NotImplementedError(f"{kind} over {dtype}")

    def output(self, x):
        """A graph output as the graph lays it out: dense and row-major, HLO's default layout,
        which stitch's kernels and XLA write. A framework whose ops return strided views (a
        permute) overrides this, so its timing covers the same work."""
        return x

    # -- dispatch ------------------------------------------------------------------------------
    def apply(self, node, xs, operand_nodes):
        op = node.op
        src = operand_nodes[0].dtype if operand_nodes else node.dtype
        if op in UNARY:
            return self.unary(op, xs[0], node.dtype)
        if op == "CONVERT":
            return self.convert(xs[0], src, node.dtype)
        if op == "BITCAST_CONVERT":
            return self.bitcast(xs[0], src, node.dtype)
        if op in BINARY:
            return self.binary(op, xs[0], xs[1], node.dtype)
        if op == "COMPARE":
            return self.compare(node.direction, xs[0], xs[1], src)
        if op == "SELECT":
            return self.xp.where(xs[0], xs[1], xs[2])
        if op == "CLAMP":
            return self.binary("MIN", self.binary("MAX", xs[1], xs[0], node.dtype), xs[2],
                               node.dtype)
        if op == "CONSTANT":
            return self.constant(node)
        if op == "IOTA":
            return self.iota(node)
        if op == "BROADCAST":
            return self.broadcast(xs[0], operand_nodes[0].dims, node.dims, node.dimensions)
        if op == "RESHAPE":
            return self.reshape(xs[0], node.dims)
        if op == "TRANSPOSE":
            return self.transpose(xs[0], node.dimensions)
        if op == "SLICE":
            return xs[0][tuple(slice(s, l, st) for s, l, st in
                               zip(node.slice_starts, node.slice_limits, node.slice_strides))]
        if op == "CONCATENATE":
            return self.concatenate(xs, node.dimensions[0])
        if op == "PAD":
            return self.pad(xs[0], xs[1], node)
        if op == "REVERSE":
            return self.flip(xs[0], node.dimensions)
        if op == "REDUCE":
            return self.reduce(node.reduce_kind, xs[0], xs[1], tuple(node.dimensions), node.dtype)
        if op == "RNG_UNIFORM":
            return self.rng_uniform(xs[0], node)
        raise NotImplementedError(f"op {op} (node {node.name})")

    # -- elementwise ---------------------------------------------------------------------------
    def signed_order(self, x, dtype):
        """Maps unsigned values held in signed storage onto signed order, by flipping the top
        bit, so that signed compare, max and min order them as unsigned. The map is its own
        inverse; other dtypes pass through."""
        if dtype in self.UNSIGNED_IN_SIGNED_STORAGE:
            return x ^ (-(1 << (BITS[dtype] - 1)))
        return x

    def unary(self, op, x, dtype):
        xp = self.xp
        if op == "NEG":
            return -x if dtype != "PRED" else x
        if op == "ABS":
            return x if dtype in UNSIGNED else xp.abs(x)
        if op == "SIGN":
            if dtype in UNSIGNED:
                return self.astype(x != 0, self.storage(dtype))
            return xp.sign(x)
        if op == "NOT":
            return xp.logical_not(x) if dtype == "PRED" else self.functions["NOT"](x)
        if op == "IS_FINITE":
            return xp.isfinite(x)
        if op == "POPCNT":
            return self.popcount(x, dtype)
        if op == "ROUND":  # half away from zero
            t = xp.trunc(x)
            return xp.where(xp.abs(x - t) >= 0.5, t + xp.sign(x), t)
        return self.functions[op](x)

    def binary(self, op, a, b, dtype):
        xp = self.xp
        if op == "ADD":
            return a + b if dtype != "PRED" else xp.logical_xor(a, b)
        if op == "SUB":
            return a - b if dtype != "PRED" else xp.logical_xor(a, b)
        if op == "MUL":
            return a * b if dtype != "PRED" else xp.logical_and(a, b)
        if op == "DIV":
            return a / b if dtype in FLOATS else self.int_div(a, b, dtype)
        if op == "REM":
            return xp.fmod(a, b) if dtype in FLOATS else self.int_rem(a, b, dtype)
        if op in ("MAX", "MIN"):
            extreme = self.functions[op](self.signed_order(a, dtype), self.signed_order(b, dtype))
            return self.signed_order(extreme, dtype)
        if op in ("POW", "ATAN2", "AND", "OR", "XOR"):
            return self.functions[op](a, b)
        return self.shift(op, a, b, dtype)

    def compare(self, direction, a, b, dtype):
        return self.comparisons[direction](self.signed_order(a, dtype),
                                           self.signed_order(b, dtype))

    # -- conversions ---------------------------------------------------------------------------
    def convert(self, x, src, dst):
        if src == dst:
            return x
        if dst == "PRED":
            return x != 0
        if src == "PRED":
            return self.astype(x, self.storage(dst))
        if src in FLOATS and dst in FLOATS:
            return self.round_float(self.astype(x, self.storage(dst)), dst)
        if src in FLOATS:
            return self.float_to_int(x, dst)
        return self.convert_integer(x, src, dst)

    def convert_integer(self, x, src, dst):
        """Integer to another integer type (keeps the low bits, extends by the source's sign)
        or to a float type."""
        converted = self.astype(x, self.storage(dst))
        return self.round_float(converted, dst) if dst in FLOATS else converted

    # -- data movement -------------------------------------------------------------------------
    def broadcast(self, x, in_dims, out_dims, mapping):
        shape = [1] * len(out_dims)
        for i, d in enumerate(mapping):
            shape[d] = in_dims[i]
        return self.broadcast_to(self.reshape(x, shape), out_dims)

    def constant_values(self, node):
        """A constant's values as its storage holds them."""
        values = literal_values(node)
        if node.dtype in self.UNSIGNED_IN_SIGNED_STORAGE:
            bits = BITS[node.dtype]
            values = [v - (1 << bits) if v >> (bits - 1) else v for v in values]
        return values

    def constant(self, node):
        values = self.constant_values(node)
        if len(values) == 1:
            return self.full(node.dims, values[0], node.dtype)
        return self.reshape(self.array(values, node.dtype), node.dims)

    def iota(self, node):
        d = node.dimensions[0]
        index = self.indices(node.dims[d])
        return self.broadcast(self.convert(index, "S64", node.dtype), (node.dims[d],), node.dims,
                              [d])

    def pad(self, x, value, node):
        full, place, crop = [], [], []
        for n, lo, hi, it in zip(x.shape, node.pad_low, node.pad_high, node.pad_interior):
            size = max(lo, 0) + max(hi, 0) + n + max(n - 1, 0) * it
            full.append(size)
            place.append(slice(max(lo, 0), max(lo, 0) + max(n - 1, 0) * (it + 1) + 1, it + 1)
                         if n > 0 else slice(0, 0))
            crop.append(slice(-min(lo, 0), size + min(hi, 0)))
        filled = self.broadcast_to(self.reshape(value, [1] * len(full)), full)
        out = self.set_slice(filled, tuple(place), x)
        return out[tuple(crop)]

    # -- reductions ----------------------------------------------------------------------------
    def reduce(self, kind, x, init, dims, dtype):
        if not dims:
            r = x
        elif dtype == "PRED":  # pred arithmetic is modulo 2: sum is parity, prod is all
            if kind == "REDUCE_SUM":
                r = self.reduce_parity(x, dims)
            elif kind in ("REDUCE_PROD", "REDUCE_MIN", "REDUCE_AND"):
                r = self.reduce_all(x, dims)
            else:
                r = self.reduce_any(x, dims)
        elif kind == "REDUCE_SUM":
            r = self.reduce_sum(x, dims, dtype)
        elif kind == "REDUCE_PROD":
            r = self.reduce_prod(x, dims, dtype)
        elif kind in ("REDUCE_MAX", "REDUCE_MIN"):
            extreme = self.reduce_max if kind == "REDUCE_MAX" else self.reduce_min
            r = self.signed_order(extreme(self.signed_order(x, dtype), dims), dtype)
        elif kind in ("REDUCE_AND", "REDUCE_OR"):
            r = self.reduce_bitwise(kind, x, dims, dtype)
        else:
            raise NotImplementedError(f"reduce kind {kind}")
        return self.fold_into_init(kind, init, r, dtype)

    def fold_into_init(self, kind, init, r, dtype):
        """Combines a reduce's result with its init value."""
        return self.binary(COMBINERS[kind], init, r, dtype)
