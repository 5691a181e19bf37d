"""One session's host buffers: the array bytes that travel beside the session stream.

The client stores a buffer (HostBufferStore) and names it in a request, which may arrive first:
a lookup waits for its buffer, until the session ends."""

from __future__ import annotations

import threading

from jax_ipu.errors import IpuError

# Bytes one session may hold in host buffers at once: far more than any IPU holds, far less than
# a server's memory; past it a store is refused.
SESSION_LIMIT = 16 << 30
CHUNK = 1 << 20  # bytes per HostBufferLookup message, as jaxlib's own server sends them


class HostBufferError(IpuError):
    """A host buffer that cannot be stored or found; `code` is the status code to answer."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class HostBuffers:
    """Handle -> bytes, with lookups that wait for a buffer still on its way."""

    def __init__(self, limit: int = SESSION_LIMIT) -> None:
        self._buffers: dict[int, bytes | memoryview] = {}
        self._held = 0
        self.large = 0  # buffers of more than CHUNK bytes held
        self._limit = limit
        self._closed: str | None = None
        self._cond = threading.Condition()

    def reserve(self, nbytes: int) -> None:
        """Refuse a store that would take the session past its limit (before reading it)."""
        with self._cond:
            if self._held + nbytes > self._limit:
                raise HostBufferError(
                    "RESOURCE_EXHAUSTED",
                    f"a host buffer of {nbytes} bytes would take this session past its "
                    f"{self._limit} bytes of host buffers ({self._held} held): read back or "
                    "free arrays first")

    def store(self, handle: int, data: bytes | memoryview) -> None:
        with self._cond:
            if self._closed is not None:
                raise HostBufferError("CANCELLED", self._closed)
            if handle in self._buffers:
                raise HostBufferError("ALREADY_EXISTS", f"host buffer {handle} exists already")
            if self._held + len(data) > self._limit:
                raise HostBufferError(
                    "RESOURCE_EXHAUSTED",
                    f"a host buffer of {len(data)} bytes would take this session past its "
                    f"{self._limit} bytes of host buffers ({self._held} held)")
            self._buffers[handle] = data
            self._held += len(data)
            self.large += len(data) > CHUNK
            self._cond.notify_all()

    def peek(self, handle: int) -> bytes | memoryview | None:
        """The buffer if it is here (None otherwise), without waiting."""
        with self._cond:
            return self._buffers.get(handle)

    def lookup(self, handle: int, timeout: float | None = None) -> bytes | memoryview:
        """The buffer, once stored; waits while the session lasts (or `timeout` seconds)."""
        with self._cond:
            if not self._cond.wait_for(
                    lambda: handle in self._buffers or self._closed is not None, timeout):
                raise HostBufferError("NOT_FOUND", f"host buffer {handle} never arrived")
            if handle not in self._buffers:
                raise HostBufferError("CANCELLED", self._closed or "session closed")
            return self._buffers[handle]

    def take(self, handle: int, timeout: float | None = None) -> bytes | memoryview:
        """lookup() and delete() in one: the buffer is used once."""
        data = self.lookup(handle, timeout)
        self.delete(handle)
        return data

    def delete(self, handle: int) -> None:
        with self._cond:
            data = self._buffers.pop(handle, None)
            if data is None:
                raise HostBufferError("NOT_FOUND", f"no host buffer {handle} in this session")
            self._held -= len(data)
            self.large -= len(data) > CHUNK

    def close(self, reason: str) -> None:
        """Drop every buffer; waiting lookups fail with `reason`."""
        with self._cond:
            self._closed = reason
            self._buffers.clear()
            self._held = 0
            self.large = 0
            self._cond.notify_all()

    @property
    def held(self) -> int:
        with self._cond:
            return self._held
