"""TessellateIPU's rotation2d_p: jax_ipu.tile's."""

from jax_ipu.tile.primitives import rotation2d_p

__all__ = ["rotation2d_p"]
