"""Custom vertices: a C++ codelet against the Poplar vertex API, declared from Python.

The declaration gives, from one tile's input shapes and the call's declaration parameters, the
outputs, constants, temporaries and a cycle estimate; the codelet runs per tile in XLA:CPU
through a typed FFI call on every backend (or an optional JAX implementation off the IPU)."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_ipu import config
from jax_ipu.tile import build, codegen
from jax_ipu.tile.array import TileShardedArray
from jax_ipu.tile.ops import composite_call
from jax_ipu.tile.validate import Tiles, tile_error, type_error, user_line

Declaration = tuple[Mapping[str, Any], Mapping[str, Any] | None, Mapping[str, Any] | None, Any]
# Attribute arrays take a dtype a vertex can hold (the chip has no 64-bit types).
_NARROW = {np.dtype(np.int64): np.dtype(np.int32), np.dtype(np.float64): np.dtype(np.float32)}


@dataclass(frozen=True)
class Codelet:
    """A vertex's C++: its text, the name compile errors show, the directory of its includes."""

    source: str
    name: str
    directory: Path | None = None

    @classmethod
    def of(cls, what: str, source: str | None, file: str | Path | None) -> Codelet:
        if (source is None) == (file is None):
            raise type_error(f"vertex {what}: give its C++ codelet as source= (text) or file= "
                             "(a path), one of them")
        if file is None:
            return cls(source, f"<{what} codelet>")
        path = Path(file).expanduser().resolve()
        if not path.is_file():
            raise tile_error(f"vertex {what}: codelet file {path} does not exist")
        return cls(path.read_text(), str(path), path.parent)


class Vertex:
    """A custom vertex: tile_map(vertex, *arrays, **params) runs it on each tile.

    `declare(*avals, **parameters)` gets one tile's input avals (named as the vertex's input
    fields) and the call's parameters named as its keyword-only arguments (shapes, dtypes,
    sizes: anything, scalar or not), and returns (outputs, constants, temporaries, estimate):
    dicts of field name -> aval (outputs, temporaries) or numpy array (constants), and the
    vertex's cycles on one tile (a number, or a function of the input avals giving one). An
    output named as an input is InOut. The call's other parameters are set on the vertex: a
    scalar on a scalar field, a sequence or array on a Vector<T> field."""

    def __init__(self, name: str, declare: Callable[..., Declaration], *,
                 source: str | None = None, file: str | Path | None = None,
                 impl: Callable[..., Any] | None = None) -> None:
        self.codelet = Codelet.of(name, source, file)
        self.name = name
        self.declare = declare
        signature = inspect.signature(declare).parameters.values()
        self.inputs = [p.name for p in signature
                       if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self.parameters = [p.name for p in signature if p.kind == p.KEYWORD_ONLY]
        self.impl = impl
        # Called before the vertex is first built: builds its whole family at once (prebuild).
        self.family: Callable[[], None] | None = None

    @property
    def source(self) -> str:
        return self.codelet.source

    def def_impl(self, impl: Callable[..., Any]) -> Callable[..., Any]:
        """Set the JAX implementation (one tile's inputs and the parameters in, the outputs
        out) that runs on backends other than ipu; without one, the codelet runs there too."""
        self.impl = impl
        return impl

    def __repr__(self) -> str:
        return f"Vertex({self.name!r})"


def declare_vertex(name: str, *, source: str | None = None, file: str | Path | None = None,
                   impl: Callable[..., Any] | None = None) -> Callable[[Callable], Vertex]:
    """Decorator declaring a custom vertex from its template name (e.g. "Scale<{x}>", where
    {x} becomes the C++ type of input x, or of a dtype parameter x) and its codelet (source=
    text or file= path)."""

    def wrap(declare: Callable[..., Declaration]) -> Vertex:
        return Vertex(name, declare, source=source, file=file, impl=impl)

    return wrap


@dataclass
class VertexCall:
    """One custom vertex mapped over tiles, its declaration read: what the glue, the build and
    the model need. Avals are one tile's; `outputs` is in result order (an input's name makes
    that output InOut); `rows` overrides a field's row length (2-D fields)."""

    vertex: str
    codelet: Codelet
    inputs: list[str]
    outputs: dict[str, Any]
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    temporaries: dict[str, Any] = field(default_factory=dict)
    attributes: dict[str, Any] = field(default_factory=dict)
    estimate: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    impl: Callable[..., Any] | None = None


def _aval(value: Any, what: str) -> jax.ShapeDtypeStruct:
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise type_error(f"{what} must be an aval (e.g. jax.ShapeDtypeStruct(shape, dtype) or an "
                         f"input aval), got {type(value).__name__}")
    return jax.ShapeDtypeStruct(tuple(value.shape), np.dtype(value.dtype))


def _field(name: str, role: str, aval: Any, vertex: str, row: int | None) -> codegen.Field:
    if not codegen.valid_name(name):
        raise tile_error(f"vertex {vertex}: {name!r} is not a C++ field name")
    dtype = np.dtype(aval.dtype).name
    if dtype not in codegen.CXX_TYPES:
        raise type_error(f"vertex {vertex}: field {name} has dtype {dtype}, which a vertex "
                         f"cannot take; use one of {', '.join(codegen.CXX_TYPES)}")
    shape = tuple(aval.shape)
    size = int(np.prod(shape))
    if row is None or row <= 0:
        row = shape[-1] if shape else 1
    return codegen.Field(name, role, dtype, size, row)


def _attribute_kind(name: str, value: Any, vertex: str) -> str:
    if isinstance(value, bool | np.bool_):
        return "bool"
    if isinstance(value, int | np.integer):
        return "int"
    if isinstance(value, float | np.floating):
        return "float"
    raise type_error(f"vertex {vertex}: attribute {name}={value!r} must be a scalar (set on a "
                     "scalar field) or a sequence or array (set on a Vector<T> field)")


def _attribute_array(name: str, value: Any, vertex: str) -> np.ndarray | None:
    """An attribute given as a sequence or array: a constant on the tile, bound to a
    Vector<T> field; None for a scalar."""
    if isinstance(value, np.ndarray | list | tuple) and not np.isscalar(value):
        data = np.asarray(value)
        if data.dtype.kind in "OUS":
            raise type_error(f"vertex {vertex}: attribute {name}={value!r} must hold numbers")
        return np.ascontiguousarray(data.astype(_NARROW.get(data.dtype, data.dtype)))
    return None


def _estimate(value: Any, avals: Sequence[Any], vertex: str) -> int:
    if callable(value):
        value = value(*avals)
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating) \
            or value < 0:
        raise type_error(f"vertex {vertex}: the cycle estimate must be a number >= 0 (or a "
                         f"function of the input avals giving one), got {value!r}")
    return int(np.ceil(value))


def _template_value(value: Any) -> str | None:
    """How a declaration parameter fills a {placeholder} of the vertex's name."""
    if isinstance(value, bool | np.bool_):
        return str(bool(value)).lower()
    if isinstance(value, int | np.integer):
        return str(int(value))
    try:
        return codegen.cxx_type(value)
    except (TypeError, KeyError):
        return None


def map_vertex(vertex: Vertex, args: tuple[TileShardedArray, ...], tiles: Tiles, sync: bool,
               params: dict[str, Any]) -> TileShardedArray | tuple[TileShardedArray, ...]:
    """tile_map of a declared custom vertex (see maps.tile_map)."""
    if len(args) != len(vertex.inputs):
        raise type_error(f"vertex {vertex.name} takes {len(vertex.inputs)} input(s) "
                         f"({', '.join(vertex.inputs)}), got {len(args)}")
    if vertex.family is not None:
        vertex.family()
    avals = [jax.ShapeDtypeStruct(a.tile_shape, a.dtype) for a in args]
    return call_vertex(declared_call(vertex, avals, params), args, tiles, sync)


def declared_call(vertex: Vertex, avals: Sequence[Any], params: dict[str, Any]) -> VertexCall:
    """What `vertex`'s declaration says of one tile with these input avals and parameters."""
    given = {k: params[k] for k in vertex.parameters if k in params}
    attributes = {k: v for k, v in params.items() if k not in given}
    try:
        declared = vertex.declare(*avals, **given)
    except TypeError as e:
        raise type_error(f"vertex {vertex.name}: its declaration rejected the call ({e}); "
                         f"declaration parameters: {', '.join(vertex.parameters) or 'none'}") \
            from None
    if not isinstance(declared, tuple) or len(declared) != 4:
        raise type_error(f"vertex {vertex.name}: its declaration must return (outputs, "
                         "constants, temporaries, estimate)")
    outputs, constants, temporaries, estimate = declared
    fills = {n: codegen.cxx_type(a.dtype) for n, a in zip(vertex.inputs, avals, strict=True)}
    fills.update({k: t for k, v in given.items() if (t := _template_value(v)) is not None})
    try:
        filled = vertex.name.format(**fills)
    except KeyError as e:
        raise tile_error(f"vertex {vertex.name}: the placeholder {{{e.args[0]}}} names no input "
                         f"nor parameter (inputs: {', '.join(vertex.inputs)})") from None
    outputs = dict(outputs or {})
    # Results: the InOut fields first (in input order), then the others as declared.
    order = [k for k in vertex.inputs if k in outputs] + \
        [k for k in outputs if k not in vertex.inputs]
    return VertexCall(
        vertex=filled, codelet=vertex.codelet, inputs=list(vertex.inputs),
        outputs={k: _aval(outputs[k], f"vertex {filled} output {k}") for k in order},
        constants={k: np.asarray(v) for k, v in (constants or {}).items()},
        temporaries={k: _aval(v, f"vertex {filled} temporary {k}")
                     for k, v in (temporaries or {}).items()},
        attributes=attributes, estimate=_estimate(estimate, avals, filled),
        impl=None if vertex.impl is None else _with(vertex.impl, given))


def _with(impl: Callable[..., Any], given: dict[str, Any]) -> Callable[..., Any]:
    return lambda *xs, **attributes: impl(*xs, **given, **attributes)


def _fields(call: VertexCall, avals: Sequence[Any]) -> list[codegen.Field]:
    """The vertex's fields: inputs (in argument order), outputs, constants, temporaries."""
    name = call.vertex
    if not call.outputs:
        raise type_error(f"vertex {name}: declare at least one output")
    fields = []
    for k, aval in zip(call.inputs, avals, strict=True):
        inout = k in call.outputs
        if inout and (call.outputs[k].shape, call.outputs[k].dtype) != (aval.shape, aval.dtype):
            raise tile_error(f"vertex {name}: InOut field {k} must keep its shape and dtype "
                             f"({aval.shape} {aval.dtype})")
        fields.append(_field(k, "inout" if inout else "in", aval, name, call.rows.get(k)))
    fields += [_field(k, "out", a, name, call.rows.get(k)) for k, a in call.outputs.items()
               if k not in call.inputs]
    fields += [_field(k, "const", v, name, call.rows.get(k)) for k, v in call.constants.items()]
    fields += [_field(k, "tmp", a, name, call.rows.get(k)) for k, a in call.temporaries.items()]
    return fields


def _kinds(call: VertexCall) -> dict[str, str]:
    """Each scalar attribute's kind: 'int', 'float' or 'bool'."""
    return {k: _attribute_kind(k, v, call.vertex) for k, v in call.attributes.items()}


def _layout(call: VertexCall, fields: list[codegen.Field]) -> tuple[Any, ...]:
    """What a vertex's build depends on (never a shape): the compiler, the codelet and the
    glue's fields and attributes."""
    return (tuple(build.compiler()), call.codelet, call.vertex,
            tuple((f.name, f.role, f.dtype) for f in fields), tuple(_kinds(call).items()),
            tuple(call.outputs))


# Handlers built together ahead of use (prebuild): build key -> FFI target.
_PREBUILT: dict[tuple[Any, ...], str] = {}
_prebuild_lock = threading.Lock()


def _split_attributes(call: VertexCall) -> VertexCall:
    """The call with its array attributes moved to constants (Vector<T> fields)."""
    arrays = {k: a for k, v in call.attributes.items()
              if (a := _attribute_array(k, v, call.vertex)) is not None}
    if not arrays:
        return call
    for k in arrays:
        if k in call.constants or k in call.outputs or k in call.inputs:
            raise tile_error(f"vertex {call.vertex}: attribute {k} is also a field")
    return VertexCall(call.vertex, call.codelet, call.inputs, call.outputs,
                      {**call.constants, **arrays}, call.temporaries,
                      {k: v for k, v in call.attributes.items() if k not in arrays},
                      call.estimate, call.rows, call.impl)


def prebuild(calls: Sequence[VertexCall], avals: Sequence[Sequence[Any]]) -> None:
    """Build the handlers of several vertices (each with one tile's input avals) as one library:
    one compiler run where each would take its own. Later calls of the same vertices find them."""
    with _prebuild_lock:
        pending = {}
        for call, in_avals in zip(calls, avals, strict=True):
            call = _split_attributes(call)
            fields = _fields(call, in_avals)
            key = _layout(call, fields)
            if key not in _PREBUILT:
                pending[key] = (call, fields)
        if not pending:
            return
        codelets = [call.codelet for call, _ in pending.values()]
        codelet = codelets[0]
        if any((c.source, c.directory) != (codelet.source, codelet.directory)
               for c in codelets):
            raise tile_error("prebuild: vertices built together must share one codelet")
        glue = []
        for i, (call, fields) in enumerate(pending.values()):
            glue.append(codegen.glue(call.vertex, fields, _kinds(call), symbol=f"JaxIpuVertex{i}",
                                     results=list(call.outputs)))
        library = build.Build(codelet.source, codelet.name, "\n".join(glue), codelet.directory)
        for i, (key, (call, _)) in enumerate(pending.items()):
            _PREBUILT[key] = build.register(
                library, f"custom vertex {call.vertex} (jax_ipu.tile), run per tile on the host",
                symbol=f"JaxIpuVertex{i}")


def call_vertex(call: VertexCall, args: Sequence[TileShardedArray], tiles: Tiles,
                sync: bool) -> TileShardedArray | tuple[TileShardedArray, ...]:
    """Run a custom vertex on each row of `args` (one row per entry of `tiles`)."""
    attributes = call.attributes  # all of them, for the JAX implementation
    call = _split_attributes(call)
    avals = [jax.ShapeDtypeStruct(a.tile_shape, a.dtype) for a in args]
    if len(avals) != len(call.inputs):
        raise type_error(f"vertex {call.vertex} takes {len(call.inputs)} input(s) "
                         f"({', '.join(call.inputs)}), got {len(avals)}")
    fields = _fields(call, avals)
    kinds = _kinds(call)
    target = _PREBUILT.get(_layout(call, fields)) or build.register(
        build.Build(call.codelet.source, call.codelet.name,
                    codegen.glue(call.vertex, fields, kinds, results=list(call.outputs)),
                    call.codelet.directory),
        f"custom vertex {call.vertex} (jax_ipu.tile), run per tile on the host")
    n = len(tiles)
    results = [jax.ShapeDtypeStruct((n, *a.shape), a.dtype) for a in call.outputs.values()]
    timeout_ms = int(round(1000 * config.value("jax_ipu_tile_worker_timeout_s")))
    ffi_attrs = {"tiles": np.asarray(tiles, np.int64), "where": user_line(),
                 "rows": np.asarray([f.row for f in fields], np.int64),
                 "temp_elements": np.asarray([f.elements for f in fields if f.role == "tmp"],
                                             np.int64),
                 "worker_timeout_ms": np.int64(timeout_ms)}
    ffi_attrs.update({k: (np.int64(v) if kinds[k] == "int" else np.float64(v)
                          if kinds[k] == "float" else bool(v))
                      for k, v in call.attributes.items()})
    const_values = [jnp.asarray(v) for v in call.constants.values()]
    k = len(args)
    impl = call.impl

    def run_codelet(*xs: Any) -> tuple[Any, ...]:
        return tuple(jax.ffi.ffi_call(target, results)(*xs, **ffi_attrs))

    def decomposition(*xs: Any) -> tuple[Any, ...]:
        if impl is None:
            return run_codelet(*xs)

        def with_impl(*ys: Any) -> tuple[Any, ...]:
            def one_tile(*zs: Any) -> tuple[Any, ...]:
                out = impl(*zs, **attributes)
                return tuple(out) if isinstance(out, tuple | list) else (out,)
            return jax.vmap(one_tile)(*ys[:k])

        return lax.platform_dependent(*xs, ipu=run_codelet, default=with_impl)

    temp_bytes = sum(f.nbytes for f in fields if f.role == "tmp")
    inout = tuple(call.inputs.index(name) if name in call.inputs else -1
                  for name in call.outputs)
    # The constants are the op's last operands: each vertex tile holds its own copy.
    outs = composite_call(
        "tile_vertex", decomposition, [*(a.array for a in args), *const_values],
        {"tiles": tuple(tiles), "vertex": call.vertex, "estimate": call.estimate,
         "temporary_bytes": temp_bytes, "constants": len(const_values),
         "sync": int(bool(sync)), "target": target, "inplace": inout})
    wrapped = tuple(TileShardedArray(o, tiles) for o in outs)
    return wrapped if len(wrapped) > 1 else wrapped[0]
