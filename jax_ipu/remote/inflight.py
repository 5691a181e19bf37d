"""How many transfers a remote client may have on their way: jax starts puts and read-backs
without waiting, and jaxlib's proxy client runs each from a thread of its own until it is done.

Without a bound, a loop that never waits (a training loop that reads its losses at the end)
ran ahead of the server without limit: 20,000 steps with a 400 KB put each had made 13,600
threads and 10.8 GB in the client, and 1.5 GB in the server after 6,000, until the kernel
killed the client; a local ipu ran it in 39 threads and 230 MB. A device's own queue is
bounded the same way (PJRT clients limit the computations in flight). jax.device_get of a tree
starts a read-back of every leaf first: 5,000 leaves left 4,280 threads (kept for the process's
life) and 243 MB more in the client."""

from __future__ import annotations

import threading
import weakref
from collections import deque
from typing import Any

from jax_ipu import _internals

# Every MARK_PUTS-th put, or the one that makes MARK_BYTES bytes since the last mark, is a mark.
# At a mark the client waits until the mark before it has landed, if the program still holds
# that array (a tree of parameters, say): the puts since stay on their way, so the transfers
# keep flowing. If the program has let it go (a training loop's batch), it cannot be asked;
# then every second mark waits for itself. The server answers a session's requests in order,
# so a landed put means every put before it has landed too: at most 2 * MARK_PUTS puts, or
# about 2 * MARK_BYTES bytes, are on their way. A wait costs one request (CheckValueReady); no
# array is held longer than the program holds it.
MARK_PUTS = 32
MARK_BYTES = 32 << 20


class PutWindow:
    """Counts one client's puts since the last mark, and makes a mark wait when it is due."""

    def __init__(self, puts: int = MARK_PUTS, nbytes: int = MARK_BYTES) -> None:
        self.puts, self.nbytes = puts, nbytes
        self._lock = threading.Lock()
        self._puts = self._bytes = 0  # since the last mark
        self._mark: weakref.ref[Any] | None = None  # the last mark, while the program holds it
        self._unsure = False  # whether the last mark waited for nothing

    def sent(self, array: Any, nbytes: int) -> None:
        """Account for a put just dispatched (a jax Array of `nbytes`); at a mark, return only
        once the mark before it (or, as above, this one) has landed."""
        with self._lock:
            self._puts += 1
            self._bytes += nbytes
            if self._puts < self.puts and self._bytes < self.nbytes:
                return
            self._puts = self._bytes = 0
            before = self._mark() if self._mark is not None else None
            wait_for = before if before is not None else array if self._unsure else None
            self._unsure = wait_for is None
            self._mark = weakref.ref(array)
        if wait_for is not None:
            try:
                wait_for.block_until_ready()
            except RuntimeError:  # failed, or deleted since: nothing to wait for
                pass


# Read-backs started (copy_to_host_async) and not yet read: with more, the oldest is read first.
READS_ON_THE_WAY = 64


class ReadWindow:
    """The read-backs one client has started; the program's arrays are referenced weakly."""

    def __init__(self, limit: int = READS_ON_THE_WAY) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._started: deque[weakref.ref[Any]] = deque()

    def started(self, array: Any) -> None:
        """Account for a read-back just started; with too many on their way, finish the oldest
        (its bytes are kept on its Array, as np.asarray keeps them)."""
        with self._lock:
            self._started.append(weakref.ref(array))
            oldest = self._started.popleft()() if len(self._started) > self.limit else None
        if oldest is not None:
            try:
                _internals.read_back(oldest)
            except RuntimeError:  # failed, or deleted since: nothing to read
                pass
