"""A program as XLA HLO with its entry layout: what jax reads back of a compiled program.

PJRT's "hlo_with_config" format (xla.HloModuleProtoWithConfig), made once per program; jaxlib
reads it without building an MLIR context, which it does for every read of the "mlir" format."""

from __future__ import annotations

from jax_ipu import _internals

# Field numbers of the protobuf messages written here (xla/xla.proto, xla/xla_data.proto).
_WITH_CONFIG_MODULE, _WITH_CONFIG_CONFIG = 1, 2  # HloModuleProtoWithConfig
_CONFIG_ENTRY_LAYOUT, _CONFIG_REPLICAS, _CONFIG_PARTITIONS = 1, 4, 5  # HloModuleConfigProto
_SHAPE_PARAMETERS, _SHAPE_RESULT, _SHAPE_PARAMETER_NAMES = 1, 2, 3  # ProgramShapeProto
_VARINT, _BYTES = 0, 2  # wire types


def hlo_with_config(code: bytes, num_replicas: int, num_partitions: int) -> bytes:
    """The StableHLO program `code` as an HloModuleProtoWithConfig whose entry layout is
    row-major (the layout of every ipu buffer)."""
    computation = _internals.mlir_module_to_xla_computation(code, use_tuple_args=False,
                                                            return_tuple=False)
    shape = computation.program_shape()
    parameters = shape.parameter_shapes()
    layout = b"".join(
        [_field(_SHAPE_PARAMETERS, _row_major(s)) for s in parameters]
        + [_field(_SHAPE_RESULT, _row_major(shape.result_shape()))]
        + [_field(_SHAPE_PARAMETER_NAMES, f"p{i}".encode()) for i in range(len(parameters))])
    config = (_field(_CONFIG_ENTRY_LAYOUT, layout) + _number(_CONFIG_REPLICAS, num_replicas)
              + _number(_CONFIG_PARTITIONS, num_partitions))
    return (_field(_WITH_CONFIG_MODULE, computation.as_serialized_hlo_module_proto())
            + _field(_WITH_CONFIG_CONFIG, config))


def _row_major(shape: object) -> bytes:
    return shape.with_major_to_minor_layout_if_absent().to_serialized_proto()  # type: ignore


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
