"""Backends on NumPy-like array namespaces: NumPy, the reference mapping that `check` tests
against stitch's interpreter, and jax.numpy, which `time` runs under jax.jit.

Both have every integer type the graphs use, u32 and u64 included, so the signedness-dependent
ops need no emulation here; what differs between the two is how floats are stored (NumPy holds
them all in float64 to round exactly where the interpreter rounds) and a few functions that
jax.numpy spells through jax.lax.
"""

import math

from op_mapping import Backend
from stitch_graph import BITS, FLOATS, SIGNED, UNSIGNED, signed_of, unsigned_of

PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85


class ArrayBackend(Backend):
    """The op mapping for a NumPy-like namespace `xp`. Subclasses say how each dtype is stored
    and override the few ops whose spelling differs."""

    name = "array"

    def __init__(self, xp):
        super().__init__(xp)
        self.functions.update({
            "ROUND_NEAREST_EVEN": xp.rint, "CBRT": xp.cbrt, "NOT": xp.invert, "POW": xp.power,
            "ATAN2": xp.arctan2, "LOGISTIC": self.logistic, "RSQRT": self.rsqrt,
            "ERF": self.erf})
        self.comparisons = {"EQ": xp.equal, "NE": xp.not_equal, "LT": xp.less,
                            "LE": xp.less_equal, "GT": xp.greater, "GE": xp.greater_equal}

    # -- storage -------------------------------------------------------------------------------
    def int_storage(self, dtype):
        xp = self.xp
        return {"PRED": xp.bool_, "S8": xp.int8, "S32": xp.int32, "S64": xp.int64,
                "U8": xp.uint8, "U32": xp.uint32, "U64": xp.uint64}[dtype]

    def astype(self, x, store):
        return x.astype(store)

    def full(self, dims, value, dtype):
        return self.xp.full(dims, value, dtype=self.storage(dtype))

    def array(self, values, dtype):
        return self.xp.asarray(values, dtype=self.storage(dtype))

    def indices(self, count):
        return self.xp.arange(count, dtype=self.xp.int64)

    def reshape(self, x, dims):
        return self.xp.reshape(x, dims)

    def broadcast_to(self, x, dims):
        return self.xp.broadcast_to(x, dims)

    def transpose(self, x, permutation):
        return self.xp.transpose(x, permutation)

    def concatenate(self, xs, axis):
        return self.xp.concatenate(xs, axis=axis)

    def flip(self, x, axes):
        return self.xp.flip(x, axis=tuple(axes))

    def set_slice(self, base, index, x):
        out = self.xp.array(base)
        out[index] = x
        return out

    # -- elementwise ---------------------------------------------------------------------------
    def logistic(self, x):
        return 1 / (1 + self.xp.exp(-x))

    def rsqrt(self, x):
        return 1 / self.xp.sqrt(x)

    def erf(self, x):
        raise NotImplementedError

    def popcount(self, x, dtype):
        xp = self.xp
        v = x.astype(self.storage(unsigned_of(dtype))).astype(xp.uint64)
        v = v - ((v >> 1) & 0x5555555555555555)
        v = (v & 0x3333333333333333) + ((v >> 2) & 0x3333333333333333)
        v = (v + (v >> 4)) & 0x0F0F0F0F0F0F0F0F
        v = (v * 0x0101010101010101) >> 56
        return v.astype(self.storage(dtype))

    def shift(self, op, a, b, dtype):
        xp = self.xp
        bits = BITS[dtype]
        ustore = self.storage(unsigned_of(dtype))
        amount = b.astype(ustore)  # read as unsigned
        big = amount >= bits
        safe = xp.where(big, 0, amount).astype(ustore)
        if op == "SHIFT_LEFT":
            r = (a.astype(ustore) << safe).astype(self.storage(dtype))
            return xp.where(big, xp.zeros_like(r), r)
        if op == "SHIFT_RIGHT_LOGICAL":
            r = (a.astype(ustore) >> safe).astype(self.storage(dtype))
            return xp.where(big, xp.zeros_like(r), r)
        sstore = self.storage(signed_of(dtype))
        sa = a.astype(sstore)
        r = (sa >> safe.astype(sstore)).astype(self.storage(dtype))
        fill = xp.where(sa < 0, -1, 0).astype(sstore).astype(self.storage(dtype))
        return xp.where(big, fill, r)

    def int_div(self, a, b, dtype):
        xp = self.xp
        store = self.storage(dtype)
        zero = b == 0
        if dtype in UNSIGNED:
            q = a // xp.where(zero, 1, b).astype(store)
            return xp.where(zero, xp.asarray(-1).astype(store), q)
        neg1 = b == -1
        safe = xp.where(zero | neg1, 1, b).astype(store)
        q = a // safe  # floor; toward zero instead where the quotient is negative and inexact
        r = a - q * safe
        q = q + ((r != 0) & ((a < 0) != (safe < 0))).astype(store)
        return xp.where(zero, xp.asarray(-1, dtype=store), xp.where(neg1, -a, q))

    def int_rem(self, a, b, dtype):
        xp = self.xp
        store = self.storage(dtype)
        zero = b == 0
        if dtype in UNSIGNED:
            return xp.where(zero, a, a % xp.where(zero, 1, b).astype(store))
        neg1 = b == -1
        safe = xp.where(zero | neg1, 1, b).astype(store)
        r = xp.fmod(a, safe)  # the sign of the dividend
        return xp.where(zero, a, xp.where(neg1, xp.zeros_like(a), r))

    # -- conversions ---------------------------------------------------------------------------
    def float_to_int(self, x, dst):
        xp = self.xp
        bits = BITS[dst]
        lo, hi = (-(2.0 ** (bits - 1)), 2.0 ** (bits - 1)) if dst in SIGNED else (0.0, 2.0 ** bits)
        store = self.storage(dst)
        t = xp.trunc(x.astype(xp.float64))
        inside = (t >= lo) & (t < hi)
        v = xp.where(inside, t, 0.0).astype(store)
        v = xp.where(t >= hi, xp.asarray(int(hi) - 1, dtype=store), v)
        v = xp.where(t < lo, xp.asarray(int(lo), dtype=store), v)
        return xp.where(xp.isnan(t), xp.zeros_like(v), v)

    # -- reductions ----------------------------------------------------------------------------
    def reduce_parity(self, x, dims):
        return self.xp.sum(x, axis=dims, dtype=self.xp.int64) % 2 == 1

    def reduce_all(self, x, dims):
        return self.xp.all(x, axis=dims)

    def reduce_any(self, x, dims):
        return self.xp.any(x, axis=dims)

    def reduce_sum(self, x, dims, dtype):
        return self.xp.sum(x, axis=dims, dtype=self.storage(dtype))

    def reduce_prod(self, x, dims, dtype):
        return self.xp.prod(x, axis=dims, dtype=self.storage(dtype))

    def reduce_max(self, x, dims):
        return self.xp.max(x, axis=dims)

    def reduce_min(self, x, dims):
        return self.xp.min(x, axis=dims)


class NumpyBackend(ArrayBackend):
    """The reference mapping: SEMANTICS.md in NumPy. Floats of every dtype are held in float64
    and rounded only where the interpreter rounds (convert, bitcast-convert, rng), so results
    agree with the interpreter up to the order of float additions."""

    name = "numpy"

    # (significand bits including the implicit one, minimum normal exponent, maximum exponent)
    FORMATS = {"F16": (11, -14, 15), "BF16": (8, -126, 127), "F32": (24, -126, 127)}

    def __init__(self):
        import numpy
        super().__init__(numpy)
        self.np = numpy

    def storage(self, dtype):
        return self.np.float64 if dtype in FLOATS else self.int_storage(dtype)

    def round_float(self, x, dtype):
        """Rounds float64 values to the nearest `dtype` value (ties to even), in one step."""
        np = self.np
        if dtype not in self.FORMATS:
            return x
        precision, emin, emax = self.FORMATS[dtype]
        x = np.asarray(x, dtype=np.float64)
        with np.errstate(all="ignore"):
            _, e = np.frexp(x)
            ulp = np.ldexp(1.0, np.maximum(e - 1, emin) - (precision - 1))
            r = np.rint(x / ulp) * ulp
            largest = (2.0 - 2.0 ** (1 - precision)) * 2.0 ** emax
            r = np.where(np.abs(r) > largest, np.copysign(np.inf, x), r)
            return np.where(np.isfinite(x), r, x)

    def erf(self, x):
        np = self.np
        return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)

    def float_bits(self, x, dtype):
        """The storage bits of float64 values as `dtype`, as unsigned integers."""
        np = self.np
        r = self.round_float(x, dtype)
        if dtype == "F64":
            return r.view(np.uint64)
        if dtype == "F32":
            return r.astype(np.float32).view(np.uint32)
        if dtype == "F16":
            return r.astype(np.float16).view(np.uint16)
        # bf16: the upper half of the f32 with the same value (exact after rounding).
        return (r.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)

    def bits_float(self, bits, dtype):
        np = self.np
        if dtype == "F64":
            return bits.astype(np.uint64).view(np.float64)
        if dtype == "F32":
            return bits.astype(np.uint32).view(np.float32).astype(np.float64)
        if dtype == "F16":
            return bits.astype(np.uint16).view(np.float16).astype(np.float64)
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)

    def bitcast(self, x, src, dst):
        np = self.np
        x = np.asarray(x)
        if src in FLOATS:
            bits = self.float_bits(x, src)
        else:
            bits = x.view(self.storage(unsigned_of(src)))
        if dst in FLOATS:
            return self.bits_float(bits, dst)
        return bits.view(self.storage(dst)) if dst != "PRED" else bits != 0

    def reduce_bitwise(self, kind, x, dims, dtype):
        ufunc = self.np.bitwise_and if kind == "REDUCE_AND" else self.np.bitwise_or
        return ufunc.reduce(x, axis=dims)

    def philox_uniform(self, seed, count, stream):
        """rng-uniform's values at linear indices 0..count-1 (SEMANTICS.md, Random numbers)."""
        np = self.np
        mask = 0xFFFFFFFF
        # Word k % 4 of the evaluation for counter k / 4: one evaluation per four elements.
        blocks = (count + 3) // 4
        block = np.arange(blocks, dtype=np.uint64)
        c0, c1 = block & np.uint64(mask), block >> np.uint64(32)
        c2 = np.full(blocks, stream & mask, dtype=np.uint64)
        c3 = np.zeros(blocks, dtype=np.uint64)
        k0, k1 = seed & mask, (seed >> 32) & mask
        for round_ in range(10):
            if round_ > 0:
                k0, k1 = (k0 + PHILOX_W0) & mask, (k1 + PHILOX_W1) & mask
            p0 = c0 * np.uint64(PHILOX_M0)
            p1 = c2 * np.uint64(PHILOX_M1)
            hi0, lo0 = p0 >> np.uint64(32), p0 & np.uint64(mask)
            hi1, lo1 = p1 >> np.uint64(32), p1 & np.uint64(mask)
            c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
        words = np.stack([c0, c1, c2, c3], axis=1).reshape(-1)[:count]
        return (words >> np.uint64(8)).astype(np.float64) * 2.0 ** -24

    def rng_uniform(self, seed, node):
        seed = int(self.np.asarray(seed).astype(self.np.uint64))
        values = self.philox_uniform(seed, node.elements(), node.rng_stream)
        return self.round_float(values.reshape(node.dims), node.dtype)

    def apply(self, node, xs, operand_nodes):
        with self.np.errstate(all="ignore"):
            return super().apply(node, xs, operand_nodes)

    def to_numpy(self, x, dtype):
        return self.np.asarray(x)

    def from_numpy(self, a, dtype):
        return a.astype(self.storage(dtype))


class JaxBackend(ArrayBackend):
    """jax.numpy, with 64-bit types enabled (the suite has u64 counters and seeds)."""

    name = "jax"

    def __init__(self, device=None):
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        super().__init__(jnp)
        self.jax = jax
        self.device = device

    def storage(self, dtype):
        jnp = self.xp
        floats = {"F16": jnp.float16, "BF16": jnp.bfloat16, "F32": jnp.float32,
                  "F64": jnp.float64}
        return floats[dtype] if dtype in FLOATS else self.int_storage(dtype)

    def logistic(self, x):
        return self.jax.nn.sigmoid(x)

    def rsqrt(self, x):
        return self.jax.lax.rsqrt(x)

    def erf(self, x):
        return self.jax.lax.erf(x)

    def bitcast(self, x, src, dst):
        if dst == "PRED" or src == "PRED":
            return self.jax.lax.bitcast_convert_type(x.astype(self.xp.uint8), self.storage(dst))
        return self.jax.lax.bitcast_convert_type(x, self.storage(dst))

    def set_slice(self, base, index, x):
        return self.xp.asarray(base).at[index].set(x)

    def reduce_bitwise(self, kind, x, dims, dtype):
        lax = self.jax.lax
        if kind == "REDUCE_AND":
            init = self.xp.asarray(True if dtype == "PRED" else -1).astype(self.storage(dtype))
            return lax.reduce(x, init, lax.bitwise_and, dims)
        init = self.xp.asarray(0).astype(self.storage(dtype))
        return lax.reduce(x, init, lax.bitwise_or, dims)

    def rng_uniform(self, seed, node):
        # JAX's own generator (threefry): timing only, the values differ from stitch's Philox.
        random = self.jax.random
        key = random.fold_in(random.PRNGKey(seed.astype(self.xp.uint32)), node.rng_stream)
        return random.uniform(key, node.dims, dtype=self.storage(node.dtype))

    def to_numpy(self, x, dtype):
        import numpy as np
        if dtype == "BF16":
            x = x.astype(self.xp.float32)
        return np.asarray(x)

    def from_numpy(self, a, dtype):
        arr = self.xp.asarray(a).astype(self.storage(dtype))
        return self.jax.device_put(arr, self.device) if self.device is not None else arr
