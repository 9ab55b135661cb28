"""``python -m stitch``: the everyday ``stitchctl`` verbs that talk to a running stitchd.

    python -m stitch compile FILE [--daemon ADDR] [--target sm_90] [--json]
    python -m stitch lookup FILE [--daemon ADDR] [--target sm_90] [--json]
    python -m stitch stats [--daemon ADDR] [--json]
    python -m stitch cache ls [--daemon ADDR] [--limit N] [--json]
    python -m stitch cache get KEY [--daemon ADDR] [--out FILE] [--json]
    python -m stitch runtimes [--daemon ADDR] [--limit N] [--json|--csv]

``ADDR`` is ``unix:///path``, a bare socket path, or ``host:port``; the default is
``unix:///run/stitchd/stitchd.sock``. ``FILE`` is one HLO module as text or a binary
``stitch.v1.Graph`` (stitchctl also reads a graph's JSON form and splits a whole model into its
subgraphs; this tool sends the file as it is). Output follows stitchctl's; errors, fallbacks
included, exit 1 with one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .client import DEFAULT_ADDRESS, Client, DaemonError, Result

PROG = "python -m stitch"


class _Failure(Exception):
    """Ends the command with one line on stderr and exit status 1."""


def _client(args: argparse.Namespace) -> Client:
    # A job's 50 ms lookup deadline assumes a warm channel; a one-shot tool connects first.
    return Client(args.daemon, lookup_deadline_ms=2000)


def _load(path: str) -> Tuple[Union[str, bytes], str]:
    """Returns (subgraph, name): HLO text as str, or a binary Graph as bytes."""
    try:
        data = pathlib.Path(path).read_bytes()
    except OSError as e:
        raise _Failure("%s: %s" % (path, e.strerror or e)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data, pathlib.Path(path).stem
    match = re.search(r"^\s*HloModule\s+([^\s,]+)", text, re.MULTILINE)
    if match:
        return text, match.group(1)
    if text.lstrip().startswith("{"):
        raise _Failure("%s: a graph in JSON form: use stitchctl, or send HLO text or a binary "
                       "stitch.v1.Graph" % path)
    return data, pathlib.Path(path).stem


def _result_json(r: Result, name: str, ms: float) -> Dict[str, Any]:
    return {
        "key": r.key,
        "graph": name,
        "source": r.outcome,
        "ms": ms,
        "bytes": len(r.bundle),
        "kernels": [{"name": k.name, "ptx_bytes": len(k.ptx.encode()),
                     "cubin_bytes": len(k.cubin)} for k in r.kernels],
    }


def _compile_or_lookup(args: argparse.Namespace, lookup: bool) -> int:
    subgraph, name = _load(args.file)
    with _client(args) as client:
        start = time.monotonic()
        r = client.lookup(subgraph, args.target) if lookup else client.compile(subgraph,
                                                                              args.target)
        ms = (time.monotonic() - start) * 1e3
    if not r.ok:
        raise _Failure("%s: %s" % (args.file, r.reason))
    if args.json:
        print(json.dumps(_result_json(r, name, ms), indent=2))
    else:
        print("%-10s %s %s  %d kernel(s)  %.1f ms" % (r.outcome, r.key, name, len(r.kernels), ms))
    return 0


def _admin(args: argparse.Namespace, call: str, *call_args: Any) -> Any:
    with _client(args) as client:
        try:
            return getattr(client, call)(*call_args)
        except DaemonError as e:
            raise _Failure("%s: %s" % (args.daemon, e.reason)) from None


def _stats(args: argparse.Namespace) -> int:
    stats = _admin(args, "stats")
    if args.json:
        print(json.dumps(stats, indent=2, sort_keys=True))
        return 0
    for name in sorted(stats):
        print("%s: %s" % (name, json.dumps(stats[name])))
    return 0


def _cache_ls(args: argparse.Namespace) -> int:
    entries = _admin(args, "list_entries", args.limit)
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    print("%-64s  %-6s  %7s  %9s  %10s  %s" % ("KEY", "TARGET", "KERNELS", "BYTES", "COMPILE_MS",
                                             "PLAN"))
    for e in entries:
        print("%-64s  %-6s  %7u  %9u  %10.1f  %s" % (e["key"], e["target"], e["kernels"],
                                                    e["bytes"], e["compile_seconds"] * 1e3,
                                                    e["plan"]))
    return 0


def _cache_get(args: argparse.Namespace) -> int:
    with _client(args) as client:
        r = client.get_entry(args.key)
    if not r.ok:
        raise _Failure("%s: %s" % (args.daemon, r.reason))
    if args.out:
        try:
            pathlib.Path(args.out).write_bytes(r.bundle)
        except OSError:
            raise _Failure("cannot write " + args.out) from None
        print("wrote %d bytes to %s" % (len(r.bundle), args.out))
        return 0
    if args.json:
        print(json.dumps(_result_json(r, "", 0.0), indent=2))
        return 0
    print("key      %s\nsource   %s\nbytes    %d" % (r.key, r.outcome, len(r.bundle)))
    for k in r.kernels:
        print("  %-28s ptx=%dB cubin=%dB" % (k.name, len(k.ptx.encode()), len(k.cubin)))
    return 0


def _runtime_rows(runtimes: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One row per key and timed kernels: "stitched", then each timed fallback by name."""
    rows = []
    for r in runtimes:
        if r["stitched"]["samples"] > 0:
            rows.append({"runtimes": r, "kernels": "stitched", "timing": r["stitched"],
                         "modeled": r["modeled_stitched_seconds"]})
        for baseline in sorted(r["fallback"]):
            rows.append({"runtimes": r, "kernels": baseline, "timing": r["fallback"][baseline],
                         "modeled": r["modeled_fallback_seconds"].get(baseline, 0.0)})
    return rows


def _mean(timing: Dict[str, Any]) -> float:
    return timing["seconds_sum"] / timing["samples"] if timing["samples"] else 0.0


def _runtimes(args: argparse.Namespace) -> int:
    rows = _runtime_rows(_admin(args, "list_runtimes", args.limit))
    if args.json:
        print(json.dumps([{
            "key": row["runtimes"]["key"],
            "target": row["runtimes"]["target"],
            "kernels": row["kernels"],
            "samples": row["timing"]["samples"],
            "measured_seconds": _mean(row["timing"]),
            "min_seconds": row["timing"]["min_seconds"],
            "max_seconds": row["timing"]["max_seconds"],
            "reports": row["timing"]["reports"],
            "modeled_seconds": row["modeled"],
            "invocations": row["runtimes"]["invocations"],
        } for row in rows], indent=2))
        return 0
    if args.csv:
        print("key,target,kernels,samples,measured_seconds,min_seconds,max_seconds,reports,"
              "modeled_seconds,invocations")
        for row in rows:
            t = row["timing"]
            print("%s,%s,%s,%d,%.9g,%.9g,%.9g,%d,%.9g,%d" % (
                row["runtimes"]["key"], row["runtimes"]["target"], row["kernels"], t["samples"],
                _mean(t), t["min_seconds"], t["max_seconds"], t["reports"], row["modeled"],
                row["runtimes"]["invocations"]))
        return 0
    print("%-64s  %-10s  %8s  %12s  %12s  %8s" % ("KEY", "KERNELS", "SAMPLES", "MEASURED_US",
                                                 "MODELED_US", "MEAS/MOD"))
    for row in rows:
        measured = _mean(row["timing"])
        print("%-64s  %-10s  %8d  %12.2f  %12.2f  %8.2f" % (
            row["runtimes"]["key"], row["kernels"], row["timing"]["samples"], measured * 1e6,
            row["modeled"] * 1e6, measured / row["modeled"] if row["modeled"] > 0 else 0.0))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Talk to a running stitchd (the everyday stitchctl verbs).")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def daemon_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument("--daemon", default=DEFAULT_ADDRESS, metavar="ADDR",
                       help="unix:///path, a socket path, or host:port (default: %(default)s)")

    for verb, helptext in (("compile", "compile FILE on the daemon (or fetch it from its cache)"),
                           ("lookup", "ask the daemon's caches for FILE; never compiles")):
        p = verbs.add_parser(verb, help=helptext)
        p.add_argument("file", metavar="FILE", help="HLO text or a binary stitch.v1.Graph")
        daemon_flag(p)
        p.add_argument("--target", help="sm_80, sm_90, ... (default: the daemon's)")
        p.add_argument("--json", action="store_true")
        p.set_defaults(run=lambda a, lookup=(verb == "lookup"): _compile_or_lookup(a, lookup))

    p = verbs.add_parser("stats", help="the daemon's counters")
    daemon_flag(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=_stats)

    cache = verbs.add_parser("cache", help="the daemon's cached bundles").add_subparsers(
        dest="cache_verb", required=True, metavar="ls|get")
    p = cache.add_parser("ls", help="cached entries, most recently used first")
    daemon_flag(p)
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=_cache_ls)
    p = cache.add_parser("get", help="one cached bundle by key")
    p.add_argument("key", metavar="KEY")
    daemon_flag(p)
    p.add_argument("--out", metavar="FILE", help="write the serialized stitch.v1.KernelBundle")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=_cache_get)

    p = verbs.add_parser("runtimes", help="measured runtimes, one row per key and kernels")
    daemon_flag(p)
    p.add_argument("--limit", type=int, default=100)
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true")
    form.add_argument("--csv", action="store_true")
    p.set_defaults(run=_runtimes)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs one verb; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        status: int = args.run(args)
        return status
    except (_Failure, ValueError) as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
