#!/usr/bin/env python3
"""The benchmark suite's subgraphs in PyTorch, JAX and NumPy.

gpu_bench exports each suite graph in the JSON form of stitch.v1.Graph. This script rebuilds a
graph as a Python function with one framework operation per stitch op (so a framework runs the
same subgraph, op for op, that stitch compiles) and

  time    times it with PyTorch eager, torch.compile and jax.jit on the GPU, median of repeats;
  check   runs it on the inputs of a reference export (`gpu_bench --export-reference DIR`)
          and compares every output with stitch's reference interpreter. The NumPy backend
          follows compiler/SEMANTICS.md exactly (floats held in float64 and rounded at
          convert, as the interpreter does; rng-uniform is Philox-4x32-10), so the op mapping
          is tested on machines without a GPU or a framework;
  merge   joins gpu_bench's results (stitch.csv, device.json) with this script's
          (frameworks.json) into bench/results/gpu_<device>.csv and .md.

Frameworks that are not importable, or see no GPU, are skipped with a note in the table.
Only the standard library is needed for `merge`; `check` needs NumPy.

Usage:
  frameworks.py time --run-dir DIR [--frameworks torch-eager,torch-compile,jax-jit]
                     [--warmup N] [--repeats N] [--only IDS] [--no-flush-l2] [--device cuda|cpu]
  frameworks.py check REFERENCE_DIR [--backend numpy|jax|torch] [--only IDS]
  frameworks.py merge --run-dir DIR --results DIR
"""

import argparse
import csv
import json
import math
import os
import statistics
import sys
import time

# ---------------------------------------------------------------------------------------------
# Graphs

FLOATS = ("F16", "BF16", "F32", "F64")
SIGNED = ("S8", "S32", "S64")
UNSIGNED = ("PRED", "U8", "U32", "U64")
BITS = {"PRED": 1, "S8": 8, "S32": 32, "S64": 64, "U8": 8, "U32": 32, "U64": 64,
        "F16": 16, "BF16": 16, "F32": 32, "F64": 64}

UNARY = {"NEG", "ABS", "EXP", "LOG", "LOG1P", "EXPM1", "TANH", "LOGISTIC", "SQRT", "RSQRT", "ERF",
         "SIN", "COS", "TAN", "CBRT", "FLOOR", "CEIL", "ROUND", "ROUND_NEAREST_EVEN", "SIGN",
         "NOT", "IS_FINITE", "POPCNT"}
BINARY = {"ADD", "SUB", "MUL", "DIV", "POW", "MAX", "MIN", "REM", "AND", "OR", "XOR",
          "SHIFT_LEFT", "SHIFT_RIGHT_LOGICAL", "SHIFT_RIGHT_ARITHMETIC", "ATAN2"}

# The binary op that folds a reduce's result into its init value (MAX on pred is OR, MIN is
# AND, ADD is XOR: pred arithmetic is modulo 2).
COMBINERS = {"REDUCE_SUM": "ADD", "REDUCE_PROD": "MUL", "REDUCE_MAX": "MAX", "REDUCE_MIN": "MIN",
             "REDUCE_AND": "AND", "REDUCE_OR": "OR"}

PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85


class Node:
    """One op of a graph, from its protobuf JSON form (defaults omitted, int64 as strings)."""

    def __init__(self, j):
        self.name = j.get("name", "")
        self.op = j.get("op", "OP_UNSPECIFIED")
        shape = j.get("shape", {})
        self.dtype = shape.get("dtype", "DTYPE_UNSPECIFIED")
        self.dims = tuple(int(d) for d in shape.get("dims", []))
        self.operands = [int(o) for o in j.get("operands", [])]
        self.parameter_number = int(j.get("parameter_number", 0))
        literal = j.get("literal", {})
        self.literal_f = [float(v) for v in literal.get("f", [])]
        self.literal_i = [int(v) for v in literal.get("i", [])]
        self.dimensions = [int(d) for d in j.get("dimensions", [])]
        self.slice_starts = [int(d) for d in j.get("slice_starts", [])]
        self.slice_limits = [int(d) for d in j.get("slice_limits", [])]
        self.slice_strides = [int(d) for d in j.get("slice_strides", [])]
        self.pad_low = [int(d) for d in j.get("pad_low", [])]
        self.pad_high = [int(d) for d in j.get("pad_high", [])]
        self.pad_interior = [int(d) for d in j.get("pad_interior", [])]
        self.direction = j.get("direction", "DIRECTION_UNSPECIFIED")
        self.reduce_kind = j.get("reduce_kind", "REDUCE_UNSPECIFIED")
        self.rng_stream = int(j.get("rng_stream", 0))

    def elements(self):
        return math.prod(self.dims)


class Graph:
    def __init__(self, j):
        self.name = j.get("name", "")
        self.nodes = [Node(n) for n in j.get("nodes", [])]
        self.outputs = [int(o) for o in j.get("outputs", [])]
        params = [i for i, n in enumerate(self.nodes) if n.op == "PARAMETER"]
        self.parameters = sorted(params, key=lambda i: self.nodes[i].parameter_number)
        self.order = self._topological_order()

    def _topological_order(self):
        order, state = [], [0] * len(self.nodes)  # 0 new, 1 on the stack, 2 done
        for root in range(len(self.nodes)):
            stack = [(root, 0)]
            while stack:
                node, k = stack.pop()
                if k == 0:
                    if state[node] == 2:
                        continue
                    state[node] = 1
                operands = self.nodes[node].operands
                if k < len(operands):
                    stack.append((node, k + 1))
                    if state[operands[k]] == 0:
                        stack.append((operands[k], 0))
                    elif state[operands[k]] == 1:
                        raise ValueError(f"graph {self.name}: cycle through node {node}")
                else:
                    state[node] = 2
                    order.append(node)
        return order

    def has_rng(self):
        return any(n.op == "RNG_UNIFORM" for n in self.nodes)

    def longest_reduction(self):
        longest = 0
        for n in self.nodes:
            if n.op == "REDUCE":
                longest = max(longest, self.nodes[n.operands[0]].elements() // max(n.elements(), 1))
        return longest


def literal_values(node):
    """A constant's values as Python numbers of its dtype: floats as given (the interpreter
    does not round literals), integers by their two's-complement bits."""
    if node.dtype in FLOATS:
        return [float(v) for v in node.literal_f] or [float(v) for v in node.literal_i]
    if node.dtype == "PRED":
        return [v != 0 for v in node.literal_i] or [v != 0.0 for v in node.literal_f]
    raw = node.literal_i or [int(math.trunc(v)) for v in node.literal_f if not math.isnan(v)]
    bits = BITS[node.dtype]
    values = [v & ((1 << bits) - 1) for v in raw]
    if node.dtype in SIGNED:
        values = [v - (1 << bits) if v >> (bits - 1) else v for v in values]
    return values


def build_function(graph, backend):
    """Returns f(*params) -> tuple of outputs, evaluating `graph` with `backend` op by op.

    Values are dropped after their last use, so eager frameworks hold no more intermediates
    than the graph needs at once."""
    uses = [0] * len(graph.nodes)
    for i in graph.order:
        for o in graph.nodes[i].operands:
            uses[o] += 1
    for o in graph.outputs:
        uses[o] += 1
    steps = []
    for i in graph.order:
        node = graph.nodes[i]
        if node.op == "PARAMETER":
            continue
        # Operands whose last use is this node.
        last = []
        for o in set(node.operands):
            uses[o] -= node.operands.count(o)
            if uses[o] == 0:
                last.append(o)
        steps.append((i, node, tuple(node.operands), tuple(last)))
    params = list(graph.parameters)
    outputs = list(graph.outputs)
    nodes = graph.nodes

    def run(*args):
        values = dict(zip(params, args))
        for i, node, operands, last in steps:
            values[i] = backend.apply(node, [values[o] for o in operands],
                                      [nodes[o] for o in operands])
            for o in last:
                del values[o]
        return tuple(values[o] for o in outputs)

    return run


# ---------------------------------------------------------------------------------------------
# Backends on NumPy-like array modules (NumPy, jax.numpy)


class ArrayBackend:
    """The op mapping for a NumPy-like namespace `xp`. Subclasses say how each dtype is stored
    and override the few ops whose spelling differs."""

    name = "array"

    def __init__(self, xp):
        self.xp = xp

    # -- storage -------------------------------------------------------------------------------
    def storage(self, dtype):
        raise NotImplementedError

    def int_storage(self, dtype):
        xp = self.xp
        return {"PRED": xp.bool_, "S8": xp.int8, "S32": xp.int32, "S64": xp.int64,
                "U8": xp.uint8, "U32": xp.uint32, "U64": xp.uint64}[dtype]

    def round_float(self, x, dtype):
        """Rounds a float value to `dtype` where the storage does not already do so."""
        return x

    def full(self, dims, value, dtype):
        return self.xp.full(dims, value, dtype=self.storage(dtype))

    def array(self, values, dtype):
        return self.xp.asarray(values, dtype=self.storage(dtype))

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
            return self.xp.reshape(xs[0], node.dims)
        if op == "TRANSPOSE":
            return self.xp.transpose(xs[0], node.dimensions)
        if op == "SLICE":
            return xs[0][tuple(slice(s, l, st) for s, l, st in
                               zip(node.slice_starts, node.slice_limits, node.slice_strides))]
        if op == "CONCATENATE":
            return self.xp.concatenate(xs, axis=node.dimensions[0])
        if op == "PAD":
            return self.pad(xs[0], xs[1], node)
        if op == "REVERSE":
            return self.xp.flip(xs[0], axis=tuple(node.dimensions))
        if op == "REDUCE":
            return self.reduce(node.reduce_kind, xs[0], xs[1], tuple(node.dimensions), node.dtype)
        if op == "RNG_UNIFORM":
            return self.rng_uniform(xs[0], node)
        raise NotImplementedError(f"op {op} (node {node.name})")

    # -- elementwise ---------------------------------------------------------------------------
    def logistic(self, x):
        return 1 / (1 + self.xp.exp(-x))

    def rsqrt(self, x):
        return 1 / self.xp.sqrt(x)

    def erf(self, x):
        raise NotImplementedError

    def unary(self, op, x, dtype):
        xp = self.xp
        if op == "NEG":
            return -x if dtype != "PRED" else x
        if op == "ABS":
            return x if dtype in UNSIGNED else xp.abs(x)
        if op == "SIGN":
            if dtype in UNSIGNED:
                return (x != 0).astype(self.storage(dtype))
            return xp.sign(x)
        if op == "NOT":
            return xp.logical_not(x) if dtype == "PRED" else xp.invert(x)
        if op == "IS_FINITE":
            return xp.isfinite(x)
        if op == "POPCNT":
            return self.popcount(x, dtype)
        if op == "ROUND":  # half away from zero
            t = xp.trunc(x)
            return xp.where(xp.abs(x - t) >= 0.5, t + xp.sign(x), t)
        simple = {"EXP": xp.exp, "LOG": xp.log, "LOG1P": xp.log1p, "EXPM1": xp.expm1,
                  "TANH": xp.tanh, "SQRT": xp.sqrt, "SIN": xp.sin, "COS": xp.cos, "TAN": xp.tan,
                  "CBRT": xp.cbrt, "FLOOR": xp.floor, "CEIL": xp.ceil,
                  "ROUND_NEAREST_EVEN": xp.rint, "LOGISTIC": self.logistic, "RSQRT": self.rsqrt,
                  "ERF": self.erf}
        return simple[op](x)

    def unsigned_of(self, dtype):
        return {"S8": "U8", "S32": "U32", "S64": "U64"}.get(dtype, dtype)

    def signed_of(self, dtype):
        return {"U8": "S8", "U32": "S32", "U64": "S64"}.get(dtype, dtype)

    def popcount(self, x, dtype):
        xp = self.xp
        v = x.astype(self.storage(self.unsigned_of(dtype))).astype(xp.uint64)
        v = v - ((v >> 1) & 0x5555555555555555)
        v = (v & 0x3333333333333333) + ((v >> 2) & 0x3333333333333333)
        v = (v + (v >> 4)) & 0x0F0F0F0F0F0F0F0F
        v = (v * 0x0101010101010101) >> 56
        return v.astype(self.storage(dtype))

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
        if op == "POW":
            return xp.power(a, b)
        if op == "ATAN2":
            return xp.arctan2(a, b)
        if op == "MAX":
            return xp.maximum(a, b)
        if op == "MIN":
            return xp.minimum(a, b)
        if op == "AND":
            return xp.bitwise_and(a, b)
        if op == "OR":
            return xp.bitwise_or(a, b)
        if op == "XOR":
            return xp.bitwise_xor(a, b)
        return self.shift(op, a, b, dtype)

    def shift(self, op, a, b, dtype):
        xp = self.xp
        bits = BITS[dtype]
        ustore = self.storage(self.unsigned_of(dtype))
        amount = b.astype(ustore)  # read as unsigned
        big = amount >= bits
        safe = xp.where(big, 0, amount).astype(ustore)
        if op == "SHIFT_LEFT":
            r = (a.astype(ustore) << safe).astype(self.storage(dtype))
            return xp.where(big, xp.zeros_like(r), r)
        if op == "SHIFT_RIGHT_LOGICAL":
            r = (a.astype(ustore) >> safe).astype(self.storage(dtype))
            return xp.where(big, xp.zeros_like(r), r)
        sstore = self.storage(self.signed_of(dtype))
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

    def compare(self, direction, a, b, dtype):
        xp = self.xp
        return {"EQ": xp.equal, "NE": xp.not_equal, "LT": xp.less, "LE": xp.less_equal,
                "GT": xp.greater, "GE": xp.greater_equal}[direction](a, b)

    # -- conversions ---------------------------------------------------------------------------
    def convert(self, x, src, dst):
        xp = self.xp
        if src == dst:
            return x
        if dst == "PRED":
            return x != 0
        if src == "PRED":
            return x.astype(self.storage(dst))
        if src in FLOATS and dst in FLOATS:
            return self.round_float(x.astype(self.storage(dst)), dst)
        if src in FLOATS:  # truncate toward zero, saturate, NaN -> 0
            bits = BITS[dst]
            lo, hi = (-(2.0 ** (bits - 1)), 2.0 ** (bits - 1)) if dst in SIGNED else (0.0,
                                                                                     2.0 ** bits)
            store = self.storage(dst)
            t = xp.trunc(x.astype(xp.float64))
            inside = (t >= lo) & (t < hi)
            v = xp.where(inside, t, 0.0).astype(store)
            v = xp.where(t >= hi, xp.asarray(int(hi) - 1, dtype=store), v)
            v = xp.where(t < lo, xp.asarray(int(lo), dtype=store), v)
            return xp.where(xp.isnan(t), xp.zeros_like(v), v)
        if dst in FLOATS:
            return self.round_float(x.astype(self.storage(dst)), dst)
        return x.astype(self.storage(dst))  # keeps the low bits, extends by the source's sign

    def bitcast(self, x, src, dst):
        raise NotImplementedError

    # -- data movement -------------------------------------------------------------------------
    def broadcast(self, x, in_dims, out_dims, mapping):
        shape = [1] * len(out_dims)
        for i, d in enumerate(mapping):
            shape[d] = in_dims[i]
        return self.xp.broadcast_to(self.xp.reshape(x, shape), out_dims)

    def constant(self, node):
        values = literal_values(node)
        if len(values) == 1:
            return self.full(node.dims, values[0], node.dtype)
        return self.xp.reshape(self.array(values, node.dtype), node.dims)

    def iota(self, node):
        xp = self.xp
        d = node.dimensions[0]
        index = xp.arange(node.dims[d], dtype=xp.int64)
        return self.broadcast(self.convert(index, "S64", node.dtype), (node.dims[d],), node.dims,
                              [d])

    def pad(self, x, value, node):
        xp = self.xp
        low, high, interior = node.pad_low, node.pad_high, node.pad_interior
        in_dims = x.shape
        full, place, crop = [], [], []
        for n, lo, hi, it in zip(in_dims, low, high, interior):
            size = max(lo, 0) + max(hi, 0) + n + max(n - 1, 0) * it
            full.append(size)
            place.append(slice(max(lo, 0), max(lo, 0) + max(n - 1, 0) * (it + 1) + 1, it + 1)
                         if n > 0 else slice(0, 0))
            crop.append(slice(-min(lo, 0), size + min(hi, 0)))
        out = self.set_slice(xp.broadcast_to(value, full), tuple(place), x)
        return out[tuple(crop)]

    def set_slice(self, base, index, x):
        out = self.xp.array(base)
        out[index] = x
        return out

    def reduce(self, kind, x, init, dims, dtype):
        xp = self.xp
        store = self.storage(dtype)
        if not dims:
            r = x
        elif dtype == "PRED":  # pred arithmetic is modulo 2: sum is parity, prod is all
            if kind == "REDUCE_SUM":
                r = xp.sum(x, axis=dims, dtype=xp.int64) % 2 == 1
            elif kind in ("REDUCE_PROD", "REDUCE_MIN", "REDUCE_AND"):
                r = xp.all(x, axis=dims)
            else:
                r = xp.any(x, axis=dims)
        elif kind == "REDUCE_SUM":
            r = xp.sum(x, axis=dims, dtype=store)
        elif kind == "REDUCE_PROD":
            r = xp.prod(x, axis=dims, dtype=store)
        elif kind == "REDUCE_MAX":
            r = xp.max(x, axis=dims)
        elif kind == "REDUCE_MIN":
            r = xp.min(x, axis=dims)
        elif kind in ("REDUCE_AND", "REDUCE_OR"):
            r = self.reduce_bitwise(kind, x, dims, dtype)
        else:
            raise NotImplementedError(f"reduce kind {kind}")
        return self.binary(COMBINERS[kind], init, r, dtype)

    def reduce_bitwise(self, kind, x, dims, dtype):
        raise NotImplementedError(f"{kind} over {dtype}")

    def rng_uniform(self, seed, node):
        raise NotImplementedError


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
            bits = x.view(self.storage(self.unsigned_of(src)))
        if dst in FLOATS:
            return self.bits_float(bits, dst)
        return bits.view(self.storage(dst)) if dst != "PRED" else bits != 0

    def set_slice(self, base, index, x):
        out = self.np.array(base)
        out[index] = x
        return out

    def reduce_bitwise(self, kind, x, dims, dtype):
        ufunc = self.np.bitwise_and if kind == "REDUCE_AND" else self.np.bitwise_or
        return ufunc.reduce(x, axis=dims)

    def philox_uniform(self, seed, count, stream):
        """rng-uniform's values at linear indices 0..count-1 (SEMANTICS.md, Random numbers)."""
        np = self.np
        mask = 0xFFFFFFFF
        index = np.arange(count, dtype=np.uint64)
        c0, c1 = index & np.uint64(mask), index >> np.uint64(32)
        c2 = np.full(count, stream & mask, dtype=np.uint64)
        c3 = np.zeros(count, dtype=np.uint64)
        k0, k1 = seed & mask, (seed >> 32) & mask
        for round_ in range(10):
            if round_ > 0:
                k0, k1 = (k0 + PHILOX_W0) & mask, (k1 + PHILOX_W1) & mask
            p0 = c0 * np.uint64(PHILOX_M0)
            p1 = c2 * np.uint64(PHILOX_M1)
            hi0, lo0 = p0 >> np.uint64(32), p0 & np.uint64(mask)
            hi1, lo1 = p1 >> np.uint64(32), p1 & np.uint64(mask)
            c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
        return (c0 >> np.uint64(8)).astype(np.float64) * 2.0 ** -24

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


# ---------------------------------------------------------------------------------------------
# PyTorch


class TorchBackend:
    """The op mapping on PyTorch. u32 and u64 are held in int32 and int64 (same bits), since
    PyTorch's unsigned types lack most CUDA kernels; the ops whose result depends on
    signedness (compare, max/min, division, right shifts, widening, to float) say so."""

    name = "torch"

    def __init__(self, device):
        import torch
        self.torch = torch
        self.device = device
        t = torch
        self.stores = {"PRED": t.bool, "S8": t.int8, "S32": t.int32, "S64": t.int64,
                       "U8": t.uint8, "U32": t.int32, "U64": t.int64, "F16": t.float16,
                       "BF16": t.bfloat16, "F32": t.float32, "F64": t.float64}

    def storage(self, dtype):
        return self.stores[dtype]

    def apply(self, node, xs, operand_nodes):
        t = self.torch
        op = node.op
        src = operand_nodes[0].dtype if operand_nodes else node.dtype
        if op in UNARY:
            return self.unary(op, xs[0], node.dtype)
        if op == "CONVERT":
            return self.convert(xs[0], src, node.dtype)
        if op == "BITCAST_CONVERT":
            x = xs[0]
            if src == "PRED":
                x = x.to(t.uint8)
            r = x.view(self.storage(node.dtype) if node.dtype != "PRED" else t.uint8)
            return r != 0 if node.dtype == "PRED" else r
        if op in BINARY:
            return self.binary(op, xs[0], xs[1], node.dtype)
        if op == "COMPARE":
            return self.compare(node.direction, xs[0], xs[1], src)
        if op == "SELECT":
            return t.where(xs[0], xs[1], xs[2])
        if op == "CLAMP":
            return self.binary("MIN", self.binary("MAX", xs[1], xs[0], node.dtype), xs[2],
                               node.dtype)
        if op == "CONSTANT":
            return self.constant(node)
        if op == "IOTA":
            d = node.dimensions[0]
            index = t.arange(node.dims[d], dtype=t.int64, device=self.device)
            return self.broadcast(self.convert(index, "S64", node.dtype), (node.dims[d],),
                                  node.dims, [d])
        if op == "BROADCAST":
            return self.broadcast(xs[0], operand_nodes[0].dims, node.dims, node.dimensions)
        if op == "RESHAPE":
            return xs[0].reshape(node.dims)
        if op == "TRANSPOSE":
            return xs[0].permute(*node.dimensions)
        if op == "SLICE":
            return xs[0][tuple(slice(s, l, st) for s, l, st in
                               zip(node.slice_starts, node.slice_limits, node.slice_strides))]
        if op == "CONCATENATE":
            return t.cat(xs, dim=node.dimensions[0])
        if op == "PAD":
            return self.pad(xs[0], xs[1], node)
        if op == "REVERSE":
            return t.flip(xs[0], dims=list(node.dimensions))
        if op == "REDUCE":
            return self.reduce(node.reduce_kind, xs[0], xs[1], tuple(node.dimensions), node.dtype)
        if op == "RNG_UNIFORM":
            # PyTorch's own generator: timing only, the values differ from stitch's Philox.
            u = t.rand(node.dims, dtype=t.float32, device=self.device)
            return u.to(self.storage(node.dtype))
        raise NotImplementedError(f"op {op} (node {node.name})")

    # Unsigned values in signed storage.
    def flip_sign(self, x, dtype):
        """Maps unsigned order onto signed order (for compare, max, min)."""
        return x ^ (-(1 << (BITS[dtype] - 1)))

    def unsigned_value(self, x, dtype):
        """The unsigned value of u32 bits, as int64."""
        return x.to(self.torch.int64) & 0xFFFFFFFF

    def unary(self, op, x, dtype):
        t = self.torch
        if op == "NEG":
            return -x if dtype != "PRED" else x
        if op == "ABS":
            return x if dtype in UNSIGNED else t.abs(x)
        if op == "SIGN":
            if dtype in UNSIGNED:
                return (x != 0).to(x.dtype)
            return t.sign(x)
        if op == "NOT":
            return t.logical_not(x) if dtype == "PRED" else t.bitwise_not(x)
        if op == "IS_FINITE":
            return t.isfinite(x)
        if op == "POPCNT":
            v = x.to(t.int64)
            if dtype in ("S8", "S32", "U32"):
                v = v & ((1 << BITS[dtype]) - 1)
            count = t.zeros_like(v)
            for _ in range(64):
                count = count + (v & 1)
                v = self.logical_shift_right64(v, 1)
            return count.to(x.dtype)
        if op == "ROUND":
            tr = t.trunc(x)
            return t.where(t.abs(x - tr) >= 0.5, tr + t.sign(x), tr)
        if op == "CBRT":
            return t.sign(x) * t.abs(x).pow(1.0 / 3.0)
        simple = {"EXP": t.exp, "LOG": t.log, "LOG1P": t.log1p, "EXPM1": t.expm1,
                  "TANH": t.tanh, "SQRT": t.sqrt, "SIN": t.sin, "COS": t.cos, "TAN": t.tan,
                  "FLOOR": t.floor, "CEIL": t.ceil, "ROUND_NEAREST_EVEN": t.round,
                  "LOGISTIC": t.sigmoid, "RSQRT": t.rsqrt, "ERF": t.erf}
        return simple[op](x)

    def logical_shift_right64(self, v, s):
        """Logical right shift of int64 bits by `s` (1..63, an int or an int64 tensor)."""
        if isinstance(s, int):
            return (v >> s) & ((1 << (64 - s)) - 1)
        ones = self.torch.ones_like(v)
        return (v >> s) & (self.torch.bitwise_left_shift(ones, 64 - s) - 1)

    def binary(self, op, a, b, dtype):
        t = self.torch
        if op == "ADD":
            return a + b if dtype != "PRED" else t.logical_xor(a, b)
        if op == "SUB":
            return a - b if dtype != "PRED" else t.logical_xor(a, b)
        if op == "MUL":
            return a * b if dtype != "PRED" else t.logical_and(a, b)
        if op in ("MAX", "MIN"):
            f = t.maximum if op == "MAX" else t.minimum
            if dtype in ("U32", "U64"):
                return self.flip_sign(f(self.flip_sign(a, dtype), self.flip_sign(b, dtype)),
                                      dtype)
            return f(a, b)
        if op == "DIV":
            if dtype in FLOATS:
                return a / b
            return self.int_div_rem(a, b, dtype, want_div=True)
        if op == "REM":
            if dtype in FLOATS:
                return t.fmod(a, b)
            return self.int_div_rem(a, b, dtype, want_div=False)
        if op == "POW":
            return t.pow(a, b)
        if op == "ATAN2":
            return t.atan2(a, b)
        if op == "AND":
            return t.bitwise_and(a, b)
        if op == "OR":
            return t.bitwise_or(a, b)
        if op == "XOR":
            return t.bitwise_xor(a, b)
        return self.shift(op, a, b, dtype)

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

    def compare(self, direction, a, b, dtype):
        t = self.torch
        if dtype in ("U32", "U64"):
            a, b = self.flip_sign(a, dtype), self.flip_sign(b, dtype)
        return {"EQ": t.eq, "NE": t.ne, "LT": t.lt, "LE": t.le, "GT": t.gt,
                "GE": t.ge}[direction](a, b)

    def convert(self, x, src, dst):
        t = self.torch
        if src == dst:
            return x
        if dst == "PRED":
            return x != 0
        store = self.storage(dst)
        if src == "PRED":
            return x.to(store)
        if src in FLOATS and dst in FLOATS:
            return x.to(store)
        if src in FLOATS:  # truncate toward zero, saturate, NaN -> 0
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
        if src == "U32":  # zero-extended
            return self.unsigned_value(x, src).to(store)
        if src == "U64" and dst in FLOATS:
            f = x.to(t.float64)
            return t.where(x < 0, f + 2.0 ** 64, f).to(store)
        return x.to(store)

    def broadcast(self, x, in_dims, out_dims, mapping):
        shape = [1] * len(out_dims)
        for i, d in enumerate(mapping):
            shape[d] = in_dims[i]
        return x.reshape(shape).expand(*out_dims)

    def constant(self, node):
        t = self.torch
        values = literal_values(node)
        if node.dtype in ("U32", "U64"):  # signed storage holds the same bits
            bits = BITS[node.dtype]
            values = [v - (1 << bits) if v >> (bits - 1) else v for v in values]
        store = self.storage(node.dtype)
        if len(values) == 1:
            return t.full(node.dims, values[0], dtype=store, device=self.device)
        return t.tensor(values, dtype=store, device=self.device).reshape(node.dims)

    def pad(self, x, value, node):
        full, place, crop = [], [], []
        for n, lo, hi, it in zip(x.shape, node.pad_low, node.pad_high, node.pad_interior):
            size = max(lo, 0) + max(hi, 0) + n + max(n - 1, 0) * it
            full.append(size)
            place.append(slice(max(lo, 0), max(lo, 0) + max(n - 1, 0) * (it + 1) + 1, it + 1)
                         if n > 0 else slice(0, 0))
            crop.append(slice(-min(lo, 0), size + min(hi, 0)))
        out = value.reshape([1] * len(full)).expand(*full).clone()
        out[tuple(place)] = x
        return out[tuple(crop)]

    def reduce(self, kind, x, init, dims, dtype):
        t = self.torch
        dims = list(dims)
        if not dims:
            r = x
        elif dtype == "PRED":  # modulo 2: sum is parity, prod is all
            as_int = x.to(t.int64)
            if kind == "REDUCE_SUM":
                r = t.sum(as_int, dim=dims) % 2 == 1
            elif kind in ("REDUCE_AND", "REDUCE_PROD", "REDUCE_MIN"):
                r = t.amin(as_int, dim=dims) != 0
            else:
                r = t.amax(as_int, dim=dims) != 0
        elif kind == "REDUCE_SUM":
            r = t.sum(x, dim=dims).to(x.dtype)  # integers wrap in their width
        elif kind == "REDUCE_PROD":
            r = x
            for d in sorted(dims, reverse=True):
                r = t.prod(r, dim=d)
            r = r.to(x.dtype)
        elif kind in ("REDUCE_MAX", "REDUCE_MIN"):
            f = t.amax if kind == "REDUCE_MAX" else t.amin
            if dtype in ("U32", "U64"):
                r = self.flip_sign(f(self.flip_sign(x, dtype), dim=dims), dtype)
            else:
                r = f(x, dim=dims)
        elif kind in ("REDUCE_AND", "REDUCE_OR"):
            f = t.bitwise_and if kind == "REDUCE_AND" else t.bitwise_or
            r = x
            for d in sorted(dims, reverse=True):
                parts = r.unbind(d)
                acc = parts[0]
                for p in parts[1:]:
                    acc = f(acc, p)
                r = acc
        else:
            raise NotImplementedError(f"reduce kind {kind}")
        if dtype == "PRED" and kind in ("REDUCE_MAX", "REDUCE_MIN"):
            return t.logical_or(init, r) if kind == "REDUCE_MAX" else t.logical_and(init, r)
        return self.binary(COMBINERS[kind], init, r, dtype)

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


# ---------------------------------------------------------------------------------------------
# check: the op mapping against the reference interpreter


def default_tolerance(dtype):
    return {"F16": 1e-2, "BF16": 1e-2, "F32": 1e-5, "F64": 1e-5}.get(dtype, 0.0)


def compare(expected, actual, dtype, tolerance):
    """compiler/src/ir/tensor_compare.cc's rule: |a - e| / max(|e|, rms(e), 1) <= tolerance;
    NaN matches NaN, infinities must match; integers exactly. Returns (pass, max_rel, text)."""
    import numpy as np
    if expected.shape != actual.shape:
        return False, math.inf, f"shape {actual.shape} differs from expected {expected.shape}"
    if dtype not in FLOATS:
        a = actual.astype(expected.dtype)
        bad = np.flatnonzero(a.reshape(-1) != expected.reshape(-1))
        if bad.size:
            k = int(bad[0])
            return False, math.inf, (f"{bad.size} mismatches; element {k}: got "
                                     f"{a.reshape(-1)[k]}, expected {expected.reshape(-1)[k]}")
        return True, 0.0, ""
    e = expected.astype(np.float64).reshape(-1)
    a = actual.astype(np.float64).reshape(-1)
    finite = np.isfinite(e)
    floor = max(1.0, math.sqrt(float(np.mean(e[finite] ** 2))) if finite.any() else 0.0)
    with np.errstate(all="ignore"):
        err = np.abs(a - e)
        nan_e, nan_a = np.isnan(e), np.isnan(a)
        err = np.where(nan_e | nan_a, np.where(nan_e & nan_a, 0.0, np.inf), err)
        inf = (np.isinf(e) | np.isinf(a)) & ~(nan_e | nan_a)
        err = np.where(inf, np.where(e == a, 0.0, np.inf), err)
        rel = err / np.maximum(np.abs(np.where(finite, e, 0.0)), floor)
    worst = float(rel.max()) if rel.size else 0.0
    bad = np.flatnonzero(rel > tolerance)
    if bad.size:
        k = int(bad[0])
        return False, worst, f"{bad.size} mismatches; element {k}: got {a[k]}, expected {e[k]}"
    return True, worst, ""


def make_backend(name, device):
    if name == "numpy":
        return NumpyBackend()
    if name == "jax":
        import jax
        return JaxBackend(jax.devices(device)[0] if device else None)
    if name == "torch":
        return TorchBackend(device or "cpu")
    raise ValueError(f"unknown backend {name}")


def command_check(args):
    import numpy as np
    with open(os.path.join(args.reference, "graphs.json")) as f:
        entries = json.load(f)["graphs"]
    only = parse_ids(args.only)
    backend = make_backend(args.backend, args.device)
    exact = args.backend == "numpy"
    failures, checked, mismatched = 0, 0, 0
    for entry in entries:
        if only and entry["id"] not in only:
            continue
        graph = Graph(entry["graph"])
        label = f"#{entry['id']} {entry['model']} / {entry['pattern']}"
        if graph.has_rng() and not exact:
            print(f"{label}: skipped (rng-uniform uses {args.backend}'s own generator)")
            continue
        params = [graph.nodes[p] for p in graph.parameters]
        inputs = [backend.from_numpy(np.load(os.path.join(args.reference, path)), node.dtype)
                  for path, node in zip(entry["inputs"], params)]
        try:
            outputs = build_function(graph, backend)(*inputs)
        except NotImplementedError as e:
            print(f"{label}: skipped ({args.backend} backend lacks {e})")
            continue
        except Exception as e:  # a mapping bug: report it against the graph
            failures += 1
            print(f"{label}: FAILED to run: {type(e).__name__}: {e}")
            continue
        checked += 1
        worst, problems = 0.0, []
        long_sum = graph.longest_reduction() > 1024
        for k, (path, o) in enumerate(zip(entry["outputs"], graph.outputs)):
            dtype = graph.nodes[o].dtype
            expected = np.load(os.path.join(args.reference, path))
            actual = backend.to_numpy(outputs[k], dtype)
            tolerance = default_tolerance(dtype)
            if not exact and dtype == "F32" and long_sum:
                tolerance *= 4  # f32 sums in another order than the interpreter's double
            ok, rel, text = compare(expected, actual, dtype, tolerance)
            worst = max(worst, rel)
            if not ok:
                problems.append(f"output {k} {dtype}{list(graph.nodes[o].dims)}: {text}")
        if problems:
            failures += 1
            mismatched += 1
            print(f"{label}: MISMATCH (max rel err {worst:.2e}); " + "; ".join(problems))
        else:
            print(f"{label}: ok (max rel err {worst:.2e})")
    print(f"{args.backend}: {checked - mismatched}/{checked} graphs match the reference "
          f"interpreter" + (f"; {failures} failed" if failures else ""))
    return 1 if failures or checked == 0 else 0


# ---------------------------------------------------------------------------------------------
# time: PyTorch eager, torch.compile, jax.jit

FRAMEWORKS = ("torch-eager", "torch-compile", "jax-jit")


def parse_ids(text):
    if not text:
        return set()
    if isinstance(text, (list, tuple)):
        return {int(i) for i in text}
    return {int(i) for i in str(text).split(",") if i}


def summarize(times_us):
    return {"median_us": statistics.median(times_us), "min_us": min(times_us),
            "max_us": max(times_us), "runs": len(times_us)}


def random_inputs_torch(torch, backend, graph, generator):
    """Floats uniform in [-2, 2), integers in [0, 16), pred 0/1, on the backend's device."""
    inputs = []
    for p in graph.parameters:
        node = graph.nodes[p]
        dims = list(node.dims)
        device = backend.device
        if node.dtype in FLOATS:
            x = torch.rand(dims, generator=generator, device=device, dtype=torch.float32) * 4 - 2
            x = x.to(backend.storage(node.dtype))
        elif node.dtype == "PRED":
            x = torch.rand(dims, generator=generator, device=device) < 0.5
        else:
            x = torch.randint(0, 16, dims, generator=generator, device=device,
                              dtype=backend.storage(node.dtype))
        inputs.append(x)
    return inputs


def time_torch(torch, fn, inputs, settings, on_gpu):
    for _ in range(settings["warmup"]):
        fn(*inputs)
    if not on_gpu:
        times = []
        for _ in range(settings["repeats"]):
            start = time.perf_counter()
            fn(*inputs)
            times.append((time.perf_counter() - start) * 1e6)
        return times
    torch.cuda.synchronize()
    flush = None
    if settings["flush_l2"]:
        flush = torch.empty(settings["flush_bytes"], dtype=torch.uint8, device="cuda")
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(settings["repeats"])]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(settings["repeats"])]
    for i in range(settings["repeats"]):
        if flush is not None:
            flush.fill_(i & 0x7F)
        starts[i].record()
        fn(*inputs)
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]


def run_torch(graphs, settings, modes, device, results):
    try:
        import torch
    except Exception as e:  # not installed, or broken
        for mode in modes:
            results[mode] = {"note": f"PyTorch not importable by {sys.executable} ({e})"}
        return
    on_gpu = device == "cuda"
    if on_gpu and not torch.cuda.is_available():
        for mode in modes:
            results[mode] = {"version": torch.__version__,
                             "note": "no CUDA device visible to PyTorch"}
        return
    for mode in modes:
        results[mode] = {"version": torch.__version__, "note": "", "times": {}}
        if not on_gpu:
            results[mode]["note"] = "CPU (no GPU timing)"
    backend = TorchBackend(device)
    generator = torch.Generator(device=device)
    for entry in graphs:
        graph = Graph(entry["graph"])
        generator.manual_seed(entry["id"])
        try:
            inputs = random_inputs_torch(torch, backend, graph, generator)
        except Exception as e:
            for mode in modes:
                results[mode]["times"][str(entry["id"])] = {"error": f"inputs: {e}"}
            continue
        for mode in modes:
            key = str(entry["id"])
            try:
                fn = build_function(graph, backend)
                if mode == "torch-compile":
                    # One code object serves every graph: start each from a clean cache, or
                    # dynamo stops recompiling after a few graphs and runs them eagerly.
                    torch._dynamo.reset()
                    fn = torch.compile(fn, dynamic=False)
                with torch.no_grad():
                    results[mode]["times"][key] = summarize(
                        time_torch(torch, fn, inputs, settings, on_gpu))
            except Exception as e:
                results[mode]["times"][key] = {"error": error_text(e)}
                if on_gpu:
                    torch.cuda.synchronize()
            print(f"{mode} #{entry['id']}: {describe_time(results[mode]['times'][key])}",
                  file=sys.stderr)
        del inputs
        if on_gpu:
            torch.cuda.empty_cache()


def random_inputs_numpy(graph, seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    inputs = []
    for p in graph.parameters:
        node = graph.nodes[p]
        if node.dtype in FLOATS:
            inputs.append(rng.uniform(-2, 2, size=node.dims).astype(np.float32))
        elif node.dtype == "PRED":
            inputs.append(rng.uniform(size=node.dims) < 0.5)
        else:
            inputs.append(rng.integers(0, 16, size=node.dims).astype(
                {"S8": np.int8, "S32": np.int32, "S64": np.int64, "U8": np.uint8,
                 "U32": np.uint32, "U64": np.uint64}[node.dtype]))
    return inputs


def run_jax(graphs, settings, device, results):
    mode = "jax-jit"
    try:
        import jax
    except Exception as e:
        results[mode] = {"note": f"JAX not importable by {sys.executable} ({e})"}
        return
    on_gpu = device == "cuda"
    try:
        target = jax.devices("gpu" if on_gpu else "cpu")[0]
    except Exception:
        results[mode] = {"version": jax.__version__, "note": "no GPU visible to JAX"}
        return
    results[mode] = {"version": jax.__version__, "note": "" if on_gpu else "CPU (no GPU timing)",
                     "times": {}}
    backend = JaxBackend(target)
    jnp = backend.xp
    flush = None
    if settings["flush_l2"] and on_gpu:
        flush = jax.device_put(jnp.zeros(settings["flush_bytes"] // 4, jnp.float32), target)
        bump = jax.jit(lambda b: b + 1)
    for entry in graphs:
        graph = Graph(entry["graph"])
        key = str(entry["id"])
        try:
            inputs = [backend.from_numpy(a, graph.nodes[p].dtype) for a, p in
                      zip(random_inputs_numpy(graph, entry["id"]), graph.parameters)]
            fn = jax.jit(build_function(graph, backend))
            for _ in range(max(settings["warmup"], 1)):
                jax.block_until_ready(fn(*inputs))
            times = []
            for _ in range(settings["repeats"]):
                if flush is not None:
                    flush = bump(flush)
                    flush.block_until_ready()
                start = time.perf_counter()
                jax.block_until_ready(fn(*inputs))
                times.append((time.perf_counter() - start) * 1e6)
            results[mode]["times"][key] = summarize(times)
        except Exception as e:
            results[mode]["times"][key] = {"error": error_text(e)}
        print(f"{mode} #{entry['id']}: {describe_time(results[mode]['times'][key])}",
              file=sys.stderr)


def error_text(e):
    """One line for the table: the exception's type and the first line of its message."""
    return f"{type(e).__name__}: {e}".splitlines()[0][:200]


def describe_time(r):
    return f"{r['median_us']:.1f} us" if "median_us" in r else r.get("error", "-")


def command_time(args):
    settings = {"warmup": 10, "repeats": 100, "flush_l2": True, "flush_bytes": 64 << 20}
    graphs_path = args.graphs or os.path.join(args.run_dir, "graphs.json")
    out_path = args.out or os.path.join(args.run_dir, "frameworks.json")
    ids = set()
    if args.run_dir and os.path.exists(os.path.join(args.run_dir, "device.json")):
        with open(os.path.join(args.run_dir, "device.json")) as f:
            device = json.load(f)
        settings.update(warmup=device["warmup"], repeats=device["repeats"],
                        flush_l2=device["flush_l2"])
        settings["flush_bytes"] = max(2 * int(device.get("l2_bytes", 0)), 64 << 20)
        ids = set(device.get("ids", []))
    if args.warmup is not None:
        settings["warmup"] = args.warmup
    if args.repeats is not None:
        settings["repeats"] = args.repeats
    if args.no_flush_l2:
        settings["flush_l2"] = False
    ids = parse_ids(args.only) or ids
    with open(graphs_path) as f:
        graphs = [g for g in json.load(f)["graphs"] if not ids or g["id"] in ids]
    wanted = [m.strip() for m in args.frameworks.split(",") if m.strip()]
    for m in wanted:
        if m not in FRAMEWORKS:
            print(f"frameworks.py: unknown framework {m}; known: {', '.join(FRAMEWORKS)}",
                  file=sys.stderr)
            return 2
    results = {}
    torch_modes = [m for m in wanted if m.startswith("torch")]
    if torch_modes:
        run_torch(graphs, settings, torch_modes, args.device, results)
    if "jax-jit" in wanted:
        run_jax(graphs, settings, args.device, results)
    report = {"python": sys.version.split()[0], "executable": sys.executable,
              "device": args.device, "settings": settings, "frameworks": results}
    with open(out_path, "w") as f:
        json.dump(report, f, indent=1)
    for mode, r in results.items():
        timed = len([t for t in r.get("times", {}).values() if "median_us" in t])
        print(f"{mode}: {timed}/{len(graphs)} graphs timed" +
              (f" ({r['note']})" if r.get("note") else ""), file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------
# merge: one CSV and one markdown table per device

FRAMEWORK_LABELS = {"torch-eager": "PyTorch eager", "torch-compile": "torch.compile",
                    "jax-jit": "jax.jit"}


def number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def fmt(v, digits):
    return "-" if v is None else f"{v:.{digits}f}"


def geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def command_merge(args):
    with open(os.path.join(args.run_dir, "stitch.csv")) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(args.run_dir, "device.json")) as f:
        device = json.load(f)
    frameworks_path = args.frameworks or os.path.join(args.run_dir, "frameworks.json")
    report = {"frameworks": {}}
    if os.path.exists(frameworks_path):
        with open(frameworks_path) as f:
            report = json.load(f)
    fw = report.get("frameworks", {})
    notes = dict(args.note or [])
    for mode in FRAMEWORKS:
        if mode not in fw:
            fw[mode] = {"note": notes.get(mode) or args.missing_note or "not run"}

    def fw_time(mode, rid):
        t = fw[mode].get("times", {}).get(str(rid), {})
        return t.get("median_us")

    peak = float(device.get("peak_bytes_per_second") or 0)
    fields = ["id", "subgraph", "lower_bound_bytes", "stitch_kernels", "baseline_kernels",
              "stitch_us", "baseline_us", "speedup_vs_baseline", "stitch_gbps", "stitch_pct_peak",
              "baseline_gbps", "baseline_pct_peak"]
    fields += [f"{m.replace('-', '_')}_us" for m in FRAMEWORKS]
    fields += [f"speedup_vs_{m.replace('-', '_')}" for m in FRAMEWORKS]
    fields += ["stitch_matches", "baseline_matches", "stitch_loaded", "error"]
    merged = []
    for row in rows:
        rid = int(row["id"])
        s_us, b_us = number(row["stitch_us"]), number(row["baseline_us"])
        out = {"id": rid, "subgraph": row["subgraph"],
               "lower_bound_bytes": row["lower_bound_bytes"],
               "stitch_kernels": row["stitch_kernels"], "baseline_kernels": row["baseline_kernels"],
               "stitch_us": row["stitch_us"], "baseline_us": row["baseline_us"],
               "speedup_vs_baseline": row["speedup"], "stitch_gbps": row["stitch_gbps"],
               "stitch_pct_peak": row["stitch_pct_peak"], "baseline_gbps": row["baseline_gbps"],
               "baseline_pct_peak": row["baseline_pct_peak"],
               "stitch_matches": row["stitch_matches"],
               "baseline_matches": row["baseline_matches"], "stitch_loaded": row["stitch_loaded"],
               "error": row["error"]}
        for mode in FRAMEWORKS:
            t = fw_time(mode, rid)
            key = mode.replace("-", "_")
            out[f"{key}_us"] = "" if t is None else f"{t:.2f}"
            out[f"speedup_vs_{key}"] = "" if t is None or not s_us else f"{t / s_us:.3f}"
        out["_s_us"], out["_b_us"] = s_us, b_us
        merged.append(out)

    slug = device.get("slug", "unknown")
    os.makedirs(args.results, exist_ok=True)
    csv_path = os.path.join(args.results, f"gpu_{slug}.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for out in merged:
            w.writerow(out)

    loaded = sorted({o["stitch_loaded"] for o in merged if o["stitch_loaded"] not in ("", "-")})
    loaded_text = {"cubin": "loaded as cubin", "ptx": "loaded as PTX (JIT-compiled by the driver)"}
    lines = [f"# GPU benchmark: {device['name']}", ""]
    lines.append(
        f"{device.get('date', '')}. {device['name']} ({device['arch']}, {device['sms']} SMs, "
        f"{int(device['memory_bytes']) / 2 ** 30:.0f} GiB), driver {device['driver_version']}; "
        f"peak DRAM bandwidth {peak / 1e9:.0f} GB/s ({device['peak_source']}). Stitch kernels "
        f"compiled for {device['target']}"
        + (f", {' and '.join(loaded_text.get(x, x) for x in loaded)}" if loaded else "")
        + f". Every time is the median of {device['repeats']} runs "
        f"of the whole subgraph after {device['warmup']} warm-up "
        f"run{'' if device['warmup'] == 1 else 's'}"
        + (", with the L2 cache flushed before each run." if device["flush_l2"] else "."))
    lines.append("")
    header = ["id", "subgraph", "kernels stitch / base", "stitch µs", "base µs", "speedup",
              "stitch GB/s", "% of peak"] + [f"{FRAMEWORK_LABELS[m]} µs" for m in FRAMEWORKS] + \
             ["speedup over fastest framework", "correct"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|---:|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(FRAMEWORKS) +
                 "---:|:---:|")
    for out in merged:
        fw_times = [number(out[f"{m.replace('-', '_')}_us"]) for m in FRAMEWORKS]
        best = min([t for t in fw_times if t], default=None)
        correct = "yes" if out["stitch_matches"] == "yes" and out["baseline_matches"] == "yes" \
            else ("NO" if "NO" in (out["stitch_matches"], out["baseline_matches"]) else "-")
        cells = [str(out["id"]), out["subgraph"],
                 f"{out['stitch_kernels'] or '-'} / {out['baseline_kernels'] or '-'}",
                 fmt(out["_s_us"], 1), fmt(out["_b_us"], 1),
                 fmt(number(out["speedup_vs_baseline"]), 2),
                 fmt(number(out["stitch_gbps"]), 0), fmt(number(out["stitch_pct_peak"]), 1)]
        cells += [fmt(t, 1) for t in fw_times]
        cells += [fmt(best / out["_s_us"], 2) if best and out["_s_us"] else "-", correct]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    base_speedups = [number(o["speedup_vs_baseline"]) for o in merged]
    timed = sum(1 for s in base_speedups if s)
    if timed:
        summary = [f"- Stitched plans over the XLA-style baseline plans: "
                   f"{fmt(geomean(base_speedups), 2)}x (geometric mean over {timed} subgraphs)."]
    else:
        summary = ["- Stitched and baseline plans: not timed."]
    for mode in FRAMEWORKS:
        key = mode.replace("-", "_")
        speedups = [number(o[f"speedup_vs_{key}"]) for o in merged]
        timed = sum(1 for s in speedups if s)
        if timed:
            summary.append(f"- Over {FRAMEWORK_LABELS[mode]} ({fw[mode].get('version', '')}): "
                           f"{fmt(geomean(speedups), 2)}x (geometric mean over {timed} subgraphs).")
        else:
            why = fw[mode].get("note") or "no results"
            summary.append(f"- {FRAMEWORK_LABELS[mode]}: not timed: {why}.")
    pct = [number(o["stitch_pct_peak"]) for o in merged if number(o["stitch_pct_peak"])]
    if pct:
        summary.append(f"- Stitched plans reach a median {statistics.median(pct):.1f}% of peak "
                       f"bandwidth (lower-bound bytes over measured time).")
    wrong = [str(o["id"]) for o in merged if "NO" in (o["stitch_matches"], o["baseline_matches"])]
    if wrong:
        summary.append(f"- Outputs differ from the reference interpreter for #{', #'.join(wrong)}.")
    errors = [f"#{o['id']}: {o['error']}" for o in merged if o["error"]]
    for mode in FRAMEWORKS:
        for rid, t in sorted(fw[mode].get("times", {}).items(), key=lambda kv: int(kv[0])):
            if "error" in t:
                errors.append(f"{FRAMEWORK_LABELS[mode]} #{rid}: {t['error']}")
    lines += summary
    if errors:
        lines += ["", "Errors:", ""] + [f"- {e}" for e in errors]
    lines += ["", "How to read it:", "",
              "- GB/s counts the lower-bound bytes (every input read once, every output written "
              "once) over the measured time, so a plan that moves more bytes scores lower.",
              "- Stitch and PyTorch times are CUDA-event times on the GPU (launch gaps "
              "included); jax.jit times are host wall-clock around one call and "
              "`block_until_ready`, so they include dispatch.",
              "- The frameworks run the same op graph as stitch, one framework op per stitch op "
              "(eager runs them one by one; torch.compile and jax.jit fuse as they can), not "
              "hand-written library kernels such as `F.layer_norm`.",
              "- rng-uniform uses each framework's own generator (torch.rand, jax.random), "
              "stitch's kernels Philox-4x32-10. PyTorch holds u32 and u64 in int32 and int64, "
              "so its unsigned shifts and compares take a few extra ops.",
              "- correct: both plans' outputs match the reference interpreter at the emulation "
              "scale on this GPU."]
    md_path = os.path.join(args.results, f"gpu_{slug}.md")
    with open(md_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {csv_path} and {md_path}")
    return 0


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("time", help="time PyTorch eager, torch.compile and jax.jit")
    t.add_argument("--run-dir", help="gpu_bench --out-dir: graphs.json and device.json")
    t.add_argument("--graphs", help="graphs.json (default: RUN_DIR/graphs.json)")
    t.add_argument("--out", help="results (default: RUN_DIR/frameworks.json)")
    t.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    t.add_argument("--warmup", type=int)
    t.add_argument("--repeats", type=int)
    t.add_argument("--only", help="suite ids, e.g. 1,12")
    t.add_argument("--no-flush-l2", action="store_true")
    t.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    c = sub.add_parser("check", help="compare a backend with the reference interpreter")
    c.add_argument("reference", help="gpu_bench --export-reference DIR")
    c.add_argument("--backend", default="numpy", choices=("numpy", "jax", "torch"))
    c.add_argument("--device", help="jax or torch device (default: cpu)")
    c.add_argument("--only", help="suite ids, e.g. 1,12")
    m = sub.add_parser("merge", help="write bench/results/gpu_<device>.csv and .md")
    m.add_argument("--run-dir", required=True)
    m.add_argument("--results", required=True)
    m.add_argument("--frameworks", help="frameworks.json (default: RUN_DIR/frameworks.json)")
    m.add_argument("--missing-note", help="why frameworks were not run, for the table")
    m.add_argument("--note", nargs=2, action="append", metavar=("FRAMEWORK", "TEXT"))
    args = parser.parse_args(argv)
    if args.command == "time":
        if not args.run_dir and not (args.graphs and args.out):
            parser.error("time needs --run-dir, or --graphs and --out")
        return command_time(args)
    if args.command == "check":
        if args.backend != "numpy" and args.device is None:
            args.device = "cpu"
        return command_check(args)
    return command_merge(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
