"""TessellateIPU's worker partitions of a row (jax_ipu.tile.workers) under their names there."""

from __future__ import annotations

import numpy as np

from jax_ipu.tile.workers import worker_offsets as make_ipu_vector1d_worker_offsets
from jax_ipu.tile.workers import (
    worker_offsets_and_sizes as make_ipu_vector1d_worker_offsets_and_sizes,
)


def make_num_elements_per_worker(N: int, num_workers: int) -> np.ndarray:
    """N elements dealt to `num_workers` as evenly as can be, the first ones one more."""
    counts = np.full(num_workers, N // num_workers, np.int32)
    counts[:N - num_workers * (N // num_workers)] += 1
    return counts


__all__ = ["make_ipu_vector1d_worker_offsets", "make_ipu_vector1d_worker_offsets_and_sizes",
           "make_num_elements_per_worker"]
