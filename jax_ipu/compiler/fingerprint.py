"""The fingerprint of a compiled program: the sha256 of its StableHLO and of its compile options
in a canonical form, the same in every process (jax's Executable_Fingerprint, report folders)."""

from __future__ import annotations

import functools
import hashlib
from collections import Counter

from jax_ipu import protowire

# CompileOptionsProto's nested messages that hold protobuf maps: the options themselves (3:
# executable_build_options) and XLA's DebugOptions (3.3). A map's entries are serialized in an
# order that differs from process to process.
_HOLDS_MAPS = {(): {3}, (3,): {3}, (3, 3): set()}


def fingerprint(code: bytes, options: bytes) -> str:
    """The sha256 of a program and its compile options in a canonical form: the same program
    compiled in another process has the same fingerprint (and report folder)."""
    return hashlib.sha256(code + b"\0" + _canonical_options(options)).hexdigest()


@functools.lru_cache(maxsize=64)
def _canonical_options(options: bytes) -> bytes:
    """The canonical form of serialized compile options. A process sends the same options bytes
    for most of its programs (every eager op's): each distinct one is read once."""
    try:
        return repr(_canonical(options, ())).encode()
    except protowire.WireError:
        return options


def _canonical(data: bytes | memoryview, path: tuple[int, ...]) -> tuple:
    """(number, value) of each field, a nested message as its own canonical form and the entries
    of each map (a repeated field of {1: key, 2: value} messages) sorted."""
    items: list[tuple[int, object]] = []
    for number, value in protowire.fields(data):
        if isinstance(value, memoryview):
            nested = path + (number,)
            value = _canonical(value, nested) if number in _HOLDS_MAPS[path] else bytes(value)
        items.append((number, value))
    counts = Counter(n for n, _ in items)
    for number in (n for n, c in counts.items() if c > 1):
        entries = [v for n, v in items if n == number]
        if all(isinstance(v, bytes) and _is_map_entry(v) for v in entries):
            ordered = iter(sorted(entries))
            items = [(n, next(ordered) if n == number else v) for n, v in items]
    return tuple(items)


def _is_map_entry(data: bytes) -> bool:
    try:
        return {n for n, _ in protowire.fields(data)} <= {1, 2}
    except protowire.WireError:
        return False
