"""The serialized executable format: data only, decoded against the expected types.

A blob round-trips the program and report exactly; a crafted pickle (the old format) is refused
without running; damaged bytes always give StaleExecutableError, never another exception."""

from __future__ import annotations

import hashlib
import pickle
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_ipu import sealing
from jax_ipu.runtime import codec, serialized
from jax_ipu.runtime.client import find_executable, live_clients
from jax_ipu.runtime.serialized import StaleExecutableError


@dataclass(frozen=True)
class Leaf:
    name: str
    weight: float | None = None


@dataclass
class Tree:
    number: int
    flag: bool
    data: bytes
    table: np.ndarray
    leaves: list[Leaf]
    pair: tuple[int, str]
    row: tuple[int, ...]
    index: dict[int, tuple[int, ...]]
    tags: frozenset[str]
    extra: dict[str, Any] = field(default_factory=dict)
    parent: Tree | None = None
    summary: dict | None = None  # bare: a JSON object


def _tree() -> Tree:
    return Tree(3, True, b"\x00\xffcode", np.arange(6, dtype=np.int64).reshape(2, 3),
                [Leaf("a"), Leaf("b", 0.5)], (7, "x"), (1, 2, 3), {4: (5, 6)},
                frozenset({"u", "v"}), {"groups": [[0, 1], [2, 3]], "nan": float("inf")},
                Tree(0, False, b"", np.zeros(0, np.float32), [], (0, ""), (), {}, frozenset()),
                {"counters": {"a": {"cycles": None}}, "cycles": [1.5, 2.0]})


def test_the_codec_round_trips_every_supported_annotation():
    tree = _tree()
    back = codec.loads(Tree, codec.dumps(Tree, tree))
    np.testing.assert_array_equal(back.table, tree.table)
    assert back.table.dtype == np.int64 and back.table.flags.writeable
    assert replace(back, table=None, parent=None) == replace(tree, table=None, parent=None)
    assert back.parent.table.dtype == np.float32 and back.parent.table.shape == (0,)
    assert type(back.pair) is tuple and type(back.tags) is frozenset


def _document(tree: Tree) -> tuple[dict, bytes]:
    import json
    data = codec.dumps(Tree, tree)
    size = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + size]), data[8 + size:]


def _encode(document: dict, sections: bytes) -> bytes:
    import json
    text = json.dumps(document).encode()
    return len(text).to_bytes(8, "little") + text + sections


@pytest.mark.parametrize("change, message", [
    (lambda d: d["value"].pop("flag"), r"missing \['flag'\]"),
    (lambda d: d["value"].update(spare=1), r"unknown \['spare'\]"),
    (lambda d: d["value"].update(number="3"), "number: expected an integer"),
    (lambda d: d["value"].update(number=True), "number: expected an integer"),
    (lambda d: d["value"].update(flag=1), "flag: expected a boolean"),
    (lambda d: d["value"]["leaves"][1].update(weight="heavy"),
     r"Tree.leaves\[1\].weight: expected a number, got str"),
    (lambda d: d["value"].update(pair=[7, "x", 8]), "pair: expected 2 items"),
    (lambda d: d["value"].update(tags=d["value"]["tags"][:1] * 2), "repeated set items"),
    (lambda d: d["value"]["leaves"][0].update(name="a"),
     r"leaves\[0\].name: expected the index of a string, got str"),
    (lambda d: d["value"]["leaves"][0].update(name=len(d["strings"])),
     "expected the index of a string, got int"),
    (lambda d: d["strings"].append(3), "the string table is not a list of strings"),
    (lambda d: d["value"].update(summary=[1]), "Tree.summary: expected an object, got list"),
    (lambda d: d["value"].update(index=[[4, [5]], [4, [6]]]), "repeated key 4"),
    (lambda d: d["value"]["table"].update(dtype="|O"), "not a numeric dtype"),
    (lambda d: d["value"]["table"].update(shape=[3, 3]), "do not hold"),
    (lambda d: d["value"].update(data=d["value"]["table"]["section"]), "used twice"),
    (lambda d: d["value"].update(parent={"__reduce__": ["os", "system"]}),
     r"Tree.parent: Tree fields do not match \(missing \['data', "),
])
def test_the_codec_refuses_data_that_does_not_match_the_types(change, message):
    document, sections = _document(_tree())
    change(document)
    with pytest.raises(codec.CodecError, match=message):
        codec.loads(Tree, _encode(document, sections))


def test_the_codec_refuses_trailing_and_missing_bytes():
    data = codec.dumps(Tree, _tree())
    with pytest.raises(codec.CodecError, match="sections end at byte"):
        codec.loads(Tree, data + b"\0")
    with pytest.raises(codec.CodecError, match="sections end at byte"):
        codec.loads(Tree, data[:-1])


def test_the_codec_checks_a_schema_once_whole():
    codec.check(Tree)
    codec.check(serialized.Blob)

    @dataclass
    class Later:  # e.g. a field someone adds to a report, of a type the codec cannot carry
        ok: tuple[int, ...]
        callback: Callable[[int], int]

    with pytest.raises(TypeError, match="cannot encode the annotation"):
        codec.check(Later)


def test_the_codec_refuses_to_encode_what_the_annotation_does_not_allow():
    with pytest.raises(TypeError, match=r"Tree.number: expected int, got str"):
        codec.dumps(Tree, replace(_tree(), number="3"))
    with pytest.raises(TypeError, match="not a JSON value"):
        codec.dumps(Tree, replace(_tree(), extra={"f": object()}))


@pytest.fixture(scope="module")
def blob() -> serialized.Blob:
    """A real blob: a program with a loop, a condition, a sort and its report."""
    ipu = jax.devices("ipu")[0]

    def f(w, x):
        carry, sums = jax.lax.scan(lambda c, _: (jnp.tanh(c @ w), c.sum()), x, None, length=5)
        return carry, sums, jnp.argsort(x[0]), jax.lax.cond(x[0, 0] > 0, lambda: x * 2,
                                                             lambda: x)

    args = jax.device_put((np.ones((32, 32), np.float32), np.ones((4, 32), np.float32)), ipu)
    compiled = jax.jit(f).lower(*args).compile()
    exe = find_executable(compiled.runtime_executable().fingerprint.decode())
    client = live_clients()[0]
    return serialized.loads(client.serialize(exe), client.build), exe


def test_a_blob_round_trips_the_program_and_report_exactly(blob):
    loaded, exe = blob
    # repr: every field (frames too), tuples apart from lists, and NaN constants equal.
    assert repr(loaded.program) == repr(exe.compiled.program)
    assert any(op.kind == "while" for op in loaded.program.walk())
    assert loaded.report.to_dict() == exe.compiled.report.to_dict()
    assert loaded.outputs == exe.compiled.outputs
    np.testing.assert_array_equal(loaded.assignment, exe.compiled.assignment)
    assert (loaded.code, loaded.options) == (exe.code, exe.options)


class Plant:
    """Unpickling it opens (so creates) a file: what a crafted cache entry could do."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


def old_format_payload(path) -> bytes:
    """A pickle whose loading creates `path`, behind the header format 1 accepted."""
    body = pickle.dumps(Plant(str(path)))
    return serialized.MAGIC + (1).to_bytes(4, "little") + hashlib.sha256(body).digest() + body


def current_format_payload(path, build: str) -> bytes:
    """The same pickle behind a correct header of today's format, build and seal (made with
    this user's key, as only this user could)."""
    body, made_by = pickle.dumps(Plant(str(path))), build.encode()
    head = (serialized.MAGIC + serialized.FORMAT.to_bytes(4, "little")
            + len(made_by).to_bytes(2, "little") + made_by)
    return head + sealing.seal(head + body) + body


def test_a_crafted_pickle_is_refused_without_running(tmp_path):
    build = serialized.build_id()
    planted = tmp_path / "planted"
    pickle.loads(pickle.dumps(Plant(str(planted))))
    assert planted.exists()  # the payload is live: unpickling it runs code
    planted.unlink()
    with pytest.raises(StaleExecutableError, match="of format 1, not 3"):
        serialized.loads(old_format_payload(planted), build)
    with pytest.raises(StaleExecutableError, match="malformed serialized jax-ipu executable"):
        serialized.loads(current_format_payload(planted, build), build)
    assert not planted.exists()


def test_jaxlib_deserialize_refuses_a_crafted_pickle_with_the_clear_error(tmp_path):
    """Through the PJRT slot that jax's compilation cache and deserialize_and_load call: jaxlib
    puts its own metadata before the plugin's bytes, so the crafted bytes go after a real one."""
    ipu = jax.devices("ipu")[0]
    compiled = jax.jit(lambda a: a + 1).lower(jax.device_put(np.ones(3, np.float32), ipu))
    real = ipu.client.serialize_executable(compiled.compile().runtime_executable())
    metadata = real[:real.index(serialized.MAGIC)]
    planted = tmp_path / "planted"
    for payload, message in ((old_format_payload(planted), "of format 1, not 3"),
                             (current_format_payload(planted, serialized.build_id()),
                              "malformed serialized jax-ipu executable")):
        with pytest.raises(jax.errors.JaxRuntimeError, match=message):
            ipu.client.deserialize_executable(metadata + payload, jax.devices("ipu")[:1])
    assert not planted.exists()


def _rewrap(data: bytes, body: bytes, build: str) -> bytes:
    """`body` behind `data`'s header, sealed with this user's key: only the decoder judges it."""
    head = data[:len(serialized.MAGIC) + 4 + 2 + len(build.encode())]
    return head + sealing.seal(head + body) + body


def test_fuzzed_blobs_give_stale_executable_error_and_nothing_else(blob):
    loaded, exe = blob
    client = live_clients()[0]
    data = client.serialize(exe)
    head = len(serialized.MAGIC) + 4 + 2 + len(client.build) + 32
    body = data[head:]
    document_end = 8 + int.from_bytes(body[:8], "little")
    rng = random.Random(0)

    def refused(candidate: bytes) -> bool:
        try:
            serialized.loads(candidate, client.build)
        except StaleExecutableError:
            return True
        return False

    # Truncations anywhere (header, checksum, document, sections), and flipped bits that the
    # checksum catches.
    cuts = sorted(rng.sample(range(len(data)), 150)) + [0, 1, head - 1, head]
    assert all(refused(data[:cut]) for cut in cuts)
    flips = [bytearray(data) for _ in range(150)]
    for damaged in flips:
        damaged[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    assert all(refused(bytes(damaged)) for damaged in flips)
    # What the checksum does not catch (a body crafted with its checksum): cut bodies are always
    # refused; flipped bits in the document mostly are, though one in a string or a number can
    # still make a well-typed blob. Either way, never another exception.
    assert all(refused(_rewrap(data, body[:rng.randrange(len(body))], client.build))
               for _ in range(300))
    outcomes = []
    for _ in range(400):
        damaged = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(document_end)] ^= 1 << rng.randrange(8)
        outcomes.append(refused(_rewrap(data, bytes(damaged), client.build)))
    assert sum(outcomes) > 200, sum(outcomes)  # 277 of 400 with this seed


def test_a_tile_program_round_trips_with_its_vertex_ops():
    """A tile_map's one-tile program (Op.vertex_ops) and the tile view of the report survive
    the format, so tile programs are cached like any other."""
    from jax import lax

    from jax_ipu.tile import tile_map, tile_put_sharded

    ipu = jax.devices("ipu")[0]
    x = jax.device_put(np.ones((3, 256), np.float32), ipu)
    compiled = jax.jit(lambda a: tile_map(lax.exp_p, tile_put_sharded(a, (0, 2, 5))).array
                       ).lower(x).compile()
    exe = find_executable(compiled.runtime_executable().fingerprint.decode())
    client = live_clients()[0]
    loaded = serialized.loads(client.serialize(exe), client.build)
    vertex = [op for op in loaded.program.walk() if op.vertex_ops]
    assert [op.kind for op in vertex] == ["tile_map"]
    assert repr(loaded.program) == repr(exe.compiled.program)
    assert loaded.report.to_dict() == exe.compiled.report.to_dict()


def _with_report_number(data: bytes, build: str, path: tuple[str, ...], number) -> bytes:
    """`data` with one number of its report's JSON replaced, sealed with this user's key."""
    import json

    head = len(serialized.MAGIC) + 4 + 2 + len(build.encode())
    body = data[head + sealing.SEAL_BYTES:]
    size = int.from_bytes(body[:8], "little")
    document = json.loads(body[8:8 + size])
    where = document["value"]["report"]
    for step in path[:-1]:
        where = where[step]
    where[path[-1]] = number
    text = json.dumps(document).encode()
    return _rewrap(data, len(text).to_bytes(8, "little") + text + body[8 + size:], build)


def test_a_report_number_past_int64_is_a_malformed_executable(blob):
    """Before: OverflowError from the runtime's clocks at the first call, as INTERNAL."""
    _, exe = blob
    client = live_clients()[0]
    data = client.serialize(exe)
    for path, number in ((("cycles", "compute"), float(2**64 + 5)),
                         (("cycles", "call"), 2**64 + 5),
                         (("cycles", "sync"), float("inf"))):
        with pytest.raises(StaleExecutableError, match="malformed serialized jax-ipu executable"):
            client.deserialize(_with_report_number(data, client.build, path, number))


def test_a_misread_build_length_says_another_jax_ipu_wrote_it():
    """Before: the build id read past its end held the seal's bytes, NUL among them, and the
    error crossing the C API said "embedded null character"."""
    ipu = jax.devices("ipu")[0]
    compiled = jax.jit(lambda a: a * 3).lower(jax.device_put(np.ones(3, np.float32), ipu))
    real = ipu.client.serialize_executable(compiled.compile().runtime_executable())
    at = real.index(serialized.MAGIC) + len(serialized.MAGIC) + 4
    size = int.from_bytes(real[at:at + 2], "little")
    for wrong in (size + 24, size - 3, 0):
        data = real[:at] + wrong.to_bytes(2, "little") + real[at + 2:]
        with pytest.raises(jax.errors.JaxRuntimeError, match="serialized by another jax-ipu"):
            ipu.client.deserialize_executable(data, jax.devices("ipu")[:1])
