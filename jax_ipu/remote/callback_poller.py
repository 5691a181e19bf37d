"""A remote client's answers to its server's host callbacks: one thread that long-polls the
server for the calls its programs made, runs this process's callables and returns the results.

Started when a program first lowers a host callback; needs grpcio (jax-ipu[remote]), which the
client switch itself does not. The channel's secret travels in the session's initialization_data
(client.connection_options), so the server knows whose calls a poll may take."""

from __future__ import annotations

import logging
import secrets
import threading
import time
from typing import Any

from jax_ipu.compiler.lowering import callbacks
from jax_ipu.protowire import WireError
from jax_ipu.remote import hostcalls
from jax_ipu.remote.schema import SERVICE

logger = logging.getLogger(__name__)

RETRY_S = (0.05, 2.0)  # waits between polls that failed: the first, and the longest
NEEDS_GRPCIO = (
    "host callbacks (jax.debug.print, jax.debug.callback, jax.pure_callback, io_callback, "
    "jax_ipu.InfeedQueue/OutfeedQueue) on a remote IPU Model are called back from the server, "
    "and this client answers them over gRPC, with grpcio, which is not installed: pip install "
    "'jax-ipu[remote]' (or grpcio), or run the program on a local IPU Model (unset "
    "JAX_IPU_REMOTE).")

USED_INSIDE = (
    "a host callback {} the remote IPU Model, which would wait forever: the server runs the "
    "callback's program, and reads nothing more of this client's until the callback returns. "
    "Inside a callback, compute with numpy on its arguments or on jax.devices('cpu'), or "
    "return the values from the jitted function and use them after it.")

# This process's channel secret: chosen once, given to every session the process opens.
SECRET = secrets.token_hex(16)
_answering = threading.local()  # set on the poller's thread while a callback runs
_lock = threading.Lock()
_poller: _Poller | None = None
_target = ""


def serve(target: str) -> None:
    """Answer calls from the server at `target` (grpc://host:port) once a program needs it."""
    global _target
    _target = target.removeprefix("grpc://")
    callbacks.answer_remotely(start)


def answering() -> bool:
    """Whether this thread is running a host callback for the server."""
    return getattr(_answering, "key", None) is not None


def refuse_inside(what: str) -> None:
    """ValueError (USED_INSIDE) when this thread is running a host callback for the server,
    which would never answer what the callback asks of it (`what`, e.g. 'waited for a value
    on'); otherwise nothing."""
    if answering():
        raise ValueError(USED_INSIDE.format(what))


def refuse_waits_inside(array: Any) -> None:
    """refuse_inside for a wait on an array of the remote devices."""
    if answering() and any(d.platform == "ipu" for d in array.sharding.device_set):
        raise ValueError(USED_INSIDE.format("waited for a value on"))


def start() -> None:
    """The poller, started once; ValueError naming what is missing when grpcio is."""
    global _poller
    with _lock:
        if _poller is not None:
            return
        try:
            import grpc
        except ImportError:
            raise ValueError(NEEDS_GRPCIO) from None
        _poller = _Poller(grpc, _target)
        _poller.thread.start()


class _Poller:
    """The thread: poll, run each call, return its result; it ends when the server says the
    session is gone, and otherwise retries, waiting longer each time a poll fails."""

    def __init__(self, grpc: Any, target: str) -> None:
        self._grpc = grpc
        channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", -1),
                                                         ("grpc.max_send_message_length", -1)])
        self._poll = channel.unary_unary(f"/{SERVICE}/{hostcalls.POLL}")
        self._return = channel.unary_unary(f"/{SERVICE}/{hostcalls.RETURN}")
        self.thread = threading.Thread(target=self._run, name="jax-ipu-host-callbacks",
                                       daemon=True)

    def _run(self) -> None:
        wait = RETRY_S[0]
        while True:
            try:
                answer = self._poll(hostcalls.poll_request(SECRET, hostcalls.POLL_WAIT_S),
                                    timeout=hostcalls.POLL_WAIT_S + 30)
                calls = hostcalls.read_poll_response(answer)
            except self._grpc.RpcError as exc:
                if exc.code() == self._grpc.StatusCode.NOT_FOUND:
                    logger.info("jax-ipu: the server ended this client's session: host callbacks "
                                "are no longer answered (%s)", exc.details())
                    return
                logger.warning("jax-ipu: polling the server for host callbacks failed (%s); "
                               "retrying in %.2f s", exc.details(), wait)
                time.sleep(wait)
                wait = min(wait * 2, RETRY_S[1])
                continue
            except WireError as exc:
                logger.error("jax-ipu: the server's host callback calls do not parse: %s", exc)
                return
            wait = RETRY_S[0]
            for call in calls:
                self._answer(call)

    def _answer(self, call: hostcalls.Call) -> None:
        fn = callbacks.remote_callback(call.key)
        _answering.key = call.key
        try:
            if fn is None:
                raise KeyError(f"this process has no host callback {call.key}")
            request = hostcalls.return_request(SECRET, call.call_id, fn(*call.args))
        except Exception as exc:  # noqa: BLE001 - the user's error goes back as the call's
            request = hostcalls.return_request(SECRET, call.call_id,
                                               error=f"{type(exc).__name__}: {exc}")
        finally:
            _answering.key = None
        try:
            self._return(request, timeout=60)
        except self._grpc.RpcError as exc:
            logger.warning("jax-ipu: returning host callback %d's results failed: %s",
                           call.key, exc.details())
