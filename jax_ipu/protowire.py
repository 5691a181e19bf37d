"""Protobuf messages read by field number: the wire format only, no generated code, nothing run.

jaxlib hands some structures over only serialized (HloModuleProto, DeviceAssignmentProto) and
ships no Python classes for them; callers name the few fields they read, from the .proto files."""

from __future__ import annotations

from collections.abc import Iterator

_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10


class WireError(ValueError):
    """Bytes that are not a protobuf message."""


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    for _ in range(_MAX_VARINT_BYTES):
        if pos >= len(data):
            raise WireError("a varint runs past the end of the message")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    raise WireError("a varint longer than 10 bytes")


def fields(data: bytes | memoryview) -> Iterator[tuple[int, int | memoryview]]:
    """(field number, value) of each field in order: an int for varints, the bytes otherwise."""
    view = memoryview(data)
    end = len(view)
    pos = 0
    while pos < end:
        key = view[pos]  # keys and most values fit one byte: read those without a call
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(view, pos)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            if pos < end and view[pos] < 0x80:
                value, pos = view[pos], pos + 1
            else:
                value, pos = _varint(view, pos)
            yield number, value
            continue
        if wire == _BYTES:
            if pos < end and view[pos] < 0x80:
                size, pos = view[pos], pos + 1
            else:
                size, pos = _varint(view, pos)
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
        else:
            raise WireError(f"unsupported wire type {wire} (field {number})")
        if pos + size > end:
            raise WireError(f"field {number} runs past the end of the message")
        yield number, view[pos:pos + size]
        pos += size


def _signed(value: int) -> int:
    """An int64 (or sign-extended int32) read as a varint."""
    return value - (1 << 64) if value >= 1 << 63 else value


class Message:
    """One message's fields by number (read once); nested messages are read when asked for."""

    __slots__ = ("_fields", "view")

    def __init__(self, data: bytes | memoryview) -> None:
        self.view = memoryview(data)  # the message's own bytes
        found: dict[int, list[int | memoryview]] = {}
        for number, value in fields(self.view):
            if number in found:
                found[number].append(value)
            else:
                found[number] = [value]
        self._fields = found

    def has(self, number: int) -> bool:
        return number in self._fields

    def integer(self, number: int, default: int = 0) -> int:
        """A singular integer field (int32, int64, enum, bool): the last value, as protobuf."""
        values = self._fields.get(number)
        if not values:
            return default
        if not isinstance(values[-1], int):
            raise WireError(f"field {number} is not an integer")
        return _signed(values[-1])

    def integers(self, number: int) -> list[int]:
        """A repeated integer field, packed or not."""
        out: list[int] = []
        for value in self._fields.get(number, ()):
            if isinstance(value, int):
                out.append(_signed(value))
                continue
            pos = 0
            while pos < len(value):
                item, pos = _varint(value, pos)
                out.append(_signed(item))
        return out

    def raw(self, number: int) -> bytes:
        values = self._fields.get(number)
        if not values:
            return b""
        if isinstance(values[-1], int):
            raise WireError(f"field {number} is not a string or bytes")
        return bytes(values[-1])

    def text(self, number: int) -> str:
        try:
            return self.raw(number).decode()
        except UnicodeDecodeError:
            raise WireError(f"field {number} is not UTF-8 text") from None

    def texts(self, number: int) -> list[str]:
        return [bytes(v).decode("utf-8", "replace") for v in self._fields.get(number, ())
                if not isinstance(v, int)]

    def message(self, number: int) -> Message | None:
        """A singular embedded message; None when absent."""
        values = self._fields.get(number)
        if not values:
            return None
        if isinstance(values[-1], int):
            raise WireError(f"field {number} is not a message")
        return Message(values[-1])

    def messages(self, number: int) -> list[Message]:
        """A repeated embedded message."""
        out = []
        for value in self._fields.get(number, ()):
            if isinstance(value, int):
                raise WireError(f"field {number} is not a message")
            out.append(Message(value))
        return out
