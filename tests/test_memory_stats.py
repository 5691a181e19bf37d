"""device.memory_stats() on ipu: bytes of live arrays in the model's sizes, back to baseline.

bytes_limit is the chip's tile memory: tiles x bytes per tile."""

from __future__ import annotations

import gc

import jax
import numpy as np

IPU = jax.devices("ipu")[0]


def test_limit_is_tiles_times_tile_memory():
    assert IPU.memory_stats()["bytes_limit"] == 1472 * 638976


def test_bytes_follow_live_arrays():
    gc.collect()
    base = IPU.memory_stats()
    arrays = [jax.device_put(np.zeros((100, 10), np.float32), IPU) for _ in range(3)]
    half = jax.device_put(np.zeros(50, np.float16), IPU)
    stats = IPU.memory_stats()
    assert stats["bytes_in_use"] == base["bytes_in_use"] + 3 * 4000 + 100
    assert stats["num_allocs"] == base["num_allocs"] + 4
    assert stats["peak_bytes_in_use"] >= stats["bytes_in_use"]
    assert stats["largest_alloc_size"] >= 4000
    out = jax.jit(lambda a, b: a @ b.T)(arrays[0], arrays[1])
    assert IPU.memory_stats()["bytes_in_use"] == stats["bytes_in_use"] + 100 * 100 * 4
    del arrays, half, out
    gc.collect()
    assert IPU.memory_stats()["bytes_in_use"] == base["bytes_in_use"]


def test_explicit_delete_frees():
    base = IPU.memory_stats()["bytes_in_use"]
    x = jax.device_put(np.ones(256, np.int32), IPU)
    x.delete()
    assert x.is_deleted()
    assert IPU.memory_stats()["bytes_in_use"] == base
