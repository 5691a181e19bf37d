"""TessellateIPU's array extensions: fill, tile_fill, tile_sharded_identity (jax_ipu.tile's)."""

from typing import Any

from jax.lax import bitcast_convert_type_p, reshape_p

from jax_ipu.tile.fill import tile_fill, tile_sharded_identity
from jax_ipu.tile.primitives import fill_p


def fill(shape: tuple[int, ...], fill_value: Any, dtype: Any) -> Any:
    """A new array of `shape` holding `fill_value`."""
    return fill_p.bind(shape=tuple(shape), fill_value=fill_value, dtype=dtype)


__all__ = ["bitcast_convert_type_p", "fill", "fill_p", "reshape_p", "tile_fill",
           "tile_sharded_identity"]
