"""TessellateIPU's vertex equation (IpuTileMapEquation) and the helpers that build its fields.

A translation rule returns one of these for a primitive on some tiles; tile_interpreter turns it
into jax_ipu.tile's own description of a custom vertex call (custom.VertexCall), which runs it."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from jax_ipu.tessellate.core.tile_common_utils import (
    IpuShapedArray,
    IpuType,
    from_ipu_type_to_numpy_dtype,
    from_numpy_dtype_to_ipu_type,
    get_ipu_type_name,
)
from jax_ipu.tile.primitives import TilePrimitive


class IpuVertexIOType(enum.IntEnum):
    In = 0
    Out = 1
    InOut = 2


@dataclass
class IpuVertexIOInfo:
    """One field of a vertex: its name, role, shape and type on one tile, the length of its
    rows for 2-D fields (vertex_dim2 > 0), and its data when it is a constant."""

    name: str
    iotype: IpuVertexIOType
    shape: tuple[int, ...]
    dtype: IpuType
    vertex_dim2: int = 0
    constant_data: np.ndarray | None = None

    @property
    def aval(self) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(tuple(self.shape), from_ipu_type_to_numpy_dtype(self.dtype))

    @property
    def is_constant(self) -> bool:
        return self.constant_data is not None


@dataclass
class IpuVertexAttributeI32:
    name: str
    value: int


@dataclass
class IpuVertexAttributeF32:
    name: str
    value: float


@dataclass
class IpuTileMapEquation:
    """A vertex mapped over tiles: its C++ name, fields, attributes, temporary, codelet file
    (a C++ source, built for the host) and cycle estimate per tile."""

    vname: str
    pname: str
    tiles: tuple[int, ...]
    inputs_info: list[IpuVertexIOInfo] = field(default_factory=list)
    outputs_info: list[IpuVertexIOInfo] = field(default_factory=list)
    attributes_i32: list[IpuVertexAttributeI32] = field(default_factory=list)
    attributes_f32: list[IpuVertexAttributeF32] = field(default_factory=list)
    tmp_space_name: str = ""
    tmp_space_aval: IpuShapedArray | None = None
    gp_filename: str | None = None
    perf_estimate: int = 0
    sync: bool = False

    @property
    def num_inouts(self) -> int:
        return sum(1 for o in self.outputs_info if o.iotype == IpuVertexIOType.InOut)


def make_ipu_vertex_io_info(name: str, iotype: IpuVertexIOType, aval: Any,
                            vertex_dim2: int = 0) -> IpuVertexIOInfo:
    return IpuVertexIOInfo(name, iotype, tuple(aval.shape),
                           from_numpy_dtype_to_ipu_type(aval.dtype), int(vertex_dim2))


def make_ipu_vertex_constant_info(name: str, data: Any, vertex_dim2: int = 0) -> IpuVertexIOInfo:
    data = np.asarray(data)
    return IpuVertexIOInfo(name, IpuVertexIOType.In, data.shape,
                           from_numpy_dtype_to_ipu_type(data.dtype), vertex_dim2, data)


def make_ipu_vertex_in_info(name: str, aval: Any, vertex_dim2: int = 0) -> IpuVertexIOInfo:
    return make_ipu_vertex_io_info(name, IpuVertexIOType.In, aval, vertex_dim2)


def make_ipu_vertex_out_info(name: str, aval: Any, vertex_dim2: int = 0) -> IpuVertexIOInfo:
    return make_ipu_vertex_io_info(name, IpuVertexIOType.Out, aval, vertex_dim2)


def make_ipu_vertex_inout_info(name: str, aval: Any, vertex_dim2: int = 0) -> IpuVertexIOInfo:
    return make_ipu_vertex_io_info(name, IpuVertexIOType.InOut, aval, vertex_dim2)


def _infos(avals: dict[str, Any], inout_names: set[str], vertex_dims2: dict[str, int],
           default: IpuVertexIOType) -> list[IpuVertexIOInfo]:
    return [make_ipu_vertex_io_info(
        name, IpuVertexIOType.InOut if name in inout_names else default, aval,
        vertex_dims2.get(name, 0)) for name, aval in avals.items()]


def make_ipu_vertex_inputs(inavals: dict[str, Any], inout_names: Sequence[str] = (),
                           vertex_dims2: dict[str, int] | None = None) -> list[IpuVertexIOInfo]:
    return _infos(inavals, set(inout_names), vertex_dims2 or {}, IpuVertexIOType.In)


def make_ipu_vertex_outputs(outavals: dict[str, Any], inout_names: Sequence[str] = (),
                            vertex_dims2: dict[str, int] | None = None) -> list[IpuVertexIOInfo]:
    return _infos(outavals, set(inout_names), vertex_dims2 or {}, IpuVertexIOType.Out)


def make_ipu_vertex_attributes(**kwargs: Any) -> tuple[list[IpuVertexAttributeI32],
                                                       list[IpuVertexAttributeF32]]:
    """Scalar vertex attributes, split into integer and float ones."""
    ints, floats = [], []
    for name, value in kwargs.items():
        if isinstance(value, bool | int | np.integer):
            ints.append(IpuVertexAttributeI32(name, int(value)))
        elif isinstance(value, float | np.floating):
            floats.append(IpuVertexAttributeF32(name, float(value)))
        else:
            raise TypeError(f"vertex attribute {name}={value!r} must be an int or a float")
    return ints, floats


def make_ipu_vertex_name_templated(basename: str, *args: Any) -> str:
    """'Name<arg, ...>' with dtypes as their C++ names and bools as true/false."""
    if not args:
        return basename

    def name(v: Any) -> str:
        if isinstance(v, str):
            return v
        if isinstance(v, bool | int):
            return str(v).lower()
        return get_ipu_type_name(v)

    return f"{basename}<{','.join(name(v) for v in args)}>"


def primitive_clone(p: Any, name: str) -> TilePrimitive:
    """A primitive computing what `p` computes, under another name."""
    return TilePrimitive(name, lambda *xs, **params: p.bind(*xs, **params), base=p,
                         multiple_results=p.multiple_results)


def primitive_num_inout_alias_args(p: Any) -> int:
    """How many of a primitive's operands it writes in place (0 for lax's)."""
    return sum(1 for j in getattr(p, "inplace", ()) if j >= 0)


def tile_map_remove_ipu_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    """The attributes without TessellateIPU's own ipu_* options."""
    return {k: v for k, v in attributes.items() if not k.startswith("ipu_")}
