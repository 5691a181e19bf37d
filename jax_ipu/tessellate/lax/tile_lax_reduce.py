"""TessellateIPU's reductions: lax's, mapped by jax_ipu.tile."""

from jax.lax import (
    reduce_and_p,
    reduce_max_p,
    reduce_min_p,
    reduce_or_p,
    reduce_prod_p,
    reduce_sum_p,
)

__all__ = ["reduce_and_p", "reduce_max_p", "reduce_min_p", "reduce_or_p", "reduce_prod_p",
           "reduce_sum_p"]
