"""The protobuf wire reader (jax_ipu/protowire.py): fields by number, packed or not, negative
ints, nested messages; bytes that are not a message give WireError, never another exception."""

from __future__ import annotations

import random

import jax
import numpy as np
import pytest

from jax_ipu import _internals
from jax_ipu.protowire import Message, WireError, fields

# Hand-encoded: field 1 varint 150, field 2 "hi", field 3 packed [1, 300], field 3 unpacked 7,
# field 4 = -2 (int64, ten bytes), field 5 a message {1: 5}, field 6 fixed32.
DATA = (b"\x08\x96\x01" b"\x12\x02hi" b"\x1a\x03\x01\xac\x02" b"\x18\x07"
        b"\x20\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01" b"\x2a\x02\x08\x05" b"\x35\x01\x02\x03\x04")


def test_fields_by_number():
    message = Message(DATA)
    assert message.integer(1) == 150 and message.text(2) == "hi"
    assert message.integers(3) == [1, 300, 7]
    assert message.integer(4) == -2
    assert message.message(5).integer(1) == 5 and message.messages(5)[0].integer(1) == 5
    assert message.raw(6) == b"\x01\x02\x03\x04"
    assert (message.integer(9), message.integers(9), message.message(9), message.text(9)) == \
        (0, [], None, "")  # proto3: absent is the default
    assert [number for number, _ in fields(DATA)] == [1, 2, 3, 3, 4, 5, 6]


def test_a_device_assignment_reads_as_jaxlib_wrote_it():
    assignment = _internals.DeviceAssignment.create(np.array([[0, 1], [2, 3], [5, 4]]))
    assert _internals.device_assignment_columns(assignment) == [[0, 2, 5], [1, 3, 4]]


@pytest.mark.parametrize("data, message", [
    (b"\x08", "runs past the end"),
    (b"\x12\x05hi", "runs past the end"),
    (b"\x0b", "unsupported wire type 3"),
    (b"\x08" + b"\xff" * 11, "longer than 10 bytes"),
])
def test_bytes_that_are_not_a_message_are_refused(data, message):
    with pytest.raises(WireError, match=message):
        Message(data)


def test_random_damage_gives_wire_error_or_a_message():
    rng = random.Random(0)
    ipu = jax.devices("cpu")[0]
    compiled = jax.jit(lambda a: a * 2).lower(jax.device_put(np.ones(3, np.float32), ipu))
    proto = compiled.compile().runtime_executable().hlo_modules()[0]
    data = proto.as_serialized_hlo_module_proto()
    for _ in range(300):
        damaged = bytearray(data[:rng.randrange(len(data))])
        for _ in range(rng.randint(0, 3)):
            if damaged:
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        try:
            for message in Message(bytes(damaged)).messages(3):
                message.text(1)
        except WireError:
            pass
