"""jax_ipu.tile's own primitives beside lax's: in-place and scaled ops, fill, copy, 2-D rotation.

Each is a jax primitive defined by a jax function of one tile's arrays (so it runs, vmaps and
lowers anywhere); tile_map maps it like a lax primitive and tells the model which results
Poplar's vertex writes into an operand (`inplace`), so a loop carrying that operand copies
nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_ipu import _internals

_ACCURACY = {"accuracy": None}
_SHARDING = {"sharding": None}
_OUT_SHARDING = {"out_sharding": None}
# Parameters jax's lax wrappers fill in for the user, by primitive name.
DEFAULT_PARAMS: dict[str, dict[str, Any]] = {
    **{name: _ACCURACY for name in ("exp", "exp2", "log", "log1p", "expm1", "sin", "cos", "tan",
                                    "tanh", "logistic", "sqrt", "rsqrt", "cbrt")},
    **{name: _OUT_SHARDING for name in ("reduce_sum", "reduce_max", "reduce_min",
                                        "reduce_prod")},
    **{name: {"reverse": False} for name in ("cumsum", "cumprod", "cummax", "cummin",
                                             "cumlogsumexp")},
    "reshape": {"dimensions": None, **_SHARDING},
    "convert_element_type": {"weak_type": False, **_SHARDING},
    "iota": {"dimension": 0, **_SHARDING},
    "broadcast_in_dim": _SHARDING,
    "sort": {"is_stable": True, "num_keys": 1},
    "round": {"rounding_method": lax.RoundingMethod.AWAY_FROM_ZERO},
    "dot_general": {"precision": None, "preferred_element_type": None, **_OUT_SHARDING},
    "rng_bit_generator": {"dtype": np.dtype(np.uint32),
                          "algorithm": lax.RandomAlgorithm.RNG_DEFAULT, **_OUT_SHARDING},
    "argmax": {"index_dtype": np.dtype(np.int32)},
    "argmin": {"index_dtype": np.dtype(np.int32)},
    "gather": {"fill_value": None},
    **{name: {"update_jaxpr": None, "update_consts": ()}
       for name in ("scatter", "scatter_add", "scatter_mul", "scatter_min", "scatter_max")},
}



class TilePrimitive(jax.extend.core.Primitive):
    """A primitive computed by `fn(*arrays, **params)`. `inplace[k]` is the operand result k
    is written into, or -1; `base` is the lax primitive an *_inplace primitive updates with."""

    def __init__(self, name: str, fn: Callable[..., Any], *, inplace: tuple[int, ...] = (),
                 multiple_results: bool = False, base: Any = None) -> None:
        super().__init__(name)
        self.fn = fn
        self.inplace = inplace
        self.base = base
        self.multiple_results = multiple_results
        self.def_impl(fn)
        self.def_abstract_eval(self._abstract)
        _internals.register_lowering(self, _internals.lower_fun(fn, multiple_results))
        _internals.primitive_batchers[self] = self._batch

    def _abstract(self, *avals: Any, **params: Any) -> Any:
        out = jax.eval_shape(lambda *xs: self.fn(*xs, **params), *avals)
        shaped = [jax.core.ShapedArray(o.shape, o.dtype) for o in jax.tree.leaves(out)]
        return shaped if self.multiple_results else shaped[0]

    def _batch(self, args: tuple[Any, ...], dims: tuple[Any, ...], **params: Any) -> Any:
        out = jax.vmap(lambda *xs: self.fn(*xs, **params), in_axes=dims)(*args)
        return (out, [0] * len(out)) if self.multiple_results else (out, 0)


def _inplace(base: Any) -> TilePrimitive:
    """`base` writing its result into its first operand, as Poplar's *InPlace vertices do."""
    defaults = DEFAULT_PARAMS.get(base.name, {})
    return TilePrimitive(f"{base.name}_inplace",
                         lambda *xs, **params: base.bind(*xs, **{**defaults, **params}),
                         inplace=(0,), base=base)


# The unary and binary lax ops with an in-place popops vertex (TessellateIPU's list).
abs_inplace_p = _inplace(lax.abs_p)
asin_inplace_p = _inplace(lax.asin_p)
cbrt_inplace_p = _inplace(lax.cbrt_p)
ceil_inplace_p = _inplace(lax.ceil_p)
erf_inplace_p = _inplace(lax.erf_p)
exp_inplace_p = _inplace(lax.exp_p)
expm1_inplace_p = _inplace(lax.expm1_p)
floor_inplace_p = _inplace(lax.floor_p)
is_finite_inplace_p = _inplace(lax.is_finite_p)
log_inplace_p = _inplace(lax.log_p)
log1p_inplace_p = _inplace(lax.log1p_p)
neg_inplace_p = _inplace(lax.neg_p)
population_count_inplace_p = _inplace(lax.population_count_p)
sin_inplace_p = _inplace(lax.sin_p)
sign_inplace_p = _inplace(lax.sign_p)
tan_inplace_p = _inplace(lax.tan_p)
round_inplace_p = _inplace(lax.round_p)
rsqrt_inplace_p = _inplace(lax.rsqrt_p)
sqrt_inplace_p = _inplace(lax.sqrt_p)
add_inplace_p = _inplace(lax.add_p)
atan2_inplace_p = _inplace(lax.atan2_p)
div_inplace_p = _inplace(lax.div_p)
max_inplace_p = _inplace(lax.max_p)
min_inplace_p = _inplace(lax.min_p)
mul_inplace_p = _inplace(lax.mul_p)
pow_inplace_p = _inplace(lax.pow_p)
rem_inplace_p = _inplace(lax.rem_p)
sub_inplace_p = _inplace(lax.sub_p)

INPLACE = {p.base.name: p for p in (
    abs_inplace_p, asin_inplace_p, cbrt_inplace_p, ceil_inplace_p, erf_inplace_p, exp_inplace_p,
    expm1_inplace_p, floor_inplace_p, is_finite_inplace_p, log_inplace_p, log1p_inplace_p,
    neg_inplace_p, population_count_inplace_p, sin_inplace_p, sign_inplace_p, tan_inplace_p,
    round_inplace_p, rsqrt_inplace_p, sqrt_inplace_p, add_inplace_p, atan2_inplace_p,
    div_inplace_p, max_inplace_p, min_inplace_p, mul_inplace_p, pow_inplace_p, rem_inplace_p,
    sub_inplace_p)}


def _scale(sb: Any) -> Any:
    return jnp.reshape(sb, ())


# a <- a + sb * b and a <- a - sb * b (popops' ScaledAdd / ScaledSubtract, in place on a);
# sb holds one value.
scaled_add_p = TilePrimitive("scaled_add", lambda a, b, sb: a + _scale(sb) * b, inplace=(0,))
scaled_sub_p = TilePrimitive("scaled_sub", lambda a, b, sb: a - _scale(sb) * b, inplace=(0,))

# A new array of `shape` holding `fill_value` (popops' Fill): a real allocation on the tile,
# unlike lax.full, which XLA may fold into its readers.
fill_p = TilePrimitive(
    "fill", lambda *, shape, fill_value, dtype: jnp.full(shape, fill_value, dtype))

# An on-tile copy that always copies (XLA elides a plain copy; the model charges this one).
tile_copy_p = TilePrimitive("tile_copy", lambda x: x)


def _rotation2d(cs: Any, row0: Any, row1: Any) -> tuple[Any, Any]:
    c, s = cs[0], cs[1]
    return c * row0 - s * row1, s * row0 + c * row1


# Two rows rotated by (cos, sin): (c x0 - s x1, s x0 + c x1), the rows passed apart.
rotation2d_p = TilePrimitive("rotation2d", _rotation2d, multiple_results=True)
