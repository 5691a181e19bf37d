"""The C++ glue around a user's codelet: one typed XLA FFI handler that runs the vertex per tile.

The handler binds each field to its tile's slice of the buffers, sets the vertex's attributes,
calls compute() and turns `false` (or a C++ exception) into an FFI error naming vertex and tile."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

# numpy dtype -> (C++ type in codelets and vertex names, XLA FFI data type)
CXX_TYPES: dict[str, tuple[str, str]] = {
    "float32": ("float", "F32"), "float16": ("half", "F16"), "int32": ("int", "S32"),
    "uint32": ("unsigned int", "U32"), "int16": ("short", "S16"),
    "uint16": ("unsigned short", "U16"), "int8": ("signed char", "S8"),
    "uint8": ("unsigned char", "U8"), "bool": ("bool", "PRED"),
}
HANDLER_SYMBOL = "JaxIpuVertexHandler"
# Roles of a vertex field: tile-sharded input, output, in-place, replicated constant, temporary.
ROLES = ("in", "out", "inout", "const", "tmp")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Field:
    """One field of the vertex class and the memory it is bound to on each tile."""

    name: str
    role: str
    dtype: str  # numpy dtype name
    elements: int  # on one tile
    row: int  # last-axis length (rows for Vector<Input<Vector<T>>> and VectorList)

    @property
    def cxx(self) -> str:
        return CXX_TYPES[self.dtype][0]

    @property
    def ffi(self) -> str:
        return CXX_TYPES[self.dtype][1]

    @property
    def nbytes(self) -> int:
        return self.elements * np.dtype(self.dtype).itemsize


def cxx_type(dtype: np.dtype | str) -> str:
    """The C++ spelling of a dtype in a codelet (KeyError for dtypes a vertex cannot take)."""
    return CXX_TYPES[np.dtype(dtype).name][0]


def valid_name(name: str) -> bool:
    return bool(_NAME.match(name))


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def glue(vertex: str, fields: list[Field], attributes: dict[str, str]) -> str:
    """C++ source of the FFI handler running `vertex` (a complete C++ class name) per tile.

    FFI arguments: the tile-sharded inputs (in, inout) then the constants; results: the outputs
    (out, inout) in field order; attributes: tiles (the tile ids), where (the user's line), then
    `attributes` (name -> 'int', 'float' or 'bool')."""
    args = [f for f in fields if f.role in ("in", "inout")] + \
        [f for f in fields if f.role == "const"]
    rets = [f for f in fields if f.role in ("out", "inout")]
    temps = [f for f in fields if f.role == "tmp"]
    cxx_attr = {"int": "int64_t", "float": "double", "bool": "bool"}
    params = [f"ffi::Buffer<ffi::DataType::{f.ffi}> arg_{i}" for i, f in enumerate(args)]
    params += [f"ffi::ResultBuffer<ffi::DataType::{f.ffi}> ret_{i}" for i, f in enumerate(rets)]
    params += ["ffi::Span<const int64_t> tiles", "std::string_view where"]
    params += [f"{cxx_attr[kind]} attr_{name}" for name, kind in attributes.items()]
    binds = [".Arg<xla::ffi::Buffer<xla::ffi::DataType::" + f.ffi + ">>()" for f in args]
    binds += [".Ret<xla::ffi::Buffer<xla::ffi::DataType::" + f.ffi + ">>()" for f in rets]
    binds += ['.Attr<xla::ffi::Span<const int64_t>>("tiles")',
              '.Attr<std::string_view>("where")']
    binds += [f'.Attr<{cxx_attr[kind]}>("{name}")' for name, kind in attributes.items()]

    body = []
    for i, f in enumerate(temps):
        body.append(f"  std::vector<unsigned char> tmp_{i}({max(f.nbytes, 1)});")
    body.append("  for (std::size_t t = 0; t < tiles.size(); ++t) {")
    body.append("    Vertex vertex{};")
    body.append("    jax_ipu::Storage storage;")
    for i, f in enumerate(args):
        offset = "0" if f.role == "const" else f"t * {f.nbytes}"
        source = f"reinterpret_cast<unsigned char*>(arg_{i}.typed_data()) + {offset}"
        if f.role == "inout":
            j = rets.index(f)
            target = f"reinterpret_cast<unsigned char*>(ret_{j}->typed_data()) + t * {f.nbytes}"
            body.append(f"    std::memcpy({target}, {source}, {f.nbytes});")
            continue
        body.append(f"    jax_ipu::bind<{f.cxx}>(vertex.{f.name}, {source}, {f.elements}, "
                    f"{f.row}, storage);")
    for j, f in enumerate(rets):
        target = f"reinterpret_cast<unsigned char*>(ret_{j}->typed_data()) + t * {f.nbytes}"
        body.append(f"    jax_ipu::bind<{f.cxx}>(vertex.{f.name}, {target}, {f.elements}, "
                    f"{f.row}, storage);")
    for i, f in enumerate(temps):
        body.append(f"    std::memset(tmp_{i}.data(), 0, tmp_{i}.size());")
        body.append(f"    jax_ipu::bind<{f.cxx}>(vertex.{f.name}, tmp_{i}.data(), {f.elements}, "
                    f"{f.row}, storage);")
    for name in attributes:
        body.append(f"    vertex.{name} = static_cast<decltype(vertex.{name})>(attr_{name});")
    body += [
        "    bool ok = false;",
        "    try {",
        "      ok = jax_ipu::run(vertex);",
        "    } catch (const std::exception& e) {",
        "      return ffi::Error(ffi::ErrorCode::kFailedPrecondition, std::string(\"vertex \") + "
        f"{_c_string(vertex)} + \" threw on tile \" + std::to_string(tiles[t]) + \": \" + "
        "e.what() + \" (\" + std::string(where) + \")\");",
        "    } catch (...) {",
        "      return ffi::Error(ffi::ErrorCode::kFailedPrecondition, std::string(\"vertex \") + "
        f"{_c_string(vertex)} + \" threw on tile \" + std::to_string(tiles[t]) + \" (\" + "
        "std::string(where) + \")\");",
        "    }",
        "    if (!ok) {",
        "      return ffi::Error(ffi::ErrorCode::kFailedPrecondition, std::string(\"vertex \") + "
        f"{_c_string(vertex)} + \" returned false on tile \" + std::to_string(tiles[t]) + "
        "\" (\" + std::string(where) + \"): compute() failing is a vertex assertion; on the "
        "IPU it stops the program\");",
        "    }",
        "  }",
        "  return ffi::Error::Success();",
    ]
    return "\n".join([
        "#include <cstring>",
        "#include <exception>",
        "#include <string>",
        "#include <string_view>",
        "#include <vector>",
        '#include "xla/ffi/api/ffi.h"',
        "namespace jax_ipu_glue {",
        "namespace ffi = xla::ffi;",
        f"using Vertex = {vertex};",
        "static ffi::Error Run(" + ", ".join(params) + ") {",
        *body,
        "}",
        "}  // namespace jax_ipu_glue",
        f"XLA_FFI_DEFINE_HANDLER_SYMBOL({HANDLER_SYMBOL}, jax_ipu_glue::Run, xla::ffi::Ffi::Bind()",
        *("    " + b for b in binds),
        ");",
        "",
    ])
