"""IFRT objects as the proxy protocol carries them: dtypes, shapes, shardings, attribute maps.

Each is read against its message; a Serialized object is decoded by a fixed table of the type
names this server knows, never by importing or running what the name says."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from jax_ipu.remote.schema import OBJECT_VERSION, Schema


class ProtocolError(ValueError):
    """A message that is well-formed protobuf but not a value this server can take."""


# DTypeProto.Kind -> numpy dtype (the kinds jax arrays can have).
_DTYPES: dict[str, Any] = {
    "KIND_PRED": np.bool_, "KIND_S2": ml_dtypes.int2, "KIND_S4": ml_dtypes.int4,
    "KIND_S8": np.int8, "KIND_S16": np.int16, "KIND_S32": np.int32, "KIND_S64": np.int64,
    "KIND_U2": ml_dtypes.uint2, "KIND_U4": ml_dtypes.uint4, "KIND_U8": np.uint8,
    "KIND_U16": np.uint16, "KIND_U32": np.uint32, "KIND_U64": np.uint64,
    "KIND_F16": np.float16, "KIND_F32": np.float32, "KIND_F64": np.float64,
    "KIND_BF16": ml_dtypes.bfloat16, "KIND_C64": np.complex64, "KIND_C128": np.complex128,
    "KIND_F8E3M4": ml_dtypes.float8_e3m4, "KIND_F8E4M3": ml_dtypes.float8_e4m3,
    "KIND_F8E4M3FN": ml_dtypes.float8_e4m3fn, "KIND_F8E4M3B11FNUZ": ml_dtypes.float8_e4m3b11fnuz,
    "KIND_F8E4M3FNUZ": ml_dtypes.float8_e4m3fnuz, "KIND_F8E5M2": ml_dtypes.float8_e5m2,
    "KIND_F8E5M2FNUZ": ml_dtypes.float8_e5m2fnuz, "KIND_F8E8M0FNU": ml_dtypes.float8_e8m0fnu,
    "KIND_F4E2M1FN": ml_dtypes.float4_e2m1fn,
}
_KIND_OF = {np.dtype(t): kind for kind, t in _DTYPES.items()}
MAX_RANK = 64
MAX_ELEMENTS = 1 << 40

SINGLE_DEVICE = "xla::ifrt::SingleDeviceSharding"
CONCRETE_EVEN = "xla::ifrt::ConcreteEvenSharding"
HLO_SHARDING = "xla::ifrt::HloSharding"
XLA_PROGRAM = "xla::ifrt::XlaProgram"
XLA_COMPILE_OPTIONS = "xla::ifrt::XlaCompileOptions"
PLACEMENTS_KEPT = 256  # shardings a session's codec keeps read (a training loop uses a few)


class Codec:
    """Reads and writes the IFRT objects of one schema."""

    def __init__(self, schema: Schema) -> None:
        m = schema.message
        self.DType = m("xla.ifrt.DTypeProto")
        self.Shape = m("xla.ifrt.ShapeProto")
        self.Sharding = m("xla.ifrt.ShardingProto")
        self.Serialized = m("xla.ifrt.Serialized")
        self.SingleDevice = m("xla.ifrt.SingleDeviceShardingProto")
        self.ConcreteEven = m("xla.ifrt.ConcreteEvenShardingProto")
        self.Hlo = m("xla.ifrt.HloShardingProto")
        self.AttributeMap = m("xla.ifrt.AttributeMapProto")
        self.CompileOptions = m("xla.ifrt.XlaCompileOptionsProto")
        # A client names the same few shardings in every put and execute: each is read once.
        self._placement = functools.lru_cache(maxsize=PLACEMENTS_KEPT)(self._read_placement)
        self._kind_names = self.DType.DESCRIPTOR.enum_types_by_name["Kind"].values_by_number
        semantics = m("xla.ifrt.proxy.CopyArraysRequest").DESCRIPTOR.fields_by_name[
            "copy_semantics"].enum_type.values_by_name
        self._always_copy = semantics["ARRAY_COPY_SEMANTICS_ALWAYS_COPY"].number
        self._donate_input = semantics["ARRAY_COPY_SEMANTICS_DONATE_INPUT"].number

    def copying(self, semantics: int) -> tuple[bool, bool]:
        """(copy, donate) of a request's ArrayCopySemanticsProto: new buffers even where the
        arrays are already (ALWAYS_COPY), and the input arrays deleted after (DONATE_INPUT)."""
        return semantics == self._always_copy, semantics == self._donate_input

    # ---- dtype and shape ----
    def dtype(self, proto: Any) -> np.dtype:
        _serdes(proto, "DTypeProto")
        kind = self._kind_names.get(proto.kind)
        if kind is None or kind.name not in _DTYPES:
            name = kind.name if kind is not None else str(proto.kind)
            raise ProtocolError(f"dtype {name} has no array type on ipu")
        return np.dtype(_DTYPES[kind.name])

    def dtype_proto(self, dtype: np.dtype) -> Any:
        return self.DType(kind=_KIND_OF[np.dtype(dtype)], version_number=OBJECT_VERSION)

    def shape(self, proto: Any) -> tuple[int, ...]:
        _serdes(proto, "ShapeProto")
        dims = tuple(proto.dims)
        if len(dims) > MAX_RANK or any(d < 0 for d in dims):
            raise ProtocolError(f"shape {list(dims)} is not an array shape")
        if math.prod(dims) > MAX_ELEMENTS:
            raise ProtocolError(f"shape {list(dims)} has more elements than any device holds")
        return dims

    def shape_proto(self, dims: Sequence[int]) -> Any:
        return self.Shape(dims=list(dims), version_number=OBJECT_VERSION)

    # ---- shardings ----
    def sharding(self, proto: Any) -> Placement:
        """Where an array lives: its devices, memory kind and how it is split over them."""
        serialized = proto.serialized_sharding
        return self._placement(serialized.type_name, serialized.data)

    def _read_placement(self, name: str, data: bytes) -> Placement:
        if name == SINGLE_DEVICE:
            s = _parse(self.SingleDevice, data, name)
            return Placement((s.device_id,), _memory_kind(s), None, None)
        if name == CONCRETE_EVEN:
            s = _parse(self.ConcreteEven, data, name)
            devices = _device_ids(s.devices)
            return Placement(devices, _memory_kind(s), None,
                             None if s.is_fully_replicated else (self.shape(s.shape),
                                                                 self.shape(s.shard_shape)))
        if name == HLO_SHARDING:
            s = _parse(self.Hlo, data, name)
            return Placement(_device_ids(s.devices), _memory_kind(s),
                             s.xla_op_sharding.SerializeToString(), None)
        raise ProtocolError(
            f"sharding type {name!r} is not one this server takes (it takes {SINGLE_DEVICE}, "
            f"{CONCRETE_EVEN} and {HLO_SHARDING})")

    def single_device_sharding(self, device_id: int, memory_kind: str | None) -> Any:
        inner = self.SingleDevice(device_id=device_id, version_number=OBJECT_VERSION)
        if memory_kind is not None:
            inner.memory_kind = memory_kind
        return self._wrap(SINGLE_DEVICE, inner)

    def hlo_sharding(self, device_ids: Sequence[int], op_sharding: bytes,
                     memory_kind: str | None) -> Any:
        inner = self.Hlo(version_number=OBJECT_VERSION)
        inner.devices.device_ids.extend(device_ids)
        inner.xla_op_sharding.ParseFromString(op_sharding)
        if memory_kind is not None:
            inner.memory_kind = memory_kind
        return self._wrap(HLO_SHARDING, inner)

    def _wrap(self, name: str, inner: Any) -> Any:
        return self.Sharding(serialized_sharding=self.Serialized(
            type_name=name, data=inner.SerializeToString()))

    # ---- attribute maps ----
    def attributes(self, values: Mapping[str, Any]) -> Any:
        proto = self.AttributeMap(version_number=OBJECT_VERSION)
        for key, value in values.items():
            entry = proto.attributes[key]
            if isinstance(value, bool):
                entry.bool_value = value
            elif isinstance(value, int):
                entry.int64_value = value
            elif isinstance(value, float):
                entry.float_value = value
            elif isinstance(value, str):
                entry.string_value = value.encode()
            else:
                entry.int64_list_value.elements.extend(int(v) for v in value)
        return proto

    def attribute_values(self, proto: Any) -> dict[str, Any]:
        """An AttributeMapProto as a dict of str, bool, int, float or list of int."""
        _serdes(proto, "AttributeMapProto")
        values: dict[str, Any] = {}
        for key, value in proto.attributes.items():
            which = value.WhichOneof("value")
            if which == "string_value":
                values[key] = value.string_value.decode("utf-8", "replace")
            elif which == "int64_list_value":
                values[key] = list(value.int64_list_value.elements)
            elif which is not None:
                values[key] = getattr(value, which)
        return values


@dataclass(frozen=True)
class Placement:
    """An IFRT sharding as this server uses it: the device ids in order, the memory kind (None:
    the default), and either an xla.OpSharding (serialized) or, for an even split whose index
    map IFRT does not say, the (shape, shard shape)."""

    devices: tuple[int, ...]
    memory_kind: str | None
    op_sharding: bytes | None
    even_split: tuple[tuple[int, ...], tuple[int, ...]] | None


def _serdes(proto: Any, what: str) -> None:
    if proto.version_number != OBJECT_VERSION:
        raise ProtocolError(f"{what} in IFRT SerDes version {proto.version_number}; this "
                            f"server reads version {OBJECT_VERSION}")


def _parse(cls: type, data: bytes, what: str) -> Any:
    message = cls()
    try:
        message.ParseFromString(data)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError and its relatives
        raise ProtocolError(f"{what}: the bytes are not a {cls.DESCRIPTOR.name}") from None
    _serdes(message, cls.DESCRIPTOR.name)
    return message


def _memory_kind(proto: Any) -> str | None:
    return proto.memory_kind if proto.HasField("memory_kind") and proto.memory_kind else None


def _device_ids(device_list: Any) -> tuple[int, ...]:
    ids = tuple(device_list.device_ids)
    if not ids or len(set(ids)) != len(ids):
        raise ProtocolError(f"device list {list(ids)} is empty or names a device twice")
    return ids
