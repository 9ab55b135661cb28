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

The modules beside this script: stitch_graph.py reads the graphs, op_mapping.py maps stitch ops
onto a framework for every backend, array_backends.py (NumPy, JAX) and torch_backend.py say
what differs per framework, and reference_check.py, timing.py and merge.py are the commands.
"""

import argparse
import os
import sys

# The modules beside this script, from any directory, and also where Python leaves the
# script's directory off sys.path (python3 -P or -I).
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

from merge import command_merge  # noqa: E402
from reference_check import command_check  # noqa: E402
from timing import FRAMEWORKS, command_time  # noqa: E402


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
