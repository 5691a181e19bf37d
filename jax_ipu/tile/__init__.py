"""Tile-level programming: arrays on named tiles, vertices mapped over them, C++ codelets.

Designed after Graphcore's TessellateIPU (jax_ipu.tessellate maps its API onto this package). On
`ipu` the model sees the exact placement (memory per tile, exchange between tiles, each tile's
vertex); on any backend the values are the same."""

from jax_ipu.tile import linalg, primitives
from jax_ipu.tile.array import TileShardedArray
from jax_ipu.tile.counters import cycles_of, ipu_cycle_count, ipu_cycle_count_overhead
from jax_ipu.tile.custom import Vertex, declare_vertex
from jax_ipu.tile.fill import tile_copy, tile_fill, tile_sharded_identity
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
from jax_ipu.tile.primitives import INPLACE, fill_p, rotation2d_p, scaled_add_p, scaled_sub_p
from jax_ipu.tile.random import (
    tile_get_hw_seeds,
    tile_random_normal,
    tile_random_uniform,
    tile_set_hw_seeds,
)
from jax_ipu.tile.workers import worker_offsets, worker_offsets_and_sizes

__all__ = ["INPLACE", "TileShardedArray", "Vertex", "cycles_of", "declare_vertex", "fill_p",
           "ipu_cycle_count", "ipu_cycle_count_overhead", "linalg", "primitives",
           "rotation2d_p", "scaled_add_p", "scaled_sub_p", "tile_barrier",
           "tile_constant_replicated", "tile_constant_sharded", "tile_copy", "tile_data_barrier",
           "tile_fill", "tile_gather", "tile_get_hw_seeds", "tile_map", "tile_put_replicated",
           "tile_put_sharded", "tile_random_normal", "tile_random_uniform", "tile_set_hw_seeds",
           "tile_sharded_identity", "worker_offsets", "worker_offsets_and_sizes"]
