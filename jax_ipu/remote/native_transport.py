"""The server's calls carried by gRPC's C++ core (native/transport.cc), built here on first use
with the system's C++ compiler and gRPC C++ library, and cached sealed like vertex builds;
requests that may wait (a session's, a host-callback poll) are answered on worker threads, never
on the transport's one thread."""

from __future__ import annotations

import atexit
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import queue
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from jax_ipu import sealing
from jax_ipu.errors import IpuError
from jax_ipu.remote.hostbuffers import CHUNK
from jax_ipu.remote.session import CODES, status_of

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).resolve().parent / "native" / "transport.cc"
MODULE = "jax_ipu.remote._transport"
FLAGS = ("-std=c++17", "-O2", "-shared", "-fPIC", "-fvisibility=hidden")
COMPILE_TIMEOUT_S = 600
INSTALL = ("install gRPC's C++ library and headers and pkg-config (Debian/Ubuntu: apt-get "
           "install libgrpc++-dev pkg-config g++; `make test` does), or serve with "
           "--transport grpcio")
DEFERRED = -1  # transport.cc's kDeferred: the answer comes later, through a Reply
_lock = threading.Lock()
_module: ModuleType | None = None


class NativeTransportUnavailable(IpuError):
    """The C++ transport cannot be built or loaded here; the message says what is missing."""


def _run(argv: list[str], what: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NativeTransportUnavailable(f"{what}: {exc}; {INSTALL}") from None
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()][:20]
        raise NativeTransportUnavailable(f"{what} failed:\n" + "\n".join(lines)
                                         + f"\n{INSTALL}")
    return done.stdout


def _command() -> tuple[list[str], list[str]]:
    """The compile command up to its source, and the libraries it links after its output."""
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    pkg_config = shutil.which("pkg-config")
    if not compiler or not pkg_config:
        raise NativeTransportUnavailable(
            f"no {'C++ compiler' if not compiler else 'pkg-config'} on PATH; {INSTALL}")
    cflags = _run([pkg_config, "--cflags", "grpc++"], "pkg-config --cflags grpc++").split()
    libs = _run([pkg_config, "--libs", "grpc++"], "pkg-config --libs grpc++").split()
    include = sysconfig.get_paths()["include"]
    return [compiler, *FLAGS, f"-I{include}", *cflags, str(SOURCE)], libs


def _identity(command: list[str]) -> str:
    """What the build depends on beyond its command: the source, gRPC's version, the
    interpreter's ABI and the compiler's version."""
    version = _run([command[0], "--version"], f"{command[0]} --version")
    pkg_config = shutil.which("pkg-config") or "pkg-config"  # _command found it
    grpc = _run([pkg_config, "--modversion", "grpc++"], "pkg-config --modversion grpc++")
    return "\0".join([SOURCE.read_text(), grpc, version, sys.version,
                      sysconfig.get_config_var("EXT_SUFFIX") or ""])


def _build() -> Path:
    """The built extension: compiled unless this user's cache holds it, sealed."""
    command, libs = _command()
    digest = hashlib.sha256("\0".join([*command, *libs, _identity(command)]).encode())
    name = digest.hexdigest()[:32]
    root = sealing.user_cache_dir() / "jax_ipu" / "transport"
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise NativeTransportUnavailable(f"cannot make {root}: {exc.strerror}") from None
    sealing.check_directory(root, "the transport build cache")
    out = root / name
    library = out / ("_transport" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    seal = out / "transport.seal"
    if out.exists():
        sealing.check_directory(out, "the transport build directory")
        if sealing.named_seal_holds(library, seal, name):
            return library
    logger.info("building the C++ gRPC transport into %s (once: about 10 s)", out)
    with tempfile.TemporaryDirectory(prefix="build-", dir=root) as tmp:
        built = Path(tmp) / library.name
        _run([*command, "-o", str(built), *libs], "building the C++ transport")
        Path(tmp, seal.name).write_text(sealing.named_seal(built.read_bytes(), name))
        out.mkdir(mode=0o700, exist_ok=True)
        sealing.check_directory(out, "the transport build directory")
        # The seal last: a library without its seal is rebuilt, never loaded.
        os.replace(built, library)
        os.replace(Path(tmp, seal.name), seal)
    return library


def module() -> ModuleType:
    """The C++ transport's extension module, built on first use."""
    global _module
    with _lock:
        if _module is None:
            path = _build()
            loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
            spec = importlib.util.spec_from_file_location(MODULE, path, loader=loader)
            if spec is None:
                raise NativeTransportUnavailable(f"cannot load {path}")
            loaded = importlib.util.module_from_spec(spec)
            loader.exec_module(loaded)
            _module = loaded
        return _module


def _answer(work: Any) -> tuple[int, str | None, Any]:
    """(0, None, work()) or the (code, message, None) of its error: what transport.cc reads."""
    try:
        return 0, None, work()
    except Exception as exc:  # noqa: BLE001 - every error is an answer
        status = status_of(exc)
        return CODES[status.code], status.message, None


class _Workers:
    """Threads that answer deferred requests: each job gets an idle thread or a new one, so no
    job waits behind another (a session defers one request at a time and waits in one
    host-callback poll at a time, so there are never more threads than twice the sessions at
    once). Daemon threads: a job still waiting when the interpreter
    exits without stopping the server must not hold its exit."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._count = 0

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
            else:
                self._count += 1
                threading.Thread(target=self._work, name=f"ipu-remote-worker-{self._count}",
                                 daemon=True).start()
        self._jobs.put(job)

    def answer(self, handle: Callable[[Callable[[Callable[[], Any]], None]], Any]
               ) -> tuple[int, str | None, Any]:
        """handle(defer)'s answer, or, when it deferred work, DEFERRED and what transport.cc
        calls to have a worker answer with work()."""
        later: list[Callable[[], Any]] = []
        answer = _answer(lambda: handle(later.append))
        if not later or answer[0] != 0:
            return answer
        work = later[0]

        def submit(reply: Callable[[tuple[int, str | None, Any]], None]) -> None:
            self.submit(lambda: reply(_answer(work)))

        return DEFERRED, None, submit

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except Exception:  # a job answers its own errors: this is the transport's
                logger.exception("jax-ipu server: a deferred request's answer failed")
            with self._lock:
                self._idle += 1


class _Session:
    """A SessionStream (server.py) as transport.cc calls it: a request that may wait is handed
    to a worker, and answered from there."""

    def __init__(self, stream: Any, workers: _Workers) -> None:
        self._stream = stream
        self._workers = workers

    def message(self, data: bytes) -> tuple[int, str | None, Any]:
        return self._workers.answer(lambda defer: self._stream.message(data, defer))

    def cancelled(self) -> None:
        self._stream.cancelled()

    def end(self, reason: str) -> None:
        self._stream.end(reason)


class _Service:
    """The service (server.py) as transport.cc calls it: every answer a (code, message,
    payload)."""

    def __init__(self, service: Any) -> None:
        self._service = service
        self._workers = _Workers()

    def session(self, metadata: dict[str, bytes]) -> tuple[int, str | None, Any]:
        return _answer(lambda: _Session(self._service.session_stream(metadata), self._workers))

    def store(self, metadata: dict[str, bytes]) -> tuple[int, str | None, Any]:
        def open_target() -> tuple[int, Any]:
            target = self._service.store_target(metadata)
            return target.size, lambda data, filled, problem: _answer(
                lambda: target.finish(data, filled, problem))

        return _answer(open_target)

    def lookup(self, data: bytes) -> tuple[int, str | None, Any]:
        return _answer(lambda: self._service.lookup(data))

    def unary(self, method: str, data: bytes) -> tuple[int, str | None, Any]:
        return self._workers.answer(lambda defer: self._service.unary(method, data, defer))


class NativeTransport:
    """A started C++ transport; stop() it (it is also stopped at the interpreter's exit)."""

    name = "native"

    def __init__(self, service: Any, address: str) -> None:
        native = module()
        self._handle = native.start(_Service(service), address, CHUNK)  # OSError
        self._native = native
        self.port = native.port(self._handle)
        self._stopped = threading.Event()
        atexit.register(self.stop, 0.0)

    def stop(self, grace: float) -> None:
        if not self._stopped.is_set():
            self._native.stop(self._handle, grace)
            self._stopped.set()
            atexit.unregister(self.stop)

    def wait(self) -> None:
        self._stopped.wait()
