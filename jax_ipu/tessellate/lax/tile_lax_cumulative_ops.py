"""TessellateIPU's cumulative ops: lax's, mapped by jax_ipu.tile."""

from jax.lax import cummax_p, cummin_p, cumprod_p, cumsum_p

__all__ = ["cummax_p", "cummin_p", "cumprod_p", "cumsum_p"]
