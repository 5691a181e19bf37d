"""A one-device program as XLA HLO with its entry layout: what jax reads back of a compiled
program (Executable_OptimizedProgram), in PJRT's "hlo_with_config" format.

jaxlib reads an xla.HloModuleProtoWithConfig without building an MLIR context, which it does for
every read of the "mlir" format. The module is the program jax sent, converted by jaxlib's own
C++ (to_hlo, during the compile); its entry layout is XLA:CPU's, as the numerics executable was
compiled (layouts, tiles, memory spaces of the memory kinds), never assumed."""

from __future__ import annotations

from typing import Any

from jax_ipu import _internals
from jax_ipu.protowire import Message

# Field numbers of the protobuf messages read and written here (xla/xla.proto,
# xla/xla_data.proto, xla/service/hlo.proto).
_WITH_CONFIG_MODULE, _WITH_CONFIG_CONFIG = 1, 2  # HloModuleProtoWithConfig
_CONFIG_ENTRY_LAYOUT, _CONFIG_REPLICAS, _CONFIG_PARTITIONS = 1, 4, 5  # HloModuleConfigProto
_MODULE_PROGRAM_SHAPE = 4  # HloModuleProto.host_program_shape: the entry's, with layouts
_SHAPE_PARAMETERS, _SHAPE_RESULT = 1, 2  # ProgramShapeProto
_ELEMENT_TYPE, _DIMENSIONS, _TUPLE_SHAPES = 2, 3, 4  # ShapeProto
_VARINT, _BYTES = 0, 2  # wire types


def to_hlo(code: bytes) -> bytes:
    """The StableHLO program `code` as a serialized HloModuleProto, as jaxlib converts it."""
    computation = _internals.mlir_module_to_xla_computation(code, use_tuple_args=False,
                                                            return_tuple=False)
    return computation.as_serialized_hlo_module_proto()


def hlo_with_config(module: bytes, cpu_executable: Any, num_replicas: int,
                    num_partitions: int) -> bytes | None:
    """An HloModuleProtoWithConfig of `module` (to_hlo's) whose entry layout is the one
    `cpu_executable` (its XLA:CPU build) runs with; None when their entry signatures differ (the
    caller answers otherwise)."""
    compiled = cpu_executable.hlo_modules()[0].as_serialized_hlo_module_proto()
    layout = Message(compiled).raw(_MODULE_PROGRAM_SHAPE)
    if _signature(layout) != _signature(Message(module).raw(_MODULE_PROGRAM_SHAPE)):
        return None
    config = (_field(_CONFIG_ENTRY_LAYOUT, layout) + _number(_CONFIG_REPLICAS, num_replicas)
              + _number(_CONFIG_PARTITIONS, num_partitions))
    return _field(_WITH_CONFIG_MODULE, module) + _field(_WITH_CONFIG_CONFIG, config)


def _signature(program_shape: bytes) -> tuple:
    """A ProgramShapeProto's parameter and result types and dims, without their layouts."""
    shape = Message(program_shape)
    return (tuple(_type(p) for p in shape.messages(_SHAPE_PARAMETERS)),
            _type(shape.message(_SHAPE_RESULT)))


def _type(shape: Message | None) -> tuple:
    if shape is None:
        return ()
    return (shape.integer(_ELEMENT_TYPE), tuple(shape.integers(_DIMENSIONS)),
            tuple(_type(t) for t in shape.messages(_TUPLE_SHAPES)))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | _BYTES) + _varint(len(payload)) + payload


def _number(number: int, value: int) -> bytes:
    return _varint(number << 3 | _VARINT) + _varint(value)
