"""TessellateIPU's scatters: lax's, mapped by jax_ipu.tile."""

from jax.lax import scatter_add_p, scatter_max_p, scatter_min_p, scatter_mul_p, scatter_p

__all__ = ["scatter_add_p", "scatter_max_p", "scatter_min_p", "scatter_mul_p", "scatter_p"]
