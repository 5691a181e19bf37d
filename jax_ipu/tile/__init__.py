"""Tile-level programming: arrays on named tiles, vertices mapped over them, C++ codelets.

Designed after Graphcore's TessellateIPU. On `ipu` the model sees the exact placement (memory
per tile, exchange between tiles, each tile's vertex); on any backend the values are the same."""

from jax_ipu.tile.array import TileShardedArray
from jax_ipu.tile.counters import cycles_of, ipu_cycle_count
from jax_ipu.tile.custom import Vertex, declare_vertex
from jax_ipu.tile.maps import tile_map
from jax_ipu.tile.placement import (
    tile_barrier,
    tile_constant_replicated,
    tile_constant_sharded,
    tile_data_barrier,
    tile_gather,
    tile_put_replicated,
    tile_put_sharded,
)

__all__ = ["TileShardedArray", "Vertex", "cycles_of", "declare_vertex", "ipu_cycle_count",
           "tile_barrier", "tile_constant_replicated",
           "tile_constant_sharded", "tile_data_barrier", "tile_gather", "tile_map",
           "tile_put_replicated", "tile_put_sharded"]
