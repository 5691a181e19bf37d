"""The server's calls carried by grpcio's Python server: portable (grpcio's wheel is all it
needs), and about 85 us of CPU a message slower than the C++ transport."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from typing import Any

import numpy as np

from jax_ipu.protowire import WireError, fields
from jax_ipu.remote import hostcalls
from jax_ipu.remote import schema as schema_mod
from jax_ipu.remote.hostbuffers import CHUNK
from jax_ipu.remote.session import Status, status_of


class GrpcioTransport:
    """A grpc.server with one generic handler; calls go to the service (server.py)."""

    name = "grpcio"

    def __init__(self, service: Any, address: str, threads: int) -> None:
        import grpc

        self._service = service
        self._server = grpc.server(
            futures.ThreadPoolExecutor(threads, thread_name_prefix="ipu-remote-rpc"),
            options=[("grpc.max_receive_message_length", -1),
                     ("grpc.max_send_message_length", -1),
                     ("grpc.so_reuseport", 0)],
            maximum_concurrent_rpcs=threads)
        self._server.add_generic_rpc_handlers((self._handlers(grpc),))
        try:
            self.port = self._server.add_insecure_port(address)
        except RuntimeError:  # grpcio's way of saying so; older releases returned port 0
            self.port = 0
        if self.port == 0:
            raise OSError(f"cannot bind {address} (in use?)")
        self._server.start()

    def stop(self, grace: float) -> None:
        self._server.stop(grace).wait(grace + 5)

    def wait(self) -> None:
        self._server.wait_for_termination()

    def _handlers(self, grpc: Any) -> Any:
        service = self._service

        def raw(x: bytes) -> bytes:
            return x

        def unary(name: str) -> Any:
            def handle(data: bytes, context: Any) -> bytes:
                try:
                    return service.unary(name, data)
                except Exception as exc:  # noqa: BLE001 - every error is an answer
                    _abort(context, exc)
                return b""

            return grpc.unary_unary_rpc_method_handler(
                handle, request_deserializer=raw, response_serializer=raw)

        def stream(kind: Any, handler: Any) -> Any:
            return kind(handler, request_deserializer=raw, response_serializer=raw)

        prefix = f"/{schema_mod.SERVICE}/"
        methods = {prefix + name: unary(name)
                   for name in ("GetVersion", "HostBufferDelete", "HostBufferReadFromDisk",
                                hostcalls.POLL, hostcalls.RETURN)}
        methods[prefix + "IfrtSession"] = stream(grpc.stream_stream_rpc_method_handler,
                                                 self._session)
        methods[prefix + "HostBufferStore"] = stream(grpc.stream_unary_rpc_method_handler,
                                                     self._store)
        methods[prefix + "HostBufferLookup"] = stream(grpc.unary_stream_rpc_method_handler,
                                                      self._lookup)
        lookup = prefix + "HostBufferLookup"
        # The same answer on the wire as the streaming handler's for a buffer of one message,
        # which grpc sends with the call's status in one write (a stream's last message and its
        # status are two, with a wait between them).
        lookup_whole = stream(grpc.unary_unary_rpc_method_handler, self._lookup_whole)

        class Service(grpc.GenericRpcHandler):
            def service(self, details: Any) -> Any:
                # Which buffer a lookup asks for is in its request, not known here; a client
                # asks only for a buffer stored before, so while no session holds one of more
                # than CHUNK bytes, every lookup is of one message.
                if details.method == lookup and not service.large_buffers():
                    return lookup_whole
                return methods.get(details.method)

        return Service()

    def _session(self, requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
        """One client's session, on this one thread (a request read, answered and sent
        without changing threads)."""
        stream = self._service.session_stream(_metadata(context))
        # A client gone while a request waits for a host buffer: the wait ends.
        context.add_callback(stream.cancelled)
        reason = "the session ended"
        try:
            for data in requests:
                reply, go_on = stream.message(data)
                yield reply
                if not go_on:
                    return
        except Exception as exc:  # noqa: BLE001 - the client disconnected or was killed
            reason = f"the stream ended: {type(exc).__name__} {exc}".strip()
        finally:
            stream.end(reason)

    def _store(self, chunks: Iterator[bytes], context: Any) -> bytes:
        try:
            target = self._service.store_target(_metadata(context))
            size = target.size
            # A buffer sent in one message (a training batch, say) is kept as it came, a view
            # of grpc's bytes; one in several is copied into one array as its pieces arrive.
            first: memoryview | None = None
            buffer: np.ndarray | None = None
            filled = 0
            problem = None
            try:
                for chunk in chunks:
                    for number, value in fields(chunk):
                        if number != 1 or isinstance(value, int):
                            continue
                        end = filled + len(value)
                        if end > size:
                            problem = "overflow"
                            break
                        if first is None:
                            first = value
                        else:
                            if buffer is None:
                                buffer = np.empty(size, np.uint8)  # filled here: not zeroed
                                buffer[:filled] = first
                            buffer[filled:end] = value
                        filled = end
                    if problem:
                        break
            except WireError:
                problem = "malformed"
            data = (memoryview(buffer).cast("B") if buffer is not None else
                    first if first is not None else memoryview(b""))
            target.finish(data, filled, problem)
        except Exception as exc:  # noqa: BLE001 - every error is an answer
            _abort(context, exc)
        return b""

    def _lookup(self, data: bytes, context: Any) -> Iterator[bytes]:
        try:
            view = self._service.lookup(data)
        except Exception as exc:  # noqa: BLE001
            _abort(context, exc)
        if not len(view):
            yield b""
        for start in range(0, len(view), CHUNK):
            yield _lookup_message(view[start:start + CHUNK])

    def _lookup_whole(self, data: bytes, context: Any) -> bytes:
        """A lookup answered with one message, whatever the buffer's size (the client takes
        any); used while no buffer is larger than one CHUNK."""
        try:
            view = self._service.lookup(data)
        except Exception as exc:  # noqa: BLE001
            _abort(context, exc)
        return _lookup_message(view) if len(view) else b""


def _metadata(context: Any) -> dict[str, bytes]:
    """The call's binary headers (the only kind the protocol sends)."""
    return {k: v for k, v in context.invocation_metadata() if isinstance(v, bytes)}


def _abort(context: Any, exc: BaseException) -> None:
    import grpc

    status: Status = status_of(exc)
    context.abort(getattr(grpc.StatusCode, status.code), status.message)


def _lookup_message(chunk: memoryview) -> bytes:
    """A GrpcHostBufferLookupResponse of `chunk` (field 1, bytes), framed with one copy."""
    return b"".join((b"\n", _varint(len(chunk)), chunk))


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
