"""The stitch graph model that frameworks.py rebuilds in each framework.

gpu_bench exports graphs in the protobuf JSON form of stitch.v1.Graph (proto/stitch/v1/
graph.proto): enums by name, defaults omitted, int64 values as strings. This module reads that
form, names the dtype classes the op mapping distinguishes, and turns a graph into a Python
function over any backend (see op_mapping.py). It needs only the standard library.
"""

import math

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


def unsigned_of(dtype):
    """The unsigned dtype of the same width as an integer dtype."""
    return {"S8": "U8", "S32": "U32", "S64": "U64"}.get(dtype, dtype)


def signed_of(dtype):
    """The signed dtype of the same width as an integer dtype."""
    return {"U8": "S8", "U32": "S32", "U64": "S64"}.get(dtype, dtype)


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


def parse_ids(text):
    """Suite ids from `--only` ("1,12"), or from a list; an empty set selects every graph."""
    if not text:
        return set()
    if isinstance(text, (list, tuple)):
        return {int(i) for i in text}
    return {int(i) for i in str(text).split(",") if i}


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
    """Returns f(*params) -> tuple of outputs, evaluating `graph` with `backend` op by op;
    each output is laid out as the graph lays it out (`Backend.output`).

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
        return tuple(backend.output(values[o]) for o in outputs)

    return run
