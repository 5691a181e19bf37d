"""TessellateIPU's worker partitions of a row: jax_ipu.tile.workers under its names and keywords."""

from __future__ import annotations

from typing import Any

import numpy as np

from jax_ipu.tile.workers import worker_offsets, worker_offsets_and_sizes


def make_ipu_vector1d_worker_offsets(size: int, vector_size: int = 2, num_workers: int = 6,
                                     wdtype: Any = np.uint16,
                                     grain_size: int | None = None) -> np.ndarray:
    """(num_workers + 1,) offsets in vectors (jax_ipu.tile.worker_offsets)."""
    return worker_offsets(size, vector_size, num_workers, wdtype, grain_size)


def make_ipu_vector1d_worker_offsets_and_sizes(size: int, vector_size: int = 2,
                                               num_workers: int = 6, wdtype: Any = np.uint16,
                                               allow_overlap: bool = False,
                                               grain_size: int | None = None) -> np.ndarray:
    """(num_workers, 2) offsets and sizes in vectors (jax_ipu.tile.worker_offsets_and_sizes)."""
    return worker_offsets_and_sizes(size, vector_size, num_workers, wdtype, allow_overlap,
                                    grain_size)


def make_num_elements_per_worker(N: int, num_workers: int) -> np.ndarray:
    """N elements dealt to `num_workers` as evenly as can be, the first ones one more."""
    counts = np.full(num_workers, N // num_workers, np.int32)
    counts[:N - num_workers * (N // num_workers)] += 1
    return counts


__all__ = ["make_ipu_vector1d_worker_offsets", "make_ipu_vector1d_worker_offsets_and_sizes",
           "make_num_elements_per_worker"]
