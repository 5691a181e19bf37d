"""The C++ glue around a user's codelet: one typed XLA FFI handler that runs the vertex per tile.

The handler binds each field to its tile's slice of the buffers, sets the vertex's attributes,
runs compute() (a MultiVertex's on all its workers at once) and turns `false`, a C++ exception
or workers that never finish into an FFI error naming vertex and tile."""

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
    elements: int  # on one tile (a call's size: never part of the glue)
    row: int  # row length for Vector<Input<Vector<T>>> and VectorList (also a call's size)

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


def glue(vertex: str, fields: list[Field], attributes: dict[str, str],
         symbol: str = HANDLER_SYMBOL, results: list[str] | None = None) -> str:
    """C++ source of the FFI handler `symbol` running `vertex` (a complete C++ class name) per
    tile row. It depends on the fields' names, roles and dtypes only, never on shapes, so one
    build serves every shape of a vertex.

    FFI arguments: the tile-sharded inputs (in, inout) then the constants; results: the outputs
    (out, inout) in the order `results` names them (else field order); attributes: tiles (one
    id per row), where (the user's line), rows (each field's row length, in field order),
    temp_elements (each temporary's size), worker_timeout_ms, then `attributes` (name ->
    'int', 'float' or 'bool')."""
    args = [f for f in fields if f.role in ("in", "inout")] + \
        [f for f in fields if f.role == "const"]
    rets = [f for f in fields if f.role in ("out", "inout")]
    if results is not None:
        rets.sort(key=lambda f: results.index(f.name))
    temps = [f for f in fields if f.role == "tmp"]
    cxx_attr = {"int": "int64_t", "float": "double", "bool": "bool"}
    params = [f"ffi::Buffer<ffi::DataType::{f.ffi}> arg_{i}" for i, f in enumerate(args)]
    params += [f"ffi::ResultBuffer<ffi::DataType::{f.ffi}> ret_{i}" for i, f in enumerate(rets)]
    params += ["ffi::Span<const int64_t> tiles", "std::string_view where",
               "ffi::Span<const int64_t> rows", "ffi::Span<const int64_t> temp_elements",
               "int64_t worker_timeout_ms"]
    params += [f"{cxx_attr[kind]} attr_{name}" for name, kind in attributes.items()]
    binds = [".Arg<xla::ffi::Buffer<xla::ffi::DataType::" + f.ffi + ">>()" for f in args]
    binds += [".Ret<xla::ffi::Buffer<xla::ffi::DataType::" + f.ffi + ">>()" for f in rets]
    binds += ['.Attr<xla::ffi::Span<const int64_t>>("tiles")',
              '.Attr<std::string_view>("where")',
              '.Attr<xla::ffi::Span<const int64_t>>("rows")',
              '.Attr<xla::ffi::Span<const int64_t>>("temp_elements")',
              '.Attr<int64_t>("worker_timeout_ms")']
    binds += [f'.Attr<{cxx_attr[kind]}>("{name}")' for name, kind in attributes.items()]
    index = {f.name: k for k, f in enumerate(fields)}

    def source(f: Field) -> str:
        if f.role == "tmp":
            return f"tmp_{temps.index(f)}.data()"
        if f.role == "out":
            j = rets.index(f)
            k = index[f.name]
            return f"reinterpret_cast<unsigned char*>(ret_{j}->typed_data()) + t * bytes_{k}"
        i = args.index(f)
        offset = "0" if f.role == "const" else f"t * bytes_{index[f.name]}"
        return f"reinterpret_cast<unsigned char*>(arg_{i}.typed_data()) + {offset}"

    body = ["  std::lock_guard<std::mutex> one_call(calls);",
            "  const std::size_t n = tiles.size();"]
    for k, f in enumerate(fields):
        if f.role == "tmp":
            count = f"static_cast<std::size_t>(temp_elements[{temps.index(f)}])"
        elif f.role == "const":
            count = f"arg_{args.index(f)}.element_count()"
        elif f.role == "out":
            count = f"ret_{rets.index(f)}->element_count() / n"
        else:
            count = f"arg_{args.index(f)}.element_count() / n"
        body.append(f"  const std::size_t elems_{k} = {count};")
        body.append(f"  const std::size_t bytes_{k} = elems_{k} * sizeof({f.cxx});")
    for i, f in enumerate(temps):
        body.append(f"  std::vector<std::max_align_t> tmp_{i}("
                    f"bytes_{index[f.name]} / sizeof(std::max_align_t) + 1);")
    body.append("  for (std::size_t t = 0; t < n; ++t) {")
    body.append("    jax_ipu::State<Vertex> state;")
    body.append("    Vertex& vertex = state.vertex();")
    body.append("    jax_ipu::Storage storage;")
    for f in fields:
        k = index[f.name]
        if f.role == "inout":
            j = rets.index(f)
            target = f"reinterpret_cast<unsigned char*>(ret_{j}->typed_data()) + t * bytes_{k}"
            body.append(f"    std::memcpy({target}, {source(f)}, bytes_{k});")
            body.append(f"    jax_ipu::bind<{f.cxx}>(vertex.{f.name}, {target}, elems_{k}, "
                        f"rows[{k}], storage);")
            continue
        if f.role == "tmp":
            body.append(f"    std::memset({source(f)}, 0, bytes_{k});")
        body.append(f"    jax_ipu::bind<{f.cxx}>(vertex.{f.name}, {source(f)}, elems_{k}, "
                    f"rows[{k}], storage);")
    for name in attributes:
        body.append(f"    jax_ipu::set_attribute(vertex.{name}, attr_{name});")
    prefix = f"std::string(\"vertex \") + {_c_string(vertex)}"

    def fail(code: str, *text: str) -> str:
        return f"        return ffi::Error(ffi::ErrorCode::{code}, {' + '.join([prefix, *text])});"

    body += [
        "    const jax_ipu::Outcome outcome = jax_ipu::run(vertex, worker_timeout_ms);",
        "    const std::string tile = std::to_string(tiles[t]);",
        "    const std::string at = \" (\" + std::string(where) + \")\";",
        "    const std::string workers = outcome.detail.empty() ? \"\" : \" in \" + "
        "outcome.detail;",
        "    switch (outcome.code) {",
        "      case jax_ipu::Outcome::kOk:",
        "        break;",
        "      case jax_ipu::Outcome::kFalse:",
        fail("kFailedPrecondition", '" returned false on tile "', "tile", "workers", "at",
             '": compute() failing is a vertex assertion; on the IPU it stops the program"'),
        "      case jax_ipu::Outcome::kThrew:",
        fail("kFailedPrecondition", '" threw on tile "', "tile", '": "', "outcome.detail", "at"),
        "      case jax_ipu::Outcome::kTimeout:",
        fail("kDeadlineExceeded", '" on tile "', "tile", '": "', "outcome.detail",
             '" of its workers did not finish within "',
             "std::to_string(worker_timeout_ms)",
             '" ms (jax_ipu_tile_worker_timeout_s) and were stopped; a worker that waits for a '
             'result another worker never writes waits for ever"', "at"),
        "      case jax_ipu::Outcome::kRuntime:",
        fail("kInternal", '" on tile "', "tile", '": the IPU Model\'s worker threads failed: "',
             "outcome.detail", "at"),
        "    }",
        "  }",
        "  return ffi::Error::Success();",
    ]
    namespace = f"jax_ipu_glue_{symbol}"
    return "\n".join([
        "#include <cstring>",
        "#include <cstddef>",
        "#include <mutex>",
        "#include <string>",
        "#include <string_view>",
        "#include <vector>",
        '#include "xla/ffi/api/ffi.h"',
        f"namespace {namespace} {{",
        "namespace ffi = xla::ffi;",
        f"using Vertex = {vertex};",
        "// One call at a time: a codelet's static data is its tile's, shared by its workers.",
        "static std::mutex calls;",
        "static ffi::Error Run(" + ", ".join(params) + ") {",
        *body,
        "}",
        f"}}  // namespace {namespace}",
        f"XLA_FFI_DEFINE_HANDLER_SYMBOL({symbol}, {namespace}::Run, xla::ffi::Ffi::Bind()",
        *("    " + b for b in binds),
        ");",
        "",
    ])
