"""What a backend fused, what it left to PyTorch, and why: the user's view of a compile."""

from __future__ import annotations

import atexit
import collections
import dataclasses
import logging
import threading
import weakref
from typing import Callable, Dict, List, Optional, Tuple

LOG = logging.getLogger("stitch.torch")

# Reports with calls counted outside Python: synced once more when the interpreter exits and
# their flushes run, so a job that never reads its report still sends its C++-launched calls
# to the daemon (the hook is registered after the clients' finalizers, so it runs before
# them).
_SYNCED_AT_EXIT: "weakref.WeakSet[Report]" = weakref.WeakSet()
_EXIT_HOOK_LOCK = threading.Lock()
_EXIT_HOOK_REGISTERED = False


def _sync_at_exit() -> None:
    for report in list(_SYNCED_AT_EXIT):
        try:
            report.sync()
            report.flush()
        except Exception as e:  # usage accounting never fails a job's exit
            LOG.debug("launch counts not synced at exit: %s", e)


def _sync_report_at_exit(report: "Report") -> None:
    global _EXIT_HOOK_REGISTERED
    with _EXIT_HOOK_LOCK:
        _SYNCED_AT_EXIT.add(report)
        if not _EXIT_HOOK_REGISTERED:
            atexit.register(_sync_at_exit)
            _EXIT_HOOK_REGISTERED = True

# Why a region, or an op, ran on PyTorch's own kernels.
DAEMON = "daemon"                  # the daemon gave no bundle (down, slow, refused)
UNSUPPORTED_OP = "unsupported_op"  # an op the lowering does not know: left out of every region
DYNAMIC_SHAPE = "dynamic_shape"    # sizes that depend on the data, or a call against the trace
DTYPE = "dtype"                    # an element type stitchd does not compile
LOWERING = "lowering"              # the region could not be written as HLO
ARCH_MISMATCH = "arch_mismatch"    # the bundle's target cannot run on the tensors' device
NO_EXECUTOR = "no_executor"        # nothing launches kernels on the tensors' device
LAUNCH_ERROR = "launch_error"      # the launch failed; PyTorch's code ran instead

REASONS = (DAEMON, UNSUPPORTED_OP, DYNAMIC_SHAPE, DTYPE, LOWERING, ARCH_MISMATCH, NO_EXECUTOR,
           LAUNCH_ERROR)


@dataclasses.dataclass
class RegionInfo:
    """One memory-intensive region of a compiled graph.

    Attributes:
        name: ``"<graph>.<submodule>"``, e.g. ``"forward0.fused_3"``.
        ops: the region's ops, in graph order.
        hlo: the signature sent to the daemon (HLO text); ``""`` when it could not be written.
        key: the daemon's cache key, ``""`` without a bundle.
        outcome: the daemon's answer (``"compiled"``, ``"hit_memory"``, ...), or
            ``"fallback"``.
        reason: why the region runs on PyTorch, ``""`` when it runs stitched kernels.
        kernels: the number of kernels of its bundle.
        served: the (lo, hi) outer extents its bundle serves when it is shape-generic (one
            bundle per power-of-two bucket of the batch); None for exact shapes.
    """

    name: str
    ops: List[str]
    hlo: str = ""
    key: str = ""
    outcome: str = "fallback"
    reason: str = ""
    kernels: int = 0
    served: Optional[Tuple[int, int]] = None

    @property
    def stitched(self) -> bool:
        """True when the region has a bundle to launch."""
        return self.outcome != "fallback"


@dataclasses.dataclass
class RegionChoice:
    """Whose kernels run one region under the ``"stitch"`` backend, and why.

    Attributes:
        region: the region's name (RegionInfo.name).
        key: the daemon's cache key.
        winner: ``"stitch"`` or ``"inductor"``.
        reason: ``"faster"`` for stitch; for Inductor ``"slower"`` (stitch did not win by the
            margin), ``"mismatch"`` (the outputs disagreed), ``"layout"`` (the graph's strides
            need a copy), ``"launch_error"`` (stitch's kernels could not run or be timed).
        detail: the explanation, for people.
        decided_by: ``"timed"`` (this process timed both), ``"daemon"`` (jobs' timings the
            daemon held), ``""`` (decided without timing).
        stitched_seconds, inductor_seconds: the per-call times compared; 0 when not timed.
    """

    region: str
    key: str
    winner: str = "inductor"
    reason: str = ""
    detail: str = ""
    decided_by: str = ""
    stitched_seconds: float = 0.0
    inductor_seconds: float = 0.0

    def keep(self, reason: str, detail: str) -> "RegionChoice":
        """Leaves the region to Inductor for ``reason``; returns self."""
        self.winner, self.reason, self.detail = "inductor", reason, detail
        return self


class Report:
    """Counts and explanations, shared by every graph one backend compiles.

    ``fallbacks`` counts events by reason: each region or op left to PyTorch at compile time
    counts once, and each call of a stitched region that ran PyTorch's code instead counts
    once. ``stitched_calls`` counts calls that launched stitched kernels. Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.regions: List[RegionInfo] = []
        self.fallbacks: Dict[str, int] = collections.Counter()
        self.details: List[Tuple[str, str]] = []  # (reason, explanation), oldest first
        self._stitched_calls = 0
        # Stitched calls by how they launched: "python" (the executor's run) or "cpp" (the
        # stitch::launch operator, counted in C++ and read by the sources at each sync).
        self._launch_paths: Dict[str, int] = collections.Counter()
        self._sources: List[Callable[[], None]] = []
        self._flushes: List[Callable[[], object]] = []
        self.choices: List[RegionChoice] = []  # the "stitch" backend's, one per region
        # Copies a replaced region's call made because a tensor came or had to leave in other
        # strides than the graph traced; 0 when stitch's kernels fit the graph as traced.
        self.layout_copies = 0
        # Sizes of symbolic regions met after the trace's, by how their kernels were found:
        # "daemon" (asked for them) or "bucket" (a bundle already held serves that extent).
        self.new_sizes: Dict[str, int] = collections.Counter()

    def count_new_size(self, how: str) -> None:
        with self._lock:
            self.new_sizes[how] += 1

    def count_layout_copy(self) -> None:
        with self._lock:
            self.layout_copies += 1

    def add_choice(self, choice: RegionChoice) -> None:
        with self._lock:
            self.choices.append(choice)
        LOG.debug("%s: %s (%s, %s) %s", choice.region, choice.winner, choice.reason,
                  choice.decided_by or "untimed", choice.detail)

    def replaced(self) -> List[RegionChoice]:
        """The regions whose stitched kernels replaced Inductor's."""
        with self._lock:
            return [c for c in self.choices if c.winner == "stitch"]

    def kept(self) -> List[RegionChoice]:
        """The regions left to Inductor's kernels."""
        with self._lock:
            return [c for c in self.choices if c.winner != "stitch"]

    def fallback(self, reason: str, explanation: str) -> None:
        """Counts one fallback and logs its explanation at debug level."""
        assert reason in REASONS, reason
        with self._lock:
            self.fallbacks[reason] += 1
            if len(self.details) < 10000:
                self.details.append((reason, explanation))
        LOG.debug("fallback (%s): %s", reason, explanation)

    def add_region(self, region: RegionInfo) -> None:
        with self._lock:
            self.regions.append(region)

    def count_stitched_call(self, calls: int = 1, path: str = "python") -> None:
        with self._lock:
            self._stitched_calls += calls
            self._launch_paths[path] += calls

    def add_source(self, sync: Callable[[], None],
                   flush: Optional[Callable[[], object]] = None) -> None:
        """Adds a function that counts calls kept outside Python (the C++ launch path's) into
        this report; :meth:`sync` runs each. ``flush`` sends what ``sync`` recorded (a
        client's ``flush_usage``); at the interpreter's exit every report is synced and
        flushed once more."""
        with self._lock:
            self._sources.append(sync)
            if flush is not None and flush not in self._flushes:
                self._flushes.append(flush)
        _sync_report_at_exit(self)

    def flush(self) -> None:
        """Runs the flushes :meth:`add_source` was given."""
        with self._lock:
            flushes = list(self._flushes)
        for flush in flushes:
            flush()

    def sync(self) -> None:
        """Counts the calls the sources hold; reading ``stitched_calls``, ``launch_paths`` or
        the summary syncs first."""
        with self._lock:
            sources = list(self._sources)
        for sync in sources:
            sync()

    @property
    def stitched_calls(self) -> int:
        """Calls that launched stitched kernels, from Python or C++."""
        self.sync()
        with self._lock:
            return self._stitched_calls

    @property
    def launch_paths(self) -> Dict[str, int]:
        """Stitched calls by the path that launched them: ``"python"`` (the executor's
        ``run``, ctypes over the loader) and ``"cpp"`` (the ``stitch::launch`` operator)."""
        self.sync()
        with self._lock:
            return dict(self._launch_paths)

    def summary(self) -> str:
        """A table of the regions and the fallback counts, for people."""
        lines = ["%-28s %-11s %3s %5s  %s" % ("region", "outcome", "ops", "kern", "reason")]
        for r in self.regions:
            lines.append("%-28s %-11s %3d %5d  %s" % (r.name, r.outcome, len(r.ops), r.kernels,
                                                      r.reason))
        for c in self.choices:
            gain = (" %.2fx" % (c.inductor_seconds / c.stitched_seconds)
                    if c.stitched_seconds > 0 else "")
            lines.append("%-28s %s kernels (%s, %s)%s %s" % (
                c.region, c.winner, c.reason, c.decided_by or "untimed", gain, c.detail))
        paths = self.launch_paths
        lines.append("stitched calls: %d (launched from C++: %d, from Python: %d)" % (
            self.stitched_calls, paths.get("cpp", 0), paths.get("python", 0)))
        if self.new_sizes:
            lines.append("new sizes of symbolic regions: %d from the daemon, %d from a bucket held"
                         % (self.new_sizes["daemon"], self.new_sizes["bucket"]))
        for reason in REASONS:
            if self.fallbacks.get(reason):
                lines.append("fallbacks (%s): %d" % (reason, self.fallbacks[reason]))
        return "\n".join(lines)
