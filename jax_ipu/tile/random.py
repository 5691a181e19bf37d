"""Random numbers on tiles from each tile's own generators, as the IPU's hardware PRNGs give them.

Every worker of every tile holds a 128-bit state (four uint32 seed words); tile_random_uniform and
tile_random_normal draw from those of the tiles named, and tile_get_hw_seeds / tile_set_hw_seeds
read and write them. The states live in the process (one per tile, shared by cpu and ipu runs)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jax_ipu.model.targets import WORKER_THREADS_PER_TILE
from jax_ipu.tile import build, codegen
from jax_ipu.tile.array import TileShardedArray, check_tile_arrays
from jax_ipu.tile.ops import composite_call
from jax_ipu.tile.validate import check_tiles, type_error

SEED_WORDS = 4
SOURCE = build.NATIVE_DIR / "random.cc"
# op name -> its handler in random.cc
_TARGETS = {
    "ipu_random_uniform": "JaxIpuRandomUniform", "ipu_random_normal": "JaxIpuRandomNormal",
    "ipu_get_hw_seeds": "JaxIpuGetHwSeeds", "ipu_set_hw_seeds": "JaxIpuSetHwSeeds",
}
_lock = threading.Lock()
_registered: set[str] = set()


def _target(name: str) -> str:
    with _lock:
        if name not in _registered:
            library = build.Build(SOURCE.read_text(), str(SOURCE), "")
            build.register(library, f"the IPU Model's tile random generators ({name})",
                           name=f"jax_ipu_{name}", symbol=_TARGETS[name], workers=False)
            _registered.add(name)
    return f"jax_ipu_{name}"


def _run(name: str, vertex: str, tiles: tuple[int, ...], arrays: list[Any],
         result: jax.ShapeDtypeStruct, inplace: tuple[int, ...] = (),
         **attributes: Any) -> TileShardedArray:
    target = _target(name)
    ids = np.asarray(tiles, np.int64)

    def decomposition(*xs: Any) -> tuple[Any, ...]:
        call = jax.ffi.ffi_call(target, result, has_side_effect=True)
        return (call(*xs, tiles=ids, **attributes),)

    (out,) = composite_call("tile_map", decomposition, arrays,
                            {"tiles": tiles, "vertex": vertex, "primitive": name,
                             "program": "", "sync": 0, "inplace": inplace})
    return TileShardedArray(out, tiles)


def _dtype(dtype: Any, allowed: tuple[str, ...], what: str) -> np.dtype:
    try:
        chosen = np.dtype(dtype)
    except TypeError:
        chosen = None
    if chosen is None or chosen.name not in allowed:
        raise type_error(f"{what}: dtype {dtype!r} is not one of {', '.join(allowed)}")
    return chosen


def _size(size: Any, what: str) -> int:
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
        raise type_error(f"{what}: size must be a whole number of samples per tile >= 1, got "
                         f"{size!r}")
    return int(size)


def tile_random_uniform(tiles: Sequence[int], size: int, dtype: Any, offset: float = 0.0,
                        scale: float = 1.0) -> TileShardedArray:
    """`size` uniform samples on each of `tiles` (shape (len(tiles), size)), as poprand's
    Uniform vertex: floats (float32, float16) in [offset - scale / 2, offset + scale / 2),
    int32 in [offset, offset + scale)."""
    tiles = check_tiles(tiles, "tile_random_uniform")
    chosen = _dtype(dtype, ("float32", "float16", "int32"), "tile_random_uniform")
    n = _size(size, "tile_random_uniform")
    return _run("ipu_random_uniform", f"poprand::Uniform<{codegen.cxx_type(chosen)}>", tiles, [],
                jax.ShapeDtypeStruct((len(tiles), n), chosen),
                offset=np.float64(offset), scale=np.float64(scale))


def tile_random_normal(tiles: Sequence[int], size: int, dtype: Any, mean: float = 0.0,
                       stddev: float = 1.0) -> TileShardedArray:
    """`size` normal samples of `mean` and `stddev` on each of `tiles` (float32 or float16)."""
    tiles = check_tiles(tiles, "tile_random_normal")
    chosen = _dtype(dtype, ("float32", "float16"), "tile_random_normal")
    n = _size(size, "tile_random_normal")
    return _run("ipu_random_normal", f"poprand::Normal<{codegen.cxx_type(chosen)}>", tiles, [],
                jax.ShapeDtypeStruct((len(tiles), n), chosen),
                mean=np.float64(mean), stddev=np.float64(stddev))


def tile_get_hw_seeds(tiles: Sequence[int]) -> TileShardedArray:
    """The generator states of `tiles`: uint32 of shape (len(tiles), workers, 4)."""
    tiles = check_tiles(tiles, "tile_get_hw_seeds")
    return _run("ipu_get_hw_seeds", "poplar_rt::GetHwSeeds", tiles, [],
                jax.ShapeDtypeStruct((len(tiles), WORKER_THREADS_PER_TILE, SEED_WORDS),
                                     np.uint32))


def tile_set_hw_seeds(seeds: TileShardedArray) -> TileShardedArray:
    """Set the generator states of the tiles `seeds` lives on (uint32, (tiles, workers, 4));
    returns `seeds`. Draws after it (in a later program, or ordered after it by data) repeat."""
    check_tile_arrays((seeds,), "tile_set_hw_seeds")
    expected = (WORKER_THREADS_PER_TILE, SEED_WORDS)
    if seeds.tile_shape != expected or seeds.dtype != np.uint32:
        raise type_error(f"tile_set_hw_seeds: seeds must be uint32 of shape (tiles, "
                         f"{expected[0]}, {expected[1]}) (a state per worker), got "
                         f"{seeds.dtype} {seeds.shape}")
    return _run("ipu_set_hw_seeds", "poplar_rt::SetHwSeeds", seeds.tiles, [seeds.array],
                jax.ShapeDtypeStruct(seeds.shape, np.uint32), inplace=(0,))
