"""How far a remote client's transfers may run ahead of the server: jax dispatches a put without
waiting for it, and jaxlib's proxy client sends each from a thread of its own until it lands.

Without a bound, a loop that never waits (a training loop that reads its losses at the end)
ran ahead of the server without limit: 20,000 steps with a 400 KB put each had made 13,600
threads and 10.8 GB in the client, and 1.5 GB in the server after 6,000, until the kernel
killed the client; a local ipu ran it in 39 threads and 230 MB. A device's own queue is
bounded the same way (PJRT clients limit the computations in flight)."""

from __future__ import annotations

import threading
from typing import Any

# Every WAIT_PUTS-th put, or the one that makes WAIT_BYTES bytes since the last wait, returns
# only once it has landed on the server. The server answers a session's requests in order, so
# then every put before it has landed too: at most WAIT_PUTS puts, or about WAIT_BYTES bytes,
# are on their way, and no array is held beyond the put that made it. The wait costs one
# request (CheckValueReady); a loop with 400 KB puts waits once every 16 puts, for the last
# one's bytes, while the server still has the computations of the others to run.
WAIT_PUTS = 16
WAIT_BYTES = 64 << 20


class PutWindow:
    """Counts one client's puts since the last wait, and makes every few of them wait."""

    def __init__(self, puts: int = WAIT_PUTS, nbytes: int = WAIT_BYTES) -> None:
        self.puts, self.nbytes = puts, nbytes
        self._lock = threading.Lock()
        self._puts = self._bytes = 0  # since the last wait

    def sent(self, array: Any, nbytes: int) -> None:
        """Account for a put just dispatched (a jax Array of `nbytes`); when it is due, return
        only once it has landed (or failed: its user sees why when using it)."""
        with self._lock:
            self._puts += 1
            self._bytes += nbytes
            due = self._puts >= self.puts or self._bytes >= self.nbytes
            if due:
                self._puts = self._bytes = 0
        if due:
            try:
                array.block_until_ready()
            except RuntimeError:  # failed, or deleted by another thread: nothing to wait for
                pass
