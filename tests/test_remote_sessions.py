"""Sessions and partitions of a remote IPU Model (issue 26, item 4): several clients of one real
server on 127.0.0.1, each in its own process; hostile messages sent by hand; the server stopped
by SIGTERM under its clients. Every test runs on both transports: gRPC's C++ core and grpcio's
Python server.

The server's devices have 16 tiles (10 MB of tile memory each), so that what a session frees is
seen in what the next one can allocate."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
import pytest

from jax_ipu import _internals
from jax_ipu.remote import hostcalls
from jax_ipu.remote.session import CODES, SERVER_HANDLES
from tests._remote import Client, RawSession, Server, wait_for

DEVICES = 6
TILE_MEMORY = 16 * 638976  # bytes of tile memory of one of the server's devices
BIG = 1_200_000  # float32 elements: 4.8 MB, so two fit on a device and three do not


@pytest.fixture(scope="module", params=["native", "grpcio"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("sessions-server"), devices=DEVICES,
                 env={"JAX_IPU_MODEL_NUM_TILES": "16"}, transport=request.param)
    try:
        assert f"({request.param} transport)" in srv.log
        yield srv
    finally:
        srv.stop()


def _closed_sessions(server: Server) -> list[str]:
    return re.findall(r"session \w+ closed \((.*?)\): (.*)", server.log)


def test_partitions_and_the_error_when_all_are_taken(server: Server) -> None:
    a = Client(server.address, devices=2)
    b = Client(server.address, devices=3)
    try:
        assert a.run("import jax; result = [d.id for d in jax.devices('ipu')]") == [0, 1]
        assert b.run("import jax; result = [d.id for d in jax.devices('ipu')]") == [2, 3, 4]
        late = Client(server.address, devices=2, timeout=1)
        try:
            err = late.error("import jax; jax.devices('ipu')")
        finally:
            late.close()
        assert "RESOURCE_EXHAUSTED" in err.message
        assert "this server's 6 ipu devices are taken: 1 free, 2 asked for" in err.message
        assert "JAX_IPU_REMOTE_DEVICES=k" in err.message and "--devices N" in err.message
        raw = RawSession(server.address, devices=1)  # the one device left
        assert [d.id for d in raw.init.init_response.all_devices] == [5]
        raw.close()
    finally:
        a.close()
        b.close()
    wait_for(lambda: len(_closed_sessions(server)) >= 3, what="the sessions to close")
    whole = RawSession(server.address)  # all free again: a session of every device opens
    assert len(whole.init.init_response.all_devices) == DEVICES
    whole.close()


def test_sessions_see_only_their_own_arrays_and_devices(server: Server) -> None:
    owner = Client(server.address, devices=2)
    try:
        owner.run("""
            import jax, jax.numpy as jnp, numpy as np
            kept = [jax.device_put(np.full(8, k, np.float32), jax.devices("ipu")[k % 2])
                    for k in range(20)]
            double = jax.jit(lambda x: x * 2)
            kept.append(double(kept[0]))
            result = None
        """)
        raw = RawSession(server.address, devices=1)
        try:
            # the owner's handles are small numbers: none of them is this session's
            for handle in range(1, 120):
                answer = raw.request(copy_to_host_buffer_request=dict(
                    array_handle=handle, host_buffer_handle=10_000 + handle))
                assert answer.response_metadata.status.code == CODES["NOT_FOUND"], handle
                answer = raw.request(destruct_array_request=dict(array_handle=[handle]))
                assert answer.response_metadata.status.code == CODES["NOT_FOUND"], handle
                answer = raw.request(loaded_executable_execute_request=dict(
                    loaded_executable_handle=handle, args_handles=[handle]))
                assert answer.response_metadata.status.code == CODES["NOT_FOUND"], handle
            # nor may it use the owner's devices
            answer = raw.request(make_array_from_host_buffer_request=_put(raw, 0, 7))
            assert answer.response_metadata.status.code == CODES["PERMISSION_DENIED"]
            assert "outside this session's partition [2]" in answer.response_metadata.status.message
            # nor read host buffers of a session it does not know the (random) id of
            with pytest.raises(Exception, match="NOT_FOUND"):
                raw.unary("HostBufferLookup", raw.m("xla.ifrt.proxy.GrpcHostBufferLookupRequest")(
                    session_id=12345, handle=1).SerializeToString())
        finally:
            raw.close()
        values = owner.run("result = [float(np.asarray(x).sum()) for x in kept]")
        assert values == [8.0 * k for k in range(20)] + [0.0]
    finally:
        owner.close()


def test_a_lookup_is_one_message_or_chunks_of_a_mebibyte_with_the_same_bytes(
        server: Server) -> None:
    # While no session holds a host buffer over 1 MiB, a lookup is answered as one message with
    # the call's status; otherwise by the streaming handler, which splits large ones.
    from jax_ipu.remote.hostbuffers import CHUNK

    raw = RawSession(server.address, devices=1)
    try:
        small, empty = bytes(range(256)) * 40, b""
        large = np.random.default_rng(0).bytes(2 * CHUNK + 12345)
        raw.store(1, small)
        raw.store(2, empty)
        assert raw.lookup(1) == [small]  # no large buffer held: one message
        assert b"".join(raw.lookup(2)) == empty
        raw.store(3, large)
        assert raw.lookup(1) == [small]  # the streaming handler, the same answer
        assert b"".join(raw.lookup(2)) == empty
        chunks = raw.lookup(3)
        assert [len(c) for c in chunks] == [CHUNK, CHUNK, 12345]
        assert b"".join(chunks) == large
        delete = raw.m("xla.ifrt.proxy.GrpcHostBufferDeleteRequest")
        raw.unary("HostBufferDelete", delete(session_id=raw.init.init_response.session_id,
                                             handle=3).SerializeToString())
        assert raw.lookup(1) == [small]  # one message again
        with pytest.raises(Exception, match="NOT_FOUND"):  # an unknown buffer, both ways
            raw.lookup(3)
        raw.store(4, large)
        with pytest.raises(Exception, match="NOT_FOUND"):
            raw.lookup(3)
    finally:
        raw.close()


def _put(raw: RawSession, device: int, handle: int, data: bytes | None = None,
         shape: tuple[int, ...] = (4,)) -> dict:
    """A MakeArrayFromHostBufferRequest (as a dict) for float32[shape] on `device`."""
    data = np.arange(np.prod(shape), dtype=np.float32).tobytes() if data is None else data
    raw.store(handle + 1_000_000, data)
    return raw.array_request(device, handle + 1_000_000, handle, shape)


def _codec(raw: RawSession):  # noqa: ANN202
    from jax_ipu.remote.ifrt import Codec

    return Codec(raw.schema)


def test_a_client_gone_while_a_request_waits_for_its_host_buffer(server: Server) -> None:
    # The request names a host buffer that never comes: it waits (on a thread of its own) until
    # the client goes; then the wait ends, the session closes and the server goes on serving.
    before = len(_closed_sessions(server))
    raw = RawSession(server.address, devices=1)
    own = raw.init.init_response.all_devices[0].id
    request = raw.m("xla.ifrt.proxy.IfrtRequest")(
        make_array_from_host_buffer_request=raw.array_request(own, 777_777, 7))
    request.request_metadata.op_id = 99
    raw.send(request.SerializeToString())
    with pytest.raises(AssertionError, match="no answer in 2 s"):
        raw.receive(timeout=2)  # waiting for buffer 777777
    raw.close()
    wait_for(lambda: len(_closed_sessions(server)) > before, what="the waiting session to close")
    fresh = RawSession(server.address, devices=1)
    try:
        answer = fresh.request(make_array_from_host_buffer_request=_put(fresh, own, 8))
        assert answer.response_metadata.status.code == CODES["OK"], answer
    finally:
        fresh.close()
    # closed before the next test counts the closed sessions
    wait_for(lambda: len(_closed_sessions(server)) > before + 1, what="the fresh session to close")


def test_a_closed_or_killed_client_frees_everything(server: Server) -> None:
    fill = f"""
        import jax, jax.numpy as jnp, numpy as np
        d = jax.devices("ipu")[0]
        held = [jax.device_put(np.ones({BIG}, np.float32), d) for _ in range(2)]
        step = jax.jit(lambda x: x + 1)
        held.append(step(jax.device_put(np.ones(4, np.float32), d)))
        result = [float(np.asarray(x)[0]) for x in held]
    """
    before = len(_closed_sessions(server))
    first = Client(server.address, devices=2)
    assert first.run(fill) == [1.0, 1.0, 2.0]
    # the device is nearly full: a third array does not fit
    err = first.error(f"np.asarray(jax.device_put(np.ones({BIG}, np.float32), d))")
    assert "RESOURCE_EXHAUSTED" in err.message
    first.close()  # the script ends: jax destructs what it holds, then the session closes
    wait_for(lambda: len(_closed_sessions(server)) > before, what="the first session to close")
    assert _closed_sessions(server)[-1][1].startswith("freed 0 arrays")  # freed already

    # a client whose stream drops while it holds an array and a program
    raw = RawSession(server.address, devices=2)
    answer = raw.request(make_array_from_host_buffer_request=_put(raw, 0, 5, shape=(1000,)))
    assert answer.response_metadata.status.code == CODES["OK"]
    raw.close()
    wait_for(lambda: len(_closed_sessions(server)) > before + 1,
             what="the dropped session to close")
    assert _closed_sessions(server)[-1][1].startswith("freed 1 arrays (4000 bytes)")

    second = Client(server.address, devices=2)  # the same devices, all free again
    assert second.run(fill) == [1.0, 1.0, 2.0]
    second.kill()  # SIGKILL: no goodbye
    wait_for(lambda: len(_closed_sessions(server)) > before + 2,
             what="the killed client's session to close")
    assert _closed_sessions(server)[-1][1].startswith("freed 3 arrays (9600016 bytes), "
                                                      "1 executables")
    third = Client(server.address, devices=2)
    try:
        assert third.run(fill) == [1.0, 1.0, 2.0]
    finally:
        third.close()


def _fuzz(raw: RawSession, count: int, rng: np.random.Generator) -> Iterator[bytes]:
    """`count` serialized requests, each malformed or hostile in its own way."""
    m, codec = raw.m, _codec(raw)
    Request = m("xla.ifrt.proxy.IfrtRequest")
    f32 = codec.dtype_proto(np.dtype(np.float32))
    own = raw.init.init_response.all_devices[0].id
    valid = Request(make_array_from_host_buffer_request=raw.array_request(own, 77, 9)
                    ).SerializeToString()
    hostile_shardings = [
        m("xla.ifrt.ShardingProto")(serialized_sharding=dict(type_name=name, data=data))
        for name, data in [("builtins.eval", b"__import__('os').system('true')"),
                           ("xla::ifrt::SingleDeviceSharding", b"\xff\xff\xff"),
                           ("xla::ifrt::HloSharding", b"\x0a\x02\x08\x05\x12\x03\xff\xff\xff"),
                           ("", b"")]]

    def hostile(i: int) -> Any:
        kind = i % 16
        big = int(rng.integers(1 << 40, 1 << 62))
        if kind == 0:
            return Request(copy_to_host_buffer_request=dict(array_handle=big,
                                                            host_buffer_handle=i))
        if kind == 1:
            return Request(loaded_executable_execute_request=dict(
                loaded_executable_handle=big, args_handles=[big, 0, SERVER_HANDLES + 3],
                result_array_handle=[0]))
        if kind == 2:
            return Request(compile_request=dict(
                program=dict(type_name="xla::ifrt::XlaProgram", data=rng.bytes(int(
                    rng.integers(0, 300)))),
                compile_options=dict(type_name="xla::ifrt::XlaCompileOptions",
                                     data=rng.bytes(20))))
        if kind == 3:
            return Request(compile_request=dict(
                program=dict(type_name="pickle", data=b"cos\nsystem\n(S'true'\ntR."),
                compile_options=dict(type_name="xla::ifrt::XlaCompileOptions")))
        if kind == 4:
            return Request(compile_request=dict(host_callbacks=[rng.bytes(50)]))
        if kind == 5:  # a shape no device holds, a negative one, a rank of 100
            dims = [[1 << 40, 1 << 40], [-3, 4], [1] * 100][i % 3]
            raw.store(500_000 + i, b"\0" * 16)
            return Request(make_array_from_host_buffer_request=dict(
                dtype=f32, shape=dict(dims=dims),
                sharding=codec.single_device_sharding(own, None),
                host_buffer_handle=500_000 + i, array_handle=600_000 + i))
        if kind == 6:
            raw.store(500_000 + i, b"\0" * 16)
            return Request(make_array_from_host_buffer_request=dict(
                dtype=dict(kind=int(rng.integers(100, 1000))), shape=codec.shape_proto((4,)),
                sharding=hostile_shardings[i % len(hostile_shardings)],
                host_buffer_handle=500_000 + i, array_handle=600_000 + i))
        if kind == 7:  # a version the server does not read
            raw.store(500_000 + i, b"\0" * 16)
            return Request(make_array_from_host_buffer_request=dict(
                dtype=dict(kind=f32.kind, version_number=3), shape=codec.shape_proto((4,)),
                sharding=codec.single_device_sharding(own, None),
                host_buffer_handle=500_000 + i, array_handle=600_000 + i))
        if kind == 8:
            return Request(assemble_array_from_single_device_arrays_request=dict(
                shape=codec.shape_proto((8,)), sharding=hostile_shardings[i % 4],
                single_device_array_handles=[big, i], result_handle=SERVER_HANDLES + i))
        if kind == 9:
            return Request(init_request={})  # a second InitRequest
        if kind == 10:
            return Request()  # no operation at all
        if kind == 11:
            return Request(get_default_device_assignment_request=dict(
                num_replicas=big, num_partitions=0))
        if kind == 12:
            return Request(get_default_layout_request=dict(dtype=f32, dims=[4],  # not its own
                                                           device_id=(own + 1) % DEVICES))
        if kind == 13:
            return Request(loaded_host_callback_poll_request=dict(
                loaded_host_callback_handle=big, operand_host_buffer_handle=i))
        if kind == 14:
            return Request(check_future_request=dict(future_handle=big)) if i % 2 else Request(
                loaded_executable_fetch_execute_result_request=dict(result_status_handle=big))
        return Request(disassemble_into_single_device_arrays_request=dict(
            array_handle=big, result_handles=[1, 1, 1]))

    for i in range(count):
        if i % 4 == 0:  # bytes: truncated, with flipped bits, or random
            data = bytearray(valid if i % 8 else rng.bytes(int(rng.integers(1, 200))))
            for _ in range(int(rng.integers(1, 6))):
                data[int(rng.integers(len(data)))] ^= 1 << int(rng.integers(8))
            data = bytes(data[:int(rng.integers(1, len(data) + 1))])
            if _parses_into_an_operation(Request, data):
                continue  # a well-formed request by chance: not hostile
            yield data
        else:
            message = hostile(i)
            message.request_metadata.op_id = 1_000_000 + i
            yield message.SerializeToString()


def _parses_into_an_operation(Request: type, data: bytes) -> bool:
    try:
        return Request.FromString(data).WhichOneof("request") not in (None, "init_request")
    except Exception:  # noqa: BLE001
        return False


def test_fuzzed_messages_get_errors_and_other_sessions_keep_their_data(server: Server) -> None:
    keeper = Client(server.address, devices=2)
    keeper.run("""
        import jax, numpy as np
        kept = jax.device_put(np.arange(1000, dtype=np.float32), jax.devices("ipu")[1])
        result = None
    """)
    raw = RawSession(server.address, devices=1)
    rng = np.random.default_rng(26)
    sent = errors = 0
    try:
        for data in _fuzz(raw, 1300, rng):
            raw.send(data)
            answer = raw.receive(timeout=30)
            assert answer is not None and not isinstance(answer, Exception), answer
            sent += 1
            errors += answer.response_metadata.status.code != CODES["OK"]
        # the other calls of the service, hostile too
        for data in (rng.bytes(30), b"\xff" * 10, b""):
            with pytest.raises(Exception):  # noqa: B017 - any gRPC error status
                raw.unary("HostBufferDelete", data)
            sent, errors = sent + 1, errors + 1
        for size in (-1, 10, 1 << 40):  # lies about the size, or past the session's limit
            with pytest.raises(Exception, match="INVALID_ARGUMENT|DATA_LOSS|RESOURCE"):
                raw.store(42, b"\1" * 100, size=size)
            sent, errors = sent + 1, errors + 1
        # jaxlib's client reports a refused store as CANCELLED only: the server's log says why
        assert f"past its {16 << 30} bytes of host buffers (0 held)" in server.log
        with pytest.raises(Exception, match="NOT_FOUND"):
            raw.store(43, b"\1" * 100, session_id=987654321)
        sent, errors = sent + 1, errors + 1
        # chunks that do not parse: a length past the message's end, a wire type 7
        for chunk in (b"\x0a\xff\x01ab", b"\x0f\x01", b"\x0a"):
            with pytest.raises(Exception, match="is not a GrpcHostBufferStoreRequest"):
                raw.store(44, b"\1" * 2, chunks=[chunk])
            sent, errors = sent + 1, errors + 1
        # fields a chunk may carry besides its data are skipped, as protobuf skips them
        extra = b"\x10\x96\x01" + b"\x0a\x03abc" + b"\x19" + bytes(8) + b"\x25" + bytes(4)
        raw.store(45, b"abcde", chunks=[extra, b"\x0a\x02de"])
        assert b"".join(raw.lookup(45)) == b"abcde"
        # the fuzzed session still works
        own = raw.init.init_response.all_devices[0].id
        answer = raw.request(make_array_from_host_buffer_request=_put(raw, own, 3))
        assert answer.response_metadata.status.code == CODES["OK"], answer
    finally:
        raw.close()
    assert sent >= 1000 and errors == sent, (sent, errors)
    assert server.proc.poll() is None  # no crash
    assert keeper.run("result = float(np.asarray(kept).sum())") == 499500.0
    keeper.close()


def test_requests_naming_a_deleted_array_get_answers_and_the_server_lives(
        server: Server) -> None:
    """jaxlib 0.10.2 crashes the process on some members of a deleted Array (is_ready among
    them); the server asked is_ready of arrays a session had deleted, and died with every
    session on it."""
    raw = RawSession(server.address, devices=1)
    try:
        own = raw.init.init_response.all_devices[0].id
        assert raw.request(make_array_from_host_buffer_request=_put(
            raw, own, 7)).response_metadata.status.code == CODES["OK"]
        assert raw.request(delete_array_request=dict(
            array_handle=[7])).response_metadata.status.code == CODES["OK"]
        answers = {which: raw.request(**{which: fields}) for which, fields in {
            "check_value_ready_request": dict(value_handles=[7]),
            "copy_to_host_buffer_request": dict(array_handle=7, host_buffer_handle=70),
            "copy_arrays_request": dict(array_handles=[7], device_ids=[own], result_handles=[8]),
            "disassemble_into_single_device_arrays_request": dict(array_handle=7,
                                                                  result_handles=[9]),
            "fully_replicated_shard_request": dict(array_handle=7, result_handle=10),
            "is_array_deleted_request": dict(array_handle=7),
            "delete_array_request": dict(array_handle=[7]),
        }.items()}
        assert answers["is_array_deleted_request"].is_array_deleted_response.deleted
        for which, answer in answers.items():
            status = answer.response_metadata.status
            if which in ("is_array_deleted_request", "delete_array_request"):
                assert status.code == CODES["OK"], answer
            else:
                assert (status.code, status.message) == (CODES["INVALID_ARGUMENT"], (
                    "array handle 7 was deleted (by a delete or by donation to a "
                    "computation)")), answer
        assert raw.request(make_array_from_host_buffer_request=_put(
            raw, own, 11)).response_metadata.status.code == CODES["OK"]  # still serving
    finally:
        raw.close()
    assert server.proc.poll() is None

    # A client deleting a result still being computed (the session holds it until it is).
    client = Client(server.address, devices=1)
    try:
        assert client.run("""
            import jax, jax.numpy as jnp, numpy as np
            d = jax.devices("ipu")[0]
            slow = jax.jit(lambda a: jax.lax.fori_loop(0, 30, lambda i, b: jnp.tanh(b @ a), a))
            x = jax.device_put(np.full((512, 512), 1e-3, np.float32), d)
            slow(x).block_until_ready()
            y = slow(x)
            y.delete()
            errors = []
            for member in (y.is_ready, y.clone, y.platform, lambda: y._pjrt_layout):
                try:
                    member()
                except RuntimeError as exc:
                    errors.append(str(exc))
            result = errors, np.unique(np.asarray(x + 1)).tolist()
        """) == [["Array has been deleted with shape=float32[512,512]."] * 4,
                 [float(np.float32(1e-3) + np.float32(1))]]
    finally:
        client.close()
    assert server.proc.poll() is None


def test_compile_requests_of_other_sessions_devices_are_refused() -> None:
    """A program whose options assign devices outside the session's partition is refused
    before it compiles (checked on the server's compile entry with a real assignment)."""
    from jax_ipu.remote.backend import Backend

    options = _internals.CompileOptions()
    options.executable_build_options.device_assignment = _internals.DeviceAssignment.create(
        np.array([[0]]))
    with pytest.raises(PermissionError, match=r"devices \[0\], outside this session's partition"):
        Backend().compile(jax.jit(lambda x: x).lower(np.ones(2)).as_text().encode(),
                          options.SerializeAsString(), frozenset({1}))


def test_a_killed_clients_pending_host_callback_fails_and_hostile_polls_get_errors(
        server: Server) -> None:
    """A client killed while the server's program waits in its host callback: the session
    closes, the waiting computation fails (XLA's thread is released), its devices are free.
    Polls and returns that name no session's channel, or do not parse, get errors."""
    import grpc

    before = len(_closed_sessions(server))
    waiting = Client(server.address, devices=2)
    assert waiting.run("""
        import threading
        import jax, numpy as np
        started = threading.Event()
        def slow(v):
            started.set()
            threading.Event().wait(600)  # longer than the test: it ends by the kill
            return v
        f = jax.jit(lambda x: jax.pure_callback(slow, x, x))
        x = jax.device_put(np.ones(2, np.float32), jax.devices("ipu")[0])
        threading.Thread(target=lambda: f(x).block_until_ready(), daemon=True).start()
        result = started.wait(120)
    """) is True
    waiting.kill()
    wait_for(lambda: len(_closed_sessions(server)) > before,
             what="the killed client's session to close")
    every = Client(server.address, devices=DEVICES)  # every device: the killed one's are free
    try:
        assert every.run("""
            import jax, numpy as np
            seen = []
            f = jax.jit(lambda x: (jax.debug.callback(seen.append, x), x + 1)[1])
            y = f(jax.device_put(np.arange(3, dtype=np.float32), jax.devices("ipu")[5]))
            result = [np.asarray(y).tolist(), [np.asarray(v).tolist() for v in seen]]
        """) == [[1.0, 2.0, 3.0], [[0.0, 1.0, 2.0]]]
        channel = grpc.insecure_channel(server.address.removeprefix("grpc://"))
        service = "/xla.ifrt.proxy.GrpcIfrtService/"
        poll = channel.unary_unary(service + hostcalls.POLL)
        answer = channel.unary_unary(service + hostcalls.RETURN)
        stranger = "0" * 32  # no session's channel
        for call, data, code in [
                (poll, b"\xff\xff\xff", grpc.StatusCode.INVALID_ARGUMENT),
                (poll, hostcalls.poll_request(stranger, 0.1), grpc.StatusCode.NOT_FOUND),
                (answer, hostcalls.return_request(stranger, 1, [np.ones(2)]),
                 grpc.StatusCode.NOT_FOUND),
                (answer, b"\x0a\x05", grpc.StatusCode.INVALID_ARGUMENT)]:
            with pytest.raises(grpc.RpcError) as refused:
                call(data, timeout=30)
            assert refused.value.code() == code, (data, refused.value)
        channel.close()
        assert every.run("result = float(np.asarray(f(np.ones(2, np.float32))).sum())") == 4.0
    finally:
        every.close()


def test_sigterm_ends_sessions_and_clients_get_an_error(server: Server) -> None:
    """Last in this module: it stops the module's server. Its sessions are drained: each
    client's next call raises the server's reason, then the server exits 0."""
    clients = [Client(server.address, devices=1) for _ in range(2)]
    for c in clients:
        c.run("""
            import jax, numpy as np
            x = jax.device_put(np.ones(3, np.float32), jax.devices("ipu")[0])
            result = float(np.asarray(x).sum())
        """)
    server.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "shutting down" in server.log or server.proc.poll() is not None,
             what="the server to start stopping")
    for c in clients:
        err = c.error("np.asarray(jax.device_put(np.ones(3, np.float32), "
                      "jax.devices('ipu')[0]) + 1)", timeout=60)
        assert "UNAVAILABLE" in err.message and "is shutting down (SIGTERM)" in err.message, err
        c.close()
    assert server.proc.wait(30) == 0  # drained once its clients left, and exited
    assert len(re.findall(r"closed \(the jax-ipu server at .* is shutting down \(SIGTERM\)",
                          server.log)) == 2


def test_a_remap_plan_takes_shards_by_interval_and_refuses_what_does_not_fit() -> None:
    """RemapArrays (jax's move of an array to a reversed mesh): each mapping's k-th interval of
    input shards fills its k-th interval of output positions; a hostile plan is an error."""
    from types import SimpleNamespace

    from jax_ipu.remote.session import Status, _remapped

    def mapping(i: int, o: int, *intervals: tuple[int, int, int, int, int, int]
                ) -> SimpleNamespace:
        names = ("from_start", "from_end", "from_step", "to_start", "to_end", "to_step")
        return SimpleNamespace(in_array=i, out_array=o, **{
            name: [iv[k] for iv in intervals] for k, name in enumerate(names)})

    held = [["a0", "a1", "a2", "a3"], ["b0", "b1"]]
    reverse = [mapping(0, 0, *[(k, k + 1, 1, 3 - k, 4 - k, 1) for k in range(4)]),
               mapping(1, 1, (0, 2, 1, 0, 4, 2))]
    assert _remapped(reverse, held, [4, 4]) == [["a3", "a2", "a1", "a0"],
                                                ["b0", None, "b1", None]]
    for bad, message in [
            (mapping(2, 0, (0, 1, 1, 0, 1, 1)), "the plan has 2 and 1"),
            (mapping(0, 0, (0, 2, 1, 0, 1, 1)), "does not fit"),   # 2 shards to 1 place
            (mapping(0, 0, (3, 5, 1, 0, 2, 1)), "does not fit"),   # past the input's end
            (mapping(0, 0, (0, 1, 0, 0, 1, 1)), "steps must be positive"),
            (SimpleNamespace(in_array=0, out_array=0, from_start=[0], from_end=[1],
                             from_step=[1], to_start=[], to_end=[], to_step=[]),
             "differ in number")]:
        with pytest.raises(Status, match=message):
            _remapped([bad], held, [1])
