"""Host callbacks of a remote IPU Model, the server's side in this process (hostcalls.py): the
wire format of a call and its results, hostile returns, a session that ends while a call
waits, and a program whose callback key the server rewrites to a stand-in of the session's."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import jax
import ml_dtypes
import numpy as np
import pytest

from jax_ipu import _internals
from jax_ipu.compiler.lowering import callbacks
from jax_ipu.protowriter import Writer
from jax_ipu.remote import callback_poller, hostcalls
from jax_ipu.remote.backend import Backend
from jax_ipu.remote.ifrt import ProtocolError

SECRET = "ab" * 16


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except Exception as exc:  # noqa: BLE001 - what the test looks at
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _one_call(channel: hostcalls.Channel) -> hostcalls.Call:
    for _ in range(50):  # bounded: 50 polls of at most 0.1 s
        calls = hostcalls.read_poll_response(channel.poll(0.1))
        if calls:
            assert len(calls) == 1
            return calls[0]
    raise AssertionError("no call came")


def test_a_call_and_its_results_cross_with_their_dtypes_shapes_and_tokens() -> None:
    channel = hostcalls.Channel(SECRET)
    args = (None, np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::2],  # strided
            np.array(3, np.int32), np.ones((2, 0), np.int8),
            np.array([1.5, -2], ml_dtypes.bfloat16), np.array([True, False]))
    thread, out = _in_thread(lambda: channel.function(7)(*args))
    call = _one_call(channel)
    assert call.key == 7 and call.args[0] is None
    for got, want in zip(call.args[1:], args[1:], strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    results = (None, np.float32(2.5), np.zeros((3, 1), np.uint16))
    channel.answer(_return(call.call_id, results))
    thread.join(30)
    token, scalar, zeros = out["value"]
    assert token is None and scalar.shape == () and scalar == 2.5
    assert zeros.dtype == np.uint16 and zeros.shape == (3, 1)


def _return(call_id: int, results: Any = (), error: str | None = None) -> Any:
    from jax_ipu.protowire import Message

    return Message(hostcalls.return_request(SECRET, call_id, results, error))


@pytest.mark.parametrize("value, reason", [
    (Writer().text(1, "float32").packed(2, [4]).raw(3, b"\0" * 15), "15 bytes"),
    (Writer().text(1, "pickle").packed(2, [1]).raw(3, b"\0"), "dtype 'pickle'"),
    (Writer().text(1, "token").packed(2, []).raw(3, b""), "dtype 'token'"),
    (Writer().text(1, "int8").packed(2, [-1]).raw(3, b""), "shape [-1]"),
    (Writer().text(1, "int8").packed(2, [1 << 40, 1 << 40]).raw(3, b"\0"), "1 bytes"),
    (Writer().raw(1, b"\xff\xfe").packed(2, [1]).raw(3, b"\0"), "not UTF-8"),
])
def test_a_hostile_return_fails_its_call_with_the_reason(value: Writer, reason: str) -> None:
    channel = hostcalls.Channel(SECRET)
    thread, out = _in_thread(lambda: channel.function(3)(np.ones(2, np.float32)))
    call = _one_call(channel)
    request = Writer().text(1, SECRET).integer(2, call.call_id).message(3, value)
    from jax_ipu.protowire import Message

    channel.answer(Message(bytes(request)))
    thread.join(30)
    error = out["error"]
    assert isinstance(error, hostcalls.CallbackError)
    assert "host callback 3: its results do not parse" in str(error) and reason in str(error)
    with pytest.raises(KeyError, match="no host callback call"):  # answered once only
        channel.answer(_return(call.call_id, [np.ones(2, np.float32)]))


def test_a_failure_whose_text_does_not_parse_still_answers_its_call() -> None:
    from jax_ipu.protowire import Message

    channel = hostcalls.Channel(SECRET)
    thread, out = _in_thread(lambda: channel.function(6)(np.ones(1, np.float32)))
    call = _one_call(channel)
    request = Writer().text(1, SECRET).integer(2, call.call_id).raw(4, b"\xff").integer(5, 1)
    channel.answer(Message(bytes(request)))
    thread.join(30)
    assert "host callback 6: its results do not parse" in str(out["error"])


def test_the_clients_error_and_a_closed_session_fail_the_calls_waiting_and_later_ones() -> None:
    channel = hostcalls.Channel(SECRET)
    first, first_out = _in_thread(lambda: channel.function(1)(np.ones(1, np.float32)))
    call = _one_call(channel)
    channel.answer(_return(call.call_id, error="ValueError: no"))
    first.join(30)
    assert str(first_out["error"]) == "host callback 1 failed in the client: ValueError: no"

    taken, taken_out = _in_thread(lambda: channel.function(2)(np.ones(1, np.float32)))
    _one_call(channel)  # taken by a poll, never answered
    queued, queued_out = _in_thread(lambda: channel.function(4)(np.ones(1, np.float32)))
    for _ in range(100):  # bounded: until the second call is queued
        with channel._lock:
            if channel._queued:
                break
        threading.Event().wait(0.05)
    channel.close("the client disconnected")
    for thread, out, key in ((taken, taken_out, 2), (queued, queued_out, 4)):
        thread.join(30)
        assert str(out["error"]) == f"host callback {key}: the client disconnected"
    with pytest.raises(hostcalls.CallbackError, match="the client disconnected"):
        channel.function(5)(np.ones(1, np.float32))
    with pytest.raises(hostcalls.CallbackError, match="the client disconnected"):
        channel.poll(0.1)


def test_a_poll_with_nothing_to_take_is_answered_with_no_calls() -> None:
    assert hostcalls.read_poll_response(hostcalls.Channel(SECRET).poll(0.01)) == []


def test_a_newer_poll_ends_the_wait_of_the_one_before() -> None:
    """So a client (a hostile one too) holds at most one server thread in polls."""
    channel = hostcalls.Channel(SECRET)
    first, first_out = _in_thread(lambda: channel.poll(hostcalls.POLL_WAIT_S))
    for _ in range(100):  # bounded: until the first poll waits
        with channel._lock:
            if channel._polls:
                break
        threading.Event().wait(0.01)
    second, second_out = _in_thread(lambda: channel.poll(hostcalls.POLL_WAIT_S))
    first.join(hostcalls.POLL_WAIT_S / 2)
    assert not first.is_alive() and first_out["value"] == b""
    call, call_out = _in_thread(lambda: channel.function(9)(np.ones(1, np.float32)))
    second.join(30)
    taken = hostcalls.read_poll_response(second_out["value"])
    assert [c.key for c in taken] == [9]
    channel.answer(_return(taken[0].call_id, [np.zeros(1, np.float32)]))
    call.join(30)
    assert call_out["value"][0].tolist() == [0.0]


PROGRAM = """
module @m {
  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.custom_call @xla_ffi_python_cpu_callback(%arg0) {backend_config = "",
        mhlo.backend_config = {BACKEND}, operand_layouts = [dense<0> : tensor<1xindex>],
        result_layouts = [dense<0> : tensor<1xindex>]} : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}"""


def _options() -> bytes:
    options = _internals.CompileOptions()
    options.executable_build_options.device_assignment = _internals.DeviceAssignment.create(
        np.array([[0]]))
    return options.SerializeAsString()


def test_a_programs_callback_key_becomes_a_stand_in_that_calls_the_sessions_client() -> None:
    """The key in the program is the client's; the server compiles it under a key of its own,
    whose stand-in asks the session's channel, and the results come back into the program."""
    backend, channel = Backend(), hostcalls.Channel(SECRET)
    code = PROGRAM.replace("{BACKEND}", "{index = 123456 : ui64}").encode()
    with pytest.raises(NotImplementedError, match="xla_ffi_python_cpu_callback"):
        backend.compile(code, _options(), frozenset({0}))  # no channel: refused
    exe = backend.compile(code, _options(), frozenset({0}), channel)
    assert len(exe.stand_ins) == 1
    x = jax.device_put(np.arange(4, dtype=np.float32), jax.devices("ipu")[0])
    thread, out = _in_thread(lambda: np.asarray(exe.execute([x])[0][0]))
    call = _one_call(channel)
    assert call.key == 123456  # the client's key, whatever the server filed it under
    np.testing.assert_array_equal(call.args[0], np.arange(4, dtype=np.float32))
    channel.answer(_return(call.call_id, [call.args[0] * 10]))
    thread.join(60)
    np.testing.assert_array_equal(out["value"], np.arange(4, dtype=np.float32) * 10)


def test_a_callback_without_its_key_is_refused() -> None:
    code = PROGRAM.replace("{BACKEND}", "{other = 1 : ui64}").encode()
    with pytest.raises(ProtocolError, match="a host callback without its index"):
        Backend().compile(code, _options(), frozenset({0}), hostcalls.Channel(SECRET))


def test_without_grpcio_a_remote_clients_host_callback_is_refused_when_it_lowers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a remote client (whose lowering asks the poller to start) without grpcio."""
    monkeypatch.setattr(callbacks, "_answer_remotely", callback_poller.start)
    monkeypatch.setattr(callback_poller, "_poller", None)
    monkeypatch.setitem(sys.modules, "grpc", None)  # as if it were not installed
    on_ipu = jax.sharding.SingleDeviceSharding(jax.devices("ipu")[0])
    f = jax.jit(lambda a: jax.pure_callback(np.sin, a, a), in_shardings=on_ipu)
    with pytest.raises(ValueError) as refused:
        f.lower(np.ones(2, np.float32))
    assert str(refused.value) == callback_poller.NEEDS_GRPCIO
    assert callback_poller._poller is None
