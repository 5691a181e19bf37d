"""Custom vertices: a C++ codelet against the Poplar vertex API, declared from Python.

The declaration gives, from one tile's input shapes, the outputs, constants, temporaries and a
cycle estimate; the codelet runs per tile in XLA:CPU through a typed FFI call on every backend
(or an optional JAX implementation off the IPU)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_ipu.tile import build, codegen
from jax_ipu.tile.array import TileShardedArray
from jax_ipu.tile.ops import composite_call
from jax_ipu.tile.validate import Tiles, tile_error, type_error, user_line

Declaration = tuple[Mapping[str, Any], Mapping[str, Any] | None, Mapping[str, Any] | None, Any]


class Vertex:
    """A custom vertex: tile_map(vertex, *arrays, **attributes) runs it on each tile.

    `declare(*avals)` gets one tile's input avals (named as the vertex's input fields) and
    returns (outputs, constants, temporaries, estimate): dicts of field name -> aval (outputs,
    temporaries) or numpy array (constants), and the vertex's cycles on one tile (a number, or a
    function of the input avals). An output named as an input is InOut."""

    def __init__(self, name: str, declare: Callable[..., Declaration], *,
                 source: str | None = None, file: str | Path | None = None,
                 impl: Callable[..., Any] | None = None) -> None:
        if (source is None) == (file is None):
            raise type_error(f"vertex {name}: give its C++ codelet as source= (text) or file= "
                             "(a path), one of them")
        if file is not None:
            path = Path(file).expanduser().resolve()
            if not path.is_file():
                raise tile_error(f"vertex {name}: codelet file {path} does not exist")
            self.source, self.source_name, self.source_dir = path.read_text(), str(path), \
                path.parent
        else:
            self.source, self.source_name, self.source_dir = source, f"<{name} codelet>", None
        self.name = name
        self.declare = declare
        self.inputs = [p.name for p in inspect.signature(declare).parameters.values()
                       if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self.impl = impl

    def def_impl(self, impl: Callable[..., Any]) -> Callable[..., Any]:
        """Set the JAX implementation (one tile's inputs and the attributes in, the outputs
        out) that runs on backends other than ipu; without one, the codelet runs there too."""
        self.impl = impl
        return impl

    def __repr__(self) -> str:
        return f"Vertex({self.name!r})"


def declare_vertex(name: str, *, source: str | None = None, file: str | Path | None = None,
                   impl: Callable[..., Any] | None = None) -> Callable[[Callable], Vertex]:
    """Decorator declaring a custom vertex from its template name (e.g. "Scale<{x}>", where
    {x} becomes the C++ type of input x) and its codelet (source= text or file= path)."""

    def wrap(declare: Callable[..., Declaration]) -> Vertex:
        return Vertex(name, declare, source=source, file=file, impl=impl)

    return wrap


def _aval(value: Any, what: str) -> jax.ShapeDtypeStruct:
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise type_error(f"{what} must be an aval (e.g. jax.ShapeDtypeStruct(shape, dtype) or an "
                         f"input aval), got {type(value).__name__}")
    return jax.ShapeDtypeStruct(tuple(value.shape), np.dtype(value.dtype))


def _field(name: str, role: str, aval: Any, vertex: str) -> codegen.Field:
    if not codegen.valid_name(name):
        raise tile_error(f"vertex {vertex}: {name!r} is not a C++ field name")
    dtype = np.dtype(aval.dtype).name
    if dtype not in codegen.CXX_TYPES:
        raise type_error(f"vertex {vertex}: field {name} has dtype {dtype}, which a vertex "
                         f"cannot take; use one of {', '.join(codegen.CXX_TYPES)}")
    shape = tuple(aval.shape)
    return codegen.Field(name, role, dtype, int(np.prod(shape)), shape[-1] if shape else 1)


def _attribute_kind(name: str, value: Any, vertex: str) -> str:
    if isinstance(value, bool | np.bool_):
        return "bool"
    if isinstance(value, int | np.integer):
        return "int"
    if isinstance(value, float | np.floating):
        return "float"
    raise type_error(f"vertex {vertex}: attribute {name}={value!r} must be a Python or numpy "
                     "scalar (it is set on the vertex before compute())")


def _estimate(value: Any, avals: list[jax.ShapeDtypeStruct], vertex: str) -> int:
    if callable(value):
        value = value(*avals)
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating) \
            or value < 0:
        raise type_error(f"vertex {vertex}: the cycle estimate must be a number >= 0 (or a "
                         f"function of the input avals giving one), got {value!r}")
    return int(np.ceil(value))


def map_vertex(vertex: Vertex, args: tuple[TileShardedArray, ...], tiles: Tiles, sync: bool,
               attributes: dict[str, Any]) -> TileShardedArray | tuple[TileShardedArray, ...]:
    """tile_map of a custom vertex (see maps.tile_map)."""
    if len(args) != len(vertex.inputs):
        raise type_error(f"vertex {vertex.name} takes {len(vertex.inputs)} input(s) "
                         f"({', '.join(vertex.inputs)}), got {len(args)}")
    avals = [jax.ShapeDtypeStruct(a.tile_shape, a.dtype) for a in args]
    declared = vertex.declare(*avals)
    if not isinstance(declared, tuple) or len(declared) != 4:
        raise type_error(f"vertex {vertex.name}: its declaration must return (outputs, "
                         "constants, temporaries, estimate)")
    outputs, constants, temporaries, estimate = declared
    if not outputs:
        raise type_error(f"vertex {vertex.name}: declare at least one output")
    try:
        filled = vertex.name.format(**{n: codegen.cxx_type(a.dtype)
                                       for n, a in zip(vertex.inputs, avals, strict=True)})
    except KeyError as e:
        raise tile_error(f"vertex {vertex.name}: the placeholder {{{e.args[0]}}} names no input "
                         f"(inputs: {', '.join(vertex.inputs)})") from None
    out_avals = {k: _aval(v, f"vertex {vertex.name} output {k}") for k, v in outputs.items()}
    consts = {k: np.asarray(v) for k, v in (constants or {}).items()}
    temps = {k: _aval(v, f"vertex {vertex.name} temporary {k}")
             for k, v in (temporaries or {}).items()}
    fields = []
    for name, aval in zip(vertex.inputs, avals, strict=True):
        inout = name in out_avals
        if inout and (out_avals[name].shape, out_avals[name].dtype) != (aval.shape, aval.dtype):
            raise tile_error(f"vertex {vertex.name}: InOut field {name} must keep its shape and "
                             f"dtype ({aval.shape} {aval.dtype})")
        fields.append(_field(name, "inout" if inout else "in", aval, filled))
    fields += [_field(k, "out", a, filled) for k, a in out_avals.items() if k not in vertex.inputs]
    fields += [_field(k, "const", v, filled) for k, v in consts.items()]
    fields += [_field(k, "tmp", a, filled) for k, a in temps.items()]
    kinds = {k: _attribute_kind(k, v, filled) for k, v in attributes.items()}
    for k in kinds:
        if not codegen.valid_name(k):
            raise tile_error(f"vertex {filled}: attribute {k!r} is not a C++ field name")
    cycles = _estimate(estimate, avals, filled)
    where = user_line()
    target = build.register(
        build.Build(vertex.source, vertex.source_name, codegen.glue(filled, fields, kinds),
                    vertex.source_dir),
        f"custom vertex {filled} (jax_ipu.tile), run per tile on the host")
    n = len(tiles)
    out_fields = [f for f in fields if f.role in ("out", "inout")]
    results = [jax.ShapeDtypeStruct((n, *out_avals[f.name].shape), out_avals[f.name].dtype)
               for f in out_fields]
    ffi_attrs = {"tiles": np.asarray(tiles, np.int64), "where": where}
    ffi_attrs.update({k: (np.int64(v) if kinds[k] == "int" else np.float64(v)
                          if kinds[k] == "float" else bool(v)) for k, v in attributes.items()})
    const_values = [jnp.asarray(v) for v in consts.values()]
    k = len(args)

    def run_codelet(*xs: Any) -> tuple[Any, ...]:
        return tuple(jax.ffi.ffi_call(target, results)(*xs, **ffi_attrs))

    def decomposition(*xs: Any) -> tuple[Any, ...]:
        if vertex.impl is None:
            return run_codelet(*xs)

        def with_impl(*ys: Any) -> tuple[Any, ...]:
            def one_tile(*zs: Any) -> tuple[Any, ...]:
                out = vertex.impl(*zs, **attributes)
                return tuple(out) if isinstance(out, tuple | list) else (out,)
            return jax.vmap(one_tile)(*ys[:k])

        return lax.platform_dependent(*xs, ipu=run_codelet, default=with_impl)

    temp_bytes = sum(f.nbytes for f in fields if f.role == "tmp")
    # The constants are the op's last operands: each vertex tile holds its own copy.
    outs = composite_call(
        "tile_vertex", decomposition, [*(a.array for a in args), *const_values],
        {"tiles": tiles, "vertex": filled, "estimate": cycles, "temporary_bytes": temp_bytes,
         "constants": len(const_values), "sync": int(bool(sync)), "target": target})
    wrapped = tuple(TileShardedArray(o, tiles) for o in outs)
    return wrapped if len(wrapped) > 1 else wrapped[0]
