"""TessellateIPU's tile arrays and data movement: jax_ipu.tile's, unchanged."""

from jax_ipu.tile import (
    TileShardedArray,
    tile_barrier,
    tile_constant_replicated,
    tile_constant_sharded,
    tile_data_barrier,
    tile_gather,
    tile_put_replicated,
    tile_put_sharded,
)

__all__ = ["TileShardedArray", "tile_barrier", "tile_constant_replicated",
           "tile_constant_sharded", "tile_data_barrier", "tile_gather", "tile_put_replicated",
           "tile_put_sharded"]
