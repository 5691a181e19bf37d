"""TessellateIPU's API on jax_ipu.tile: `import jax_ipu.tessellate as tessellate_ipu`.

Its names map onto jax_ipu.tile (no second implementation); where TessellateIPU's semantics
differ from jax_ipu.tile's they are kept here (select_n_p, tile_map(None, ...)). The differences
that remain are listed in ipu/docs/tile_programming.md, 'Coming from TessellateIPU'."""

from jax_ipu import __version__
from jax_ipu.tessellate import core, lax, linalg, utils
from jax_ipu.tessellate.core import (
    TileShardedArray,
    create_ipu_tile_primitive,
    declare_ipu_tile_primitive,
    ipu_cycle_count,
    tile_constant_replicated,
    tile_constant_sharded,
    tile_data_barrier,
    tile_gather,
    tile_map,
    tile_put_replicated,
    tile_put_sharded,
)
from jax_ipu.tessellate.utils import IpuDevice, IpuTargetType, is_ipu_model

__all__ = ["IpuDevice", "IpuTargetType", "TileShardedArray", "__version__", "core",
           "create_ipu_tile_primitive", "declare_ipu_tile_primitive", "ipu_cycle_count",
           "is_ipu_model", "lax", "linalg", "tile_constant_replicated", "tile_constant_sharded",
           "tile_data_barrier", "tile_gather", "tile_map", "tile_put_replicated",
           "tile_put_sharded", "utils"]
