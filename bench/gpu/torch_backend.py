"""The PyTorch backend, which `time` runs eagerly and under torch.compile.

PyTorch's unsigned 32- and 64-bit types lack most CUDA kernels, so u32 and u64 are held in
int32 and int64 with the same bits. The shared mapping (op_mapping.py) keeps compare, max and
min right for them; this module emulates the rest of what depends on signedness: division,
right shifts, popcount, widening and conversion to and from floats.
"""

from op_mapping import Backend
from stitch_graph import BITS, FLOATS, SIGNED


class TorchBackend(Backend):
    """The op mapping on PyTorch. u32 and u64 are held in int32 and int64 (same bits), since
    PyTorch's unsigned types lack most CUDA kernels; the ops whose result depends on
    signedness (compare, max/min, division, right shifts, widening, to float) say so."""

    name = "torch"

    UNSIGNED_IN_SIGNED_STORAGE = ("U32", "U64")

    def __init__(self, device):
        import torch
        super().__init__(torch)
        self.torch = torch
        self.device = device
        t = torch
        self.stores = {"PRED": t.bool, "S8": t.int8, "S32": t.int32, "S64": t.int64,
                       "U8": t.uint8, "U32": t.int32, "U64": t.int64, "F16": t.float16,
                       "BF16": t.bfloat16, "F32": t.float32, "F64": t.float64}
        self.functions.update({
            "ROUND_NEAREST_EVEN": t.round, "CBRT": self.cbrt, "NOT": t.bitwise_not,
            "POW": t.pow, "ATAN2": t.atan2, "LOGISTIC": t.sigmoid, "RSQRT": t.rsqrt,
            "ERF": t.erf})
        self.comparisons = {"EQ": t.eq, "NE": t.ne, "LT": t.lt, "LE": t.le, "GT": t.gt,
                            "GE": t.ge}

    # -- storage and data movement -------------------------------------------------------------
    def storage(self, dtype):
        return self.stores[dtype]

    def astype(self, x, store):
        return x.to(store)

    def full(self, dims, value, dtype):
        return self.torch.full(dims, value, dtype=self.storage(dtype), device=self.device)

    def array(self, values, dtype):
        return self.torch.tensor(values, dtype=self.storage(dtype), device=self.device)

    def indices(self, count):
        return self.torch.arange(count, dtype=self.torch.int64, device=self.device)

    def reshape(self, x, dims):
        return x.reshape(dims)

    def broadcast_to(self, x, dims):
        return x.expand(*dims)

    def transpose(self, x, permutation):
        return x.permute(*permutation)

    def output(self, x):
        """A permute or an expand is a strided view in PyTorch, and torch.compile returns it
        as one: its kernel then writes the untransposed values and leaves the transposition to
        whatever reads them. The graph's outputs are dense row-major arrays, so they are made
        contiguous, which torch.compile fuses into the kernel that computes them. An output
        that is already dense (a reshaped input) stays the view it is, as stitch's bundle
        aliases it to its input."""
        return x.contiguous()

    def concatenate(self, xs, axis):
        return self.torch.cat(xs, dim=axis)

    def flip(self, x, axes):
        return self.torch.flip(x, dims=list(axes))

    def set_slice(self, base, index, x):
        out = base.clone()
        out[index] = x
        return out

    # -- unsigned values in signed storage -----------------------------------------------------
    def unsigned_value(self, x, dtype):
        """The unsigned value of u32 bits, as int64."""
        return x.to(self.torch.int64) & 0xFFFFFFFF

    def logical_shift_right64(self, v, s):
        """Logical right shift of int64 bits by `s` (1..63, an int or an int64 tensor)."""
        if isinstance(s, int):
            return (v >> s) & ((1 << (64 - s)) - 1)
        ones = self.torch.ones_like(v)
        return (v >> s) & (self.torch.bitwise_left_shift(ones, 64 - s) - 1)

    # -- elementwise ---------------------------------------------------------------------------
    def cbrt(self, x):
        t = self.torch
        return t.sign(x) * t.abs(x).pow(1.0 / 3.0)

    def popcount(self, x, dtype):
        t = self.torch
        v = x.to(t.int64)
        if dtype in ("S8", "S32", "U32"):
            v = v & ((1 << BITS[dtype]) - 1)
        count = t.zeros_like(v)
        for _ in range(64):
            count = count + (v & 1)
            v = self.logical_shift_right64(v, 1)
        return count.to(x.dtype)

    def int_div(self, a, b, dtype):
        return self.int_div_rem(a, b, dtype, want_div=True)

    def int_rem(self, a, b, dtype):
        return self.int_div_rem(a, b, dtype, want_div=False)

    def int_div_rem(self, a, b, dtype, want_div):
        t = self.torch
        if dtype == "U64":
            raise NotImplementedError("u64 division in PyTorch")
        if dtype == "U32":  # exact unsigned values in int64
            ua, ub = self.unsigned_value(a, dtype), self.unsigned_value(b, dtype)
            zero = ub == 0
            safe = t.where(zero, t.ones_like(ub), ub)
            if want_div:
                return t.where(zero, t.full_like(ua, -1), ua // safe).to(a.dtype)
            return t.where(zero, ua, ua % safe).to(a.dtype)
        zero = b == 0
        if dtype == "U8":
            safe = t.where(zero, t.ones_like(b), b)
            if want_div:
                return t.where(zero, t.full_like(a, 255), a // safe)
            return t.where(zero, a, a % safe)
        neg1 = b == -1
        safe = t.where(zero | neg1, t.ones_like(b), b)
        if want_div:
            q = t.div(a, safe, rounding_mode="trunc")
            return t.where(zero, t.full_like(a, -1), t.where(neg1, -a, q))
        return t.where(zero, a, t.where(neg1, t.zeros_like(a), t.fmod(a, safe)))

    def shift(self, op, a, b, dtype):
        t = self.torch
        bits = BITS[dtype]
        if bits == 32 or bits == 8:
            # Work on the exact unsigned (or signed) value in int64, then keep the low bits.
            amount = b.to(t.int64) & ((1 << bits) - 1)
            big = amount >= bits
            safe = t.where(big, t.zeros_like(amount), amount)
            if op == "SHIFT_LEFT":
                r = a.to(t.int64) << safe
                r = t.where(big, t.zeros_like(r), r)
            elif op == "SHIFT_RIGHT_LOGICAL":
                r = (a.to(t.int64) & ((1 << bits) - 1)) >> safe
                r = t.where(big, t.zeros_like(r), r)
            else:
                # The value as signed, sign-extended into int64.
                v = a.to(t.int64) & ((1 << bits) - 1)
                v = t.where(v >= (1 << (bits - 1)), v - (1 << bits), v)
                r = v >> t.where(big, t.full_like(safe, bits - 1), safe)
            r = r & ((1 << bits) - 1)
            if dtype in ("S8", "S32", "U32"):  # back to the stored signed bits
                r = t.where(r >= (1 << (bits - 1)), r - (1 << bits), r)
            return r.to(a.dtype)
        # 64-bit: amounts >= 64 (or negative, read as unsigned) give 0 or the sign fill.
        big = (b < 0) | (b >= 64)
        safe = t.where(big, t.zeros_like(b), b)
        if op == "SHIFT_LEFT":
            return t.where(big, t.zeros_like(a), a << safe)
        if op == "SHIFT_RIGHT_ARITHMETIC":
            return a >> t.where(big, t.full_like(safe, 63), safe)
        r = t.where(safe == 0, a, self.logical_shift_right64(a, t.clamp(safe, min=1)))
        return t.where(big, t.zeros_like(a), r)

    # -- conversions ---------------------------------------------------------------------------
    def float_to_int(self, x, dst):
        t = self.torch
        store = self.storage(dst)
        v = t.trunc(x.to(t.float64))
        v = t.where(t.isnan(v), t.zeros_like(v), v)
        bits = BITS[dst]
        if bits < 64:
            lo = -(2.0 ** (bits - 1)) if dst in SIGNED else 0.0
            hi = 2.0 ** (bits - 1) - 1 if dst in SIGNED else 2.0 ** bits - 1
            return t.clamp(v, lo, hi).to(t.int64).to(store)
        below = 2.0 ** 63 - 1024  # the largest double under 2^63
        if dst == "S64":
            r = t.clamp(v, -(2.0 ** 63), below).to(t.int64)
            return t.where(v >= 2.0 ** 63, t.full_like(r, 2 ** 63 - 1), r)
        v = t.clamp(v, 0.0, 2.0 ** 64)
        high = v >= 2.0 ** 63  # bit 63 set: the rest goes through int64, then the bit
        r = t.clamp(t.where(high, v - 2.0 ** 63, v), max=below).to(t.int64)
        r = t.where(high, r ^ (-(2 ** 63)), r)
        return t.where(v >= 2.0 ** 64, t.full_like(r, -1), r)

    def convert_integer(self, x, src, dst):
        t = self.torch
        if src == "U32":  # zero-extended
            x = self.unsigned_value(x, src)
        elif src == "U64" and dst in FLOATS:
            f = x.to(t.float64)
            x = t.where(x < 0, f + 2.0 ** 64, f)
        return super().convert_integer(x, src, dst)

    def bitcast(self, x, src, dst):
        t = self.torch
        if src == "PRED":
            x = x.to(t.uint8)
        r = x.view(self.storage(dst) if dst != "PRED" else t.uint8)
        return r != 0 if dst == "PRED" else r

    # -- reductions ----------------------------------------------------------------------------
    def reduce_parity(self, x, dims):
        return self.torch.sum(x.to(self.torch.int64), dim=list(dims)) % 2 == 1

    def reduce_all(self, x, dims):
        return self.torch.amin(x.to(self.torch.int64), dim=list(dims)) != 0

    def reduce_any(self, x, dims):
        return self.torch.amax(x.to(self.torch.int64), dim=list(dims)) != 0

    def reduce_sum(self, x, dims, dtype):
        return self.torch.sum(x, dim=list(dims)).to(x.dtype)  # integers wrap in their width

    def reduce_prod(self, x, dims, dtype):
        r = x
        for d in sorted(dims, reverse=True):
            r = self.torch.prod(r, dim=d)
        return r.to(x.dtype)

    def reduce_max(self, x, dims):
        return self.torch.amax(x, dim=list(dims))

    def reduce_min(self, x, dims):
        return self.torch.amin(x, dim=list(dims))

    def reduce_bitwise(self, kind, x, dims, dtype):
        t = self.torch
        f = t.bitwise_and if kind == "REDUCE_AND" else t.bitwise_or
        r = x
        for d in sorted(dims, reverse=True):
            parts = r.unbind(d)
            acc = parts[0]
            for p in parts[1:]:
                acc = f(acc, p)
            r = acc
        return r

    def fold_into_init(self, kind, init, r, dtype):
        if dtype == "PRED" and kind in ("REDUCE_MAX", "REDUCE_MIN"):
            t = self.torch
            return t.logical_or(init, r) if kind == "REDUCE_MAX" else t.logical_and(init, r)
        return super().fold_into_init(kind, init, r, dtype)

    def rng_uniform(self, seed, node):
        # PyTorch's own generator: timing only, the values differ from stitch's Philox.
        t = self.torch
        u = t.rand(node.dims, dtype=t.float32, device=self.device)
        return u.to(self.storage(node.dtype))

    # -- host transfers ------------------------------------------------------------------------
    def to_numpy(self, x, dtype):
        t = self.torch
        if dtype == "BF16":
            x = x.to(t.float32)
        a = x.detach().cpu().numpy()
        if dtype == "U32":
            a = a.view("uint32")
        elif dtype == "U64":
            a = a.view("uint64")
        return a

    def from_numpy(self, a, dtype):
        import numpy as np
        t = self.torch
        if dtype == "U32":
            a = a.astype(np.uint32).view(np.int32)
        elif dtype == "U64":
            a = a.astype(np.uint64).view(np.int64)
        elif dtype == "BF16":
            a = a.astype(np.float32)
        return t.from_numpy(np.ascontiguousarray(a)).to(device=self.device,
                                                        dtype=self.storage(dtype))
