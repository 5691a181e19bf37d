"""ipu_cycle_count: the IPU Model's cycle counter at a point of the program, returned with data.

Each call site is a composite the model sees in program order; when an ipu program is compiled,
the model's count of every cycle up to that point (and, inside counted loops, each loop's cycles
a trip) is written into the site's FFI call."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import jax
import numpy as np

from jax_ipu.model.targets import CYCLE_COUNT_READ_CYCLES
from jax_ipu.model.tiles import CYCLE_COUNT_TARGET
from jax_ipu.tile import build
from jax_ipu.tile.array import TileShardedArray, check_tile_arrays
from jax_ipu.tile.ops import composite_call
from jax_ipu.tile.validate import tile_error

_sites = itertools.count(1)
_lock = threading.Lock()
_registered = False


def _register() -> None:
    global _registered
    with _lock:
        if _registered:
            return
    source = (build.NATIVE_DIR / "cycle_count.cc").read_text()
    build.register(build.Build(source, str(build.NATIVE_DIR / "cycle_count.cc"), ""),
                   "the IPU Model's cycle counter (jax_ipu.tile.ipu_cycle_count)",
                   name=CYCLE_COUNT_TARGET, workers=False)
    with _lock:
        _registered = True


def ipu_cycle_count(*args: Any, sync: bool = False) -> tuple[Any, ...]:
    """(*args, count): the arrays unchanged and the model's cycle count once they are ready.

    The count is uint32 (low word, high word) per tile of the first TileShardedArray argument
    (a TileShardedArray of shape (tiles, 2)); uint32[2] when the first argument is a plain
    array. On ipu it is the model's cycles of everything the program ran up to this point
    (from the program's start), its own read included, so two counts differ by exactly the
    report's cycles of the ops between them plus one read (ipu_cycle_count_overhead()).
    Inside a counted loop (fori_loop, scan) each trip reads its own count. Off the IPU Model
    (cpu) the count is 0. A count in a loop of unknown trip count is refused when the program
    is compiled; bracket that loop instead."""
    if not args:
        raise tile_error("ipu_cycle_count needs at least one array to count after")
    tiled = isinstance(args[0], TileShardedArray)
    if tiled:
        check_tile_arrays(args, "ipu_cycle_count")
    tiles = args[0].tiles if tiled else (0,)
    _register()
    site = next(_sites)
    shape = (len(tiles), 2) if tiled else (2,)
    arrays = [a.array if isinstance(a, TileShardedArray) else a for a in args]

    def decomposition(*xs: Any) -> tuple[Any, ...]:
        count = jax.ffi.ffi_call(CYCLE_COUNT_TARGET, jax.ShapeDtypeStruct(shape, np.uint32),
                                 has_side_effect=True)(
            site=np.int64(site), cycles=np.int64(0), strides=np.zeros(0, np.int64),
            trips=np.zeros(0, np.int64))
        return (*xs, count)

    outs = composite_call("tile_cycle_count", decomposition, arrays,
                          {"tiles": tuple(tiles), "site": site, "sync": int(bool(sync))})
    data = [TileShardedArray(o, a.tiles) if isinstance(a, TileShardedArray) else o
            for o, a in zip(outs[:-1], args, strict=True)]
    count = TileShardedArray(outs[-1], tiles) if tiled else outs[-1]
    return (*data, count)


def ipu_cycle_count_overhead() -> int:
    """Cycles between two successive ipu_cycle_count calls: one read of the counters, as
    TessellateIPU measured on the chip and the model charges it."""
    return CYCLE_COUNT_READ_CYCLES


def cycles_of(count: Any) -> np.ndarray:
    """The counts of ipu_cycle_count's result as int64 (one per tile, or one)."""
    words = np.asarray(count).astype(np.uint64)
    return (words[..., 0] | (words[..., 1] << np.uint64(32))).astype(np.int64)
