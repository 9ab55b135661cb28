"""The stitchd client: compile and look up subgraphs on the node's daemon, report usage.

Every compile and lookup is fail-open, as in the C++ client: when the daemon is absent, slow,
overloaded or refuses the input, the call returns a :class:`Result` whose outcome is
``"fallback"``, with the reason, within its deadline, and the job runs its framework's own
kernels. No exception is raised for the daemon's failures; exceptions are for programming
errors (an argument of the wrong type or value, a closed client).
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import json
import operator
import os
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Tuple, Union

from . import _lib

DEFAULT_ADDRESS = "unix:///run/stitchd/stitchd.sock"
DEFAULT_LOOKUP_DEADLINE_MS = 50
DEFAULT_COMPILE_DEADLINE_MS = 10000

#: What a job may run where stitchd's kernels are not used.
FALLBACKS = ("xla", "inductor", "eager")

Subgraph = Union[str, bytes, bytearray, memoryview, Any]
"""HLO text (``str``), a serialized ``stitch.v1.Graph`` (bytes-like), or a protobuf message
with ``SerializeToString`` (a generated ``stitch.v1.Graph``)."""


class ClientClosedError(RuntimeError):
    """A method was called on a :class:`Client` after :meth:`Client.close`."""


class DaemonError(RuntimeError):
    """An admin call (stats, entries, runtimes) or an extraction the daemon did not answer
    or refused.

    Attributes:
        code: the status code name, e.g. ``"UNAVAILABLE"``.
        reason: ``"<code>: <message>"`` as the C ABI words it.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = reason.split(":", 1)[0]


class Kernel(NamedTuple):
    """One kernel of a bundle: its entry point, PTX text, and cubin (``b""`` in PTX-only
    mode)."""

    name: str
    ptx: str
    cubin: bytes


@dataclass(frozen=True)
class Result:
    """The answer to a compile or lookup.

    Attributes:
        outcome: where the bundle came from: ``"hit_local"`` (this process already had it),
            ``"hit_memory"``, ``"hit_disk"``, ``"hit_cluster"``, ``"compiled"``, or
            ``"fallback"`` (no bundle: run the framework's kernels).
        key: the daemon's cache key (64 hex digits), ``""`` when unknown.
        reason: for a fallback, ``"<code>: <message>"`` (``"UNAVAILABLE: ..."``,
            ``"DEADLINE_EXCEEDED: ..."``, ``"NOT_FOUND: ..."`` for a lookup's miss,
            ``"INVALID_ARGUMENT: ..."``); ``""`` otherwise.
        kernels: the bundle's kernels, in launch order.
        bundle: the serialized ``stitch.v1.KernelBundle`` (``b""`` for a fallback).
        runtimes: what jobs measured for the key, as the daemon held it when it answered
            (``stitch.v1.KernelRuntimes`` as a dict, the form :meth:`Client.list_runtimes`
            gives); None when it held none, for a fallback, and for a ``"hit_local"``.
        outer_extent: ``(lo, hi)``, the outer extents a shape-generic bundle serves (its
            kernels run at any extent ``lo <= e <= hi``, see ``outer_parameters`` of
            :meth:`Client.compile`); None for a bundle of exact shapes and for a fallback.
    """

    outcome: str
    key: str = ""
    reason: str = ""
    kernels: List[Kernel] = field(default_factory=list)
    bundle: bytes = b""
    runtimes: Optional[Dict[str, Any]] = None
    outer_extent: Optional[Tuple[int, int]] = None

    def __repr__(self) -> str:
        if not self.ok:
            return "Result(outcome='fallback', reason=%r)" % self.reason
        served = "" if self.outer_extent is None else ", outer_extent=%r" % (self.outer_extent,)
        return "Result(outcome=%r, key=%r, kernels=%d, bundle=%d bytes%s)" % (
            self.outcome, self.key, len(self.kernels), len(self.bundle), served)

    @property
    def ok(self) -> bool:
        """True when the result has a bundle (the outcome is not ``"fallback"``)."""
        return self.outcome != "fallback"

    @property
    def code(self) -> str:
        """The status code name of a fallback's reason (``"UNAVAILABLE"``), ``""`` otherwise."""
        return self.reason.split(":", 1)[0] if self.reason else ""


@dataclass(frozen=True)
class Signature:
    """One memory-intensive subgraph the daemon extracted: what a job compiles or looks up.

    A Signature can be passed to :meth:`Client.compile`, :meth:`Client.lookup` and
    :meth:`Client.compile_async` as it is (it serializes to its graph).

    Attributes:
        name: ``"<module>.sg<k>"``, unique within one extraction.
        graph: the serialized ``stitch.v1.Graph``.
        nodes: the graph's node count (parameters and constants included).
        parameters: its parameter count (values produced outside the subgraph).
        outputs: its output count.
    """

    name: str
    graph: bytes
    nodes: int = 0
    parameters: int = 0
    outputs: int = 0

    def __repr__(self) -> str:
        return "Signature(%r, nodes=%d, parameters=%d, outputs=%d, graph=%d bytes)" % (
            self.name, self.nodes, self.parameters, self.outputs, len(self.graph))

    def SerializeToString(self) -> bytes:  # noqa: N802 (the protobuf method's name)
        """Returns the serialized ``stitch.v1.Graph``, as a protobuf message would."""
        return self.graph


def _read_extraction(handle: Any) -> List[Signature]:
    """Copies a stitch_extraction into Signatures and frees it; raises DaemonError when the
    extraction failed."""
    lib = _lib.lib()
    if not handle:
        raise MemoryError("stitch_client_extract_hlo ran out of memory")
    try:
        error = (lib.stitch_extraction_error(handle) or b"").decode("utf-8", errors="replace")
        if error:
            raise DaemonError(error)
        signatures = []
        for i in range(lib.stitch_extraction_count(handle)):
            size = ctypes.c_size_t(0)
            data = lib.stitch_extraction_graph(handle, i, ctypes.byref(size))
            signatures.append(Signature(
                name=(lib.stitch_extraction_name(handle, i) or b"").decode(),
                graph=ctypes.string_at(data, size.value) if data else b"",
                nodes=lib.stitch_extraction_node_count(handle, i),
                parameters=lib.stitch_extraction_parameter_count(handle, i),
                outputs=lib.stitch_extraction_output_count(handle, i)))
        return signatures
    finally:
        lib.stitch_extraction_free(handle)


def _read_result(handle: Any) -> Result:
    """Copies a stitch_result into a Result and frees it."""
    lib = _lib.lib()
    if not handle:  # out of memory in the library
        return Result("fallback", reason="RESOURCE_EXHAUSTED: the client library ran out of memory")
    try:
        outcome = _lib.OUTCOME_NAMES.get(lib.stitch_result_outcome(handle), "fallback")
        key = (lib.stitch_result_key(handle) or b"").decode()
        reason = (lib.stitch_result_reason(handle) or b"").decode("utf-8", errors="replace")
        size = ctypes.c_size_t(0)
        data = lib.stitch_result_bundle(handle, ctypes.byref(size))
        bundle = ctypes.string_at(data, size.value) if data else b""
        kernels = []
        for i in range(lib.stitch_result_kernel_count(handle)):
            name = (lib.stitch_result_kernel_name(handle, i) or b"").decode()
            ptx = (lib.stitch_result_kernel_ptx(handle, i) or b"").decode("utf-8", errors="replace")
            size = ctypes.c_size_t(0)
            cubin = lib.stitch_result_kernel_cubin(handle, i, ctypes.byref(size))
            kernels.append(Kernel(name, ptx, ctypes.string_at(cubin, size.value) if cubin else b""))
        runtimes_json = lib.stitch_result_runtimes_json(handle) or b""
        runtimes = json.loads(runtimes_json) if runtimes_json else None
        lo, hi = ctypes.c_int64(0), ctypes.c_int64(0)
        generic = lib.stitch_result_outer_extent(handle, ctypes.byref(lo), ctypes.byref(hi))
        outer_extent = (lo.value, hi.value) if generic == 1 else None
        return Result(outcome, key, reason, kernels, bundle, runtimes, outer_extent)
    finally:
        lib.stitch_result_free(handle)


def _encode_subgraph(subgraph: Subgraph) -> "tuple[bool, bytes]":
    """Returns (is_hlo, payload) for a compile or lookup argument."""
    if isinstance(subgraph, str):
        return True, subgraph.encode("utf-8")
    if isinstance(subgraph, (bytes, bytearray, memoryview)):
        return False, bytes(subgraph)
    serialize = getattr(subgraph, "SerializeToString", None)
    if callable(serialize):
        return False, serialize()
    raise TypeError("a subgraph is HLO text (str), a serialized stitch.v1.Graph (bytes) or a "
                    "protobuf message, not %s" % type(subgraph).__name__)


def _check_outer_parameters(outer_parameters: Iterable[int], is_hlo: bool) -> Tuple[int, ...]:
    """Returns the outer parameter numbers of a compile or lookup as a tuple, checked."""
    if isinstance(outer_parameters, (str, bytes, bytearray, memoryview)):
        raise TypeError("outer_parameters is a sequence of ints, not %s"
                        % type(outer_parameters).__name__)
    try:
        entries = tuple(outer_parameters)
    except TypeError:
        raise TypeError("outer_parameters is a sequence of ints, not %s"
                        % type(outer_parameters).__name__) from None
    numbers = []
    for entry in entries:
        # operator.index takes numpy's integers too; a bool is an int Python would accept.
        if isinstance(entry, bool):
            raise TypeError("outer_parameters holds ints, not bool")
        try:
            number = operator.index(entry)
        except TypeError:
            raise TypeError("outer_parameters holds ints, not %s"
                            % type(entry).__name__) from None
        if number < 0 or number >= 1 << 63:
            raise ValueError("outer parameter numbers are in [0, 2**63), got %d" % number)
        numbers.append(number)
    if numbers and not is_hlo:
        raise ValueError("outer_parameters is for HLO text: a stitch.v1.Graph names its own "
                         "(Graph.outer_parameters)")
    return tuple(numbers)


def _check_target(target: Optional[str]) -> Optional[bytes]:
    if target is None:
        return None
    if not isinstance(target, str):
        raise TypeError("target is a str such as 'sm_90', or None for the daemon's")
    return target.encode()


def _check_key(key: str) -> bytes:
    if not isinstance(key, str):
        raise TypeError("key is a str (the result's key), not %s" % type(key).__name__)
    return key.encode()


def _check_count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s is an int, not %s" % (name, type(value).__name__))
    if value < 0 or value >= 1 << 64:
        raise ValueError("%s must be in [0, 2**64), got %d" % (name, value))
    return value


class Client:
    """A client of the node's stitchd. Thread-safe; use one per process.

    ``address`` is ``"unix:///path"``, a socket path starting with ``/``, or ``"host:port"``.
    No connection is made until the first call. Compiles wait at most
    ``compile_deadline_ms``, lookups ``lookup_deadline_ms``, admin calls and usage flushes
    2000 ms. ``fallback`` names what the job runs without stitchd (``"xla"``,
    ``"inductor"``, ``"eager"``), which the daemon prices its savings against.

    For a ``"host:port"`` whose daemon serves TLS, ``tls_ca`` names the PEM file that
    verifies the daemon's certificate (``None``: the system's roots), and ``tls_cert`` and
    ``tls_key`` (both or neither) this client's certificate, for a daemon that requires one
    (mutual TLS). Unix socket addresses ignore them. A file that cannot be read makes every
    call fall back with a ``FAILED_PRECONDITION`` reason naming it.

    Use it as a context manager, or call :meth:`close`; a client that is garbage-collected
    unclosed is released then.
    """

    def __init__(self, address: Union[str, "os.PathLike[str]"] = DEFAULT_ADDRESS,
                 lookup_deadline_ms: int = DEFAULT_LOOKUP_DEADLINE_MS,
                 compile_deadline_ms: int = DEFAULT_COMPILE_DEADLINE_MS,
                 fallback: Optional[str] = None, async_workers: int = 4,
                 tls_ca: Optional[Union[str, "os.PathLike[str]"]] = None,
                 tls_cert: Optional[Union[str, "os.PathLike[str]"]] = None,
                 tls_key: Optional[Union[str, "os.PathLike[str]"]] = None) -> None:
        address = os.fspath(address)
        if not isinstance(address, str):
            raise TypeError("address is a str")
        tls = {}
        for name, value in (("tls_ca", tls_ca), ("tls_cert", tls_cert), ("tls_key", tls_key)):
            value = None if value is None else os.fspath(value)
            if value is not None and not isinstance(value, str):
                raise TypeError("%s is a str path or None" % name)
            tls[name] = value
        if (tls["tls_cert"] is None) != (tls["tls_key"] is None):
            raise ValueError("tls_cert and tls_key go together")
        for name, value in (("lookup_deadline_ms", lookup_deadline_ms),
                            ("compile_deadline_ms", compile_deadline_ms),
                            ("async_workers", async_workers)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError("%s is an int" % name)
            if value <= 0 or value > 2**31 - 1:
                raise ValueError("%s must be positive, got %d" % (name, value))
        self._address = address
        lib = _lib.lib()
        if any(v is not None for v in tls.values()):
            handle = lib.stitch_client_create_tls(
                address.encode(), lookup_deadline_ms, compile_deadline_ms,
                *(None if v is None else v.encode() for v in tls.values()))
        else:
            handle = lib.stitch_client_create(address.encode(), lookup_deadline_ms,
                                              compile_deadline_ms)
        if not handle:
            raise MemoryError("stitch_client_create failed")
        self._handle = handle
        self._async_workers = async_workers
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        # Calls in flight hold the handle; close() waits for them before destroying it.
        self._cond = threading.Condition()
        self._in_flight = 0
        self._closed = False
        self._finalizer = weakref.finalize(self, lib.stitch_client_destroy, handle)
        if fallback is not None:
            self.set_fallback(fallback)

    # --- lifetime --------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The daemon address this client was created with."""
        return self._address

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def close(self) -> None:
        """Waits for asynchronous compiles and calls in flight, then releases the client.
        Results already returned stay valid. Closing twice does nothing."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        with self._cond:
            self._cond.wait_for(lambda: self._in_flight == 0)
        self._finalizer()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "stitch.Client(%r%s)" % (self._address, ", closed" if self._closed else "")

    def _acquire(self) -> Any:
        with self._cond:
            if self._closed:
                raise ClientClosedError("this stitch.Client is closed")
            self._in_flight += 1
            return self._handle

    def _release(self) -> None:
        with self._cond:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._cond.notify_all()

    # --- compile and lookup ----------------------------------------------------------------

    def _run(self, subgraph: Subgraph, target: Optional[str], lookup: bool,
             outer_parameters: Iterable[int]) -> Result:
        is_hlo, payload = _encode_subgraph(subgraph)
        target_b = _check_target(target)
        outer = _check_outer_parameters(outer_parameters, is_hlo)
        lib = _lib.lib()
        handle = self._acquire()
        try:
            if outer:
                fn = (lib.stitch_client_lookup_hlo_generic if lookup
                      else lib.stitch_client_compile_hlo_generic)
                numbers = (ctypes.c_int64 * len(outer))(*outer)
                result = fn(handle, payload, len(payload), target_b, numbers, len(outer))
            else:
                if is_hlo:
                    fn = lib.stitch_client_lookup_hlo if lookup else lib.stitch_client_compile_hlo
                else:
                    fn = (lib.stitch_client_lookup_graph if lookup
                          else lib.stitch_client_compile_graph)
                result = fn(handle, payload, len(payload), target_b)
        finally:
            self._release()
        return _read_result(result)

    def compile(self, subgraph: Subgraph, target: Optional[str] = None,
                outer_parameters: Iterable[int] = ()) -> Result:
        """Returns the bundle for ``subgraph``, compiling it on a miss, within the compile
        deadline.

        ``subgraph`` is one HLO module as text (``str``), a serialized ``stitch.v1.Graph``
        (``bytes``), or a protobuf message with ``SerializeToString``. ``target``
        (``"sm_80"``, ``"sm_90"``, ``"sm_90/h200"``) defaults to the daemon's; an
        architecture alone means the daemon's device of it where the daemon plans for one
        (``"sm_90"`` on an H200 node is ``"sm_90/h200"``). Never raises for the daemon's
        failures: those are a ``"fallback"`` Result with the reason.

        For HLO text whose outer dimension varies from run to run (a batch, or batch x
        sequence folded into rows), ``outer_parameters`` names the entry parameters, by
        number, whose dimension 0 is that extent. The daemon then answers the bundle of the
        extent's power-of-two bucket, shared by every extent of the bucket
        (``Result.outer_extent`` gives its ``(lo, hi)``), or an exact bundle when the module
        cannot follow the extent. Numbers the module does not have are a fallback with code
        ``"INVALID_ARGUMENT"``. Raises TypeError for entries that are not ints (or are bool),
        ValueError for negative numbers and for outer parameters with a subgraph that is not
        HLO text (a ``stitch.v1.Graph`` names its own).
        """
        return self._run(subgraph, target, False, outer_parameters)

    def lookup(self, subgraph: Subgraph, target: Optional[str] = None,
               outer_parameters: Iterable[int] = ()) -> Result:
        """Like :meth:`compile`, but never compiles: answers from this process's bundles or
        the daemon's caches within the lookup deadline. A miss is a fallback whose reason
        starts with ``"NOT_FOUND"``. ``outer_parameters`` is :meth:`compile`'s."""
        return self._run(subgraph, target, True, outer_parameters)

    def compile_async(self, subgraph: Subgraph, target: Optional[str] = None,
                      outer_parameters: Iterable[int] = ()
                      ) -> "concurrent.futures.Future[Result]":
        """Starts :meth:`compile` on the client's worker threads; the future's result is the
        Result (a fallback on the daemon's failures, never an exception from them).

        The arguments are checked now: a wrong type or value raises here, not in the future.
        """
        is_hlo, _ = _encode_subgraph(subgraph)
        _check_target(target)
        # Taken once: an iterator would be empty by the time the worker reads it.
        outer = _check_outer_parameters(outer_parameters, is_hlo)
        with self._cond:
            if self._closed:
                raise ClientClosedError("this stitch.Client is closed")
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self._async_workers, thread_name_prefix="stitch-compile")
            return self._executor.submit(self.compile, subgraph, target, outer)

    def get_entry(self, key: str) -> Result:
        """Returns the daemon's cached bundle for ``key`` (never compiles, never answers from
        this process's bundles): outcome ``"hit_memory"``/``"hit_disk"``/``"hit_cluster"``,
        or a fallback with ``"NOT_FOUND: ..."`` for a key the daemon does not hold."""
        key_b = _check_key(key)
        handle = self._acquire()
        try:
            result = _lib.lib().stitch_client_get_entry(handle, key_b)
        finally:
            self._release()
        return _read_result(result)

    def extract(self, hlo_text: str, outer_extent: int = 0) -> List[Signature]:
        """Returns the memory-intensive subgraphs of ``hlo_text`` (one or more HLO modules, as
        ``jax.jit(f).lower(...).as_text(dialect="hlo")`` prints them), split by the daemon,
        in extraction order; an empty list when the text has no memory-intensive work.

        Waits at most the compile deadline. Not fail-open, as there is nothing to fall back
        to: raises DaemonError with code ``"INVALID_ARGUMENT"`` (naming the line) for text
        that is not HLO or is empty, ``"RESOURCE_EXHAUSTED"`` for a subgraph past the
        daemon's limits, ``"UNAVAILABLE"`` or ``"DEADLINE_EXCEEDED"`` when the daemon does
        not answer. Raises TypeError when ``hlo_text`` is not a str.

        A job whose batch size (or batch x sequence, folded into rows) varies passes it as
        ``outer_extent``: each signature then names as outer parameters those whose
        dimension 0 is that extent, and the daemon compiles one bundle per power-of-two
        bucket of it instead of one per shape (a signature that cannot follow the extent
        still compiles for its exact shapes). Raises ValueError for a negative extent.
        """
        if not isinstance(hlo_text, str):
            raise TypeError("hlo_text is a str, not %s" % type(hlo_text).__name__)
        if isinstance(outer_extent, bool) or not isinstance(outer_extent, int):
            raise TypeError("outer_extent is an int, not %s" % type(outer_extent).__name__)
        if outer_extent < 0 or outer_extent >= 1 << 63:
            raise ValueError("outer_extent must be in [0, 2**63), got %d" % outer_extent)
        payload = hlo_text.encode("utf-8")
        handle = self._acquire()
        try:
            extraction = _lib.lib().stitch_client_extract_hlo_at_extent(
                handle, payload, len(payload), outer_extent)
        finally:
            self._release()
        return _read_extraction(extraction)

    # --- usage and measured times ----------------------------------------------------------

    def record_invocations(self, key: str, invocations: int) -> None:
        """Adds ``invocations`` launches of the bundle ``key`` to the pending usage batch
        (sent by :meth:`flush_usage`)."""
        key_b = _check_key(key)
        _check_count("invocations", invocations)
        handle = self._acquire()
        try:
            rc = _lib.lib().stitch_client_record_invocations(handle, key_b, invocations)
        finally:
            self._release()
        if rc != 0:
            raise ValueError("stitch_client_record_invocations refused key %r" % key)

    def record_time(self, key: str, kernels: str, seconds: float, samples: int = 1) -> None:
        """Adds measured GPU time to the pending usage batch: ``seconds`` summed over
        ``samples`` invocations of the subgraph ``key``, for the bundle's kernels
        (``kernels="stitched"``) or the job's own (``"fallback"``).

        Raises ValueError for an empty key, zero samples, or seconds that are negative or not
        finite; nothing is recorded then.
        """
        key_b = _check_key(key)
        if kernels not in _lib.TIMED_KERNELS:
            raise ValueError("kernels is 'stitched' or 'fallback', not %r" % (kernels,))
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError("seconds is a float")
        _check_count("samples", samples)
        handle = self._acquire()
        try:
            rc = _lib.lib().stitch_client_record_time(handle, key_b, _lib.TIMED_KERNELS[kernels],
                                                      float(seconds), samples)
        finally:
            self._release()
        if rc != 0:
            raise ValueError("invalid measured time: key %r, %r s over %d sample(s)"
                             % (key, seconds, samples))

    def should_time_fallback(self) -> bool:
        """True on one call in 100: a job calls it once per step and, when True, also runs
        and times its fallback kernels that step (:meth:`record_time` with
        ``kernels="fallback"``)."""
        handle = self._acquire()
        try:
            return bool(_lib.lib().stitch_client_should_time_fallback(handle) == 1)
        finally:
            self._release()

    def set_fallback(self, fallback: Optional[str]) -> None:
        """Says what the job runs where stitchd's kernels are not used: ``"xla"``,
        ``"inductor"``, ``"eager"``, or None for not said. Later usage reports carry it."""
        if fallback is not None and fallback not in FALLBACKS:
            raise ValueError("fallback is one of %s or None, not %r" % (", ".join(FALLBACKS),
                                                                       fallback))
        handle = self._acquire()
        try:
            rc = _lib.lib().stitch_client_set_fallback(
                handle, None if fallback is None else fallback.encode())
        finally:
            self._release()
        if rc != 0:
            raise ValueError("stitch_client_set_fallback refused %r" % (fallback,))

    def flush_usage(self) -> bool:
        """Sends the pending usage batch within 2000 ms. Returns True on success (also when
        nothing was pending), False when the daemon could not be reached or refused it; the
        batch is then kept for the next flush."""
        handle = self._acquire()
        try:
            return bool(_lib.lib().stitch_client_flush_usage(handle) == 0)
        finally:
            self._release()

    # --- admin calls -----------------------------------------------------------------------

    def _admin(self, call: str, *args: int) -> Dict[str, Any]:
        out = ctypes.c_void_p()
        handle = self._acquire()
        try:
            rc = getattr(_lib.lib(), call)(handle, *args, ctypes.byref(out))
        finally:
            self._release()
        text = _lib.take_string(out)
        if rc == 0:
            value: Dict[str, Any] = json.loads(text)
            return value
        if rc == 1:
            raise DaemonError(text)
        raise MemoryError("%s failed" % call)

    def stats(self) -> Dict[str, Any]:
        """Returns the daemon's counters and cache occupancy, as ``stitchctl stats --json``
        prints them: the fields of ``stitch.v1.StatsResponse`` by name (``compiles``,
        ``hits_memory``, ``entries``, ``invocations_reported``, ``runtime_keys``, ...).

        Raises DaemonError when the daemon does not answer within 2000 ms or refuses.
        """
        return self._admin("stitch_client_stats")

    def list_entries(self, limit: int = 100) -> List[Dict[str, Any]]:
        """Returns the daemon's cached entries, most recently used first (at most ``limit``):
        dicts with ``key``, ``target``, ``kernels``, ``bytes``, ``compile_seconds``,
        ``plan``. Raises DaemonError as :meth:`stats` does."""
        entries: List[Dict[str, Any]] = self._admin(
            "stitch_client_list_entries", _check_limit(limit))["entries"]
        return entries

    def list_runtimes(self, limit: int = 100) -> List[Dict[str, Any]]:
        """Returns the measured runtimes the daemon holds, most reported invocations first
        (at most ``limit`` keys): ``stitch.v1.KernelRuntimes`` as dicts (``key``,
        ``target``, ``stitched`` and per-baseline ``fallback`` timing summaries, the
        modeled seconds, ``invocations``). Raises DaemonError as :meth:`stats` does."""
        runtimes: List[Dict[str, Any]] = self._admin(
            "stitch_client_list_runtimes", _check_limit(limit))["runtimes"]
        return runtimes


def _check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError("limit is an int")
    if limit <= 0 or limit >= 1 << 32:
        raise ValueError("limit must be positive, got %d" % limit)
    return limit
