"""`frameworks.py check`: a backend's outputs against stitch's reference interpreter.

`gpu_bench --export-reference DIR` writes each suite graph with the inputs it drew and the
interpreter's outputs as .npy files. This module runs a backend on those inputs and compares
every output by the interpreter's own rule, so the op mapping is tested on machines without a
GPU or a framework (the NumPy backend matches the interpreter exactly but for the order of
float additions).
"""

import json
import math
import os

from array_backends import JaxBackend, NumpyBackend
from stitch_graph import FLOATS, Graph, build_function, parse_ids
from torch_backend import TorchBackend


def default_tolerance(dtype):
    return {"F16": 1e-2, "BF16": 1e-2, "F32": 1e-5, "F64": 1e-5}.get(dtype, 0.0)


def compare(expected, actual, dtype, tolerance):
    """compiler/reference/src/tensor_compare.cc's rule: |a - e| / max(|e|, rms(e), 1) <= tolerance;
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
