"""A session's shared directory: host buffers a client on the server's own host writes as files
(jaxlib's large-transfer optimization, HostBufferReadFromDisk), read and removed by the server.

Only a private directory of the server's own user is accepted: a client that could plant files
there could already signal or trace the server, so the files add no power over it."""

from __future__ import annotations

import mmap
import os
import re
import stat
import threading

from jax_ipu.remote.hostbuffers import HostBufferError

# The name jaxlib's client gives a host buffer's file in the directory (transfer_util.cc).
FILE_PREFIX = "lt_"
_FILE_NAME = re.compile(re.escape(FILE_PREFIX) + r"[0-9]+")
REFUSED = ("the jax-ipu server cannot use the shared directory {path!r}: {why}. Run client and "
           "server on one host as one user, or unset JAX_IPU_REMOTE_SHARED_DIR on the client.")


class SharedDirError(HostBufferError):
    """A shared directory the server refuses at a session's start."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__("FAILED_PRECONDITION", REFUSED.format(path=path, why=why))


class SharedDir:
    """An open directory (held by descriptor, so a path swapped later changes nothing) whose
    files `lt_<handle>` hold host buffers, each read once."""

    def __init__(self, path: object) -> None:
        if not isinstance(path, str) or not os.path.isabs(path):
            raise SharedDirError(str(path), "it is not an absolute path")
        self.path = path
        self.reads = 0  # host buffers read
        self._lock = threading.Lock()  # reads come on several transport threads at once
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            raise SharedDirError(path, "no such directory on the server's host (is the client "
                                 "on another host, or behind an SSH tunnel?)") from None
        except OSError as exc:
            raise SharedDirError(path, f"it does not open as a directory ({exc.strerror})"
                                 ) from None
        info = os.fstat(self._fd)
        why = None
        if info.st_uid != os.geteuid():
            why = f"it belongs to uid {info.st_uid}, the server runs as uid {os.geteuid()}"
        elif info.st_mode & 0o077:
            why = (f"other users may use it (mode {stat.S_IMODE(info.st_mode):o}; a client's "
                   "own directory is 700)")
        if why is not None:
            os.close(self._fd)
            raise SharedDirError(path, why)

    def read(self, handle: int, size: int) -> memoryview:
        """Host buffer `handle` of `size` bytes, mapped from its file; the file is removed."""
        name = f"{FILE_PREFIX}{handle}"
        # The directory's descriptor is used under the lock: once the session closes it, its
        # number may name another file.
        with self._lock:
            if self._fd < 0:
                raise HostBufferError("CANCELLED", "the session has ended")
            try:  # O_NONBLOCK: a FIFO planted there would block the open, not fail it
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             dir_fd=self._fd)
            except FileNotFoundError:
                raise HostBufferError("NOT_FOUND", f"no file {name} in the shared directory "
                                      f"{self.path}") from None
            except OSError as exc:
                self._remove(name)
                raise HostBufferError("INVALID_ARGUMENT", f"{name} in the shared directory "
                                      f"does not open as a file ({exc.strerror})") from None
            self._remove(name)
        try:
            info = os.fstat(fd)  # unlinked: a file with another link has one left
            if not stat.S_ISREG(info.st_mode) or info.st_nlink != 0 \
                    or info.st_uid != os.geteuid():
                raise HostBufferError("INVALID_ARGUMENT", f"{name} in the shared directory is "
                                      "not a file of the server's user with one link")
            if info.st_size != size:
                raise HostBufferError("INVALID_ARGUMENT", f"{name} holds {info.st_size} bytes, "
                                      f"its request says {size}")
            # Mapped, not copied: device_put copies it once, into the device's buffer.
            data = mmap.mmap(fd, size, prot=mmap.PROT_READ) if size else bytearray()
        finally:
            os.close(fd)
        with self._lock:
            self.reads += 1
        return memoryview(data)

    def _remove(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self._fd)
        except FileNotFoundError:
            pass

    def close(self) -> int:
        """Remove the files no request read (a client that died mid-transfer); how many."""
        with self._lock:
            if self._fd < 0:
                return 0
            try:
                leftovers = [n for n in os.listdir(self._fd) if _FILE_NAME.fullmatch(n)]
                for name in leftovers:
                    self._remove(name)
            finally:
                os.close(self._fd)
                self._fd = -1
        return len(leftovers)
