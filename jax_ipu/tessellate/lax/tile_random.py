"""TessellateIPU's tile random numbers (jax_ipu.tile.random), and its primitives' names."""

from typing import Any

import jax.extend.core

from jax_ipu.tessellate.core.tile_interpreter import register_handler
from jax_ipu.tile.random import (
    tile_get_hw_seeds,
    tile_random_normal,
    tile_random_uniform,
    tile_set_hw_seeds,
)

ipu_random_uniform_p = jax.extend.core.Primitive("ipu_random_uniform")
ipu_random_normal_p = jax.extend.core.Primitive("ipu_random_normal")
ipu_get_hw_seeds_p = jax.extend.core.Primitive("ipu_get_hw_seeds")
ipu_set_hw_seeds_p = jax.extend.core.Primitive("ipu_set_hw_seeds")


def _no_arrays(fn: Any) -> Any:
    return lambda args, tiles, sync, attributes: fn(tiles, **attributes)


register_handler(ipu_random_uniform_p, _no_arrays(tile_random_uniform))
register_handler(ipu_random_normal_p, _no_arrays(tile_random_normal))
register_handler(ipu_get_hw_seeds_p, _no_arrays(tile_get_hw_seeds))
register_handler(ipu_set_hw_seeds_p, lambda args, tiles, sync, attributes:
                 tile_set_hw_seeds(*args))

__all__ = ["ipu_get_hw_seeds_p", "ipu_random_normal_p", "ipu_random_uniform_p",
           "ipu_set_hw_seeds_p", "tile_get_hw_seeds", "tile_random_normal",
           "tile_random_uniform", "tile_set_hw_seeds"]
