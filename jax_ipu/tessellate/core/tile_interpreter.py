"""TessellateIPU's tile_map and primitive registry, on jax_ipu.tile.

lax primitives and jax_ipu.tile's own run as jax_ipu.tile.tile_map runs them; a primitive with a
translation rule (register_ipu_tile_primitive, create_ipu_tile_primitive...) runs the C++ vertex
its IpuTileMapEquation describes, as a jax_ipu.tile custom vertex. TessellateIPU's semantics are
kept where jax_ipu.tile's differ: select_n_p picks as popops' Select does (where(c, x, y)),
ipu_* options are dropped, tile_map(None, ...) returns a tuple."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.extend.core
from jax import lax

from jax_ipu import tile
from jax_ipu.errors import IpuTileTypeError
from jax_ipu.tessellate.core.tile_common_utils import (
    from_ipu_type_to_numpy_dtype,
    get_ipu_type_name,
    make_ipu_shaped_array,
)
from jax_ipu.tessellate.core.tile_interpreter_primitives import (
    IpuTileMapEquation,
    IpuVertexIOType,
    make_ipu_vertex_attributes,
    make_ipu_vertex_constant_info,
    make_ipu_vertex_io_info,
    tile_map_remove_ipu_attributes,
)
from jax_ipu.tile.array import TileShardedArray
from jax_ipu.tile.custom import Codelet, VertexCall, call_vertex
from jax_ipu.tile.maps import common_tiles

Translation = Callable[[Any, tuple[int, ...], list[Any], dict[str, Any]], IpuTileMapEquation]
# A primitive this layer maps itself: (arrays, tiles, sync, attributes) -> its results.
Handler = Callable[[tuple[TileShardedArray, ...], Any, bool, dict[str, Any]], Any]

_translations: dict[str, tuple[Any, Translation]] = {}
_handlers: dict[str, Handler] = {}


def register_ipu_tile_primitive(primitive: Any, translation: Translation) -> None:
    """Register how `primitive` maps to a vertex: translation(p, tiles, inavals, attributes)
    returns the IpuTileMapEquation of one call."""
    if primitive.name in _translations or primitive.name in _handlers:
        raise KeyError(f"The primitive '{primitive.name}' is already registered in TessellateIPU.")
    _translations[primitive.name] = (primitive, translation)


def get_ipu_tile_primitive_translation(pname: str) -> tuple[Any, Translation]:
    """(primitive, translation) registered under `pname` (KeyError if none)."""
    return _translations[pname]


def register_handler(primitive: Any, handler: Handler) -> None:
    """Map `primitive` with `handler` (a jax_ipu.tile function) rather than a vertex equation."""
    _handlers[primitive.name] = handler


def tile_map(primitive: Any, *args: TileShardedArray, **kwargs: Any) -> Any:
    """Map `primitive` over the tiles of `args` (TessellateIPU's tile_map): tiles= and sync= as
    there, the other keyword arguments the primitive's attributes."""
    tiles = kwargs.pop("tiles", None)
    sync = bool(kwargs.pop("sync", False))
    if primitive is None:
        return tuple(args)
    if not all(isinstance(a, TileShardedArray) for a in args):
        raise TypeError("Tile map inputs must be `TileShardedArray` instances.")
    name = getattr(primitive, "name", None)
    if name in _handlers:
        return _handlers[name](args, tiles, sync, kwargs)
    if name in _translations and _translations[name][0] is primitive:
        _, translation = _translations[name]
        where = common_tiles(args, tiles)
        equation = translation(primitive, where, [a.tile_aval for a in args], kwargs)
        equation.sync = sync
        return run_equation(equation, args)
    attributes = tile_map_remove_ipu_attributes(kwargs)
    if primitive is lax.select_n_p and len(args) == 3:
        # popops' Select (TessellateIPU's translation) is where(c, x, y); lax.select_n(c, x, y)
        # picks y where c holds.
        args = (args[0], args[2], args[1])
    return tile.tile_map(primitive, *args, tiles=tiles, sync=sync, **attributes)


def run_equation(equation: IpuTileMapEquation, args: Sequence[TileShardedArray]) -> Any:
    """Run the C++ vertex an IpuTileMapEquation describes, as a jax_ipu.tile custom vertex."""
    what = f"vertex {equation.vname or '(none)'} of primitive {equation.pname}"
    if not equation.gp_filename:
        raise IpuTileTypeError(
            f"{what} names no codelet file: Poplar's built-in codelets (popops::, poplin::, "
            "poprand::) are not available without the Poplar SDK; map the lax primitive (or a "
            "jax_ipu.tile primitive) instead, or give the vertex's C++ source as gp_filename")
    if str(equation.gp_filename).endswith(".gp"):
        raise IpuTileTypeError(
            f"{what}: {equation.gp_filename} is a compiled IPU object, which the IPU Model "
            "cannot run on the host; give the codelet's C++ source (.cpp) as gp_filename")
    fields = [*equation.inputs_info, *equation.outputs_info]
    inputs = [i for i in equation.inputs_info if not i.is_constant]
    if len(inputs) != len(args):
        raise IpuTileTypeError(f"{what} takes {len(inputs)} array(s), got {len(args)}")
    inout = {o.name for o in equation.outputs_info if o.iotype == IpuVertexIOType.InOut}
    temporaries = {}
    if equation.tmp_space_aval is not None:
        temporaries[equation.tmp_space_name or "tmp"] = jax.ShapeDtypeStruct(
            equation.tmp_space_aval.shape,
            from_ipu_type_to_numpy_dtype(equation.tmp_space_aval.dtype))
    call = VertexCall(
        vertex=equation.vname,
        codelet=Codelet.of(equation.vname, None, equation.gp_filename),
        inputs=[i.name for i in inputs],
        outputs={o.name: o.aval for o in equation.outputs_info},
        constants={c.name: c.constant_data for c in equation.inputs_info if c.is_constant},
        temporaries=temporaries,
        attributes={a.name: a.value
                    for a in [*equation.attributes_i32, *equation.attributes_f32]},
        estimate=int(equation.perf_estimate or 0),
        rows={f.name: f.vertex_dim2 for f in fields if f.vertex_dim2 > 0})
    missing = inout - set(call.inputs)
    if missing:
        raise IpuTileTypeError(f"{what}: InOut output(s) {sorted(missing)} name no input")
    return call_vertex(call, args, tuple(equation.tiles), equation.sync)


def _vertex_name(vname: str, inputs: Sequence[str], inavals: Sequence[Any]) -> str:
    """The vertex name with {input} placeholders filled with those inputs' C++ types."""
    used = {n: get_ipu_type_name(a.dtype) for n, a in zip(inputs, inavals, strict=False)
            if f"{{{n}}}" in vname}
    return vname.format(**used)


def create_ipu_tile_primitive(pname: str, vname: str, inputs: list[str], outputs: dict[str, Any],
                              constants: dict[str, Callable] | None = None,
                              tmp_space: Any = None, gp_filename: str | None = None,
                              perf_estimate: int = 0) -> Any:
    """A primitive mapped to the vertex `vname` of `gp_filename`: `outputs` name -> an input's
    index (its aval) or an aval (an output named as an input is InOut); `constants` name ->
    fn(inavals, outavals, attributes) giving a numpy array; `tmp_space` an input's index or an
    aval; the call's other attributes are set on the vertex."""
    p = jax.extend.core.Primitive(pname)
    p.multiple_results = len(outputs) > 1
    makers = constants or {}

    def out_avals(*avals: Any, **_: Any) -> list[Any]:
        found = []
        for name, info in outputs.items():
            if isinstance(info, int):
                found.append(avals[info])
            elif hasattr(info, "shape") and hasattr(info, "dtype"):
                found.append(info)
            else:
                raise ValueError(f"Unknown IPU vertex output descriptor for {name}: {info}.")
        return found

    def abstract(*avals: Any, **params: Any) -> Any:
        found = [jax.core.ShapedArray(a.shape, a.dtype) for a in out_avals(*avals)]
        return found if p.multiple_results else found[0]

    def translation(prim: Any, tiles: tuple[int, ...], inavals: list[Any],
                    attributes: dict[str, Any] | None = None) -> IpuTileMapEquation:
        attributes = attributes or {}
        outs = out_avals(*inavals)

        def iotype(name: str, default: IpuVertexIOType) -> IpuVertexIOType:
            return IpuVertexIOType.InOut if name in inputs and name in outputs else default

        ints, floats = make_ipu_vertex_attributes(**attributes)
        equation = IpuTileMapEquation(
            vname=_vertex_name(vname, inputs, inavals), pname=prim.name, tiles=tuple(tiles),
            inputs_info=[make_ipu_vertex_io_info(n, iotype(n, IpuVertexIOType.In), a)
                         for n, a in zip(inputs, inavals, strict=True)] +
                        [make_ipu_vertex_constant_info(n, fn(inavals, outs, attributes))
                         for n, fn in makers.items()],
            outputs_info=[make_ipu_vertex_io_info(n, iotype(n, IpuVertexIOType.Out), a)
                          for n, a in zip(outputs, outs, strict=True)],
            attributes_i32=ints, attributes_f32=floats, gp_filename=gp_filename,
            perf_estimate=perf_estimate)
        if tmp_space is not None:
            aval = inavals[tmp_space] if isinstance(tmp_space, int) else tmp_space
            equation.tmp_space_name = "tmp"
            equation.tmp_space_aval = make_ipu_shaped_array(aval.shape, aval.dtype)
        return equation

    p.def_abstract_eval(abstract)
    register_ipu_tile_primitive(p, translation)
    return p


def create_ipu_tile_primitive_v2(pname: str, vname: str, initializer_fn: Callable,
                                 gp_filename: str | None = None) -> Any:
    """A primitive mapped to a vertex declared by initializer_fn(*inavals) -> (outputs,
    constants, temporaries, estimate), its parameters named as the vertex's inputs."""
    inputs = list(initializer_fn.__code__.co_varnames[:initializer_fn.__code__.co_argcount])
    p = jax.extend.core.Primitive(pname)
    p.multiple_results = False

    def abstract(*avals: Any, **params: Any) -> Any:
        outs = [jax.core.ShapedArray(a.shape, a.dtype)
                for a in initializer_fn(*avals)[0].values()]
        p.multiple_results = len(outs) > 1
        return outs if p.multiple_results else outs[0]

    def translation(prim: Any, tiles: tuple[int, ...], inavals: list[Any],
                    attributes: dict[str, Any] | None = None) -> IpuTileMapEquation:
        outputs, consts, temps, estimate = initializer_fn(*inavals)
        p.multiple_results = len(outputs) > 1
        inout = [n for n in inputs if n in outputs]
        if list(outputs)[:len(inout)] != inout or inputs[:len(inout)] != inout:
            raise ValueError(f"In/out arguments should be at the first vertex arguments "
                             f"(here: {inout}).")
        ints, floats = make_ipu_vertex_attributes(**(attributes or {}))
        equation = IpuTileMapEquation(
            vname=_vertex_name(vname, inputs, inavals), pname=prim.name, tiles=tuple(tiles),
            inputs_info=[make_ipu_vertex_io_info(
                n, IpuVertexIOType.InOut if n in outputs else IpuVertexIOType.In, a)
                for n, a in zip(inputs, inavals, strict=True)] +
                [make_ipu_vertex_constant_info(n, d) for n, d in (consts or {}).items()],
            outputs_info=[make_ipu_vertex_io_info(
                n, IpuVertexIOType.InOut if n in inputs else IpuVertexIOType.Out, a)
                for n, a in outputs.items()],
            attributes_i32=ints, attributes_f32=floats, gp_filename=gp_filename,
            perf_estimate=int(estimate or 0))
        if temps:
            if len(temps) != 1:
                raise ValueError("TessellateIPU vertices take one temporary; "
                                 "jax_ipu.tile.declare_vertex takes several")
            ((name, aval),) = temps.items()
            equation.tmp_space_name = name
            equation.tmp_space_aval = make_ipu_shaped_array(aval.shape, aval.dtype)
        return equation

    p.def_abstract_eval(abstract)
    register_ipu_tile_primitive(p, translation)
    return p


def declare_ipu_tile_primitive(vname: str, gp_filename: str | None = None) -> Callable:
    """Decorator: create_ipu_tile_primitive_v2 from a function named `<name>_p`."""

    def wrap(initializer_fn: Callable) -> Any:
        name, found = re.subn(r"_p$", "", initializer_fn.__name__)
        if not found:
            raise ValueError(f"We expect pname {initializer_fn.__name__} to end in _p.")
        return create_ipu_tile_primitive_v2(name, vname, initializer_fn, gp_filename)

    return wrap
