"""A typed codec for dataclasses: a JSON document for the structure, raw byte sections for bytes
and numpy arrays. Decoding walks the expected type's annotations, never a name in the data.

Supported annotations: dataclasses, tuple (fixed or `...`), list, dict, frozenset/set, np.ndarray
(numeric dtypes), bytes, int, float, str, bool, None, unions (`X | None`), and Any (a JSON value:
null, bool, number, string, list, object with string keys). Anything else in the data (an unknown
or missing field, a wrong type, an unused section, trailing bytes) raises CodecError."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import types
import typing
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

_LENGTH = 8  # bytes of the JSON document's length, little-endian, before it
# Numeric dtypes only ('<f4', '|b1', '<c16'...): an object or structured dtype is never made.
_DTYPE = re.compile(r"[<>|][biufc]\d{1,2}")


class CodecError(ValueError):
    """Data that is not a value of the expected type in this codec's format."""


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, Any], ...]:
    """(name, resolved annotation) of each field of a dataclass, in order."""
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    for f in fields:
        if not f.init:
            raise TypeError(f"{cls.__name__}.{f.name} is not an __init__ field: not encodable")
    return tuple((f.name, hints[f.name]) for f in fields)


def _union_members(tp: Any) -> tuple[Any, ...] | None:
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return typing.get_args(tp)
    return None


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


_LEAVES = (bool, int, float, str, bytes, np.ndarray, type(None), None, Any)


def check(tp: Any, _seen: set | None = None) -> None:
    """Raise TypeError unless the codec can encode and decode every annotation reachable from
    `tp` (a dataclass's fields, recursively): run once per schema, not per value."""
    seen = set() if _seen is None else _seen
    if tp in _LEAVES:
        return
    if _is_dataclass_type(tp):
        if tp not in seen:
            seen.add(tp)
            for _, ftp in _fields(tp):
                check(ftp, seen)
        return
    members = _union_members(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if members is not None:
        parts = members
    elif origin is tuple:
        parts = (args[0],) if len(args) == 2 and args[1] is Ellipsis else args
    elif origin in (list, frozenset, set, dict) and args:
        parts = args
    else:
        raise TypeError(f"the codec cannot encode the annotation {tp!r}")
    for part in parts:
        check(part, seen)


# ---- encoding ---------------------------------------------------------------------------------

class _Encoder:
    def __init__(self) -> None:
        self.sections: list[bytes] = []

    def section(self, data: bytes) -> int:
        self.sections.append(bytes(data))
        return len(self.sections) - 1

    def encode(self, tp: Any, value: Any, path: str) -> Any:
        if tp is Any:
            return _json_value(value, path)
        members = _union_members(tp)
        if members is not None:
            for member in members:
                if _matches(member, value):
                    return self.encode(member, value, path)
            raise TypeError(f"{path}: {type(value).__name__} is none of {tp}")
        if tp is type(None) or tp is None:
            if value is not None:
                raise TypeError(f"{path}: expected None, got {type(value).__name__}")
            return None
        if tp is bool:
            if not isinstance(value, bool | np.bool_):
                raise TypeError(f"{path}: expected bool, got {type(value).__name__}")
            return bool(value)
        if tp is int:
            if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
                raise TypeError(f"{path}: expected int, got {type(value).__name__}")
            return int(value)
        if tp is float:
            if isinstance(value, bool | np.bool_) or not isinstance(
                    value, float | int | np.floating | np.integer):
                raise TypeError(f"{path}: expected float, got {type(value).__name__}")
            return float(value)
        if tp is str:
            if not isinstance(value, str):
                raise TypeError(f"{path}: expected str, got {type(value).__name__}")
            return value
        if tp is bytes:
            if not isinstance(value, bytes | bytearray | memoryview):
                raise TypeError(f"{path}: expected bytes, got {type(value).__name__}")
            return self.section(value)
        if tp is np.ndarray:
            if not isinstance(value, np.ndarray) or not _DTYPE.fullmatch(value.dtype.str):
                raise TypeError(f"{path}: expected a numeric numpy array, got {value!r:.80}")
            return {"dtype": value.dtype.str, "shape": list(value.shape),
                    "section": self.section(np.ascontiguousarray(value).tobytes())}
        if _is_dataclass_type(tp):
            if not isinstance(value, tp):
                raise TypeError(f"{path}: expected {tp.__name__}, got {type(value).__name__}")
            return {name: self.encode(ftp, getattr(value, name), f"{path}.{name}")
                    for name, ftp in _fields(tp)}
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is tuple:
            if not isinstance(value, tuple):
                raise TypeError(f"{path}: expected a tuple, got {type(value).__name__}")
            if len(args) == 2 and args[1] is Ellipsis:
                return [self.encode(args[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
            if len(args) != len(value):
                raise TypeError(f"{path}: expected {len(args)} items, got {len(value)}")
            return [self.encode(a, v, f"{path}[{i}]")
                    for i, (a, v) in enumerate(zip(args, value, strict=True))]
        if origin is list:
            if not isinstance(value, list):
                raise TypeError(f"{path}: expected a list, got {type(value).__name__}")
            return [self.encode(args[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
        if origin in (frozenset, set):
            if not isinstance(value, frozenset | set):
                raise TypeError(f"{path}: expected a set, got {type(value).__name__}")
            items = [self.encode(args[0], v, f"{path}{{}}") for v in value]
            return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
        if origin is dict:
            if not isinstance(value, dict):
                raise TypeError(f"{path}: expected a dict, got {type(value).__name__}")
            return [[self.encode(args[0], k, f"{path} key"),
                     self.encode(args[1], v, f"{path}[{k!r}]")] for k, v in value.items()]
        raise TypeError(f"{path}: the codec cannot encode the annotation {tp!r}")


def _matches(tp: Any, value: Any) -> bool:
    """Whether `value` is (shallowly) of type `tp`: picks a union's member when encoding."""
    if tp is Any:
        return True
    if tp is type(None) or tp is None:
        return value is None
    if tp is bool:
        return isinstance(value, bool | np.bool_)
    if tp is int:
        return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)
    if tp is float:
        return isinstance(value, float | int | np.floating | np.integer) and not isinstance(
            value, bool | np.bool_)
    if tp is bytes:
        return isinstance(value, bytes | bytearray | memoryview)
    members = _union_members(tp)
    if members is not None:
        return any(_matches(m, value) for m in members)
    origin = typing.get_origin(tp) or tp
    if origin in (frozenset, set):
        return isinstance(value, frozenset | set)
    return isinstance(origin, type) and isinstance(value, origin)


def _json_value(value: Any, path: str) -> Any:
    """`value` as JSON (an Any field): tuples become lists; anything else non-JSON is refused."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | np.integer) and not isinstance(value, np.bool_):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, float | np.floating):
        return float(value)
    if isinstance(value, list | tuple):
        return [_json_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _json_value(v, f"{path}[{k!r}]") for k, v in value.items()}
    raise TypeError(f"{path}: {type(value).__name__} is not a JSON value")


def dumps(tp: type[T], value: T) -> bytes:
    """`value`, of type `tp`, in the codec's format: the JSON document's length, the document
    ({"sections": [their sizes], "value": ...}), then the byte sections in order."""
    encoder = _Encoder()
    tree = encoder.encode(tp, value, tp.__name__ if isinstance(tp, type) else "value")
    document = json.dumps({"sections": [len(s) for s in encoder.sections], "value": tree},
                          separators=(",", ":"), allow_nan=True).encode()
    return b"".join([len(document).to_bytes(_LENGTH, "little"), document, *encoder.sections])


# ---- decoding ---------------------------------------------------------------------------------

class _Decoder:
    def __init__(self, sections: list[memoryview]) -> None:
        self.sections = sections
        self.used = [False] * len(sections)

    def section(self, index: Any, path: str) -> memoryview:
        if type(index) is not int or not 0 <= index < len(self.sections):
            raise CodecError(f"{path}: no byte section {index!r}")
        if self.used[index]:
            raise CodecError(f"{path}: byte section {index} is used twice")
        self.used[index] = True
        return self.sections[index]

    def decode(self, tp: Any, node: Any, path: str) -> Any:
        if tp is Any:
            return node  # json.loads made it: a JSON value by construction
        members = _union_members(tp)
        if members is not None:
            errors = []
            for member in members:
                used = list(self.used)
                try:
                    return self.decode(member, node, path)
                except CodecError as e:
                    self.used = used
                    errors.append(str(e))
            raise CodecError(f"{path}: none of {tp} ({'; '.join(errors)})")
        if tp is type(None) or tp is None:
            return _expect(node is None, node, "null", path)
        if tp is bool:
            return _expect(type(node) is bool, node, "a boolean", path)
        if tp is int:
            return _expect(type(node) is int, node, "an integer", path)
        if tp is float:
            if type(node) is int:
                return float(node)
            return _expect(type(node) is float, node, "a number", path)
        if tp is str:
            return _expect(type(node) is str, node, "a string", path)
        if tp is bytes:
            return bytes(self.section(node, path))
        if tp is np.ndarray:
            return self.array(node, path)
        if _is_dataclass_type(tp):
            fields = _fields(tp)
            _expect(type(node) is dict, node, f"an object ({tp.__name__})", path)
            names = [name for name, _ in fields]
            if set(node) != set(names):
                missing = sorted(set(names) - set(node))
                unknown = sorted(set(node) - set(names))
                raise CodecError(f"{path}: {tp.__name__} fields do not match (missing "
                                 f"{missing}, unknown {unknown})")
            values = {name: self.decode(ftp, node[name], f"{path}.{name}")
                      for name, ftp in fields}
            try:
                return tp(**values)
            except (TypeError, ValueError) as e:  # a __post_init__ refusing the values
                raise CodecError(f"{path}: {tp.__name__} refuses these values ({e})") from None
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is tuple:
            _expect(type(node) is list, node, "a list", path)
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(self.decode(args[0], v, f"{path}[{i}]") for i, v in enumerate(node))
            if len(node) != len(args):
                raise CodecError(f"{path}: expected {len(args)} items, got {len(node)}")
            return tuple(self.decode(a, v, f"{path}[{i}]")
                         for i, (a, v) in enumerate(zip(args, node, strict=True)))
        if origin is list:
            _expect(type(node) is list, node, "a list", path)
            return [self.decode(args[0], v, f"{path}[{i}]") for i, v in enumerate(node)]
        if origin in (frozenset, set):
            _expect(type(node) is list, node, "a list", path)
            items = [self.decode(args[0], v, f"{path}{{}}") for v in node]
            try:
                result = origin(items)
            except TypeError:
                raise CodecError(f"{path}: unhashable set items") from None
            if len(result) != len(items):
                raise CodecError(f"{path}: repeated set items")
            return result
        if origin is dict:
            _expect(type(node) is list, node, "a list of [key, value] pairs", path)
            result = {}
            for i, pair in enumerate(node):
                if type(pair) is not list or len(pair) != 2:
                    raise CodecError(f"{path}[{i}]: expected a [key, value] pair")
                key = self.decode(args[0], pair[0], f"{path}[{i}] key")
                try:
                    if key in result:
                        raise CodecError(f"{path}: repeated key {key!r}")
                except TypeError:
                    raise CodecError(f"{path}: unhashable key") from None
                result[key] = self.decode(args[1], pair[1], f"{path}[{key!r}]")
            return result
        raise TypeError(f"{path}: the codec cannot decode the annotation {tp!r}")

    def array(self, node: Any, path: str) -> np.ndarray:
        _expect(type(node) is dict and set(node) == {"dtype", "shape", "section"}, node,
                "an array object {dtype, shape, section}", path)
        dtype, shape = node["dtype"], node["shape"]
        if type(dtype) is not str or not _DTYPE.fullmatch(dtype):
            raise CodecError(f"{path}: {dtype!r} is not a numeric dtype")
        if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape):
            raise CodecError(f"{path}: {shape!r} is not an array shape")
        try:
            dt = np.dtype(dtype)
        except (TypeError, ValueError):
            raise CodecError(f"{path}: {dtype!r} is not a numeric dtype") from None
        data = self.section(node["section"], path)
        if math.prod(shape) * dt.itemsize != len(data):
            raise CodecError(f"{path}: {len(data)} bytes do not hold {dtype}{shape}")
        try:
            return np.frombuffer(data, dt).reshape(shape).copy()
        except (ValueError, OverflowError):  # e.g. an empty array of 2**70 rows
            raise CodecError(f"{path}: numpy cannot hold an array of shape {shape}") from None


def _expect(ok: bool, node: Any, what: str, path: str) -> Any:
    if not ok:
        raise CodecError(f"{path}: expected {what}, got {type(node).__name__}")
    return node


def loads(tp: type[T], data: bytes) -> T:
    """The value of type `tp` that dumps() wrote in `data`. CodecError for anything else: bytes
    that do not parse, a document that does not match `tp`, sections unused or missing."""
    view = memoryview(data)
    if len(view) < _LENGTH:
        raise CodecError("too short to hold a document")
    size = int.from_bytes(view[:_LENGTH], "little")
    if size > len(view) - _LENGTH:
        raise CodecError("the document runs past the end of the data")
    try:
        document = json.loads(bytes(view[_LENGTH:_LENGTH + size]))
    except (ValueError, RecursionError) as e:  # bad UTF-8 or JSON, an int too long to read
        raise CodecError(f"the document is not JSON ({type(e).__name__})") from None
    if type(document) is not dict or set(document) != {"sections", "value"}:
        raise CodecError("the document is not {sections, value}")
    sizes = document["sections"]
    if type(sizes) is not list or not all(type(n) is int and n >= 0 for n in sizes):
        raise CodecError("the section sizes are not a list of byte counts")
    sections, offset = [], _LENGTH + size
    for n in sizes:
        sections.append(view[offset:offset + n])
        offset += n
    if offset != len(view):
        raise CodecError(f"the sections end at byte {offset}, the data at {len(view)}")
    decoder = _Decoder(sections)
    try:
        value = decoder.decode(tp, document["value"], tp.__name__)
    except RecursionError:
        raise CodecError("the document nests too deeply") from None
    if not all(decoder.used):
        raise CodecError("a byte section is not used by the value")
    return value
