"""The client switch: with JAX_IPU_REMOTE=grpc://host:port, platform "ipu" is jaxlib's IFRT proxy
client connected to a jax-ipu server, and no local IPU Model starts.

Programs still lower with this plugin's rules for "ipu", so they are the programs a local run
compiles, and give the same numbers. Needs only jax and jaxlib (no grpcio, no protobuf)."""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import functools
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from jax_ipu import _internals, config
from jax_ipu.errors import IpuConfigError, IpuError
from jax_ipu.remote import callback_poller, hostcalls
from jax_ipu.remote.inflight import PutWindow, ReadWindow

logger = logging.getLogger(__name__)

# jaxlib's client defaults to ALTS credentials (Google Cloud only); this selects plaintext. The
# client has no TLS: beyond loopback, tunnel it (ipu/docs/remote.md).
INSECURE_VAR = "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS"
# Keys of the initialization_data a session opens with (the server reads the same names).
TOKEN_KEY = "token"
DEVICES_KEY = "devices"
SHARED_DIR_KEY = "shared_dir"
# jaxlib's client writes a host buffer of at least THRESHOLD bytes to DIRECTORY/lt_<handle> and
# asks the server to read it (HostBufferReadFromDisk). Each is read once in a process's life.
TRANSFER_DIR_VAR = "IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_DIRECTORY"
TRANSFER_THRESHOLD_VAR = "IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_THRESHOLD_BYTES"
# Smaller buffers travel over gRPC: through a file, a 400 KB put cost the same time and CPU on
# both sides; a 64 MiB put took about 30% less time and half the server's CPU.
SHARED_DIR_THRESHOLD = 1 << 20
# Below this much free space a warning: a put that does not fit fails in jaxlib's client, which
# then drops its session and aborts the process at its next call.
SHARED_DIR_ROOM = 1 << 30
_shared_dir: str | None = None  # this process's, once made
# jaxlib's client flushes its batched array deletions from a thread that sleeps 50 us at a time,
# for the client's whole life: measured, an idle client used 18% of a core (0.86-0.97 s of CPU in
# 5 s). Threads started while the client connects get this much timer slack, so that thread
# wakes about once a millisecond (0.13 s in 5 s). A deletion still reaches the server before any
# later request of the client: each request flushes the batch first.
FLUSHER_TIMER_SLACK_NS = 1_000_000
PR_SET_TIMERSLACK, PR_GET_TIMERSLACK = 29, 30  # linux/prctl.h
# The cost_analysis() key that carries the model's report of a remote compile: the codec's
# bytes (runtime/codec.py, data only) in base64, as attribute maps carry text.
REPORT_KEY = "ipu_report"


def address() -> str:
    """The server address the flags name ('' when the switch is off); a malformed one raises
    IpuConfigError naming the flag and the form it takes."""
    return config.value("jax_ipu_remote").strip()


def connection_options() -> Any:
    """jaxlib's ClientConnectionOptions for the flags: timeout, token, partition size, and this
    process's host-callback channel."""
    from jax.extend.backend import ifrt_proxy

    options = ifrt_proxy.ClientConnectionOptions()
    options.connection_timeout_in_seconds = int(config.value("jax_ipu_remote_timeout"))
    data: dict[str, Any] = {}
    token = config.value("jax_ipu_remote_token")
    if token:
        data[TOKEN_KEY] = token.encode()  # jaxlib takes bytes, bool or int values
    devices = config.value("jax_ipu_remote_devices")
    if devices:
        data[DEVICES_KEY] = devices
    shared = shared_dir()
    if shared:
        data[SHARED_DIR_KEY] = shared.encode()
    data[hostcalls.CHANNEL_KEY] = callback_poller.SECRET.encode()
    # No on_disconnect callback: jaxlib calls it from its own thread, and a Python callable
    # called while the interpreter exits aborts the process.
    options.initialization_data = data
    return options


def shared_dir() -> str | None:
    """This process's private directory for large host buffers (made on first use in the one
    jax_ipu_remote_shared_dir names, removed at exit), or None; sets jaxlib's variables to it."""
    global _shared_dir
    if _shared_dir is not None:
        return _shared_dir  # jaxlib keeps the first directory for the process's life
    parent = config.value("jax_ipu_remote_shared_dir").strip()
    if not parent:
        if TRANSFER_THRESHOLD_VAR in os.environ:
            raise IpuConfigError(
                f"{TRANSFER_THRESHOLD_VAR} is set, so jaxlib would write large host buffers to "
                "files, which a jax-ipu server reads only from a directory the session names: "
                "unset jaxlib's variables and set JAX_IPU_REMOTE_SHARED_DIR (e.g. /dev/shm) "
                "instead, for a server on this host run by this user.")
        return None
    own = [var for var in (TRANSFER_DIR_VAR, TRANSFER_THRESHOLD_VAR) if var in os.environ]
    if own:
        raise IpuConfigError(
            f"JAX_IPU_REMOTE_SHARED_DIR sets jaxlib's {' and '.join(own)}: unset "
            f"{'them' if len(own) > 1 else 'it'}.")
    try:
        path = tempfile.mkdtemp(prefix="jax-ipu-transfers-", dir=parent)  # mode 700
    except OSError as exc:
        raise IpuConfigError(
            f"jax_ipu_remote_shared_dir={parent!r}: cannot make a directory there "
            f"({exc.strerror}); name a directory this user may write, e.g. /dev/shm, or set "
            "it empty.") from None
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    free = shutil.disk_usage(path).free
    if free < SHARED_DIR_ROOM:
        logger.warning(
            "jax_ipu_remote_shared_dir=%r has %d MiB free: a device_put of an array (or shard) "
            "larger than that fails, and jaxlib's client then ends its session and aborts the "
            "process at its next call. Name a directory with room for the largest array you "
            "put, or set it empty.", parent, free >> 20)
    os.environ[TRANSFER_DIR_VAR] = path
    os.environ[TRANSFER_THRESHOLD_VAR] = str(SHARED_DIR_THRESHOLD)
    _shared_dir = path
    return path


def connect() -> Any:
    """The proxy client for the server the flags name (jax's backend factory for "ipu")."""
    from jax.extend.backend import ifrt_proxy

    target = address()
    os.environ.setdefault(INSECURE_VAR, "true")
    options = connection_options()
    try:
        with _timer_slack(FLUSHER_TIMER_SLACK_NS):
            return ifrt_proxy.get_client(target, options)
    except Exception as exc:  # noqa: BLE001 - jaxlib's error, with our words around it
        raise IpuError(
            f"cannot use the remote IPU Model at {target}: {exc}\nIs a server running there "
            "(python -m jax_ipu serve --port PORT), with a matching JAX_IPU_REMOTE_TOKEN and "
            "enough free devices for JAX_IPU_REMOTE_DEVICES? Unset JAX_IPU_REMOTE for a local "
            "IPU Model.") from None


@contextlib.contextmanager
def _timer_slack(ns: int) -> Iterator[None]:
    """Threads started inside get `ns` nanoseconds of timer slack (on Linux a thread inherits its
    creator's); the calling thread's own is restored after. Elsewhere, nothing changes."""
    prctl = getattr(ctypes.CDLL(None), "prctl", None) if sys.platform == "linux" else None
    if prctl is None:
        yield
        return
    before = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)
    prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0)
    try:
        yield
    finally:
        prctl(PR_SET_TIMERSLACK, before, 0, 0, 0)


def register(platform: str, priority: int) -> None:
    """Make `platform` the remote IPU Model (in place of the local plugin)."""
    from jax.extend.backend import register_backend_factory

    target = address()  # a malformed address is refused now, naming the flag
    register_backend_factory(platform, connect, priority=priority, fail_quietly=False)
    callback_poller.serve(target)
    # What a host callback may not ask of the server that is waiting for it (a hang otherwise)
    _internals.guard_array_waits(callback_poller.refuse_waits_inside)
    _internals.wrap_compile(functools.partial(_compiled_outside_callbacks, platform))
    _internals.wrap_batched_device_put(functools.partial(_sent_to_proxy, platform))
    _internals.wrap_shard_arg_handler(_internals.ArrayImpl, _through_host_across_clients)
    _internals.wrap_copy_to_host_async(functools.partial(_read_within_window, platform))


def _sent_to_proxy(platform: str, put: Callable[..., Any]) -> Callable[..., Any]:
    """jax's transfer to devices, as jaxlib's proxy client needs it when it goes to `platform`:
    each host array the client would refuse made C-contiguous first (a local device takes any
    layout), and at most a window of transfers on their way to the server (inflight.py)."""
    window = PutWindow()

    @functools.wraps(put)
    def batched_device_put(aval: Any, sharding: Any, xs: Any, devices: Any, *args: Any,
                           **kwargs: Any) -> Any:
        if not devices or devices[0].platform != platform:
            return put(aval, sharding, xs, devices, *args, **kwargs)
        callback_poller.refuse_inside("put an array on")
        if any(map(refused_by_proxy, xs)):
            xs = [np.ascontiguousarray(x) if refused_by_proxy(x) else x for x in xs]
        array = put(aval, sharding, xs, devices, *args, **kwargs)
        window.sent(array, sum(getattr(x, "nbytes", 0) for x in xs))
        return array

    return batched_device_put


def _compiled_outside_callbacks(platform: str, compile: Callable[..., Any]) -> Callable[..., Any]:
    """jax's compile, refused for `platform` inside a host callback the server waits for."""

    @functools.wraps(compile)
    def compile_or_get_cached(backend: Any, *args: Any, **kwargs: Any) -> Any:
        if backend.platform == platform:
            callback_poller.refuse_inside("compiled a program for")
        return compile(backend, *args, **kwargs)

    return compile_or_get_cached


def _read_within_window(platform: str, copy: Callable[[Any], None]) -> Callable[[Any], None]:
    """jax's start of a read-back, with at most a window of them on their way from the server's
    `platform` devices (inflight.py); a local array's is jax's own."""
    window = ReadWindow()

    @functools.wraps(copy)
    def copy_to_host_async(array: Any) -> None:
        copy(array)
        if next(iter(array.devices())).platform == platform:
            window.started(array)

    return copy_to_host_async


def _through_host_across_clients(handler: Callable[..., Any]) -> Callable[..., Any]:
    """jax's move of Arrays to shardings, with an Array bound from the proxy client's devices to
    another client's, or back, read to the host and put from there: jaxlib's CopyArrays takes
    no other client's devices on either side (a local client copies through the host itself)."""

    @functools.wraps(handler)
    def array_shard_arg(xs: Any, shardings: Any, layouts: Any, copy_semantics: Any) -> Any:
        across = [crosses_proxy(x, s) for x, s in zip(xs, shardings, strict=True)]
        if not any(across):
            return handler(xs, shardings, layouts, copy_semantics)
        xs = [np.asarray(x) if a else x for x, a in zip(xs, across, strict=True)]
        return _internals.shard_args(shardings, layouts, copy_semantics, xs)

    return array_shard_arg


def crosses_proxy(array: Any, sharding: Any) -> bool:
    """Whether moving jax `array` to `sharding` goes between the proxy client and another."""
    source = next(iter(array.devices())).client
    target = next(iter(sharding.device_set)).client
    return source is not target and (is_remote(source) or is_remote(target))


def refused_by_proxy(x: Any) -> bool:
    """Whether jaxlib's proxy client refuses to send host array `x` as it is laid out: it takes
    only strides that are positive multiples of the item size (on dimensions longer than 1), so
    np.broadcast_to (stride 0), x[::-1] (negative) or a field of a packed record would fail
    with UNIMPLEMENTED."""
    if not isinstance(x, np.ndarray) or x.size == 0:
        return False
    return any(n > 1 and (s <= 0 or s % x.itemsize)
               for n, s in zip(x.shape, x.strides, strict=True))


def is_remote(backend: Any) -> bool:
    """Whether a jax backend (client) is a proxy to a remote server."""
    return str(getattr(backend, "runtime_type", "")).startswith("proxy/")


def remote_report(compiled: Any) -> Any:
    """The model's ProgramReport of a program compiled on a remote server (data only)."""
    from jax_ipu.model.report import ProgramReport
    from jax_ipu.runtime import codec

    costs = compiled.cost_analysis() or {}
    text = costs.get(REPORT_KEY)
    if not isinstance(text, str):
        raise IpuError("the server sent no report for this program (is it a jax-ipu server?)")
    return codec.loads(ProgramReport, base64.b64decode(text.encode(), validate=True))
