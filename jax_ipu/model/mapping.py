"""Tile mapping: how a tensor's bytes are spread over tiles, as Poplar's linear mapping does.

Whole 64-bit grains per tile, no tile below a minimum share, and a rotating start tile."""

from __future__ import annotations

import numpy as np

from jax_ipu.model.targets import MIN_BYTES_PER_TILE, TENSOR_GRAIN_BYTES


def tiles_used(nbytes: int, num_tiles: int) -> int:
    """How many tiles a linearly mapped tensor of nbytes occupies."""
    if nbytes <= 0:
        return 0
    grains = -(-nbytes // TENSOR_GRAIN_BYTES)
    return max(1, min(num_tiles, grains, nbytes // MIN_BYTES_PER_TILE))


def linear_mapping(nbytes: int, num_tiles: int, start: int = 0) -> np.ndarray:
    """Bytes on each tile (length num_tiles) of a tensor mapped linearly from tile `start`.

    Grains are dealt as evenly as possible; the partial last grain costs a whole one, as
    tile allocations are in whole vectors."""
    out = np.zeros(num_tiles, dtype=np.int64)
    tiles = tiles_used(nbytes, num_tiles)
    if tiles == 0:
        return out
    grains = -(-nbytes // TENSOR_GRAIN_BYTES)
    base, extra = divmod(grains, tiles)
    share = np.full(tiles, base * TENSOR_GRAIN_BYTES, dtype=np.int64)
    share[:extra] += TENSOR_GRAIN_BYTES
    idx = (start + np.arange(tiles)) % num_tiles
    out[idx] = share
    return out


def uniform_share(nbytes: int, tiles: int, num_tiles: int, start: int = 0) -> np.ndarray:
    """Bytes per tile when nbytes are split evenly over `tiles` tiles (e.g. a matmul plan)."""
    out = np.zeros(num_tiles, dtype=np.int64)
    tiles = max(1, min(tiles, num_tiles))
    if nbytes <= 0:
        return out
    idx = (start + np.arange(tiles)) % num_tiles
    out[idx] = -(-nbytes // tiles)
    return out
