"""The protobuf writer: the encodings of protobuf's own documentation, read back by protowire."""

from __future__ import annotations

import struct

import pytest

from jax_ipu.protowire import Message
from jax_ipu.protowriter import Writer


def test_the_documented_encodings() -> None:
    # protobuf.dev "Encoding": field 1 = 150, field 2 = "testing", field 3 = message {1: 150}
    assert bytes(Writer().integer(1, 150)) == b"\x08\x96\x01"
    assert bytes(Writer().text(2, "testing")) == b"\x12\x07testing"
    assert bytes(Writer().message(3, Writer().integer(1, 150))) == b"\x1a\x03\x08\x96\x01"
    # packed repeated int32 field 4 = [3, 270, 86942]
    assert bytes(Writer().packed(4, [3, 270, 86942])) == b"\x22\x06\x03\x8e\x02\x9e\xa7\x05"
    # a negative int64 is ten bytes of two's complement; a double is eight little-endian
    assert bytes(Writer().integer(1, -2)) == b"\x08" + b"\xfe" + b"\xff" * 8 + b"\x01"
    assert bytes(Writer().double(2, 1.5)) == b"\x11" + struct.pack("<d", 1.5)


def test_what_it_writes_protowire_reads() -> None:
    inner = Writer().integer(1, 7).text(2, "ipu")
    data = bytes(Writer().integer(1, -(2**63)).integer(2, 2**64 - 1).double(3, -0.25)
                 .message(4, inner).message(4, inner).packed(5, [1, 2**40]).raw(6, b"\x00\xff")
                 .integer(7, 0))
    read = Message(data)
    assert read.integer(1) == -(2**63)
    assert read.integer(2) == -1  # an int64 reads the bits back as signed, as protobuf does
    assert struct.unpack("<d", read.raw(3))[0] == -0.25
    assert [(m.integer(1), m.text(2)) for m in read.messages(4)] == [(7, "ipu")] * 2
    assert read.integers(5) == [1, 2**40]
    assert read.raw(6) == b"\x00\xff"
    assert read.has(7) and read.integer(7, default=9) == 0  # a zero written stays present


def test_an_integer_beyond_64_bits_is_refused() -> None:
    with pytest.raises(ValueError, match="64-bit"):
        Writer().integer(1, 2**64)
    with pytest.raises(ValueError, match="64-bit"):
        Writer().integer(1, -(2**63) - 1)
