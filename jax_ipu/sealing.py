"""A per-user secret key and HMAC-SHA256 seals over what jax-ipu caches on disk.

A cached executable or vertex library holds machine code that runs when loaded: it is loaded only
when its seal, made with a key only this user (or a team that shares a key file) can read, holds."""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
import threading
from pathlib import Path

from jax_ipu import config
from jax_ipu.errors import IpuError

KEY_BYTES = 32
SEAL_BYTES = hashlib.sha256().digest_size
_lock = threading.Lock()
_keys: dict[Path, bytes] = {}


class UntrustedDirectoryError(IpuError, PermissionError):
    """A cache directory another user could write into: nothing in it is trusted."""


class KeyFileError(IpuError, PermissionError):
    """The key file cannot be made, read or trusted."""


def user_cache_dir() -> Path:
    """$XDG_CACHE_HOME, else ~/.cache."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def key_path() -> Path:
    """jax_ipu_key_file when set, else <user cache>/jax_ipu/seal.key."""
    chosen = config.value("jax_ipu_key_file").strip()
    if chosen:
        return Path(chosen).expanduser()
    return user_cache_dir() / "jax_ipu" / "seal.key"


def check_directory(path: Path, what: str) -> None:
    """Refuse `path` (which must exist) unless it is a directory this user owns that no one else
    can write: otherwise another user could plant or swap files in it."""
    try:
        st = path.lstat()
    except OSError as e:
        raise UntrustedDirectoryError(f"cannot use {what} {str(path)!r}: {e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UntrustedDirectoryError(
            f"{what} {str(path)!r} is not a directory (a symbolic link or a file): choose a "
            "directory of your own")
    if st.st_uid != os.getuid():
        raise UntrustedDirectoryError(
            f"{what} {str(path)!r} belongs to user id {st.st_uid}, not to you ({os.getuid()}): "
            "nothing in it is trusted. Choose a directory of your own")
    if st.st_mode & 0o022:
        raise UntrustedDirectoryError(
            f"{what} {str(path)!r} is writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
            f", so anything in it may have been planted: run `chmod go-w {path}` or choose "
            "another directory")


def _make_key(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, os.urandom(KEY_BYTES))
    finally:
        os.close(fd)
    try:  # link, not rename: a key another process made first is kept, never replaced
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)


def key() -> bytes:
    """The seal key: read from key_path(), made there (mode 0600) when it does not exist.

    Refused when it is not this user's or others can write it; the default key also when
    others can read it (a shared key file may be group-readable on purpose)."""
    path = key_path()
    with _lock:
        if path in _keys:
            return _keys[path]
        shared = bool(config.value("jax_ipu_key_file").strip())
        try:
            if not shared and not path.exists():
                _make_key(path)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as e:
            raise KeyFileError(
                f"cannot {'read' if shared else 'make or read'} jax-ipu's cache key "
                f"{str(path)!r}: {e.strerror}. It seals cached programs and vertex libraries; "
                "set JAX_IPU_KEY_FILE to a key file you can read, or fix the path") from None
        try:
            st = os.fstat(fd)
            data = os.read(fd, 4 * KEY_BYTES)
        finally:
            os.close(fd)
        loose = 0o022 if shared else 0o077
        if st.st_uid != os.getuid() and not shared or st.st_mode & loose or \
                len(data) < KEY_BYTES:
            who = "no other user can write" if shared else "only you can read or write (mode 600)"
            raise KeyFileError(
                f"jax-ipu's cache key {str(path)!r} is not trusted: it must be a file of at "
                f"least {KEY_BYTES} bytes that {who} (it has mode {stat.S_IMODE(st.st_mode):o}, "
                f"owner id {st.st_uid}). Delete it to have a new one made, or run "
                f"`chmod {'go-w' if shared else '600'} {path}`")
        _keys[path] = data
        return data


def seal(data: bytes) -> bytes:
    """The HMAC-SHA256 of `data` under key()."""
    return hmac.new(key(), data, hashlib.sha256).digest()


def holds(data: bytes, mac: bytes) -> bool:
    """Whether `mac` is `data`'s seal (compared in constant time)."""
    return hmac.compare_digest(seal(data), mac)


def named_seal(data: bytes, name: str) -> str:
    """The hex seal of a built file's bytes under the name it was built as (the name binds the
    file to its build: a file moved to another build's place does not hold)."""
    return seal(name.encode() + b"\0" + data).hex()


def named_seal_holds(path: Path, seal_path: Path, name: str) -> bool:
    """Whether the file at `path` is the one this user's jax-ipu built as `name` (the hex seal
    in `seal_path` holds)."""
    try:
        data, mac = path.read_bytes(), bytes.fromhex(seal_path.read_text().strip())
    except (OSError, ValueError):
        return False
    return holds(name.encode() + b"\0" + data, mac)
