"""A one-device program as jax reads it back (Executable_OptimizedProgram), as cpu answers:
XLA:CPU's optimized HLO module with its entry layout, in PJRT's "hlo_with_config" format."""

from __future__ import annotations

from typing import Any

from jax_ipu.protowire import Message

# Field numbers of the protobuf messages read and written here (xla/xla.proto,
# xla/xla_data.proto, xla/service/hlo.proto).
_WITH_CONFIG_MODULE, _WITH_CONFIG_CONFIG = 1, 2  # HloModuleProtoWithConfig
_CONFIG_ENTRY_LAYOUT, _CONFIG_REPLICAS, _CONFIG_PARTITIONS = 1, 4, 5  # HloModuleConfigProto
_MODULE_PROGRAM_SHAPE = 4  # HloModuleProto.host_program_shape: the entry's, with layouts
_VARINT, _BYTES = 0, 2  # wire types


def hlo_with_config(cpu_executable: Any, num_replicas: int, num_partitions: int) -> bytes:
    """An HloModuleProtoWithConfig of the module `cpu_executable` (XLA:CPU's build) runs, with
    the entry layout it was compiled with (layouts, tiles, memory spaces of the memory kinds).

    jaxlib reads it without building an MLIR context (it builds one for every read of the
    "mlir" format), and it needs no conversion of the program: none during the compile."""
    module = cpu_executable.hlo_modules()[0].as_serialized_hlo_module_proto()
    layout = Message(module).raw(_MODULE_PROGRAM_SHAPE)
    config = (_field(_CONFIG_ENTRY_LAYOUT, layout) + _number(_CONFIG_REPLICAS, num_replicas)
              + _number(_CONFIG_PARTITIONS, num_partitions))
    return _field(_WITH_CONFIG_MODULE, module) + _field(_WITH_CONFIG_CONFIG, config)


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
