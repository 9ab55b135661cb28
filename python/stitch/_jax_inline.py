"""Flattening a JAX function's nested jits into one entry computation.

JAX lowers every nested ``jit`` (jnp helpers such as ``_where``, ``clip``, ``_reduce_max``;
flax and optax internals) to an HLO ``call``, and on the CPU the Threefry PRNG behind dropout
to a ``call`` of a rolled ``while`` loop. stitchd's extractor treats a ``call`` as a boundary,
so the elementwise work inside it would never be stitched. :func:`inline_calls` re-traces the
function with every call body spliced in and the PRNG expanded inline, unrolled (the form JAX
uses on GPU), so that the lowered module is one flat entry computation.

This module imports JAX; :mod:`stitch.jax` imports it only when a function needs it.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Dict, List

import jax
from jax._src import core as jax_core
from jax._src.random import prng as jax_prng
from jax._src.random import threefry2x32 as jax_threefry

# Primitives whose body is another jaxpr that JAX would lower to an HLO `call`.
_CALL_JAXPR_PARAM = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "remat": "jaxpr",
    "checkpoint": "jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
}

# PRNG primitives on typed key arrays. JAX lowers them through nested jits
# (threefry_random_bits, _threefry_fold_in, ...) that end up as HLO calls, so they are
# replaced by their uint32 implementations here; keys are carried as their raw uint32[..., 2]
# data.
_KEY_PRIMS = {"random_wrap", "random_unwrap", "random_bits", "random_fold_in",
              "random_split", "random_seed", "threefry2x32"}


def _is_key(aval: Any) -> bool:
    return bool(jax.dtypes.issubdtype(getattr(aval, "dtype", None), jax.dtypes.prng_key))


def _eval_key_prim(eqn: Any, invals: List[Any]) -> List[Any]:
    name = eqn.primitive.name
    p = eqn.params
    if name == "threefry2x32":
        # Out of line in JAX (a call; on CPU a rolled while loop): the same hash, inline and
        # unrolled, as JAX's generic (GPU) lowering computes it.
        return list(jax_threefry._threefry2x32_lowering(*invals, use_rolled_loops=False))
    if name in ("random_wrap", "random_unwrap"):
        return [invals[0]]
    if name == "random_seed":
        return [jax_prng.random_seed_impl_base(invals[0], impl=p["impl"])]
    kaval = eqn.invars[0].aval
    impl = kaval.dtype._impl
    if name == "random_bits":
        return [jax_prng.random_bits_impl_base(impl, invals[0], kaval.ndim,
                                               bit_width=p["bit_width"], shape=p["shape"])]
    if name == "random_fold_in":
        return [jax_prng.random_fold_in_impl_base(impl, invals[0], invals[1], kaval.shape)]
    if name == "random_split":
        return [jax_prng.random_split_impl_base(impl, invals[0], kaval.ndim, shape=p["shape"])]
    raise NotImplementedError(name)


def _needs_flattening(jaxpr: Any) -> bool:
    return any(e.primitive.name in _CALL_JAXPR_PARAM or e.primitive.name in _KEY_PRIMS
               for e in jaxpr.eqns)


def _eval_flattened(jaxpr: Any, consts: Any, *args: Any) -> List[Any]:
    """Evaluates `jaxpr` under the current trace, splicing in every call body."""
    env: Dict[Any, Any] = {}

    def read(v: Any) -> Any:
        return v.val if isinstance(v, jax_core.Literal) else env[v]

    for v, c in zip(jaxpr.constvars, consts):
        env[v] = c
    for v, a in zip(jaxpr.invars, args):
        env[v] = a
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        key = _CALL_JAXPR_PARAM.get(name)
        if key is not None and key in eqn.params:
            inner = eqn.params[key]
            if isinstance(inner, jax_core.ClosedJaxpr):
                outs = _eval_flattened(inner.jaxpr, inner.consts, *invals)
            else:
                outs = _eval_flattened(inner, (), *invals)
        elif name in _KEY_PRIMS:
            outs = _eval_key_prim(eqn, invals)
        else:
            if any(_is_key(v.aval) for v in eqn.invars):
                raise NotImplementedError(
                    f"primitive {name} on a PRNG key array is not handled by inline_calls")
            params = eqn.primitive.get_bind_params(eqn.params)
            with eqn.ctx.manager:
                outs = eqn.primitive.bind(*invals, **params)
            if not eqn.primitive.multiple_results:
                outs = [outs]
        for v, o in zip(eqn.outvars, outs):
            env[v] = o
    return [read(v) for v in jaxpr.outvars]


def inline_calls(fn: Callable[..., Any], name: str, max_rounds: int = 8) -> Callable[..., Any]:
    """Returns ``fn`` with every nested jit/call body (and the PRNG helpers) inlined.

    The result takes the same positional and keyword arguments as ``fn`` and returns the same
    pytree; its ``__name__`` is ``name``, which ``jax.jit`` turns into the HLO module's name
    (``jit_<name>``). Each round re-traces the previous jaxpr, splicing call bodies in; the
    PRNG implementations bring in new jits, so rounds repeat until none is left. Raises
    RuntimeError when calls remain after ``max_rounds`` rounds.
    """

    def flat_fn(*args: Any, **kwargs: Any) -> Any:
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))

        def on_leaves(*flat: Any) -> Any:
            a, k = jax.tree_util.tree_unflatten(treedef, flat)
            return fn(*a, **k)

        closed, out_shape = jax.make_jaxpr(on_leaves, return_shape=True)(*leaves)
        for _ in range(max_rounds):
            if not _needs_flattening(closed.jaxpr):
                break
            closed = jax.make_jaxpr(partial(_eval_flattened, closed.jaxpr, closed.consts))(*leaves)
        else:
            raise RuntimeError(f"inline_calls: nested calls remain after {max_rounds} rounds")
        outs = _eval_flattened(closed.jaxpr, closed.consts, *leaves)
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(out_shape), outs)

    flat_fn.__name__ = name
    flat_fn.__qualname__ = name
    return flat_fn
