"""Trace-time checks of tile-level calls (tile ids against the chip, counts) and the errors they
raise, each naming the problem, the fix and the user's line (compiler.frames' rule)."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from jax_ipu import config
from jax_ipu.compiler import frames
from jax_ipu.errors import IpuTileError, IpuTileTypeError
from jax_ipu.model.targets import get_target

Tiles = tuple[int, ...]


def user_line() -> str:
    """'file:line (function)' of the innermost frame of the user's own code (compiler.frames'
    rule: not jax's, jax_ipu's, an installed library's or Python's own)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frames.user(frame.f_code.co_filename):
            return f"{frame.f_code.co_filename}:{frame.f_lineno} ({frame.f_code.co_name})"
        frame = frame.f_back
    return "<unknown>"


def tile_error(message: str) -> IpuTileError:
    return IpuTileError(f"{message} (at {user_line()})")


def type_error(message: str) -> IpuTileTypeError:
    return IpuTileTypeError(f"{message} (at {user_line()})")


def chip_tiles() -> tuple[int, str]:
    """(tiles, version) of the configured IPU: jax_ipu_model_num_tiles of
    jax_ipu_model_version, the full chip when 0. Read on every backend, so a tile program that
    runs on cpu would also fit the chip it is written for."""
    version = config.value("jax_ipu_model_version")
    num = config.value("jax_ipu_model_num_tiles")
    return num or get_target(version).num_tiles, version


def check_tiles(tiles: Any, what: str, count: int | None = None) -> Tiles:
    """`tiles` as a tuple of ints within the chip; `count` of them when given. A tile may be
    named more than once: it then holds several rows, as in TessellateIPU."""
    if isinstance(tiles, int | np.integer):
        raise tile_error(f"{what}: tiles must be a sequence of tile ids, got the int {tiles}; "
                         f"write ({tiles},) for one tile")
    try:
        ids = np.asarray(tiles)
    except (TypeError, ValueError):
        ids = np.asarray([], dtype=object)
    if ids.ndim != 1 or not (ids.size == 0 or np.issubdtype(ids.dtype, np.integer)):
        raise tile_error(f"{what}: tiles must be a flat sequence of int tile ids, got "
                         f"{tiles!r}")
    result = tuple(int(t) for t in ids)
    if not result:
        raise tile_error(f"{what}: no tiles given; name at least one tile")
    if count is not None and len(result) != count:
        raise tile_error(f"{what}: {len(result)} tiles for {count} rows; the first axis is "
                         f"mapped one row per tile, so give exactly {count} tile ids")
    limit, version = chip_tiles()
    outside = [t for t in result if not 0 <= t < limit]
    if outside:
        raise tile_error(f"{what}: tile id(s) {outside[:8]} outside 0..{limit - 1}: the "
                         f"{version} IPU Model has {limit} tiles (jax_ipu_model_num_tiles, "
                         "jax_ipu_model_version)")
    return result
