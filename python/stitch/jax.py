"""JAX integration: the stitchd signatures of a jitted function, and cluster pre-warming.

    import stitch.jax

    sigs = stitch.jax.signatures(train_step, params, opt_state, batch)   # List[Signature]
    report = stitch.jax.warm(train_step, params, opt_state, batch)       # compiles them all
    print(report.outcomes)            # {"compiled": 181, "hit_memory": 3}

The function is lowered with ``jax.jit`` on the example arguments (arrays or
``jax.ShapeDtypeStruct``s: nothing runs and no parameter is materialised) to JAX's
pre-optimization HLO, the module XLA would receive, with every nested jit inlined into one
flat entry computation (JAX would otherwise emit HLO ``call``s, which stitchd's extractor
treats as boundaries). The node's stitchd splits it into its memory-intensive subgraphs.

JAX is imported by these functions, not by ``import stitch``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from .client import DEFAULT_ADDRESS, Client, Result, Signature

#: Deadlines of the clients these functions create: extracting and compiling a whole training
#: step may take minutes on a busy node, and a pre-warm has no step waiting on it.
EXTRACT_DEADLINE_MS = 120_000
WARM_COMPILE_DEADLINE_MS = 600_000

__all__ = ["EXTRACT_DEADLINE_MS", "WARM_COMPILE_DEADLINE_MS", "WarmReport", "hlo_text",
           "inline_calls", "signatures", "warm"]


def inline_calls(fn: Callable[..., Any], name: str, max_rounds: int = 8) -> Callable[..., Any]:
    """Returns ``fn`` with every nested jit (and JAX's PRNG helpers) inlined, so that
    ``jax.jit`` of the result lowers to one flat entry computation with no HLO ``call``.

    The result takes ``fn``'s arguments and returns its outputs; ``name`` becomes the HLO
    module's name (``jit_<name>``). Raises RuntimeError when calls remain after
    ``max_rounds`` re-tracing rounds.
    """
    from . import _jax_inline

    return _jax_inline.inline_calls(fn, name, max_rounds)


def _bind_static(fn: Callable[..., Any], args: Tuple[Any, ...],
                 static_argnums: Union[int, Sequence[int]]) -> Tuple[Callable[..., Any], List[Any]]:
    """Returns ``fn`` with the positional arguments at ``static_argnums`` fixed to their
    values in ``args``, and the remaining (traced) arguments."""
    nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    static = set()
    for i in nums:
        if not -len(args) <= i < len(args):
            raise ValueError("static_argnums %r is out of range for %d positional arguments"
                             % (i, len(args)))
        static.add(i % len(args))
    if not static:
        return fn, list(args)
    fixed = {i: args[i] for i in static}

    def bound(*dynamic: Any, **kwargs: Any) -> Any:
        rest: Iterator[Any] = iter(dynamic)
        full = [fixed[i] if i in fixed else next(rest) for i in range(len(args))]
        return fn(*full, **kwargs)

    bound.__name__ = getattr(fn, "__name__", "fn")
    return bound, [a for i, a in enumerate(args) if i not in static]


def hlo_text(fn: Callable[..., Any], *args: Any, static_argnums: Union[int, Sequence[int]] = (),
             **kwargs: Any) -> str:
    """Returns the pre-optimization HLO text of ``jax.jit(fn)`` lowered on ``args`` and
    ``kwargs``, with every nested jit inlined (no HLO ``call`` remains).

    ``fn`` may already be jitted. Arguments are arrays, ``jax.ShapeDtypeStruct``s or pytrees
    of them; those at ``static_argnums`` are Python values baked into the trace, as
    ``jax.jit(fn, static_argnums=...)`` would. The module is named ``jit_<fn.__name__>``.
    """
    import jax

    bound, dynamic = _bind_static(fn, tuple(args), static_argnums)
    name = getattr(fn, "__name__", None) or "fn"
    flat = inline_calls(bound, name)
    lowered = jax.jit(flat).lower(*dynamic, **kwargs)
    text: str = lowered.as_text(dialect="hlo")
    return text


def signatures(fn: Callable[..., Any], *args: Any, client: Optional[Client] = None,
               address: str = DEFAULT_ADDRESS,
               static_argnums: Union[int, Sequence[int]] = (), outer_extent: int = 0,
               **kwargs: Any) -> List[Signature]:
    """Returns the stitchd signatures of ``jax.jit(fn)`` on these arguments: the
    memory-intensive subgraphs of its HLO (see :func:`hlo_text`), split by the daemon, in
    extraction order. A function with no memory-intensive work has none.

    ``client`` is used when given; otherwise a client of ``address`` is created (extraction
    deadline :data:`EXTRACT_DEADLINE_MS`) and closed. Keyword arguments other than these are
    ``fn``'s. Raises DaemonError when the daemon cannot be reached or refuses the module
    (there is nothing to fall back to), and JAX's exceptions when ``fn`` does not trace.

    ``outer_extent`` names a bucket: for a job whose batch size varies, the batch size of
    these arguments. Each signature then names the parameters whose dimension 0 it is, and
    every batch size in the same power-of-two bucket shares one compiled bundle
    (:meth:`Client.extract`).
    """
    text = hlo_text(fn, *args, static_argnums=static_argnums, **kwargs)
    if client is not None:
        return client.extract(text, outer_extent)
    with Client(address, compile_deadline_ms=EXTRACT_DEADLINE_MS) as own:
        return own.extract(text, outer_extent)


@dataclass(frozen=True)
class WarmReport:
    """What :func:`warm` did, one entry per signature in extraction order.

    Attributes:
        signatures: the signatures compiled.
        outcomes: how many signatures came to each outcome: ``"compiled"``, ``"hit_memory"``,
            ``"hit_disk"``, ``"hit_cluster"``, ``"hit_local"``, ``"fallback"``.
        keys: each signature's daemon cache key (``""`` for a fallback), in signature order.
        fallbacks: ``(signature name, reason)`` of each fallback, e.g.
            ``("jit_step.sg12", "DEADLINE_EXCEEDED: ...")``.
        seconds: wall time of the extraction and the compiles.
    """

    signatures: List[Signature] = field(default_factory=list)
    outcomes: Dict[str, int] = field(default_factory=dict)
    keys: List[str] = field(default_factory=list)
    fallbacks: List[Tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when every signature has a bundle (no fallback)."""
        return not self.fallbacks

    def __repr__(self) -> str:
        return "WarmReport(signatures=%d, outcomes=%r, fallbacks=%d, seconds=%.1f)" % (
            len(self.signatures), self.outcomes, len(self.fallbacks), self.seconds)


def warm(fn: Callable[..., Any], *args: Any, client: Optional[Client] = None,
         address: str = DEFAULT_ADDRESS, static_argnums: Union[int, Sequence[int]] = (),
         target: Optional[str] = None, max_in_flight: int = 4, outer_extent: int = 0,
         **kwargs: Any) -> WarmReport:
    """Compiles every signature of ``jax.jit(fn)`` on these arguments into the daemon's cache
    and returns what happened to each: the cluster pre-warm path, run once per model and
    shape before the jobs start, so that their lookups hit.

    Signatures are extracted as :func:`signatures` does and compiled concurrently, at most
    ``max_in_flight`` at a time (each client's own compile queue; the daemon bounds its
    compile pool itself), for ``target`` (``"sm_90"``; None: the daemon's). ``client`` is
    used when given (its compile deadline and worker count apply); otherwise a client of
    ``address`` with a compile deadline of :data:`WARM_COMPILE_DEADLINE_MS` and
    ``max_in_flight`` workers is created and closed. A compile the daemon refuses or that
    outlives the deadline is a fallback in the report, not an exception; extraction failures
    raise DaemonError. ``outer_extent`` warms the bucket of that batch size, as in
    :func:`signatures`.
    """
    if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight <= 0:
        raise ValueError("max_in_flight is a positive int, got %r" % (max_in_flight,))
    start = time.monotonic()
    text = hlo_text(fn, *args, static_argnums=static_argnums, **kwargs)
    if client is not None:
        return _warm_with(client, text, target, max_in_flight, start, outer_extent)
    with Client(address, compile_deadline_ms=WARM_COMPILE_DEADLINE_MS,
                async_workers=max_in_flight) as own:
        return _warm_with(own, text, target, max_in_flight, start, outer_extent)


def _warm_with(client: Client, text: str, target: Optional[str], max_in_flight: int,
               start: float, outer_extent: int) -> WarmReport:
    sigs = client.extract(text, outer_extent)
    results: List[Optional[Result]] = [None] * len(sigs)
    # A window of at most max_in_flight futures: the client's executor would queue every
    # signature at once, holding a training step's worth of graphs in its queue.
    pending: Dict["concurrent.futures.Future[Result]", int] = {}
    next_index = 0
    while next_index < len(sigs) or pending:
        while next_index < len(sigs) and len(pending) < max_in_flight:
            pending[client.compile_async(sigs[next_index], target)] = next_index
            next_index += 1
        done, _ = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
        for future in done:
            results[pending.pop(future)] = future.result()
    outcomes: Dict[str, int] = collections.Counter()
    keys: List[str] = []
    fallbacks: List[Tuple[str, str]] = []
    for sig, result in zip(sigs, results):
        assert result is not None
        outcomes[result.outcome] += 1
        keys.append(result.key if result.ok else "")
        if not result.ok:
            fallbacks.append((sig.name, result.reason))
    return WarmReport(signatures=sigs, outcomes=dict(outcomes), keys=keys, fallbacks=fallbacks,
                      seconds=time.monotonic() - start)
