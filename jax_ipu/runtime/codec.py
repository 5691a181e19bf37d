"""A typed codec for dataclasses: a JSON document for the structure, raw byte sections for bytes
and numpy arrays. Decoding walks the expected type's annotations, never a name in the data.

Supported annotations: dataclasses, tuple (fixed or `...`), list, dict, frozenset/set, np.ndarray
(numeric dtypes), bytes, int, float, str, bool, None, unions (`X | None`), and Any (a JSON value:
null, bool, number, string, list, object with string keys; tuples become lists; a bare `dict` or
`list` is a JSON object or array). Anything else in
the data (an unknown or missing field, a wrong type, an unused section, trailing bytes) raises
CodecError. Each type's encoder and decoder is built once from its annotations (check())."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import threading
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

_LENGTH = 8  # bytes of the JSON document's length, little-endian, before it
# Numeric dtypes only ('<f4', '|b1', '<c16'...): an object or structured dtype is never made.
_DTYPE = re.compile(r"[<>|][biufc]\d{1,2}")
_NONE = type(None)


class CodecError(ValueError):
    """Data that is not a value of the expected type in this codec's format."""

    def __init__(self, problem: str, path: tuple[str, ...] = ()) -> None:
        super().__init__(problem)
        self.problem, self.path = problem, path

    def within(self, step: str) -> CodecError:
        return CodecError(self.problem, (step, *self.path))

    def __str__(self) -> str:
        where = "".join(p if p.startswith("[") else f".{p}" for p in self.path)
        return f"{where.lstrip('.')}: {self.problem}" if where else self.problem


class _Sections:
    """The byte sections and the string table of one document: appended while encoding, each
    section used once decoding. A str field holds its string's index in the table (programs
    repeat file names and op names many times)."""

    def __init__(self, parts: list[memoryview] | None = None,
                 strings: list[str] | None = None) -> None:
        self.parts: list[Any] = parts if parts is not None else []
        self.used = [False] * len(self.parts)
        self.strings: list[str] = strings if strings is not None else []
        self.string_ids: dict[str, int] = {}

    def string(self, text: str) -> int:
        found = self.string_ids.get(text)
        if found is None:
            found = self.string_ids[text] = len(self.strings)
            self.strings.append(text)
        return found

    def add(self, data: Any) -> int:
        self.parts.append(data)
        return len(self.parts) - 1

    def take(self, index: Any) -> memoryview:
        if type(index) is not int or not 0 <= index < len(self.parts):
            raise CodecError(f"no byte section {index!r}")
        if self.used[index]:
            raise CodecError(f"byte section {index} is used twice")
        self.used[index] = True
        return self.parts[index]


Encoder = Callable[[Any, _Sections], Any]
Decoder = Callable[[Any, _Sections], Any]
# Built coders, published whole: another thread never sees one whose fields are still building.
_ENCODERS: dict[Any, Encoder] = {}
_DECODERS: dict[Any, Decoder] = {}
_BUILDING = threading.RLock()
_PENDING: dict[tuple[bool, Any], Callable] = {}  # (encoder?, type) -> coder, while building
_depth = 0


def _coder(encoding: bool, tp: Any) -> Callable:
    """The encoder (or decoder) of `tp`, built from its annotations on first use."""
    table = _ENCODERS if encoding else _DECODERS
    found = table.get(tp)
    if found is not None:
        return found
    global _depth
    with _BUILDING:
        found = table.get(tp) or _PENDING.get((encoding, tp))
        if found is not None:
            return found
        _depth += 1
        try:
            built = (_build_encoder if encoding else _build_decoder)(tp)
            _PENDING[(encoding, tp)] = built
        except BaseException:
            if _depth == 1:
                _PENDING.clear()
            raise
        finally:
            _depth -= 1
        if _depth == 0:
            for (is_encoder, key), coder in _PENDING.items():
                (_ENCODERS if is_encoder else _DECODERS)[key] = coder
            _PENDING.clear()
        return built


def _fields(cls: type) -> list[tuple[str, Any]]:
    """(name, resolved annotation) of each field of a dataclass, in order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            raise TypeError(f"{cls.__name__}.{f.name} is not an __init__ field: not encodable")
        out.append((f.name, hints[f.name]))
    return out


def _union_members(tp: Any) -> tuple[Any, ...] | None:
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return typing.get_args(tp)
    return None


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _unsupported(tp: Any) -> TypeError:
    return TypeError(f"the codec cannot encode the annotation {tp!r}")


def check(tp: Any) -> None:
    """Build the encoder and decoder of `tp` (a dataclass: every annotation reachable from its
    fields); TypeError for an annotation the codec cannot carry. Once per schema."""
    _encoder(tp)
    _decoder(tp)


# ---- encoding ---------------------------------------------------------------------------------

def _matches(tp: Any) -> Callable[[Any], bool]:
    """A shallow test of whether a value is of `tp`: picks a union's member when encoding."""
    if tp is Any:
        return lambda v: True
    if tp is _NONE or tp is None:
        return lambda v: v is None
    if tp is bool:
        return lambda v: isinstance(v, bool | np.bool_)
    if tp is int:
        return lambda v: isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)
    if tp is float:
        return lambda v: isinstance(v, float | int | np.floating | np.integer) and not isinstance(
            v, bool | np.bool_)
    if tp is bytes:
        return lambda v: isinstance(v, bytes | bytearray | memoryview)
    members = _union_members(tp)
    if members is not None:
        tests = [_matches(m) for m in members]
        return lambda v: any(t(v) for t in tests)
    origin = typing.get_origin(tp) or tp
    if origin in (frozenset, set):
        return lambda v: isinstance(v, frozenset | set)
    return lambda v: isinstance(v, origin)


def _json_value(value: Any) -> Any:
    """`value` as JSON (an Any field): tuples become lists; anything else non-JSON is refused."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value)
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _json_value(v) for k, v in value.items()}
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _wrong(expected: str, value: Any) -> TypeError:
    return TypeError(f"expected {expected}, got {type(value).__name__}")


def _encode_int(v: Any, _: _Sections) -> int:
    if type(v) is int:
        return v
    if isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_):
        return int(v)
    raise _wrong("int", v)


def _encode_float(v: Any, _: _Sections) -> float:
    if type(v) is float:
        return v
    if isinstance(v, float | int | np.floating | np.integer) and not isinstance(
            v, bool | np.bool_):
        return float(v)
    raise _wrong("float", v)


def _encode_bool(v: Any, _: _Sections) -> bool:
    if isinstance(v, bool | np.bool_):
        return bool(v)
    raise _wrong("bool", v)


def _encode_str(v: Any, sections: _Sections) -> int:
    if type(v) is str:
        return sections.string(v)
    raise _wrong("str", v)


def _encode_none(v: Any, _: _Sections) -> None:
    if v is not None:
        raise _wrong("None", v)


def _encode_bytes(v: Any, sections: _Sections) -> int:
    if not isinstance(v, bytes | bytearray | memoryview):
        raise _wrong("bytes", v)
    return sections.add(v)


def _encode_array(v: Any, sections: _Sections) -> dict:
    if not isinstance(v, np.ndarray) or not _DTYPE.fullmatch(v.dtype.str):
        raise _wrong("a numeric numpy array", v)
    return {"dtype": v.dtype.str, "shape": list(v.shape),
            "section": sections.add(np.ascontiguousarray(v).tobytes())}


def _encode_any(v: Any, _: _Sections) -> Any:
    return _json_value(v)


def _encode_json_object(v: Any, _: _Sections) -> Any:
    if not isinstance(v, dict):
        raise _wrong("a dict", v)
    return _json_value(v)


def _encode_json_array(v: Any, _: _Sections) -> Any:
    if not isinstance(v, list):
        raise _wrong("a list", v)
    return _json_value(v)


_LEAF_ENCODERS: dict[Any, Encoder] = {
    int: _encode_int, float: _encode_float, bool: _encode_bool, str: _encode_str,
    _NONE: _encode_none, bytes: _encode_bytes, np.ndarray: _encode_array, Any: _encode_any,
    dict: _encode_json_object, list: _encode_json_array,  # bare: JSON values inside
}


def _encoder(tp: Any) -> Encoder:
    return _coder(True, tp)


def _build_encoder(tp: Any) -> Encoder:
    if tp in _LEAF_ENCODERS or tp is None:
        return _LEAF_ENCODERS[_NONE if tp is None else tp]
    if _is_dataclass_type(tp):
        fields: list[tuple[str, Encoder]] = []

        def encode_dataclass(v: Any, sections: _Sections) -> dict:
            if not isinstance(v, tp):
                raise _wrong(tp.__name__, v)
            values = getattr(v, "__dict__", None) or {n: getattr(v, n) for n, _ in fields}
            out = {}
            for name, encode in fields:
                try:
                    out[name] = encode(values[name], sections)
                except TypeError as e:
                    raise TypeError(f"{tp.__name__}.{name}: {e}") from None
            return out

        _PENDING[(True, tp)] = encode_dataclass  # before its fields: types may nest themselves
        fields.extend((name, _encoder(ftp)) for name, ftp in _fields(tp))
        return encode_dataclass
    members = _union_members(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if members is not None and len(members) == 2 and _NONE in members:
        present = _encoder(next(m for m in members if m is not _NONE))

        def encode_optional(v: Any, sections: _Sections) -> Any:
            return None if v is None else present(v, sections)

        encoder: Encoder = encode_optional
    elif members is not None:
        choices = [(_matches(m), _encoder(m)) for m in members]

        def encode_union(v: Any, sections: _Sections) -> Any:
            for matches, encode in choices:
                if matches(v):
                    return encode(v, sections)
            raise _wrong(f"one of {tp}", v)

        encoder = encode_union
    elif origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = _encoder(args[0])

        def encode_tuple(v: Any, sections: _Sections) -> list:
            if not isinstance(v, tuple):
                raise _wrong("a tuple", v)
            return [item(x, sections) for x in v]

        encoder = encode_tuple
    elif origin is tuple:
        items = [_encoder(a) for a in args]

        def encode_fixed(v: Any, sections: _Sections) -> list:
            if not isinstance(v, tuple) or len(v) != len(items):
                raise _wrong(f"a tuple of {len(items)}", v)
            return [encode(x, sections) for encode, x in zip(items, v, strict=True)]

        encoder = encode_fixed
    elif origin is list and args:
        item = _encoder(args[0])

        def encode_list(v: Any, sections: _Sections) -> list:
            if not isinstance(v, list):
                raise _wrong("a list", v)
            return [item(x, sections) for x in v]

        encoder = encode_list
    elif origin in (frozenset, set) and args:
        item = _encoder(args[0])

        def encode_set(v: Any, sections: _Sections) -> list:
            if not isinstance(v, frozenset | set):
                raise _wrong("a set", v)
            # In a fixed order, so that equal sets give equal bytes.
            return sorted((item(x, sections) for x in v), key=json.dumps)

        encoder = encode_set
    elif origin is dict and args:
        key, value = _encoder(args[0]), _encoder(args[1])

        def encode_dict(v: Any, sections: _Sections) -> list:
            if not isinstance(v, dict):
                raise _wrong("a dict", v)
            return [[key(k, sections), value(x, sections)] for k, x in v.items()]

        encoder = encode_dict
    else:
        raise _unsupported(tp)
    return encoder


def dumps(tp: type[T], value: T) -> bytes:
    """`value`, of type `tp`, in the codec's format: the JSON document's length, the document
    ({"sections": [their sizes], "strings": [...], "value": ...}), then the byte sections."""
    sections = _Sections()
    tree = _encoder(tp)(value, sections)
    document = json.dumps({"sections": [len(s) for s in sections.parts],
                           "strings": sections.strings, "value": tree},
                          separators=(",", ":"), allow_nan=True).encode()
    return b"".join([len(document).to_bytes(_LENGTH, "little"), document, *sections.parts])


# ---- decoding ---------------------------------------------------------------------------------

def _got(expected: str, node: Any) -> CodecError:
    return CodecError(f"expected {expected}, got {type(node).__name__}")


def _decode_int(node: Any, _: _Sections) -> int:
    if type(node) is int:
        return node
    raise _got("an integer", node)


def _decode_float(node: Any, _: _Sections) -> float:
    if type(node) is float:
        return node
    if type(node) is int:
        return float(node)
    raise _got("a number", node)


def _decode_bool(node: Any, _: _Sections) -> bool:
    if type(node) is bool:
        return node
    raise _got("a boolean", node)


def _decode_str(node: Any, sections: _Sections) -> str:
    if type(node) is int and 0 <= node < len(sections.strings):
        return sections.strings[node]
    raise _got("the index of a string", node)


def _decode_none(node: Any, _: _Sections) -> None:
    if node is not None:
        raise _got("null", node)


def _decode_bytes(node: Any, sections: _Sections) -> bytes:
    return bytes(sections.take(node))


def _decode_array(node: Any, sections: _Sections) -> np.ndarray:
    if type(node) is not dict or node.keys() != {"dtype", "shape", "section"}:
        raise _got("an array object {dtype, shape, section}", node)
    dtype, shape = node["dtype"], node["shape"]
    if type(dtype) is not str or not _DTYPE.fullmatch(dtype):
        raise CodecError(f"{dtype!r} is not a numeric dtype")
    if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape):
        raise CodecError(f"{shape!r} is not an array shape")
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError):
        raise CodecError(f"{dtype!r} is not a numeric dtype") from None
    data = sections.take(node["section"])
    if math.prod(shape) * dt.itemsize != len(data):
        raise CodecError(f"{len(data)} bytes do not hold {dtype}{shape}")
    try:
        return np.frombuffer(data, dt).reshape(shape).copy()
    except (ValueError, OverflowError):  # e.g. an empty array of 2**70 rows
        raise CodecError(f"numpy cannot hold an array of shape {shape}") from None


def _decode_any(node: Any, _: _Sections) -> Any:
    return node  # json.loads made it: a JSON value by construction


def _decode_json_object(node: Any, _: _Sections) -> Any:
    if type(node) is not dict:
        raise _got("an object", node)
    return node


def _decode_json_array(node: Any, _: _Sections) -> Any:
    if type(node) is not list:
        raise _got("a list", node)
    return node


_LEAF_DECODERS: dict[Any, Decoder] = {
    int: _decode_int, float: _decode_float, bool: _decode_bool, str: _decode_str,
    _NONE: _decode_none, bytes: _decode_bytes, np.ndarray: _decode_array, Any: _decode_any,
    dict: _decode_json_object, list: _decode_json_array,
}


def _decoder(tp: Any) -> Decoder:
    return _coder(False, tp)


def _items(decode: Decoder, node: list, sections: _Sections) -> list:
    out = []
    for i, x in enumerate(node):
        try:
            out.append(decode(x, sections))
        except CodecError as e:
            raise e.within(f"[{i}]") from None
    return out


def _build_decoder(tp: Any) -> Decoder:
    if tp in _LEAF_DECODERS or tp is None:
        return _LEAF_DECODERS[_NONE if tp is None else tp]
    if _is_dataclass_type(tp):
        fields: list[tuple[str, Decoder]] = []
        names: set[str] = set()

        def decode_dataclass(node: Any, sections: _Sections) -> Any:
            if type(node) is not dict:
                raise _got(f"an object ({tp.__name__})", node)
            if node.keys() != names:
                raise CodecError(f"{tp.__name__} fields do not match (missing "
                                 f"{sorted(names - node.keys())}, unknown "
                                 f"{sorted(node.keys() - names)})")
            values = {}
            for name, decode in fields:
                try:
                    values[name] = decode(node[name], sections)
                except CodecError as e:
                    raise e.within(name) from None
            try:
                return tp(**values)
            except (TypeError, ValueError) as e:  # a __post_init__ refusing the values
                raise CodecError(f"{tp.__name__} refuses these values ({e})") from None

        _PENDING[(False, tp)] = decode_dataclass  # before its fields: types may nest themselves
        fields.extend((name, _decoder(ftp)) for name, ftp in _fields(tp))
        names.update(name for name, _ in fields)
        return decode_dataclass
    members = _union_members(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if members is not None and len(members) == 2 and _NONE in members:
        present = _decoder(next(m for m in members if m is not _NONE))

        def decode_optional(node: Any, sections: _Sections) -> Any:
            return None if node is None else present(node, sections)

        decoder: Decoder = decode_optional
    elif members is not None:
        choices = [_decoder(m) for m in members]

        def decode_union(node: Any, sections: _Sections) -> Any:
            errors = []
            for decode in choices:
                used = list(sections.used)
                try:
                    return decode(node, sections)
                except CodecError as e:
                    sections.used = used
                    errors.append(str(e))
            raise CodecError(f"none of {tp} ({'; '.join(errors)})")

        decoder = decode_union
    elif origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = _decoder(args[0])

        def decode_tuple(node: Any, sections: _Sections) -> tuple:
            if type(node) is not list:
                raise _got("a list", node)
            return tuple(_items(item, node, sections))

        decoder = decode_tuple
    elif origin is tuple:
        items = [_decoder(a) for a in args]

        def decode_fixed(node: Any, sections: _Sections) -> tuple:
            if type(node) is not list:
                raise _got("a list", node)
            if len(node) != len(items):
                raise CodecError(f"expected {len(items)} items, got {len(node)}")
            return tuple(decode(x, sections) for decode, x in zip(items, node, strict=True))

        decoder = decode_fixed
    elif origin is list and args:
        item = _decoder(args[0])

        def decode_list(node: Any, sections: _Sections) -> list:
            if type(node) is not list:
                raise _got("a list", node)
            return _items(item, node, sections)

        decoder = decode_list
    elif origin in (frozenset, set) and args:
        item = _decoder(args[0])

        def decode_set(node: Any, sections: _Sections) -> Any:
            if type(node) is not list:
                raise _got("a list", node)
            values = _items(item, node, sections)
            try:
                result = origin(values)
            except TypeError:
                raise CodecError("unhashable set items") from None
            if len(result) != len(values):
                raise CodecError("repeated set items")
            return result

        decoder = decode_set
    elif origin is dict and args:
        key, value = _decoder(args[0]), _decoder(args[1])

        def decode_dict(node: Any, sections: _Sections) -> dict:
            if type(node) is not list:
                raise _got("a list of [key, value] pairs", node)
            result = {}
            for i, pair in enumerate(node):
                if type(pair) is not list or len(pair) != 2:
                    raise CodecError("expected a [key, value] pair", (f"[{i}]",))
                try:
                    k = key(pair[0], sections)
                    if k in result:
                        raise CodecError(f"repeated key {k!r}")
                    result[k] = value(pair[1], sections)
                except TypeError:
                    raise CodecError("unhashable key", (f"[{i}]",)) from None
                except CodecError as e:
                    raise e.within(f"[{i}]") from None
            return result

        decoder = decode_dict
    else:
        raise _unsupported(tp)
    return decoder


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
    if type(document) is not dict or document.keys() != {"sections", "strings", "value"}:
        raise CodecError("the document is not {sections, strings, value}")
    sizes, strings = document["sections"], document["strings"]
    if type(sizes) is not list or not all(type(n) is int and n >= 0 for n in sizes):
        raise CodecError("the section sizes are not a list of byte counts")
    if type(strings) is not list or not all(type(t) is str for t in strings):
        raise CodecError("the string table is not a list of strings")
    parts, offset = [], _LENGTH + size
    for n in sizes:
        parts.append(view[offset:offset + n])
        offset += n
    if offset != len(view):
        raise CodecError(f"the sections end at byte {offset}, the data at {len(view)}")
    sections = _Sections(parts, strings)
    try:
        value = _decoder(tp)(document["value"], sections)
    except CodecError as e:
        raise e.within(tp.__name__) from None
    except RecursionError:
        raise CodecError("the document nests too deeply") from None
    if not all(sections.used):
        raise CodecError("a byte section is not used by the value")
    return value
