"""Protobuf messages written by field number: protowire's counterpart, with no generated code.

Callers name the fields they write from the .proto files (the XSpace jax.profiler collects from
the plugin is one such message); nothing here knows a schema."""

from __future__ import annotations

import struct
from collections.abc import Iterable

_VARINT, _FIXED64, _BYTES = 0, 1, 2
_UINT64 = 1 << 64


def _varint(value: int) -> bytes:
    """Base-128 varint; a negative int64 is written as its two's complement (ten bytes)."""
    if not -(_UINT64 >> 1) <= value < _UINT64:
        raise ValueError(f"{value} does not fit a 64-bit protobuf integer")
    if value < 0:
        value += _UINT64
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


class Writer:
    """One message, its fields appended in the order written; bytes() gives the encoding."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def integer(self, number: int, value: int) -> Writer:
        """An int32, int64, uint64, enum or bool field (written even when zero, so that a
        oneof member keeps its presence)."""
        self._parts += (_key(number, _VARINT), _varint(int(value)))
        return self

    def double(self, number: int, value: float) -> Writer:
        self._parts += (_key(number, _FIXED64), struct.pack("<d", value))
        return self

    def raw(self, number: int, data: bytes) -> Writer:
        """A bytes field, or an embedded message already encoded."""
        self._parts += (_key(number, _BYTES), _varint(len(data)), data)
        return self

    def text(self, number: int, value: str) -> Writer:
        return self.raw(number, value.encode())

    def message(self, number: int, message: Writer) -> Writer:
        return self.raw(number, bytes(message))

    def packed(self, number: int, values: Iterable[int]) -> Writer:
        """A repeated integer field, packed (proto3's default encoding)."""
        return self.raw(number, b"".join(_varint(int(v)) for v in values))

    def __bytes__(self) -> bytes:
        return b"".join(self._parts)
