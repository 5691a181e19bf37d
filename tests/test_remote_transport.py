"""The C++ transport's deferred answers (jax_ipu/remote/native/transport.cc), driven through its
module by a service written here and a grpcio client on 127.0.0.1: a request answered later from
another thread gets exactly one answer, whatever the thread does with its Reply, and the
transport stops cleanly while a reply is still owed."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from jax_ipu.remote import native_transport
from jax_ipu.remote.session import CODES

METHOD = "/xla.ifrt.proxy.GrpcIfrtService/IfrtSession"
OK, DEFERRED = 0, native_transport.DEFERRED


class _Stream:
    """A session whose requests say how to answer them: b"now" at once; anything else is
    deferred to submit(), which the test's `behaviours` pick by the request's bytes."""

    def __init__(self, behaviours: dict[bytes, Callable[[Any], None]]) -> None:
        self.behaviours = behaviours
        self.ended: list[str] = []

    def message(self, data: bytes) -> tuple[int, str | None, Any]:
        if data == b"now":
            return OK, None, (b"answered now", True)
        return DEFERRED, None, self.behaviours[data]

    def cancelled(self) -> None:
        pass

    def end(self, reason: str) -> None:
        self.ended.append(reason)


class _Service:
    def __init__(self, behaviours: dict[bytes, Callable[[Any], None]]) -> None:
        self.behaviours = behaviours
        self.streams: list[_Stream] = []

    def session(self, metadata: dict[str, bytes]) -> tuple[int, str | None, Any]:
        self.streams.append(_Stream(self.behaviours))
        return OK, None, self.streams[-1]


def _later(answer: tuple[int, str | None, Any], kept: list[Any]) -> Callable[[Any], None]:
    """A submit that answers from another thread, then tries to answer again."""
    def submit(reply: Any) -> None:
        def run() -> None:
            time.sleep(0.05)
            reply(answer)
            try:
                reply(answer)
            except RuntimeError as exc:
                kept.append(str(exc))
        threading.Thread(target=run, daemon=True).start()
    return submit


def _raising(reply: Any) -> None:
    raise ValueError("submit failed")


def _dropping(reply: Any) -> None:
    pass  # the reply is dropped unanswered


@pytest.fixture()
def started() -> Iterator[tuple[Any, Any, _Service, list[Any]]]:
    native = native_transport.module()
    kept: list[Any] = []
    service = _Service({
        b"later": _later((OK, None, (b"answered later", True)), kept),
        b"later-error": _later((CODES["INVALID_ARGUMENT"], "a bad request", None), kept),
        b"later-deferred": _later((DEFERRED, None, _dropping), kept),
        b"raising": _raising,
        b"dropping": _dropping,
    })
    handle = native.start(service, "127.0.0.1:0", 1 << 20)
    try:
        yield native, handle, service, kept
    finally:
        native.stop(handle, 0.0)


def _session(port: int, requests: list[bytes], timeout: float = 10.0
             ) -> tuple[list[bytes], grpc.StatusCode, str]:
    """The answers to `requests` sent on one stream, and the status it ended with."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.stream_stream(METHOD)(iter(requests), timeout=timeout)
        answers: list[bytes] = []
        try:
            answers.extend(call)
        except grpc.RpcError:
            pass
        return answers, call.code(), call.details()


def test_a_deferred_answer_comes_once_and_in_order(started: Any) -> None:
    native, handle, service, kept = started
    answers, code, _ = _session(native.port(handle), [b"later", b"now", b"later", b"now"])
    assert answers == [b"answered later", b"answered now"] * 2
    assert code == grpc.StatusCode.OK
    assert kept == ["this request was answered already"] * 2


@pytest.mark.parametrize("request_, code, details", [
    (b"later-error", grpc.StatusCode.INVALID_ARGUMENT, "a bad request"),
    (b"later-deferred", grpc.StatusCode.INTERNAL, "a deferred request deferred again"),
    (b"raising", grpc.StatusCode.INTERNAL, "submit failed"),
    (b"dropping", grpc.StatusCode.INTERNAL, "a request's answer was dropped"),
])
def test_a_deferred_request_that_fails_ends_its_stream_with_the_reason(
        started: Any, request_: bytes, code: grpc.StatusCode, details: str) -> None:
    native, handle, service, _ = started
    answers, got, text = _session(native.port(handle), [b"now", request_, b"now"])
    assert answers == [b"answered now"]
    assert (got, details in text) == (code, True), text
    assert details in service.streams[-1].ended[0]
    # the transport goes on serving
    assert _session(native.port(handle), [b"now"])[0] == [b"answered now"]


def test_stop_waits_for_a_reply_still_owed_and_the_late_reply_is_harmless() -> None:
    native = native_transport.module()
    owed: queue.Queue = queue.Queue()
    service = _Service({b"held": owed.put})
    handle = native.start(service, "127.0.0.1:0", 1 << 20)
    client = threading.Thread(target=_session, args=(native.port(handle), [b"held"], 30.0),
                              daemon=True)
    client.start()
    reply = owed.get(timeout=10)
    with pytest.raises(TypeError, match="cannot create"):
        type(reply)()  # only the transport makes replies
    replying: list[float] = []

    def late() -> None:
        time.sleep(0.5)
        replying.append(time.monotonic())
        reply((OK, None, (b"too late", True)))

    threading.Thread(target=late, daemon=True).start()
    native.stop(handle, 0.0)  # returns once the reply is given
    assert replying and replying[0] < time.monotonic()
    client.join(10)
    assert not client.is_alive()
    assert service.streams[0].ended  # the session ended
