"""TessellateIPU's unary extensions: in-place unary ops and tile_copy (jax_ipu.tile's)."""

from jax import lax

from jax_ipu.tessellate.core.tile_interpreter import register_handler
from jax_ipu.tile.fill import tile_copy
from jax_ipu.tile.primitives import (
    abs_inplace_p,
    asin_inplace_p,
    cbrt_inplace_p,
    ceil_inplace_p,
    erf_inplace_p,
    exp_inplace_p,
    expm1_inplace_p,
    floor_inplace_p,
    is_finite_inplace_p,
    log1p_inplace_p,
    log_inplace_p,
    neg_inplace_p,
    population_count_inplace_p,
    round_inplace_p,
    rsqrt_inplace_p,
    sign_inplace_p,
    sin_inplace_p,
    sqrt_inplace_p,
    tan_inplace_p,
)

# tile_map(lax.copy_p, x), as TessellateIPU maps it: a copy that is always made.
register_handler(lax.copy_p, lambda args, tiles, sync, attributes: tile_copy(*args))

__all__ = ["abs_inplace_p", "asin_inplace_p", "cbrt_inplace_p", "ceil_inplace_p",
           "erf_inplace_p", "exp_inplace_p", "expm1_inplace_p", "floor_inplace_p",
           "is_finite_inplace_p", "log1p_inplace_p", "log_inplace_p", "neg_inplace_p",
           "population_count_inplace_p", "round_inplace_p", "rsqrt_inplace_p",
           "sign_inplace_p", "sin_inplace_p", "sqrt_inplace_p", "tan_inplace_p", "tile_copy"]
