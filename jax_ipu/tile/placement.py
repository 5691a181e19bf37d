"""Putting data on tiles and moving it between them: put, replicate, constants, gather, barrier.

Each records where its rows come from and go to, so the model charges exactly the bytes that
change tiles; on any backend the values are those of the plain jax expression."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from jax_ipu.tile.array import TileShardedArray, check_tile_arrays
from jax_ipu.tile.ops import composite_call
from jax_ipu.tile.validate import check_tiles, tile_error, type_error


def _source(x: Any, what: str) -> tuple[Any, tuple[int, ...]]:
    """(the array, the tiles its rows live on, () when the model must find where it lives)."""
    if isinstance(x, TileShardedArray):
        return x.array, x.tiles
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        x = jnp.asarray(x)
    return x, ()


def _first_axis(x: Any, what: str) -> int:
    if not np.shape(x):
        raise tile_error(f"{what}: got a scalar; the first axis is the one mapped onto tiles, "
                         "so give an array with at least one axis (or use "
                         "tile_put_replicated)")
    return np.shape(x)[0]


def tile_put_sharded(x: Any, tiles: Sequence[int]) -> TileShardedArray:
    """Row i of `x` on tile `tiles[i]` (len(tiles) == x.shape[0])."""
    array, sources = _source(x, "tile_put_sharded")
    tiles = check_tiles(tiles, "tile_put_sharded", count=_first_axis(array, "tile_put_sharded"))
    (out,) = composite_call("tile_put", lambda a: (a,), [array],
                            {"mode": "sharded", "tiles": tiles, "source_tiles": sources})
    return TileShardedArray(out, tiles)


def tile_put_replicated(x: Any, tiles: Sequence[int]) -> TileShardedArray:
    """A copy of `x` on each of `tiles`: shape (len(tiles), *x.shape)."""
    array, sources = _source(x, "tile_put_replicated")
    tiles = check_tiles(tiles, "tile_put_replicated")
    n = len(tiles)
    (out,) = composite_call(
        "tile_put", lambda a: (jnp.broadcast_to(a[None], (n, *a.shape)),), [array],
        {"mode": "replicated", "tiles": tiles, "source_tiles": sources})
    return TileShardedArray(out, tiles)


def _constant(data: Any, what: str) -> np.ndarray:
    if not isinstance(data, np.ndarray | np.generic | list | tuple | int | float | bool):
        raise type_error(f"{what}: data must be a numpy array (a constant known when the "
                         f"program is built), got {type(data).__name__}; use "
                         "tile_put_sharded / tile_put_replicated for traced values")
    return np.asarray(data)


def tile_constant_sharded(data: Any, tiles: Sequence[int]) -> TileShardedArray:
    """A numpy constant, row i laid out on tile `tiles[i]` when the program is built."""
    data = _constant(data, "tile_constant_sharded")
    tiles = check_tiles(tiles, "tile_constant_sharded",
                        count=_first_axis(data, "tile_constant_sharded"))
    (out,) = composite_call("tile_put", lambda a: (a,), [data],
                            {"mode": "constant_sharded", "tiles": tiles, "source_tiles": ()})
    return TileShardedArray(out, tiles)


def tile_constant_replicated(data: Any, tiles: Sequence[int]) -> TileShardedArray:
    """A numpy constant, a copy on each of `tiles`: shape (len(tiles), *data.shape)."""
    data = _constant(data, "tile_constant_replicated")
    tiles = check_tiles(tiles, "tile_constant_replicated")
    n = len(tiles)
    (out,) = composite_call(
        "tile_put", lambda a: (jnp.broadcast_to(a[None], (n, *a.shape)),), [data],
        {"mode": "constant_replicated", "tiles": tiles, "source_tiles": ()})
    return TileShardedArray(out, tiles)


def tile_gather(x: Any, indices: Sequence[int], tiles: Sequence[int],
                copy: bool = False) -> TileShardedArray:
    """Row `x[indices[i]]` on tile `tiles[i]`: rows move between tiles; a row already on its
    tile stays (no copy) unless `copy`."""
    array, sources = _source(x, "tile_gather")
    rows = _first_axis(array, "tile_gather")
    try:
        idx = tuple(int(i) for i in np.asarray(indices).reshape(-1))
    except (TypeError, ValueError):
        raise tile_error(f"tile_gather: indices must be ints known when tracing, got "
                         f"{type(indices).__name__}") from None
    tiles = check_tiles(tiles, "tile_gather", count=len(idx))
    bad = [i for i in idx if not 0 <= i < rows]
    if bad:
        raise tile_error(f"tile_gather: indices {bad[:8]} outside 0..{rows - 1} (the rows of "
                         f"an array of shape {tuple(np.shape(array))})")
    picks = np.asarray(idx, np.int32)
    (out,) = composite_call("tile_gather", lambda a: (a[picks],), [array],
                            {"tiles": tiles, "indices": idx,
                             "source_tiles": () if copy else sources})
    return TileShardedArray(out, tiles)


def tile_data_barrier(*args: TileShardedArray) -> TileShardedArray | tuple[TileShardedArray, ...]:
    """The arrays unchanged, once all of them are ready on their tiles (one sync of those tiles
    in the model); one array is returned as it is."""
    check_tile_arrays(args, "tile_data_barrier")
    if not args:
        raise tile_error("tile_data_barrier: give at least one TileShardedArray")
    if len(args) == 1:
        return args[0]
    tiles = tuple(sorted({t for a in args for t in a.tiles}))
    outs = composite_call("tile_barrier", lambda *xs: xs, [a.array for a in args],
                          {"tiles": tiles})
    return tuple(TileShardedArray(o, a.tiles) for o, a in zip(outs, args, strict=True))


tile_barrier = tile_data_barrier
