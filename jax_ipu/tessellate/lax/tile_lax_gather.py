"""TessellateIPU's gather: lax's, mapped by jax_ipu.tile."""

from jax.lax import gather_p

__all__ = ["gather_p"]
