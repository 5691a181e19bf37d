"""`python -m jax_ipu serve`: the gRPC service xla.ifrt.proxy.GrpcIfrtService over this process's
IPU Model devices, with sessions, partitions of devices and an optional token.

Every call is answered: a version outside the client's range, a wrong token or a busy server is
an error the client reports, never a silence it would wait on forever."""

from __future__ import annotations

import ctypes
import functools
import hmac
import ipaddress
import logging
import os
import secrets
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax

from jax_ipu.errors import IpuError
from jax_ipu.protowire import Message
from jax_ipu.remote import hostcalls, transports
from jax_ipu.remote import schema as schema_mod
from jax_ipu.remote.backend import Backend
from jax_ipu.remote.client import DEVICES_KEY, SHARED_DIR_KEY, TOKEN_KEY
from jax_ipu.remote.hostbuffers import HostBufferError
from jax_ipu.remote.ifrt import Codec
from jax_ipu.remote.session import CODES, Defer, Session, Status, status_of
from jax_ipu.remote.shareddir import SharedDir

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
                 max_sessions: int = MAX_SESSIONS, transport: str = "auto") -> None:
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
        self.transport = transports.check(transport)
        self._transport: Any = None
        m = self.schema.message
        self._VersionRequest = m("xla.ifrt.proxy.GrpcGetVersionRequest")
        self._VersionResponse = m("xla.ifrt.proxy.GrpcGetVersionResponse")
        self._SessionMetadata = m("xla.ifrt.proxy.GrpcIfrtSessionMetadata")
        self._StoreMetadata = m("xla.ifrt.proxy.GrpcHostBufferStoreMetadata")
        self._LookupRequest = m("xla.ifrt.proxy.GrpcHostBufferLookupRequest")
        self._DeleteRequest = m("xla.ifrt.proxy.GrpcHostBufferDeleteRequest")
        self._ReadFromDiskRequest = m("xla.ifrt.proxy.GrpcHostBufferReadFromDiskRequest")
        self._IfrtRequest = m("xla.ifrt.proxy.IfrtRequest")

    # ---- lifetime ----
    def start(self) -> int:
        """Bind and serve; the port bound (useful with port 0)."""
        # grpcio's transport gives a call in progress a thread and refuses calls past its
        # limit at once (RESOURCE_EXHAUSTED), never queueing them behind calls that may wait
        # long: enough threads that sessions whose requests wait on a host buffer (each holds
        # one meanwhile) never hold them all. The C++ transport hands such requests to threads
        # of their own (defer in SessionStream.message).
        threads = 2 * self.max_sessions + 8
        self._transport = transports.start(self.transport, self, self.host, self.port, threads)
        self.port = self._transport.port
        logger.info("jax-ipu server on %s:%d serving %d ipu devices (%s transport)", self.host,
                    self.port, len(self.partitions.device_ids), self._transport.name)
        return self.port

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
        if self._transport is not None:
            self._transport.stop(grace)

    def wait(self) -> None:
        if self._transport is not None:
            self._transport.wait()

    # ---- GetVersion ----
    def get_version(self, data: bytes) -> bytes:
        request = self._parse(self._VersionRequest, data)
        low = max(request.min_version.protocol_version, schema_mod.PROTOCOL_MIN)
        high = min(request.max_version.protocol_version, schema_mod.PROTOCOL_MAX)
        serdes = schema_mod.SESSION_SERDES
        if low > high or not (request.min_version.ifrt_serdes_version_number <= serdes
                              <= request.max_version.ifrt_serdes_version_number):
            raise Status(
                "FAILED_PRECONDITION",
                f"this jax-ipu server speaks IFRT proxy protocol versions "
                f"{schema_mod.PROTOCOL_MIN}-{schema_mod.PROTOCOL_MAX} (IFRT SerDes {serdes}), "
                f"the client {request.min_version.protocol_version}-"
                f"{request.max_version.protocol_version} (SerDes "
                f"{request.min_version.ifrt_serdes_version_number}-"
                f"{request.max_version.ifrt_serdes_version_number}): use jax and jaxlib "
                f"{schema_mod.BUILT_FOR_JAXLIB} on the client, as on the server.")
        response = self._VersionResponse()
        response.version.protocol_version = high
        response.version.ifrt_serdes_version_number = serdes
        return response.SerializeToString()

    # ---- IfrtSession ----
    def session_stream(self, metadata: Mapping[str, bytes]) -> SessionStream:
        """One client's IfrtSession stream (its header `metadata`), read by the transport."""
        return SessionStream(self, metadata.get(SESSION_HEADER, b""))

    def _session_options(self, header: bytes) -> dict[str, Any]:
        metadata = self._SessionMetadata()
        try:
            metadata.ParseFromString(header)
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
        secret = options.get(hostcalls.CHANNEL_KEY)
        low, high = hostcalls.CHANNEL_BYTES
        if secret is not None and not (isinstance(secret, str) and low * 2 <= len(secret)
                                       <= high * 2):
            raise Status("INVALID_ARGUMENT", f"{hostcalls.CHANNEL_KEY}: a secret of {low} to "
                         f"{high} bytes, as hexadecimal text")
        try:
            shared = SharedDir(options[SHARED_DIR_KEY]) if SHARED_DIR_KEY in options else None
        except HostBufferError as exc:
            raise status_of(exc) from None
        try:
            with self._lock:
                if self._stopping is not None:
                    raise Status("UNAVAILABLE", self._stopping)
                if len(self.sessions) >= self.max_sessions:
                    raise Status("RESOURCE_EXHAUSTED", f"this server has {len(self.sessions)} "
                                 f"sessions, its limit: try again when one ends")
                partition = self.partitions.take(session_id, count)
                session = Session(self.schema, self.backend, session_id, partition.device_ids,
                                  shared, hostcalls.Channel(secret) if secret else None)
                self.sessions[session_id] = session
        except BaseException:
            if shared is not None:
                shared.close()
            raise
        logger.info("session %x opened on devices %s%s", session_id, partition.device_ids,
                    f", shared directory {shared.path}" if shared else "")
        return session

    def _close(self, session_id: int, reason: str) -> None:
        with self._lock:
            session = self.sessions.pop(session_id, None)
        if session is not None:
            freed = session.close(reason)
            self.partitions.release(session_id)
            _trim_heap()
            logger.info("session %x closed (%s): %s", session_id, reason, freed)

    def _refusal(self, op_id: int, status: Status) -> bytes:
        response = self.schema.message("xla.ifrt.proxy.IfrtResponse")()
        response.response_metadata.op_id = op_id
        response.response_metadata.status.code = CODES[status.code]
        response.response_metadata.status.message = status.message
        return response.SerializeToString()

    # ---- host buffers ----
    def _session(self, session_id: int) -> Session:
        with self._lock:
            session = self.sessions.get(session_id)
        if session is None:
            raise Status("NOT_FOUND", "no such session on this server (it ended?)")
        return session

    def store_target(self, metadata: Mapping[str, bytes]) -> StoreTarget:
        """Where a HostBufferStore call's bytes go (its header in `metadata`): checked and
        reserved before any chunk is read."""
        header = self._parse(self._StoreMetadata, metadata.get(STORE_HEADER, b""))
        session = self._session(header.session_id)
        if header.buffer_size < 0:
            raise Status("INVALID_ARGUMENT", f"buffer_size {header.buffer_size}")
        try:
            session.host_buffers.reserve(header.buffer_size)
        except HostBufferError as exc:
            raise self._refused(header.session_id, exc) from None
        return StoreTarget(session, header.handle, header.buffer_size)

    @staticmethod
    def _refused(session_id: int, exc: HostBufferError) -> Status:
        """The answer to a host buffer refused; one past the session's limit is logged too:
        jaxlib's client then ends its session and tells its user only 'CANCELLED'."""
        if exc.code == "RESOURCE_EXHAUSTED":
            logger.warning("session %x: %s", session_id, exc)
        return status_of(exc)

    def lookup(self, data: bytes) -> memoryview:
        """The bytes a HostBufferLookup asks for."""
        request = self._parse(self._LookupRequest, data)
        session = self._session(request.session_id)
        # Never waited for: a client asks only for a buffer the server has answered it stored.
        buffer = session.host_buffers.peek(request.handle)
        if buffer is None:
            raise Status("NOT_FOUND", f"no host buffer {request.handle} in this session")
        return memoryview(buffer)

    def large_buffers(self) -> bool:
        """Whether any session holds a host buffer of more than one lookup message (CHUNK)."""
        with self._lock:
            return any(s.host_buffers.large for s in self.sessions.values())

    def host_buffer_delete(self, data: bytes) -> bytes:
        request = self._parse(self._DeleteRequest, data)
        session = self._session(request.session_id)
        try:
            session.host_buffers.delete(request.handle)
        except HostBufferError as exc:
            raise status_of(exc) from None
        return b""

    def host_buffer_read_from_disk(self, data: bytes) -> bytes:
        """A host buffer the client wrote to its session's shared directory (a client on this
        host with JAX_IPU_REMOTE_SHARED_DIR; ipu/docs/remote.md)."""
        header = self._parse(self._ReadFromDiskRequest, data).metadata
        session = self._session(header.session_id)
        if session.shared_dir is None:
            raise Status("FAILED_PRECONDITION",
                         "this session named no shared directory when it opened, so the server "
                         "cannot read host buffers from files: on the client, set "
                         "JAX_IPU_REMOTE_SHARED_DIR (not jaxlib's IFRT_PROXY_GRPC_LARGE_TRANSFER_* "
                         "variables alone)")
        try:
            session.host_buffers.reserve(header.buffer_size)
            session.host_buffers.store(
                header.handle, session.shared_dir.read(header.handle, header.buffer_size))
        except HostBufferError as exc:
            raise self._refused(header.session_id, exc) from None
        return b""

    # ---- host callbacks (hostcalls.py) ----
    def _host_calls(self, channel: str) -> hostcalls.Channel:
        with self._lock:
            found = [s.host_calls for s in self.sessions.values()
                     if s.host_calls is not None
                     and hmac.compare_digest(s.host_calls.secret.encode(), channel.encode())]
        if not found:
            raise Status("NOT_FOUND", "no session on this server has this host-callback "
                         "channel (it ended?)")
        return found[-1]  # a client that connected again: its newest session

    def host_callback_poll(self, data: bytes, defer: Defer | None = None) -> bytes | None:
        """The calls a session's programs made to its client's host callbacks: those waiting,
        or the first within the poll's wait (on a worker, when the transport can defer)."""
        request = Message(data)  # WireError: INVALID_ARGUMENT
        channel = self._host_calls(request.text(1))
        wait = request.integer(2) / 1000

        def poll() -> bytes:
            try:
                return channel.poll(wait)
            except hostcalls.CallbackError as exc:
                raise Status("NOT_FOUND", str(exc)) from None

        if defer is None:
            return poll()
        defer(poll)
        return None

    def host_callback_return(self, data: bytes) -> bytes:
        request = Message(data)  # WireError: INVALID_ARGUMENT
        try:
            self._host_calls(request.text(1)).answer(request)
        except KeyError as exc:
            raise Status("NOT_FOUND", str(exc.args[0])) from None
        return b""

    def unary(self, method: str, data: bytes, defer: Defer | None = None) -> bytes | None:
        """The answer to a call of one request and one answer, by its method's name (a poll
        for host callbacks may hand `defer` the work that answers it, and return None)."""
        if method == hostcalls.POLL:
            return self.host_callback_poll(data, defer)
        handler = {"GetVersion": self.get_version,
                   "HostBufferDelete": self.host_buffer_delete,
                   "HostBufferReadFromDisk": self.host_buffer_read_from_disk,
                   hostcalls.RETURN: self.host_callback_return}.get(method)
        if handler is None:
            raise Status("UNIMPLEMENTED", f"method {method} is not one of "
                         f"{schema_mod.SERVICE}'s")
        return handler(data)

    def _parse(self, cls: type, data: bytes) -> Any:
        message = cls()
        try:
            message.ParseFromString(data)
        except Exception:  # noqa: BLE001
            raise Status("INVALID_ARGUMENT",
                         f"the request is not a {cls.DESCRIPTOR.full_name}") from None
        return message


class SessionStream:
    """One IfrtSession stream as its transport sees it: each request's answer, in order, and
    whether the stream goes on; the session opens with the first request (an InitRequest)."""

    def __init__(self, server: IfrtProxyServer, header: bytes) -> None:
        self._server = server
        self._header = header
        self._session: Session | None = None
        self._session_id = 0

    def message(self, data: bytes, defer: Defer | None = None) -> tuple[bytes, bool] | None:
        """The answer to one request, and False once the stream is to end (a refusal). Given
        `defer`, a request that may wait is not answered here: defer(work) gets a function that
        answers it (on a thread that may wait), and this returns None."""
        if self._session is not None:
            if defer is None:
                return self._session.handle(data), True
            answer = self._session.handle(data, lambda work: defer(lambda: (work(), True)))
            return None if answer is None else (answer, True)
        server = self._server
        request = server._IfrtRequest()
        try:
            request.ParseFromString(data)
        except Exception:  # noqa: BLE001
            request = server._IfrtRequest()
        op_id = request.request_metadata.op_id
        session_id = secrets.randbits(63) | 1
        try:
            if request.WhichOneof("request") != "init_request":
                raise Status("FAILED_PRECONDITION",
                             "a session's first request must be an InitRequest")
            self._session = server._open(session_id, server._session_options(self._header))
        except Exception as exc:  # noqa: BLE001 - refused: answered, then the stream ends
            return server._refusal(op_id, status_of(exc)), False
        self._session_id = session_id
        return self._session.init_response(op_id, server.backend.client.platform_version), True

    def cancelled(self) -> None:
        """The client is gone: a request waiting for one of its host buffers, or a computation
        waiting in one of its host callbacks, stops waiting."""
        if self._session is not None:
            self._session.host_buffers.close("the client disconnected")
            if self._session.host_calls is not None:
                self._session.host_calls.close("the client disconnected")

    def end(self, reason: str) -> None:
        """The stream is over: the session's arrays, executables and devices are freed."""
        if self._session is not None:
            self._server._close(self._session_id, self._server._stopping or reason)


class StoreTarget:
    """One HostBufferStore call's buffer: `size` bytes, which the transport fills and hands to
    finish()."""

    def __init__(self, session: Session, handle: int, size: int) -> None:
        self.session, self.handle, self.size = session, handle, size

    def finish(self, data: memoryview | bytes | bytearray, filled: int,
               problem: str | None = None) -> None:
        """Store `data` (its first `filled` bytes arrived), or raise the Status of `problem`:
        "overflow" (more bytes than size), "malformed" (a chunk that does not parse)."""
        if problem == "overflow":
            raise Status("INVALID_ARGUMENT", f"host buffer {self.handle} runs past its "
                         f"buffer_size {self.size}")
        if problem is not None:
            raise Status("INVALID_ARGUMENT", f"host buffer {self.handle}: a chunk is not a "
                         "GrpcHostBufferStoreRequest")
        if filled != self.size:
            raise Status("DATA_LOSS", f"host buffer {self.handle}: {filled} of its {self.size} "
                         "bytes arrived")
        try:
            self.session.host_buffers.store(self.handle, memoryview(data).cast("B"))
        except HostBufferError as exc:
            raise status_of(exc) from None


M_ARENA_MAX = -8  # glibc's mallopt parameter


@functools.cache
def _glibc() -> Any:
    """The C library when it is glibc (which has malloc_trim and mallopt), else None."""
    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim, libc.mallopt  # noqa: B018 - absent outside glibc
    except (OSError, AttributeError):
        return None
    return libc


def _limit_arenas() -> None:
    """At most one malloc arena per core (glibc's default is eight): the bytes sessions move are
    allocated and freed on several threads (the transport's, its workers', XLA's), and each arena
    keeps what it freed.
    Measured: a server's memory grew by about 25 MB a session (300 calls and a 16 MiB round
    trip each), 230 to 390 MB in six sessions; flat at about 250 MB with this and _trim_heap."""
    libc = _glibc()
    if libc is not None:
        libc.mallopt(M_ARENA_MAX, max(2, os.cpu_count() or 2))


def _trim_heap() -> None:
    """Give the C heap's free pages back to the system once a session's buffers are freed."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def serve(host: str, port: int, token: str | None, ready: Any = print,
          transport: str = "auto") -> int:
    """Serve until SIGINT or SIGTERM, then end every session with an error its client sees."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    _limit_arenas()
    # Each client's jax has chosen its arrays' dtypes (with jax_enable_x64, int64 and float64):
    # the server holds what it is sent, and must not narrow it to its own default.
    jax.config.update("jax_enable_x64", True)
    server = IfrtProxyServer(host, port, token, transport=transport)
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

