"""Serialized IPU executables: what jax's compilation cache and serialize_executable store.

One blob holds the XLA:CPU executable, the program jax sent and the model's report, so loading
it neither compiles XLA:CPU again nor re-runs the model. It is data only (runtime/codec.py: JSON
and byte sections, decoded against Blob's annotations), sealed with the user's key (sealing.py)
and refused before anything in it is decoded unless its seal holds."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import string
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jax_ipu import sealing
from jax_ipu._version import __version__
from jax_ipu.errors import IpuError
from jax_ipu.model.ir import Program, TensorType
from jax_ipu.model.report import ProgramReport
from jax_ipu.runtime import codec

MAGIC = b"JAX-IPU EXECUTABLE\n"
# 1 was a pickle, which could run code when read: never read again. 2 was the codec's format
# under an unkeyed SHA-256, which anyone could recompute; 3 is sealed with the user's key.
FORMAT = 3
_DIGEST = sealing.SEAL_BYTES
_PRINTABLE = frozenset(string.ascii_letters + string.digits + string.punctuation + " ")
_BUILD_LENGTH = 2  # bytes of the build id's length


class StaleExecutableError(IpuError, ValueError):
    """A serialized executable that this jax-ipu cannot load (corrupt, or made by another)."""


@dataclass
class Blob:
    """What a serialized executable holds."""

    build: str  # the jax-ipu build that wrote it (build_id())
    code: bytes  # the StableHLO jax sent
    options: bytes  # the compile options jax sent
    cpu_executable: bytes  # XLA:CPU's own serialization
    program: Program
    report: ProgramReport
    assignment: np.ndarray
    outputs: tuple[TensorType, ...]


codec.check(Blob)  # every field type the codec must carry, checked when jax-ipu loads


def _sources() -> list[Path]:
    here = Path(__file__).resolve()
    package = here.parent.parent
    compiles = [p for folder in ("model", "compiler") for p in (package / folder).glob("*.py")]
    return sorted([*compiles, here, here.with_name("codec.py")])


def build_id() -> str:
    """jax-ipu's version and a digest of the code that decides what a compile produces (the
    compiler and the model) and of this format: a blob from another build is never loaded."""
    digest = hashlib.sha256()
    for path in _sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return f"{__version__}+{digest.hexdigest()[:16]}"


def dumps(blob: Blob) -> bytes:
    """MAGIC, FORMAT, the build id (its length first), the seal (HMAC-SHA256 under the user's
    key) of everything before it and of the body, then the body: `blob` in the codec's format."""
    build = blob.build.encode()
    body = codec.dumps(Blob, blob)
    head = MAGIC + FORMAT.to_bytes(4, "little") + len(build).to_bytes(_BUILD_LENGTH, "little") \
        + build
    return head + sealing.seal(head + body) + body


def _shown(raw: bytes) -> str:
    """A build id read from untrusted bytes, safe to print (no control or NUL characters)."""
    text = raw.decode("utf-8", "replace")
    return text if text and set(text) <= _PRINTABLE else repr(raw[:64])


def loads(data: bytes, build: str) -> Blob:
    """The blob in `data`; StaleExecutableError when it is not a whole blob of this build.

    Nothing in `data` is run or imported: the header is checked, then its seal (a blob sealed
    with another key, or changed since, is refused whatever it holds), then the body is decoded
    as a Blob by its annotations, and refused unless it is exactly one."""
    head = len(MAGIC) + 4
    if not data.startswith(MAGIC) or len(data) < head + _BUILD_LENGTH:
        raise StaleExecutableError("not a serialized jax-ipu executable")
    made_in = int.from_bytes(data[len(MAGIC):head], "little")
    if made_in != FORMAT:
        raise StaleExecutableError(
            f"a serialized jax-ipu executable of format {made_in}, not {FORMAT} (written by "
            "another jax-ipu): compile the program again")
    size = int.from_bytes(data[head:head + _BUILD_LENGTH], "little")
    start = head + _BUILD_LENGTH
    made_by = data[start:start + size]
    if made_by != build.encode():
        raise StaleExecutableError(
            f"a serialized executable of jax-ipu {_shown(made_by)}, not of this jax-ipu "
            f"({build}): it was serialized by another jax-ipu. Compile the program again")
    mac, body = data[start + size:start + size + _DIGEST], data[start + size + _DIGEST:]
    if len(mac) != _DIGEST or not sealing.holds(data[:start + size] + body, mac):
        raise StaleExecutableError(
            "a serialized jax-ipu executable whose seal does not hold: it was changed since it "
            "was written, or written with another key (another user's, or before "
            f"{sealing.key_path()} was made again). Nothing in it was run: compile the "
            "program again, or share one key file (JAX_IPU_KEY_FILE) between the processes")
    try:
        blob = codec.loads(Blob, body)
    except codec.CodecError as e:
        raise StaleExecutableError(f"a malformed serialized jax-ipu executable: {e}") from None
    if blob.build != build:
        raise StaleExecutableError(
            f"a serialized executable whose header says build {_shown(made_by)} but whose body "
            f"says {blob.build}: compile the program again")
    _check_numbers(blob.report)
    return blob


_LIMIT = 2 ** 63  # the model's counts are int64 where they are used (clocks, cost analysis)


def _check_numbers(report: ProgramReport) -> None:
    """Refuse a report number the runtime cannot hold: a count past int64, or a cycle count that
    is not a finite number (each becomes an int64 on every call)."""
    cycles = dataclasses.asdict(report.cycles)
    for name, value in cycles.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise StaleExecutableError(
                f"a malformed serialized jax-ipu executable: its report's cycles.{name} is "
                f"{value}. Compile the program again")
    pending: list = [report.to_dict()]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending += item.values()
        elif isinstance(item, list | tuple):
            pending += item
        elif isinstance(item, int | float) and not isinstance(item, bool) and \
                math.isfinite(item) and abs(item) >= _LIMIT:
            raise StaleExecutableError(
                f"a malformed serialized jax-ipu executable: its report holds {item:g}, past "
                "what a 64-bit count holds. Compile the program again")
