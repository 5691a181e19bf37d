"""tile_map: one vertex per tile running a lax primitive (or a custom vertex) on that tile's data.

Its value is the vmap it means, on every backend; the composite also carries the primitive's
one-tile StableHLO, which the model costs with its own vertex rates on one tile."""

from __future__ import annotations

from typing import Any

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np

from jax_ipu.tile.array import TileShardedArray, check_tile_arrays
from jax_ipu.tile.ops import composite_call
from jax_ipu.tile.primitives import DEFAULT_PARAMS, TilePrimitive
from jax_ipu.tile.validate import Tiles, check_tiles, tile_error, type_error


def _canonical(value: Any) -> Any:
    """Lists as tuples, inside named tuples too: jax's parameters must hash
    (dimension_numbers=(([1], [1]), ([], [])) as TessellateIPU code writes them)."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_canonical(v) for v in value))
    if isinstance(value, list | tuple):
        return tuple(_canonical(v) for v in value)
    return value


def _params(primitive: Any, tile_ndim: int, params: dict[str, Any]) -> dict[str, Any]:
    name = (getattr(primitive, "base", None) or primitive).name
    given = {k: _canonical(v) for k, v in params.items()}
    if name.startswith("scatter") and given.get("update_consts", ()) is None:
        given["update_consts"] = ()
    full = {**DEFAULT_PARAMS.get(name, {}), **given}
    if name == "sort":
        full.setdefault("dimension", max(tile_ndim - 1, 0))
    for key in ("dtype", "new_dtype"):
        if full.get(key) is not None and not isinstance(full[key], np.dtype):
            full[key] = np.dtype(full[key])
    return full


def _hashable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


# (primitive, tile avals, params) -> one-tile StableHLO; a vertex is lowered once per process.
_PROGRAMS: dict[Any, str] = {}
_MAX_PROGRAMS = 1024


def _one_tile_program(primitive: Any, avals: tuple[jax.ShapeDtypeStruct, ...],
                      params: dict[str, Any]) -> str:
    """The primitive on one tile's shapes, as StableHLO text (what the model costs per tile)."""
    key = (primitive, avals, _hashable(params))
    if key not in _PROGRAMS:
        def one_tile(*xs: Any) -> Any:
            return primitive.bind(*xs, **params)

        if len(_PROGRAMS) >= _MAX_PROGRAMS:
            _PROGRAMS.clear()
        _PROGRAMS[key] = jax.jit(one_tile).trace(*avals).lower(
            lowering_platforms=("cpu",)).as_text()
    return _PROGRAMS[key]


def _vertex_name(primitive: Any, args: tuple[TileShardedArray, ...]) -> str:
    dtypes = ",".join(sorted({str(a.dtype) for a in args})) or "none"
    family = "tile" if isinstance(primitive, TilePrimitive) else "lax"
    return f"{family}.{primitive.name}<{dtypes}>"


def tile_map(primitive: Any, *args: TileShardedArray, tiles: Any = None, sync: bool = False,
             **params: Any) -> TileShardedArray | tuple[TileShardedArray, ...]:
    """Map `primitive` (a lax primitive such as lax.add_p, one of jax_ipu.tile's own such as
    add_inplace_p, or a custom Vertex) over the tiles of `args`: each tile runs it on its own
    rows, as one vertex of one compute set. None maps nothing: the arrays come back as given.

    All args must be TileShardedArrays on the same tiles (`tiles=` names them when there are no
    args). `params` are the primitive's parameters (e.g. axes=(0,) for lax.reduce_sum_p; those
    jax's wrappers fill in are filled in, lists are taken as tuples); `sync=True` adds a sync
    of those tiles before the compute set."""
    from jax_ipu.tile.custom import Vertex, map_vertex

    check_tile_arrays(args, f"tile_map({getattr(primitive, 'name', primitive)})")
    if primitive is None:
        return args[0] if len(args) == 1 else args
    vertex_tiles = common_tiles(args, tiles)
    if isinstance(primitive, Vertex):
        return map_vertex(primitive, args, vertex_tiles, sync, params)
    if not isinstance(primitive, jax.extend.core.Primitive):
        raise type_error(f"tile_map: {primitive!r} is not a jax primitive (e.g. jax.lax.add_p) "
                         "nor a custom Vertex (jax_ipu.tile.declare_vertex)")
    n = len(vertex_tiles)
    tile_ndim = len(args[0].tile_shape) if args else 0
    params = _params(primitive, tile_ndim, params)
    avals = tuple(jax.ShapeDtypeStruct(a.tile_shape, a.dtype) for a in args)

    def one_tile(*xs: Any) -> tuple[Any, ...]:
        out = primitive.bind(*xs, **params)
        return tuple(out) if primitive.multiple_results else (out,)

    try:
        outs = jax.eval_shape(one_tile, *avals)
        program = _one_tile_program(primitive, avals, params)
    except (TypeError, ValueError, NotImplementedError) as e:
        raise type_error(f"tile_map({primitive.name}) on tile shapes "
                         f"{[tuple(a.shape) for a in avals]}: {e}") from None
    inplace = getattr(primitive, "inplace", ())
    for k, j in enumerate(inplace):
        if j >= 0 and (j >= len(avals) or (outs[k].shape, outs[k].dtype) !=
                       (avals[j].shape, avals[j].dtype)):
            raise type_error(f"tile_map({primitive.name}) writes its result into argument {j}, "
                             f"which must have the result's shape and dtype "
                             f"({outs[k].shape} {outs[k].dtype})")

    def decomposition(*xs: Any) -> tuple[Any, ...]:
        if xs:
            return jax.vmap(one_tile)(*xs)
        return tuple(jnp.broadcast_to(o[None], (n, *o.shape)) for o in one_tile())

    outs = composite_call(
        "tile_map", decomposition, [a.array for a in args],
        {"tiles": vertex_tiles, "vertex": _vertex_name(primitive, args),
         "primitive": primitive.name, "program": program, "sync": int(bool(sync)),
         "inplace": tuple(inplace)})
    wrapped = tuple(TileShardedArray(o, vertex_tiles) for o in outs)
    return wrapped if primitive.multiple_results else wrapped[0]


def common_tiles(args: tuple[TileShardedArray, ...], tiles: Any) -> Tiles:
    """The tiles every arg lives on (and `tiles`, when given, must be them)."""
    if not args:
        if tiles is None:
            raise tile_error("tile_map with no TileShardedArray arguments needs tiles=(...) to "
                             "say where its vertices run")
        return check_tiles(tiles, "tile_map")
    first = args[0].tiles
    for i, a in enumerate(args[1:], start=1):
        if a.tiles != first:
            raise tile_error(f"tile_map: argument {i} lives on other tiles than argument 0 "
                             f"({_describe(a.tiles)} vs {_describe(first)}); a vertex reads only "
                             "its own tile's memory: move the data first with tile_gather or "
                             "tile_put_sharded")
    if tiles is not None and check_tiles(tiles, "tile_map") != first:
        raise tile_error(f"tile_map: tiles={_describe(tuple(tiles))} differ from where the "
                         f"arguments live ({_describe(first)})")
    return first


def _describe(tiles: Tiles) -> str:
    return str(tiles) if len(tiles) <= 6 else f"{len(tiles)} tiles from {tiles[0]}"
