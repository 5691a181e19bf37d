"""Serialized IPU executables: what jax's compilation cache and serialize_executable store.

One blob holds the XLA:CPU executable, the program jax sent and the model's report, so loading
it neither compiles XLA:CPU again nor re-runs the model. It is data only (runtime/codec.py: JSON
and byte sections, decoded against Blob's annotations), checked before anything in it is used."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jax_ipu._version import __version__
from jax_ipu.errors import IpuError
from jax_ipu.model.ir import Program, TensorType
from jax_ipu.model.report import ProgramReport
from jax_ipu.runtime import codec

MAGIC = b"JAX-IPU EXECUTABLE\n"
# 1 was a pickle, which could run code when read: never read again. 2 is the codec's format.
FORMAT = 2
_DIGEST = hashlib.sha256().digest_size
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
    """MAGIC, FORMAT, the build id (its length first), the SHA-256 of the build id and the body,
    then the body: `blob` in the codec's format."""
    build = blob.build.encode()
    body = codec.dumps(Blob, blob)
    return (MAGIC + FORMAT.to_bytes(4, "little") + len(build).to_bytes(_BUILD_LENGTH, "little")
            + build + hashlib.sha256(build + body).digest() + body)


def loads(data: bytes, build: str) -> Blob:
    """The blob in `data`; StaleExecutableError when it is not a whole blob of this build.

    Nothing in `data` is run or imported: the header is checked, then the body is decoded as a
    Blob by its annotations, and refused unless it is exactly one."""
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
    made_by = data[start:start + size].decode("utf-8", "replace")
    if made_by != build:
        raise StaleExecutableError(
            f"a serialized executable of jax-ipu {made_by}, not of this jax-ipu ({build}): "
            "compile the program again")
    digest, body = data[start + size:start + size + _DIGEST], data[start + size + _DIGEST:]
    if hashlib.sha256(data[start:start + size] + body).digest() != digest:
        raise StaleExecutableError("a corrupt serialized jax-ipu executable (checksum mismatch)")
    try:
        blob = codec.loads(Blob, body)
    except codec.CodecError as e:
        raise StaleExecutableError(f"a malformed serialized jax-ipu executable: {e}") from None
    if blob.build != build:
        raise StaleExecutableError(
            f"a serialized executable whose header says build {made_by} but whose body says "
            f"{blob.build}: compile the program again")
    return blob
