"""The waiter thread: resolves the PJRT events of executions XLA:CPU runs in the background.

Execute hands over each execution that was not finished when it returned; the thread waits for
XLA:CPU (without the GIL) and marks the event ready, with the execution's error if it failed."""

from __future__ import annotations

import atexit
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from jax_ipu.pjrt import _table

logger = logging.getLogger(__name__)

_STOP = object()


class Waiter:
    """One daemon thread resolving events in the order executions were dispatched."""

    def __init__(self, status_of: Callable[[BaseException], tuple[int, str]]) -> None:
        self._status_of = status_of
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="jax_ipu-waiter", daemon=True)
        self._thread.start()
        # Before the interpreter tears threads down: a daemon thread killed inside jaxlib's C++
        # would terminate the process.
        atexit.register(self.stop)

    def wait_for(self, event: Any, waitables: tuple[Any, ...]) -> None:
        """Resolve `event` once the execution that made `waitables` (its XLA:CPU token, or one
        device's output arrays) has finished."""
        self._queue.put((event, waitables))

    def stop(self) -> None:
        """Finish the executions under way, then end the thread."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            event, waitables = item
            code, message = 0, ""
            for waitable in waitables:
                try:
                    waitable.block_until_ready()  # jaxlib waits without the GIL
                    break
                except BaseException as exc:  # noqa: BLE001 - the execution's error goes to readers
                    if _donated(waitable):
                        continue  # a later call has it; another output tells the same
                    code, message = self._status_of(exc)
                    break
            # Every output donated before it was waited for: the calls they went to carry any
            # error of this one.
            del waitable, waitables, item
            _table.resolve(event, code, message)


def _donated(waitable: Any) -> bool:
    """Whether an output array was handed to a later call (donated) or deleted."""
    is_deleted = getattr(waitable, "is_deleted", None)
    return is_deleted is not None and is_deleted()
