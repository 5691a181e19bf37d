"""New arrays on tiles made on the tiles themselves: filled with a value, copied, an identity.

Each is a vertex on the tiles named (popops' Fill, an on-tile copy, a scatter of ones), which the
model costs per tile; nothing is exchanged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from jax import lax

from jax_ipu.tile.array import TileShardedArray, check_tile_arrays
from jax_ipu.tile.maps import tile_map
from jax_ipu.tile.placement import tile_constant_replicated, tile_constant_sharded
from jax_ipu.tile.primitives import fill_p, tile_copy_p
from jax_ipu.tile.validate import check_tiles


def tile_fill(shape: Sequence[int], fill_value: Any, dtype: Any,
              tiles: Sequence[int]) -> TileShardedArray:
    """An array of `shape` holding `fill_value` on each of `tiles`: (len(tiles), *shape)."""
    return tile_map(fill_p, shape=tuple(int(d) for d in shape), fill_value=fill_value,
                    dtype=np.dtype(dtype), tiles=check_tiles(tiles, "tile_fill"))


def tile_copy(x: TileShardedArray) -> TileShardedArray:
    """A copy of `x` on its own tiles, always made (a plain copy may be elided)."""
    check_tile_arrays((x,), "tile_copy")
    return tile_map(tile_copy_p, x)


def tile_sharded_identity(dtype: Any, tiles: Sequence[int]) -> TileShardedArray:
    """The identity matrix of size len(tiles), row i on tiles[i]: zeros filled on each tile,
    then its one written by a scatter at the tile's own index."""
    tiles = check_tiles(tiles, "tile_sharded_identity")
    n = len(tiles)
    rows = tile_fill((n,), 0, dtype, tiles)
    where = tile_constant_sharded(np.arange(n, dtype=np.uint32).reshape(n, 1, 1), tiles)
    one = tile_constant_replicated(np.ones(1, np.dtype(dtype)), tiles)
    numbers = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                          scatter_dims_to_operand_dims=(0,))
    return tile_map(lax.scatter_p, rows, where, one, dimension_numbers=numbers,
                    indices_are_sorted=True, unique_indices=True,
                    mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS)
