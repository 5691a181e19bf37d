"""Compiles whose caller gave up: jaxlib runs the plugin's compile on its own worker thread while
the user's thread waits, and a Ctrl-C ends only the wait; the compile it left is stopped here.

A watcher thread (one, started with the first compile, asleep while none runs) sees the waiting
thread leave jax's compile function and raises CompileAbandoned in the worker; a compile that
has no waiting thread (run on the caller's own thread, where Ctrl-C reaches it) is not watched.
Ctrl-C's CANCELLED error, when the interrupt was taken inside a slot on the caller's thread,
reaches the user as KeyboardInterrupt through jax's compile error handlers."""

from __future__ import annotations

import ctypes
import functools
import inspect
import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from jax_ipu import _internals

logger = logging.getLogger(__name__)

POLL_S = 0.05  # how soon a compile stops once its caller left
INTERRUPTED = "KeyboardInterrupt: interrupted while jax_ipu was working"  # error.c's message


class CompileAbandoned(BaseException):  # noqa: N818 - as KeyboardInterrupt, not an error
    """The call waiting for this compile returned (Ctrl-C): nobody will read its result. A
    BaseException, as KeyboardInterrupt is, so that no `except Exception` runs on."""


class _Watch:
    def __init__(self, worker: int, callers: dict[int, Any]) -> None:
        self.worker = worker
        self.callers = callers  # thread id -> its frame waiting in jax's compile function
        self.stopped = False


_lock = threading.Condition()
_watches: list[_Watch] = []
_watcher: threading.Thread | None = None


def _forked() -> None:
    """In a forked child: no watcher thread came along; the next compile starts one."""
    global _lock, _watcher
    _lock, _watcher = threading.Condition(), None
    _watches.clear()


os.register_at_fork(after_in_child=_forked)


def _waiting_callers(worker: int) -> dict[int, Any]:
    """The threads other than `worker` whose innermost Python frame is jax's compile function
    (one of them called this compile; several compile at once only from several threads)."""
    compiling = _compiling_code()
    return {tid: frame for tid, frame in sys._current_frames().items()
            if tid != worker and frame.f_code is compiling}


@functools.cache
def _compiling_code() -> Any:
    return getattr(inspect.unwrap(_internals.backend_compile_and_load), "__code__", None)


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    """Raise `exc` in a thread at its next Python instruction (None: take back one not yet
    raised)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               ctypes.py_object(exc) if exc else None)


def _on_stack(top: Any, frame: Any) -> bool:
    """Whether `frame` is on the stack whose innermost frame is `top` (a thread waiting in
    jax's compile may run a signal handler or a finaliser above it meanwhile)."""
    while top is not None:
        if top is frame:
            return True
        top = top.f_back
    return False


def _watch_loop() -> None:
    while True:
        with _lock:
            while not _watches:
                _lock.wait()
            _lock.wait(POLL_S)  # a compile shorter than this is never looked at
            frames = sys._current_frames()
            for w in _watches:
                if not w.stopped and not any(_on_stack(frames.get(t), f)
                                             for t, f in w.callers.items()):
                    w.stopped = True
                    _raise_in(w.worker, CompileAbandoned)
            del frames  # they hold what the compiling calls hold (a program's callbacks)


@contextmanager
def watched() -> Iterator[None]:
    """Run a compile that stops (CompileAbandoned) once every thread that may be waiting for it
    stopped waiting."""
    global _watcher
    worker = threading.get_ident()
    callers = _waiting_callers(worker)
    if not callers:  # compiling on the caller's own thread: Ctrl-C reaches it there
        yield
        return
    watch = _Watch(worker, callers)
    with _lock:
        if _watcher is None:
            _watcher = threading.Thread(target=_watch_loop, name="jax_ipu-compile-watch",
                                        daemon=True)
            _watcher.start()
        _watches.append(watch)
        _lock.notify()
    try:
        yield
    finally:
        with _lock:
            _watches.remove(watch)
            if watch.stopped:  # raised too late to stop this compile: not the next one
                _raise_in(worker, None)
                logger.debug("a compile its caller abandoned stopped")
        watch.callers.clear()


def register() -> None:
    """Have jax's compile ask interrupted_compile about its errors (once a process)."""
    global _registered
    if not _registered:
        _internals.register_xla_runtime_error_handler(interrupted_compile)
        _registered = True


_registered = False


def interrupted_compile(error: Exception) -> BaseException | None:
    """jax's compile error handler: the CANCELLED error of a Ctrl-C taken inside a slot becomes
    the KeyboardInterrupt error.c set pending again, raised here and not after the next lines of
    the user's code (which an `except Exception` around the call would run)."""
    if INTERRUPTED not in str(error):
        return None
    ctypes.pythonapi.PyErr_CheckSignals()  # raises the pending KeyboardInterrupt
    return KeyboardInterrupt()
