"""Host callbacks over the network: a server's program calls a function of the client's process.
The wire format of the two calls that carry them, and the server's side: calls wait for a poll.

XLA runs a host callback on one of its threads on the server; the proxy callable that stands in
for the client's function queues the call and waits. The client's poller (callback_poller.py)
takes queued calls with a long poll (POLL), runs its functions and returns each result (RETURN).
jaxlib's own protocol carries host callbacks too, but its pip-installed client never runs them.
Arguments and results are arrays (dtype, shape, bytes) or tokens, parsed field by field."""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from jax_ipu import dtypes
from jax_ipu.protowire import Message, WireError
from jax_ipu.protowriter import Writer

POLL = "JaxIpuHostCallbackPoll"
RETURN = "JaxIpuHostCallbackReturn"
# The initialization_data key of a session's callback channel: a secret the client chose, which
# its polls and returns present (sessions are told apart by it, as host buffers by session id).
CHANNEL_KEY = "host_callbacks"
CHANNEL_BYTES = (16, 64)  # the length a channel's secret may have, in bytes of its hex text
POLL_WAIT_S = 2.0  # the longest a poll waits for a call before it is answered with none


class CallbackError(RuntimeError):
    """A host callback that failed: in the client's function, or because its session ended."""


# ---- the wire format (field numbers) ----
# Value: 1 dtype name, 2 shape (packed), 3 data, 4 token (1: a token, no array)
# Call: 1 call id, 2 key (the client's index of its function), 3 repeated Value arguments
# PollRequest: 1 channel, 2 wait in ms; PollResponse: 1 repeated Call
# ReturnRequest: 1 channel, 2 call id, 3 repeated Value results, 4 error text, 5 failed (1)


def _value(x: Any) -> Writer:
    if x is None:  # XLA hands a token as None and takes None back for one
        return Writer().integer(4, 1)
    array = np.asarray(x)  # tobytes() is C order, whatever the strides
    name = array.dtype.name
    if name not in dtypes.BY_NAME:
        raise CallbackError(f"a host callback value of dtype {name}, which no ipu array has")
    return Writer().text(1, name).packed(2, array.shape).raw(3, array.tobytes())


def _read_value(m: Message) -> np.ndarray | None:
    if m.integer(4):
        return None
    name = m.text(1)
    if name not in dtypes.BY_NAME or name == "token":
        raise WireError(f"a host callback value of dtype {name!r}")
    dtype = dtypes.numpy_dtype(name)
    shape = tuple(m.integers(2))
    if any(d < 0 for d in shape):
        raise WireError(f"a host callback value of shape {list(shape)}")
    data = m.raw(3)
    count = math.prod(shape)
    if len(data) != count * dtype.itemsize:
        raise WireError(f"{len(data)} bytes for a host callback value {name}{list(shape)}")
    return np.frombuffer(data, dtype).reshape(shape).copy()


def values(items: Sequence[Any]) -> list[Writer]:
    return [_value(x) for x in items]


def read_values(ms: Sequence[Message]) -> list[np.ndarray | None]:
    return [_read_value(m) for m in ms]


def poll_request(channel: str, wait_s: float) -> bytes:
    return bytes(Writer().text(1, channel).integer(2, int(wait_s * 1000)))


def return_request(channel: str, call_id: int, results: Sequence[Any] = (),
                   error: str | None = None) -> bytes:
    w = Writer().text(1, channel).integer(2, call_id)
    if error is not None:
        return bytes(w.text(4, error).integer(5, 1))
    for v in values(results):
        w.message(3, v)
    return bytes(w)


@dataclass(frozen=True)
class Call:
    """One call the server's program made: its id, the client's key, its arguments."""

    call_id: int
    key: int
    args: list[np.ndarray | None]


def read_poll_response(data: bytes) -> list[Call]:
    """The calls a poll's answer holds (WireError for bytes that are not one)."""
    return [Call(c.integer(1), c.integer(2), read_values(c.messages(3)))
            for c in Message(data).messages(1)]


# ---- the server's side ----


@dataclass
class _Pending:
    call_id: int
    key: int
    message: bytes  # the Call message a poll hands on
    done: threading.Event = field(default_factory=threading.Event)
    results: list[np.ndarray | None] | None = None
    error: str | None = None


class Channel:
    """One session's host callbacks on the server: the calls its programs made, waiting for the
    client's poll and then its return. close() fails every call waiting and every later one."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self._lock = threading.Condition()
        self._queued: list[_Pending] = []
        self._sent: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._closed: str | None = None
        self._polls = 0  # polls so far: only the latest waits

    def function(self, key: int) -> Callable[..., tuple[Any, ...]]:
        """What XLA calls on the server for the client's function `key`: the client's results,
        or CallbackError with what went wrong there."""

        def call(*args: Any) -> tuple[Any, ...]:
            arguments = b"".join(bytes(Writer().message(3, v)) for v in values(args))
            with self._lock:
                if self._closed is not None:
                    raise CallbackError(f"host callback {key}: {self._closed}")
                call_id = next(self._ids)
                # fields in any order make one message: the arguments were written first
                head = Writer().integer(1, call_id).integer(2, key)
                pending = _Pending(call_id, key, bytes(head) + arguments)
                self._queued.append(pending)
                self._lock.notify_all()
            pending.done.wait()
            if pending.error is not None:
                raise CallbackError(pending.error)
            return tuple(pending.results or ())

        return call

    def poll(self, wait_s: float) -> bytes:
        """The calls queued now, or the first to come within `wait_s` (none after that). One
        poll waits at a time: a newer one ends the wait of the one before (with no calls), so
        a session holds at most one of the server's threads in polls."""
        deadline = time.monotonic() + min(max(wait_s, 0.0), POLL_WAIT_S)
        with self._lock:
            self._polls += 1
            mine = self._polls
            self._lock.notify_all()
            while not self._queued and self._closed is None and self._polls == mine:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(left)
            if self._closed is not None and not self._queued:
                raise CallbackError(self._closed)
            if self._polls != mine:  # a newer poll takes the calls (this one may be abandoned)
                return b""
            taken, self._queued = self._queued, []
            for p in taken:
                self._sent[p.call_id] = p
        out = Writer()
        for p in taken:
            out.raw(1, p.message)
        return bytes(out)

    def answer(self, request: Message) -> None:
        """A return: the results (or the error) of a call a poll took."""
        call_id = request.integer(2)
        with self._lock:
            pending = self._sent.pop(call_id, None)
        if pending is None:
            raise KeyError(f"no host callback call {call_id} is waiting for its results")
        try:  # the call is answered whatever the request holds
            if request.integer(5):
                pending.error = (f"host callback {pending.key} failed in the client: "
                                 f"{request.text(4)}")
            else:
                pending.results = read_values(request.messages(3))
        except WireError as exc:
            pending.error = f"host callback {pending.key}: its results do not parse ({exc})"
        pending.done.set()

    def close(self, reason: str) -> None:
        with self._lock:
            self._closed = reason
            waiting = [*self._queued, *self._sent.values()]
            self._queued, self._sent = [], {}
            self._lock.notify_all()
        for p in waiting:
            p.error = f"host callback {p.key}: {reason}"
            p.done.set()
