"""How a jax function becomes an ipu lowering rule: traced on plain avals under default numpy rules.

Used by every table whose rules decompose a primitive into jax ops (linalg, top-k, random bits)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

Rule = Callable[..., Any]


def _plain(aval: Any) -> Any:
    """`aval` without sharding or manual-axis types: only shape and dtype."""
    if not isinstance(aval, jax.core.ShapedArray):
        return aval
    return jax.core.ShapedArray(aval.shape, aval.dtype, aval.weak_type)


def decomposition(rule: Rule) -> Rule:
    """`rule`, a lowering that traces jax code, made to trace it as one device's computation.

    Inside shard_map (and pmap, which jax builds on it) the operands' avals carry the mesh axes
    they vary over; a loop the decomposition builds would start from constants that vary over
    none, and jax refuses a loop whose carry changes type. The decomposition computes one
    device's values from that device's operands, so it is traced on shape and dtype alone; the
    HLO it emits is the same. It also traces under jax.numpy's default promotion rules, whatever
    the user's config says: a user's jax_numpy_rank_promotion='raise' is about the user's
    program, not about these decompositions."""

    def lower(ctx: Any, *args: Any, **params: Any) -> Any:
        avals_out = ctx.avals_out
        if avals_out is not None:
            avals_out = [_plain(a) for a in avals_out]
        plain = ctx.replace(avals_in=[_plain(a) for a in ctx.avals_in], avals_out=avals_out)
        with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
            outs = rule(plain, *args, **params)
        if plain.tokens_out is not None:
            ctx.set_tokens_out(plain.tokens_out)
        return outs

    return lower


def over_batch(fn: Callable[..., Any], batch_rank: int) -> Callable[..., Any]:
    """`fn` of one matrix (or pair) mapped over `batch_rank` leading batch dimensions."""
    for _ in range(batch_rank):
        fn = jax.vmap(fn)
    return fn
