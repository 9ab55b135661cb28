"""`frameworks.py time`: PyTorch eager, torch.compile and jax.jit on the suite's graphs.

Each framework runs the same op graph as stitch, one framework op per stitch op, on random
inputs, with the warm-up, repeat and L2-flush settings gpu_bench used (from its device.json).
A framework that is not importable, or sees no GPU, gets a note instead of times.

Two times per graph on a GPU, as gpu_bench gives for stitch: the host's view (CUDA events for
PyTorch, wall clock around a call and `block_until_ready` for jax.jit), and the kernel time,
the sum of each run's kernel durations as the framework's profiler records them (torch.profiler;
jax.profiler), in a second series of the same number of runs. Memsets and copies are not
kernels and are left out, as gpu_bench's CUPTI records leave them out.
"""

import glob
import json
import os
import statistics
import sys
import tempfile
import time

from array_backends import JaxBackend
from stitch_graph import FLOATS, Graph, build_function, parse_ids
from torch_backend import TorchBackend

FRAMEWORKS = ("torch-eager", "torch-compile", "jax-jit")


def summarize(times_us):
    return {"median_us": statistics.median(times_us), "min_us": min(times_us),
            "max_us": max(times_us), "runs": len(times_us)}


def kernel_time_between_separators(spans, runs, is_separator):
    """Each run's summed kernel durations from (start, end, name) spans, in their unit.

    A separator span (the L2 flush that precedes each run) starts the next run and is no
    run's kernel. Raises ValueError unless the spans make exactly `runs` runs.
    """
    sums = []
    for start, end, name in sorted(spans):
        if is_separator(name):
            sums.append(0.0)
        elif not sums:
            raise ValueError(f"kernel {name} ran before the first run started")
        elif end < start:
            raise ValueError(f"kernel {name} ends before it starts")
        else:
            sums[-1] += end - start
    if len(sums) != runs:
        raise ValueError(f"the profile holds {len(sums)} runs, {runs} were made")
    return sums


def kernel_time_in_windows(spans, windows):
    """Each window's summed kernel durations from (start, end, name) spans; a span belongs to
    the (start, end) window its start lies in, and spans outside every window (the L2 flush
    between runs) to none; the runs' windows do not overlap. Raises ValueError when a window
    holds no kernel."""
    sums = [0.0] * len(windows)
    for start, end, name in spans:
        for w, (first, last) in enumerate(windows):
            if first <= start <= last:
                sums[w] += end - start
                break
    empty = [w for w, total in enumerate(sums) if total == 0]
    if empty:
        raise ValueError(f"{len(empty)} of {len(windows)} runs hold no kernel record")
    return sums


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


# The name part of the kernel that fills a uint8 tensor: the L2 flush, and the separator between
# profiled runs (no suite graph computes in uint8).
TORCH_SEPARATOR = "FillFunctor<unsigned char>"


def time_torch_kernels(torch, fn, inputs, settings):
    """Kernel time of each run, in µs, from torch.profiler's CUDA kernel records."""
    from torch.profiler import ProfilerActivity, profile
    # Without an L2 flush a one-byte fill still marks where each run starts.
    marker = torch.empty(settings["flush_bytes"] if settings["flush_l2"] else 1,
                         dtype=torch.uint8, device="cuda")
    runs = settings["repeats"]
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(runs):
            marker.fill_(i & 0x7F)
            fn(*inputs)
        torch.cuda.synchronize()
    spans = [(ev.time_range.start, ev.time_range.end, ev.name) for ev in prof.events()
             if ev.device_type == torch.autograd.DeviceType.CUDA
             and not ev.name.startswith(("Memset", "Memcpy"))]
    return kernel_time_between_separators(spans, runs, lambda name: TORCH_SEPARATOR in name)


def add_kernel_time(result, measure):
    """Puts `measure()`'s per-run kernel times into `result`, or the reason there are none."""
    try:
        result["kernel"] = summarize(measure())
    except Exception as e:  # the profiler's failure costs the kernel time, not the row
        result["kernel"] = {"error": error_text(e)}


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
                    if on_gpu:
                        add_kernel_time(results[mode]["times"][key],
                                        lambda: time_torch_kernels(torch, fn, inputs, settings))
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


def time_jax_kernels(jax, fn, inputs, runs, flush):
    """Kernel time of each run, in µs, from jax.profiler's trace: the GPU's kernel records
    that start inside each run's annotation on the host (so the L2 flush, run between the
    annotations, is no run's)."""
    from jax.profiler import ProfileData
    with tempfile.TemporaryDirectory() as folder:
        jax.profiler.start_trace(folder)
        try:
            for i in range(runs):
                if flush is not None:
                    flush()
                with jax.profiler.TraceAnnotation(f"stitch-run-{i}"):
                    jax.block_until_ready(fn(*inputs))
        finally:
            jax.profiler.stop_trace()
        traces = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
        if len(traces) != 1:
            raise ValueError(f"jax.profiler wrote {len(traces)} traces, not one")
        profile = ProfileData.from_file(traces[0])
    windows, spans = jax_run_windows_and_kernels(profile, runs)
    return [ns / 1e3 for ns in kernel_time_in_windows(spans, windows)]


def jax_run_windows_and_kernels(profile, runs):
    """The (start, end) of each run's annotation on the host, and (start, end, name) of every
    kernel on the GPU's streams, in nanoseconds."""
    windows = [None] * runs
    spans = []
    for plane in profile.planes:
        if plane.name.startswith("/host:"):
            for line in plane.lines:
                for e in line.events:
                    if e.name.startswith("stitch-run-"):
                        windows[int(e.name[len("stitch-run-"):])] = (
                            e.start_ns, e.start_ns + e.duration_ns)
        elif plane.name.startswith("/device:GPU:"):
            for line in plane.lines:
                # The streams' lines hold the kernels; others ("XLA Ops", "XLA Modules")
                # repeat them grouped another way.
                if not line.name.startswith("Stream"):
                    continue
                spans += [(e.start_ns, e.start_ns + e.duration_ns, e.name) for e in line.events
                          if not e.name.startswith(("Memset", "Memcpy"))]
    missing = [i for i, w in enumerate(windows) if w is None]
    if missing:
        raise ValueError(f"the trace lacks {len(missing)} of {runs} run annotations")
    if not spans:
        raise ValueError("the trace holds no GPU kernel records")
    return windows, spans


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
            if on_gpu:
                add_kernel_time(results[mode]["times"][key], lambda: time_jax_kernels(
                    jax, fn, inputs, settings["repeats"],
                    (lambda: bump(flush).block_until_ready()) if flush is not None else None))
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
