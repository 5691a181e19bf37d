"""TileShardedArray: a jax array whose first axis is mapped onto named tiles, row i on tiles[i].

A pytree (the tiles are static), so it passes through jit, scan, fori_loop and donation."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jax_ipu.tile.validate import Tiles, check_tiles, tile_error, type_error


@jax.tree_util.register_pytree_node_class
class TileShardedArray:
    """`array` with row i on tile `tiles[i]`: `array.shape[0] == len(tiles)`. A tile named
    several times holds several rows (each runs its own vertex there).

    The constructor trusts that the data already lives there (as TessellateIPU's does); use
    tile_put_sharded / tile_put_replicated / tile_gather to move data onto tiles."""

    __slots__ = ("array", "tiles")

    def __init__(self, array: Any, tiles: Sequence[int]) -> None:
        shape = np.shape(array)
        if not shape:
            raise tile_error("a TileShardedArray needs an array with a first (tile) axis, got "
                             "a scalar")
        self.array = array
        self.tiles: Tiles = check_tiles(tiles, "TileShardedArray", count=shape[0])

    # ---- pytree: the array is the leaf, the tiles static metadata ----
    def tree_flatten(self) -> tuple[tuple[Any], Tiles]:
        return (self.array,), self.tiles

    @classmethod
    def tree_unflatten(cls, tiles: Tiles, children: Sequence[Any]) -> TileShardedArray:
        # jax rebuilds pytrees with placeholders (None, tracers of other shapes): no checks.
        out = object.__new__(cls)
        out.array, out.tiles = children[0], tiles
        return out

    # ---- numpy-like surface ----
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(np.shape(self.array))

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.array.dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def num_tiles(self) -> int:
        return len(self.tiles)

    @property
    def device_array(self) -> Any:
        """The underlying jax array (TessellateIPU's name for .array)."""
        return self.array

    @property
    def tile_shape(self) -> tuple[int, ...]:
        """The shape of the part on one tile."""
        return self.shape[1:]

    @property
    def aval(self) -> jax.core.ShapedArray:
        return jax.core.ShapedArray(self.shape, self.dtype)

    @property
    def tile_aval(self) -> jax.core.ShapedArray:
        return jax.core.ShapedArray(self.tile_shape, self.dtype)

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.array, dtype=dtype)

    def __repr__(self) -> str:
        return f"TileShardedArray(tiles={_short(self.tiles)}, array={self.array!r})"

    def __getitem__(self, key: Any) -> TileShardedArray:
        """Index the tile axis (keeps it: an int selects one tile) and the data on each tile.

        Selecting within a tile's part is a view there: nothing moves between tiles."""
        key = key if isinstance(key, tuple) else (key,)
        if any(k is None or k is Ellipsis for k in key):
            raise tile_error("TileShardedArray indexing takes ints and slices only (no None or "
                             "...); index .array for anything else")
        first = key[0]
        if isinstance(first, int | np.integer):
            i = int(first) + (len(self) if first < 0 else 0)
            first = slice(i, i + 1)
        if not isinstance(first, slice):
            raise tile_error(f"the tile axis of a TileShardedArray takes an int or a slice, got "
                             f"{type(first).__name__}; use tile_gather to pick rows by index")
        rows = range(len(self))[first]
        return TileShardedArray(self.array[(first, *key[1:])], tuple(self.tiles[i] for i in rows))

    def reshape(self, *shape: Any) -> TileShardedArray:
        """Reshape the data on each tile; the tile axis stays (give it as -1 or its length)."""
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple | list) \
            else tuple(shape)
        if not shape or shape[0] not in (-1, len(self)):
            raise tile_error(f"reshape({shape}) would change the tile axis of length "
                             f"{len(self)}; keep it first, e.g. reshape({len(self)}, ...)")
        return TileShardedArray(self.array.reshape((len(self), *shape[1:])), self.tiles)

    def squeeze(self) -> TileShardedArray:
        """Drop the axes of size 1 of each tile's part (the tile axis stays, even of one)."""
        kept = [d for d in self.tile_shape if d != 1]
        return self.reshape((len(self), *kept))

    def tile_reshape(self, *shape: Any) -> TileShardedArray:
        """Reshape the part on each tile to `shape`."""
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple | list) \
            else tuple(shape)
        return self.reshape((len(self), *shape))

    @classmethod
    def concatenate(cls, arrays: Sequence[TileShardedArray]) -> TileShardedArray:
        """Join tile sharded arrays along the tile axis (a tile in several holds several
        rows)."""
        check_tile_arrays(arrays, "TileShardedArray.concatenate")
        tiles = tuple(itertools.chain.from_iterable(a.tiles for a in arrays))
        return cls(jax.numpy.concatenate([a.array for a in arrays], axis=0), tiles)


def check_tile_arrays(args: Sequence[Any], what: str) -> None:
    """Raise unless every arg is a TileShardedArray."""
    for i, a in enumerate(args):
        if not isinstance(a, TileShardedArray):
            kind = type(a).__name__
            raise type_error(f"{what}: argument {i} is a {kind}, not a TileShardedArray; put it "
                             "on tiles first with tile_put_sharded or tile_put_replicated")


def _short(tiles: Tiles) -> str:
    if len(tiles) <= 8:
        return str(tiles)
    return f"({', '.join(map(str, tiles[:4]))}, ..., {tiles[-1]}) [{len(tiles)} tiles]"
