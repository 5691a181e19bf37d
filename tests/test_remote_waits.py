"""Requests that wait, on a remote IPU Model (issue 26, items 4 and 6): which ones a session
answers at once and which it defers (the C++ transport serves every call on one thread, which
must never wait), checked in this process; and over real servers on 127.0.0.1, both transports,
that sessions whose requests wait hold back no other session and get their answers in order."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_ipu.remote.session import CODES, RUNNING_PER_SESSION, Session
from tests._remote import Client, RawSession, Server


@pytest.fixture(scope="module")
def session() -> Iterator[Session]:
    from jax_ipu.remote import schema
    from jax_ipu.remote.backend import Backend

    s = Session(schema.load(), Backend(), session_id=1, device_ids=[0])
    try:
        yield s
    finally:
        s.close("the test is over")


def _request(session: Session, op_id: int, **fields: Any) -> bytes:
    message = session.Request(**fields)
    message.request_metadata.op_id = op_id
    return message.SerializeToString()


def _handle(session: Session, data: bytes) -> tuple[bytes | None, list[Callable[[], bytes]]]:
    """The answer given at once (or None) and the work deferred (at most one)."""
    deferred: list[Callable[[], bytes]] = []
    answer = session.handle(data, deferred.append)
    assert (answer is None) == (len(deferred) == 1), (answer, deferred)
    return answer, deferred


def _status(session: Session, answer: bytes, op_id: int) -> int:
    response = session.Response.FromString(answer)
    assert response.response_metadata.op_id == op_id, response
    return response.response_metadata.status.code


def _put_request(session: Session, op_id: int, buffer: int, array: int) -> bytes:
    codec = session.codec
    return _request(session, op_id, make_array_from_host_buffer_request=dict(
        dtype=codec.dtype_proto(np.dtype(np.float32)), shape=codec.shape_proto((4,)),
        sharding=codec.single_device_sharding(0, None), host_buffer_handle=buffer,
        array_handle=array))


def test_a_put_waits_off_the_transport_thread_only_while_its_host_buffer_is_on_its_way(
        session: Session) -> None:
    data = np.arange(4, dtype=np.float32).tobytes()
    answer, deferred = _handle(session, _put_request(session, 1, buffer=501, array=11))
    assert answer is None  # buffer 501 is not here yet
    session.host_buffers.store(501, data)
    assert _status(session, deferred[0](), 1) == CODES["OK"]
    assert np.asarray(session.array(11)).tobytes() == data

    session.host_buffers.store(502, data)  # here first: answered at once
    answer, _ = _handle(session, _put_request(session, 2, buffer=502, array=12))
    assert answer is not None and _status(session, answer, 2) == CODES["OK"]


def test_reading_a_value_waits_off_the_transport_thread_only_while_it_is_computed(
        session: Session) -> None:
    device = jax.devices("ipu")[0]
    slow = jax.jit(lambda a: jax.lax.fori_loop(0, 100, lambda i, b: jnp.tanh(b @ a), a))
    x = jax.device_put(np.full((1024, 1024), 1e-3, np.float32), device)
    slow(x).block_until_ready()  # compiled
    session.arrays[21] = computing = slow(x)
    assert not computing.is_ready()  # about a second of work to go
    session.results[31] = [computing]  # an execute's outputs, as its status handle holds them
    requests = {"check_value_ready_request": dict(value_handles=[21]),
                "copy_to_host_buffer_request": dict(array_handle=21, host_buffer_handle=601),
                "loaded_executable_fetch_execute_result_request": dict(result_status_handle=31)}
    works = []
    for op_id, (which, fields) in enumerate(requests.items(), start=3):
        answer, deferred = _handle(session, _request(session, op_id, **{which: fields}))
        assert answer is None, which
        works.append((op_id, deferred[0]))
    for op_id, work in works:
        assert _status(session, work(), op_id) == CODES["OK"]
    assert bytes(session.host_buffers.peek(601)) == np.asarray(computing).tobytes()

    answer, _ = _handle(session, _request(session, 10, check_value_ready_request=dict(
        value_handles=[21])))  # computed now: answered at once
    assert answer is not None and _status(session, answer, 10) == CODES["OK"]
    # an unknown handle is an error answered at once, not a wait
    answer, _ = _handle(session, _request(session, 11, copy_to_host_buffer_request=dict(
        array_handle=999, host_buffer_handle=602)))
    assert answer is not None and _status(session, answer, 11) == CODES["NOT_FOUND"]


@pytest.mark.parametrize("which", ["compile_request", "loaded_executable_cost_analysis_request",
                                   "loaded_executable_human_readable_program_text_request"])
def test_the_compiler_and_the_reports_always_run_off_the_transport_thread(
        session: Session, which: str) -> None:
    answer, deferred = _handle(session, _request(session, 12, **{which: {}}))
    assert answer is None
    assert _status(session, deferred[0](), 12) != CODES["OK"]  # an empty request: its error


def test_other_requests_are_answered_at_once(session: Session) -> None:
    answer, _ = _handle(session, _request(session, 13, get_default_device_assignment_request=dict(
        num_replicas=1, num_partitions=1)))
    assert answer is not None and _status(session, answer, 13) == CODES["OK"]


def test_an_execute_waits_off_the_transport_thread_once_16_of_its_sessions_are_running(
        session: Session) -> None:
    """XLA:CPU lets 32 computations a device be in flight and makes the caller of the next
    wait: a session with RUNNING_PER_SESSION computations running defers its next execute (to
    wait for the oldest), and holds each computation only while it runs."""
    assert RUNNING_PER_SESSION == 16
    device = jax.devices("ipu")[0]
    slow = jax.jit(lambda a: jax.lax.fori_loop(0, 100, lambda i, b: jnp.tanh(b @ a), a))
    step = jax.jit(lambda a: a + 1)
    x = jax.device_put(np.full((1024, 1024), 1e-3, np.float32), device)
    step(slow(x)).block_until_ready()  # compiled
    chain = [slow(x)]  # about a second of work, then 15 quick steps that wait for it
    for _ in range(RUNNING_PER_SESSION - 1):
        chain.append(step(chain[-1]))
    execute = {"loaded_executable_execute_request": dict(loaded_executable_handle=999)}
    session.running.extend(chain[:-1])
    answer, _ = _handle(session, _request(session, 14, **execute))  # 15 running: at once
    assert answer is not None and _status(session, answer, 14) == CODES["NOT_FOUND"]
    session.running.append(chain[-1])
    answer, deferred = _handle(session, _request(session, 15, **execute))
    assert answer is None and len(session.running) == RUNNING_PER_SESSION
    assert _status(session, deferred[0](), 15) == CODES["NOT_FOUND"]  # an unknown executable
    chain[-1].block_until_ready()
    _handle(session, _request(session, 16, **execute))
    assert not session.running  # all finished: none held


def test_an_execute_of_a_program_with_host_callbacks_always_waits_off_the_transport_thread(
        session: Session) -> None:
    """Its callbacks wait for the client's poll, which that thread has to take in."""
    program = type("Program", (), {"stand_ins": [print], "devices": []})()
    session.executables[777] = program
    try:
        answer, deferred = _handle(session, _request(
            session, 17, loaded_executable_execute_request=dict(loaded_executable_handle=777)))
        assert answer is None and not session.running
        program.stand_ins = []
        answer, deferred = _handle(session, _request(
            session, 18, loaded_executable_execute_request=dict(loaded_executable_handle=777)))
        assert answer is not None
    finally:
        del session.executables[777]


@pytest.fixture(scope="module", params=["native", "grpcio"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("waits-server"), devices=6, transport=request.param)
    try:
        assert f"({request.param} transport)" in srv.log
        yield srv
    finally:
        srv.stop()


def test_sessions_waiting_for_host_buffers_hold_back_no_other_session(server: Server) -> None:
    # Four sessions each ask for an array from a host buffer they have not stored, then to copy
    # that array back: both wait. Meanwhile a fifth session puts and reads back. Then each
    # buffer comes, and each waiting session gets both answers, in order, with its own bytes.
    waiting = [RawSession(server.address, devices=1) for _ in range(4)]
    other = None
    try:
        asked = []
        for raw in waiting:
            own = raw.init.init_response.all_devices[0].id
            put = raw.send_request(make_array_from_host_buffer_request=raw.array_request(
                own, buffer=555, array=7))
            copy = raw.send_request(copy_to_host_buffer_request=dict(array_handle=7,
                                                                     host_buffer_handle=556))
            asked.append((put, copy))
        for raw in waiting:
            with pytest.raises(AssertionError, match="no answer"):
                raw.receive(timeout=0.5)

        other = RawSession(server.address, devices=1)
        own = other.init.init_response.all_devices[0].id
        values = np.arange(4, dtype=np.float32).tobytes()
        other.store(9, values)
        answer = other.request(make_array_from_host_buffer_request=other.array_request(
            own, buffer=9, array=8))
        assert answer.response_metadata.status.code == CODES["OK"], answer
        answer = other.request(copy_to_host_buffer_request=dict(array_handle=8,
                                                                host_buffer_handle=10))
        assert answer.response_metadata.status.code == CODES["OK"], answer
        assert b"".join(other.lookup(10)) == values

        for i, (raw, ops) in enumerate(zip(waiting, asked, strict=True)):
            data = np.full(4, i, np.float32).tobytes()
            raw.store(555, data)
            answers = [raw.receive(), raw.receive()]
            assert [a.response_metadata.op_id for a in answers] == list(ops), answers
            assert [a.response_metadata.status.code for a in answers] == [CODES["OK"]] * 2
            assert b"".join(raw.lookup(556)) == data
    finally:
        for raw in [*waiting, *([other] if other else [])]:
            raw.close()


def test_a_sessions_queue_of_computations_holds_back_no_other_session(server: Server) -> None:
    """A client that queues 300 computations (some 10 ms each) without waiting holds back no
    other session: a call on another partition returns before the first 50 are done. (XLA:CPU
    makes the caller of a device's 33rd computation in flight wait; that must not be the
    transport's thread, which serves every session.)"""
    busy, other = Client(server.address, devices=1), Client(server.address, devices=1)
    try:
        other.run("""
            import time, jax, numpy as np
            g = jax.jit(lambda a: a * 2 + 1)
            y = jax.device_put(np.arange(8, dtype=np.float32), jax.devices("ipu")[0])
            np.asarray(g(y))
            result = None
        """)
        busy.run("""
            import threading, time, jax, jax.numpy as jnp, numpy as np
            f = jax.jit(lambda a: jnp.tanh(a @ a / 1024 + 0.5))
            x = jax.device_put(np.full((1024, 1024), 0.1, np.float32), jax.devices("ipu")[0])
            f(x).block_until_ready()  # compiled
            for i in range(300):
                x = f(x)
                if i == 49:
                    early = x
            done = []
            waiter = threading.Thread(
                target=lambda: done.append((early.block_until_ready(), time.monotonic())[1]))
            waiter.start()
            result = None
        """)
        returned = other.run("""
            value = np.asarray(g(y))
            result = [time.monotonic(), value.tolist()]
        """)
        early_done, last = busy.run("""
            waiter.join(120)
            result = [done[0], np.asarray(x)[::256, ::256].tolist()]
        """)
        assert returned[1] == [2.0 * k + 1 for k in range(8)]
        assert returned[0] < early_done, "the other session's call waited for this one's queue"
        want = 0.1  # every element follows v -> tanh(v * v + 0.5)
        for _ in range(300):
            want = np.tanh(want * want + 0.5)
        np.testing.assert_allclose(last, np.full((4, 4), want), rtol=1e-5)
    finally:
        busy.close()
        other.close()


def test_sigterm_while_a_request_waits_ends_it_and_the_server_exits(server: Server) -> None:
    """Last in this module: it stops the module's server. A session's request waits for a host
    buffer when SIGTERM comes: its stream ends with an error (never a hang), and the server
    exits 0."""
    raw = RawSession(server.address, devices=1)
    try:
        own = raw.init.init_response.all_devices[0].id
        raw.send_request(make_array_from_host_buffer_request=raw.array_request(
            own, buffer=555, array=7))
        with pytest.raises(AssertionError, match="no answer"):
            raw.receive(timeout=0.5)
        assert server.stop(timeout=60) == 0, server.log
        answer = raw.receive(timeout=10)
        assert answer is None or isinstance(answer, Exception) or (
            answer.response_metadata.status.code != CODES["OK"]), answer
    finally:
        raw.close()
