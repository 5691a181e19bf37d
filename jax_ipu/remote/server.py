"""`python -m jax_ipu serve`: the gRPC service xla.ifrt.proxy.GrpcIfrtService over this process's
IPU Model devices, with sessions, partitions of devices and an optional token.

Every call is answered: a version outside the client's range, a wrong token or a busy server is
an error the client reports, never a silence it would wait on forever."""

from __future__ import annotations

import hmac
import ipaddress
import logging
import secrets
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import numpy as np

from jax_ipu.errors import IpuError
from jax_ipu.protowire import WireError, fields
from jax_ipu.remote import schema as schema_mod
from jax_ipu.remote.backend import Backend
from jax_ipu.remote.client import DEVICES_KEY, TOKEN_KEY
from jax_ipu.remote.hostbuffers import CHUNK, HostBufferError
from jax_ipu.remote.ifrt import Codec
from jax_ipu.remote.session import CODES, Session, Status, status_of

logger = logging.getLogger(__name__)

SESSION_HEADER = "ifrt-proxy-grpc-ifrt-session-metadata-bin"
STORE_HEADER = "ifrt-proxy-grpc-host-buffer-store-metadata-bin"
MAX_SESSIONS = 32
# Seconds a stopping server keeps its sessions' streams open, answering every request with its
# reason, before it closes them: a client's next call gets that error while it is connected (a
# jaxlib client whose connection is gone may abort on some calls instead; see the docs).
DRAIN_SECONDS = 5.0


class ServeError(IpuError):
    """The server cannot start as asked (an exposed address without a token, say)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class Partition:
    session_id: int
    device_ids: tuple[int, ...]


class Partitions:
    """Which session holds which devices: a session holds a partition of its own, as V-IPU gives
    each user of a Pod; partitions never overlap."""

    def __init__(self, device_ids: Sequence[int]) -> None:
        self.device_ids = tuple(device_ids)
        self._held: dict[int, Partition] = {}
        self._lock = threading.Lock()

    def take(self, session_id: int, count: int | None) -> Partition:
        total = len(self.device_ids)
        with self._lock:
            busy = {d for p in self._held.values() for d in p.device_ids}
            free = [d for d in self.device_ids if d not in busy]
            want = total if count is None else count
            if not 1 <= want <= total:
                raise Status("INVALID_ARGUMENT", f"a partition of {want} devices: this server "
                             f"has {total} (ask for 1 to {total} with JAX_IPU_REMOTE_DEVICES)")
            if len(free) < want:
                held = ", ".join(f"{len(p.device_ids)} ({list(p.device_ids)})"
                                 for p in self._held.values())
                raise Status(
                    "RESOURCE_EXHAUSTED",
                    f"this server's {total} ipu devices are taken: {len(free)} free, "
                    f"{want} asked for; {len(self._held)} session(s) hold partitions of "
                    f"{held}. Ask for fewer devices (JAX_IPU_REMOTE_DEVICES=k), wait for a "
                    "session to end, or start the server with more (--devices N).")
            partition = Partition(session_id, tuple(free[:want]))
            self._held[session_id] = partition
            return partition

    def release(self, session_id: int) -> None:
        with self._lock:
            self._held.pop(session_id, None)

    @property
    def held(self) -> dict[int, tuple[int, ...]]:
        with self._lock:
            return {s: p.device_ids for s, p in self._held.items()}


class IfrtProxyServer:
    """The service: GetVersion, IfrtSession and the host buffer calls, over a gRPC server."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8470, token: str | None = None,
                 max_sessions: int = MAX_SESSIONS) -> None:
        if not is_loopback(host) and not token:
            raise ServeError(
                f"refusing to serve on {host}, which is not a loopback address, without a "
                "token: any host that reaches it could use the devices and read every session's "
                "data. Give one with --token-file PATH (clients set JAX_IPU_REMOTE_TOKEN), or "
                "serve on 127.0.0.1 and reach it through an SSH tunnel (ipu/docs/remote.md).")
        schema_mod.check_jaxlib()
        self.schema = schema_mod.load()
        self.codec = Codec(self.schema)
        self.backend = Backend()
        self.partitions = Partitions(sorted(self.backend.devices))
        self.token = token
        self.host, self.port = host, port
        self.max_sessions = max_sessions
        self.sessions: dict[int, Session] = {}
        self._lock = threading.Lock()
        self._stopping: str | None = None
        self._stopped = threading.Event()
        self._server: Any = None
        m = self.schema.message
        self._VersionRequest = m("xla.ifrt.proxy.GrpcGetVersionRequest")
        self._VersionResponse = m("xla.ifrt.proxy.GrpcGetVersionResponse")
        self._SessionMetadata = m("xla.ifrt.proxy.GrpcIfrtSessionMetadata")
        self._StoreMetadata = m("xla.ifrt.proxy.GrpcHostBufferStoreMetadata")
        self._LookupRequest = m("xla.ifrt.proxy.GrpcHostBufferLookupRequest")
        self._DeleteRequest = m("xla.ifrt.proxy.GrpcHostBufferDeleteRequest")
        self._IfrtRequest = m("xla.ifrt.proxy.IfrtRequest")

    # ---- lifetime ----
    def start(self) -> int:
        """Bind and serve; the port bound (useful with port 0)."""
        import grpc

        # A thread per call in progress (a session's stream holds one): past that, a call is
        # refused at once (RESOURCE_EXHAUSTED), never queued behind calls that may wait long.
        threads = 2 * self.max_sessions + 8
        self._server = grpc.server(
            futures.ThreadPoolExecutor(threads, thread_name_prefix="ipu-remote-rpc"),
            options=[("grpc.max_receive_message_length", -1),
                     ("grpc.max_send_message_length", -1),
                     ("grpc.so_reuseport", 0)],
            maximum_concurrent_rpcs=threads)
        self._server.add_generic_rpc_handlers((self._handlers(grpc),))
        address = f"[{self.host.strip('[]')}]" if ":" in self.host else self.host
        port = self._server.add_insecure_port(f"{address}:{self.port}")
        if port == 0:
            raise ServeError(f"cannot bind {self.host}:{self.port} (in use?)")
        self.port = port
        self._server.start()
        logger.info("jax-ipu server on %s:%d serving %d ipu devices", self.host, port,
                    len(self.partitions.device_ids))
        return port

    def stop(self, reason: str, drain: float = DRAIN_SECONDS, grace: float = 2.0) -> None:
        """Stop serving: refuse new sessions, answer every request of the open ones with
        `reason` for up to `drain` seconds (or until their clients leave), then close them."""
        with self._lock:
            first = self._stopping is None
            self._stopping = reason
            sessions = list(self.sessions.values())
        if first:
            logger.info("%s: draining %d session(s) for up to %g s", reason, len(sessions),
                        drain)
            for session in sessions:
                session.drain(reason)
            deadline = time.monotonic() + drain
            while self.sessions and time.monotonic() < deadline and not self._stopped.is_set():
                time.sleep(0.1)
        self._stopped.set()
        if self._server is not None:
            self._server.stop(grace).wait(grace + 5)

    def wait(self) -> None:
        if self._server is not None:
            self._server.wait_for_termination()

    def _handlers(self, grpc: Any) -> Any:
        def raw(x: bytes) -> bytes:
            return x

        prefix = f"/{schema_mod.SERVICE}/"
        methods = {prefix + name: handler for name, handler in {
            "GetVersion": grpc.unary_unary_rpc_method_handler(
                self.get_version, request_deserializer=raw, response_serializer=raw),
            "IfrtSession": grpc.stream_stream_rpc_method_handler(
                self.ifrt_session, request_deserializer=raw, response_serializer=raw),
            "HostBufferStore": grpc.stream_unary_rpc_method_handler(
                self.host_buffer_store, request_deserializer=raw, response_serializer=raw),
            "HostBufferLookup": grpc.unary_stream_rpc_method_handler(
                self.host_buffer_lookup, request_deserializer=raw, response_serializer=raw),
            "HostBufferDelete": grpc.unary_unary_rpc_method_handler(
                self.host_buffer_delete, request_deserializer=raw, response_serializer=raw),
            "HostBufferReadFromDisk": grpc.unary_unary_rpc_method_handler(
                self.host_buffer_read_from_disk, request_deserializer=raw,
                response_serializer=raw),
        }.items()}
        lookup = prefix + "HostBufferLookup"
        # The same answer on the wire as the streaming handler's for a buffer of one message,
        # which grpc sends with the call's status in one write (a stream's last message and its
        # status are two, with a wait between them).
        lookup_whole = grpc.unary_unary_rpc_method_handler(
            self.host_buffer_lookup_whole, request_deserializer=raw, response_serializer=raw)
        server = self

        class Service(grpc.GenericRpcHandler):
            def service(self, details: Any) -> Any:
                # Which buffer a lookup asks for is in its request, not known here; a client
                # asks only for a buffer stored before, so while no session holds one of more
                # than CHUNK bytes, every lookup is of one message.
                if details.method == lookup and not server._large_buffers():
                    return lookup_whole
                return methods.get(details.method)

        return Service()

    # ---- GetVersion ----
    def get_version(self, data: bytes, context: Any) -> bytes:
        request = self._parse(self._VersionRequest, data, context)
        low = max(request.min_version.protocol_version, schema_mod.PROTOCOL_MIN)
        high = min(request.max_version.protocol_version, schema_mod.PROTOCOL_MAX)
        serdes = schema_mod.SESSION_SERDES
        if low > high or not (request.min_version.ifrt_serdes_version_number <= serdes
                              <= request.max_version.ifrt_serdes_version_number):
            _abort(context, Status(
                "FAILED_PRECONDITION",
                f"this jax-ipu server speaks IFRT proxy protocol versions "
                f"{schema_mod.PROTOCOL_MIN}-{schema_mod.PROTOCOL_MAX} (IFRT SerDes {serdes}), "
                f"the client {request.min_version.protocol_version}-"
                f"{request.max_version.protocol_version} (SerDes "
                f"{request.min_version.ifrt_serdes_version_number}-"
                f"{request.max_version.ifrt_serdes_version_number}): use jax and jaxlib "
                f"{schema_mod.BUILT_FOR_JAXLIB} on the client, as on the server."))
        response = self._VersionResponse()
        response.version.protocol_version = high
        response.version.ifrt_serdes_version_number = serdes
        return response.SerializeToString()

    # ---- IfrtSession ----
    def ifrt_session(self, requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
        """One client's session: its InitRequest answered, then every request in order, on
        this one thread (a request read, answered and sent without changing threads)."""
        try:
            first = next(requests)
        except Exception:  # noqa: BLE001 - the client went away before asking anything
            return
        request = self._IfrtRequest()
        try:
            request.ParseFromString(first)
        except Exception:  # noqa: BLE001
            request = self._IfrtRequest()
        op_id = request.request_metadata.op_id
        session_id = secrets.randbits(63) | 1
        try:
            if request.WhichOneof("request") != "init_request":
                raise Status("FAILED_PRECONDITION",
                             "a session's first request must be an InitRequest")
            session = self._open(session_id, self._session_options(context))
        except Exception as exc:  # noqa: BLE001 - refused: answered, then the stream ends
            yield self._refusal(op_id, status_of(exc))
            return
        # A client gone while a request waits for a host buffer: the wait ends.
        context.add_callback(lambda: session.host_buffers.close("the client disconnected"))
        reason = "the session ended"
        try:
            yield session.init_response(op_id, self.backend.client.platform_version)
            for data in requests:
                yield session.handle(data)
        except Exception as exc:  # noqa: BLE001 - the client disconnected or was killed
            reason = f"the stream ended: {type(exc).__name__} {exc}".strip()
        finally:
            self._close(session_id, self._stopping or reason)

    def _session_options(self, context: Any) -> dict[str, Any]:
        raw = dict(context.invocation_metadata()).get(SESSION_HEADER)
        metadata = self._SessionMetadata()
        try:
            metadata.ParseFromString(raw if isinstance(raw, bytes) else b"")
        except Exception:  # noqa: BLE001
            raise Status("INVALID_ARGUMENT", "the session metadata header does not parse"
                         ) from None
        version = metadata.version.protocol_version
        if not schema_mod.PROTOCOL_MIN <= version <= schema_mod.PROTOCOL_MAX:
            raise Status("FAILED_PRECONDITION",
                         f"protocol version {version} is not one this server speaks "
                         f"({schema_mod.PROTOCOL_MIN}-{schema_mod.PROTOCOL_MAX})")
        values = (self.codec.attribute_values(metadata.initialization_data)
                  if metadata.HasField("initialization_data") else {})
        return values

    def _open(self, session_id: int, options: dict[str, Any]) -> Session:
        if self.token is not None:
            given = options.get(TOKEN_KEY)
            if not isinstance(given, str) or not hmac.compare_digest(given.encode(),
                                                                     self.token.encode()):
                raise Status("UNAUTHENTICATED",
                             "this jax-ipu server needs a token and the client "
                             + ("gave a wrong one" if given else "gave none")
                             + ": set JAX_IPU_REMOTE_TOKEN to the server's token")
        count = options.get(DEVICES_KEY)
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
            raise Status("INVALID_ARGUMENT", f"devices={count!r}: a whole number of devices")
        with self._lock:
            if self._stopping is not None:
                raise Status("UNAVAILABLE", self._stopping)
            if len(self.sessions) >= self.max_sessions:
                raise Status("RESOURCE_EXHAUSTED", f"this server has {len(self.sessions)} "
                             f"sessions, its limit: try again when one ends")
            partition = self.partitions.take(session_id, count)
            session = Session(self.schema, self.backend, session_id, partition.device_ids)
            self.sessions[session_id] = session
        logger.info("session %x opened on devices %s", session_id, partition.device_ids)
        return session

    def _close(self, session_id: int, reason: str) -> None:
        with self._lock:
            session = self.sessions.pop(session_id, None)
        if session is not None:
            freed = session.close(reason)
            self.partitions.release(session_id)
            logger.info("session %x closed (%s): %s", session_id, reason, freed)

    def _refusal(self, op_id: int, status: Status) -> bytes:
        response = self.schema.message("xla.ifrt.proxy.IfrtResponse")()
        response.response_metadata.op_id = op_id
        response.response_metadata.status.code = CODES[status.code]
        response.response_metadata.status.message = status.message
        return response.SerializeToString()

    # ---- host buffers ----
    def _session(self, session_id: int, context: Any) -> Session:
        with self._lock:
            session = self.sessions.get(session_id)
        if session is None:
            _abort(context, Status("NOT_FOUND", "no such session on this server (it ended?)"))
        return session

    def host_buffer_store(self, chunks: Iterator[bytes], context: Any) -> bytes:
        raw = dict(context.invocation_metadata()).get(STORE_HEADER)
        metadata = self._parse(self._StoreMetadata, raw if isinstance(raw, bytes) else b"",
                               context)
        session = self._session(metadata.session_id, context)
        size = metadata.buffer_size
        try:
            if size < 0:
                raise HostBufferError("INVALID_ARGUMENT", f"buffer_size {size}")
            session.host_buffers.reserve(size)
            # A buffer sent in one message (a training batch, say) is kept as it came, a view of
            # grpc's bytes; one in several is copied into one array as its pieces arrive.
            first: memoryview | None = None
            buffer: np.ndarray | None = None
            filled = 0
            for chunk in chunks:
                for number, value in fields(chunk):
                    if number != 1 or isinstance(value, int):
                        continue
                    end = filled + len(value)
                    if end > size:
                        raise HostBufferError("INVALID_ARGUMENT",
                                              f"host buffer {metadata.handle} runs past its "
                                              f"buffer_size {size}")
                    if first is None:
                        first = value
                    else:
                        if buffer is None:
                            buffer = np.empty(size, np.uint8)  # filled here: not zeroed first
                            buffer[:filled] = first
                        buffer[filled:end] = value
                    filled = end
            if filled != size:
                raise HostBufferError("DATA_LOSS", f"host buffer {metadata.handle}: {filled} "
                                      f"of its {size} bytes arrived")
            data = (memoryview(buffer).cast("B") if buffer is not None else
                    first if first is not None else memoryview(b""))
            session.host_buffers.store(metadata.handle, data)
        except (HostBufferError, WireError) as exc:
            _abort(context, status_of(exc))
        return b""

    def _lookup(self, data: bytes, context: Any) -> memoryview:
        request = self._parse(self._LookupRequest, data, context)
        session = self._session(request.session_id, context)
        # Never waited for: a client asks only for a buffer the server has answered it stored.
        buffer = session.host_buffers.peek(request.handle)
        if buffer is None:
            _abort(context, Status("NOT_FOUND", f"no host buffer {request.handle} in this "
                                   "session"))
        return memoryview(buffer)

    def host_buffer_lookup(self, data: bytes, context: Any) -> Iterator[bytes]:
        view = self._lookup(data, context)
        if not len(view):
            yield b""
        for start in range(0, len(view), CHUNK):
            yield _lookup_message(view[start:start + CHUNK])

    def host_buffer_lookup_whole(self, data: bytes, context: Any) -> bytes:
        """A lookup answered with one message, whatever the buffer's size (the client takes
        any); used while no buffer is larger than one CHUNK."""
        view = self._lookup(data, context)
        return _lookup_message(view) if len(view) else b""

    def _large_buffers(self) -> bool:
        with self._lock:
            return any(s.host_buffers.large for s in self.sessions.values())

    def host_buffer_delete(self, data: bytes, context: Any) -> bytes:
        request = self._parse(self._DeleteRequest, data, context)
        session = self._session(request.session_id, context)
        try:
            session.host_buffers.delete(request.handle)
        except HostBufferError as exc:
            _abort(context, status_of(exc))
        return b""

    def host_buffer_read_from_disk(self, data: bytes, context: Any) -> bytes:
        _abort(context, Status("UNIMPLEMENTED", "the jax-ipu server reads no host buffers from "
                               "disk: it shares no directory with its clients"))
        return b""

    def _parse(self, cls: type, data: bytes, context: Any) -> Any:
        message = cls()
        try:
            message.ParseFromString(data)
        except Exception:  # noqa: BLE001
            _abort(context, Status("INVALID_ARGUMENT",
                                   f"the request is not a {cls.DESCRIPTOR.full_name}"))
        return message


def _abort(context: Any, status: Status) -> None:
    import grpc

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


def serve(host: str, port: int, token: str | None, ready: Any = print) -> int:
    """Serve until SIGINT or SIGTERM, then end every session with an error its client sees."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    server = IfrtProxyServer(host, port, token)
    bound = server.start()
    stopped = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        # The first signal drains the sessions (DRAIN_SECONDS at most), a second one ends now.
        name = signal.Signals(signum).name
        threading.Thread(target=server.stop, args=(
            f"the jax-ipu server at {host}:{bound} is shutting down ({name})",),
            kwargs={"drain": 0.0 if stopped.is_set() else DRAIN_SECONDS}, daemon=True).start()
        stopped.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    ready(f"jax-ipu server listening on {host}:{bound} with "
          f"{len(server.partitions.device_ids)} ipu device(s)"
          + (", token required" if token else ""), flush=True)
    while not stopped.wait(0.5):
        pass
    server.wait()
    logger.info("stopped")
    return 0

