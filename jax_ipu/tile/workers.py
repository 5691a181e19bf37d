"""How a MultiVertex splits a row of data over its tile's workers: worker offsets as constants.

A row of `size` elements is handled in vectors of `vector_size` (2 floats make one 64-bit load)
and grains of `grain_size`; each worker takes whole grains, the first ones as many as the most,
the next the rest, the others none (TessellateIPU's make_ipu_vector1d_worker_offsets)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from jax_ipu.model.targets import WORKER_THREADS_PER_TILE
from jax_ipu.tile.validate import tile_error


def _grains(size: int, vector_size: int, num_workers: int, grain_size: int | None,
            allow_overlap: bool) -> tuple[int, int, int, int]:
    """(grain, vectors a grain, grains of each of the first workers, how many such workers)."""
    grain = grain_size or vector_size
    if size % vector_size or grain % vector_size or size < grain or num_workers < 1 or \
            (size % grain and not allow_overlap):
        raise tile_error(f"worker offsets: a row of {size} elements cannot be split in grains of "
                         f"{grain} ({vector_size} a vector) over {num_workers} workers; it needs "
                         "whole vectors, at least one grain, a multiple of the grain, and a "
                         "grain made of whole vectors")
    per_worker = math.ceil(size / (grain * num_workers))
    return grain, grain // vector_size, per_worker, size // (grain * per_worker)


def worker_offsets(size: int, vector_size: int = 2, num_workers: int = WORKER_THREADS_PER_TILE,
                   dtype: Any = np.uint16, grain_size: int | None = None) -> np.ndarray:
    """(num_workers + 1,) offsets, in vectors: worker w takes [offsets[w], offsets[w + 1])."""
    grain, scale, per_worker, full = _grains(size, vector_size, num_workers, grain_size, False)
    sizes = [per_worker] * full
    if full < num_workers:
        sizes.append((size - per_worker * grain * full) // grain)
        sizes += [0] * (num_workers - len(sizes))
    return np.cumsum([0, *sizes]).astype(dtype) * np.asarray(scale, dtype)


def worker_offsets_and_sizes(size: int, vector_size: int = 2,
                             num_workers: int = WORKER_THREADS_PER_TILE, dtype: Any = np.uint16,
                             allow_overlap: bool = False,
                             grain_size: int | None = None) -> np.ndarray:
    """(num_workers, 2): each worker's (offset, size) in vectors. With allow_overlap, a size
    that is no multiple of the grain gives the last busy worker a whole grain ending at the
    row's end (overlapping its neighbour's)."""
    grain, scale, per_worker, full = _grains(size, vector_size, num_workers, grain_size,
                                             allow_overlap)
    table = np.zeros((num_workers, 2), np.int64)
    table[:full, 0] = np.arange(full) * per_worker * scale
    table[:full, 1] = per_worker * scale
    if full < num_workers:
        rest = math.ceil((size - per_worker * grain * full) / grain)
        table[full] = (size // vector_size - rest * scale, rest * scale)
    return table.astype(dtype)
