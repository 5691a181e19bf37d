"""Real jax-ipu servers and remote jax clients on 127.0.0.1, for tests (and for the examples'
tests, which run scripts with --remote against `server`).

A Server is `python -m jax_ipu serve --port 0` in its own process; a Client is a Python process
with JAX_IPU_REMOTE pointing at it, kept alive between snippets so that jax starts once. Every
wait is bounded in time."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

DOC = Path(__file__).resolve().parents[1] / "ipu" / "docs" / "remote.md"
START_TIMEOUT = 120.0  # seconds for a server or client process to be ready
CALL_TIMEOUT = 180.0  # seconds for one client snippet


def _base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_IPU_", "POPLAR_"))}
    env.update(JAX_PLATFORMS="ipu,cpu", TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
    env.update(extra or {})
    return env


class Server:
    """`python -m jax_ipu serve` on 127.0.0.1 and a free port; its log goes to a file."""

    def __init__(self, workdir: Path, devices: int = 8, token: str | None = None,
                 env: dict[str, str] | None = None, host: str = "127.0.0.1",
                 transport: str = "native") -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.token = token
        args = [sys.executable, "-m", "jax_ipu", "serve", "--host", host, "--port", "0",
                "--devices", str(devices), "--transport", transport]
        if token is not None:
            token_file = workdir / "token"
            token_file.write_text(token + "\n")
            args += ["--token-file", str(token_file)]
        self.log_path = workdir / "server.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed by stop()
        self.proc = subprocess.Popen(args, cwd=workdir, env=_base_env(env),
                                     stdout=subprocess.PIPE, stderr=self._log, text=True)
        line = _read_line(self.proc, START_TIMEOUT)
        if "listening on" not in line:
            self.stop()
            raise AssertionError(f"the server did not start: {line!r}\n{self.log}")
        self.address = "grpc://" + line.split("listening on ")[1].split()[0]
        self.port = int(self.address.rsplit(":", 1)[1])

    @property
    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Signal the server and wait for it to exit; its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode


_DRIVER = r"""
import json, sys, traceback
namespace = {}
print("ready", flush=True)
for line in sys.stdin:
    code = json.loads(line)
    try:
        exec(code, namespace)
        reply = {"ok": True, "value": namespace.pop("result", None)}
    except BaseException as exc:
        reply = {"ok": False, "type": type(exc).__name__, "message": str(exc),
                 "traceback": traceback.format_exc()}
    print(json.dumps(reply, default=repr), flush=True)
"""


class RemoteError(Exception):
    """An exception a snippet raised in the client process."""

    def __init__(self, reply: dict[str, Any]) -> None:
        super().__init__(f"{reply['type']}: {reply['message']}")
        self.type, self.message, self.traceback = reply["type"], reply["message"], reply[
            "traceback"]


class Client:
    """A Python process whose jax platform "ipu" is a server: snippets run in it one at a time,
    in one namespace; a snippet's `result` (JSON) comes back."""

    def __init__(self, address: str, token: str | None = None, devices: int | None = None,
                 timeout: int = 10, env: dict[str, str] | None = None) -> None:
        extra = {"JAX_IPU_REMOTE": address, "JAX_IPU_REMOTE_TIMEOUT": str(timeout)}
        if token is not None:
            extra["JAX_IPU_REMOTE_TOKEN"] = token
        if devices is not None:
            extra["JAX_IPU_REMOTE_DEVICES"] = str(devices)
        extra.update(env or {})
        # Started here, waited for at the first snippet: clients made together start together.
        self.proc = subprocess.Popen([sys.executable, "-c", _DRIVER], env=_base_env(extra),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self._ready = False

    def run(self, code: str, timeout: float = CALL_TIMEOUT) -> Any:
        """Run `code`; its `result`, or RemoteError with what it raised."""
        if not self._ready:
            line = _read_line(self.proc, START_TIMEOUT)
            if line.strip() != "ready":
                raise AssertionError(f"the client did not start: {line!r}")
            self._ready = True
        assert self.proc.poll() is None, "the client process has exited"
        self.proc.stdin.write(json.dumps(textwrap.dedent(code)) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(_read_line(self.proc, timeout))
        if not reply["ok"]:
            raise RemoteError(reply)
        return reply["value"]

    def error(self, code: str, timeout: float = CALL_TIMEOUT) -> RemoteError:
        """Run `code`, which must raise; what it raised."""
        try:
            value = self.run(code, timeout)
        except RemoteError as exc:
            return exc
        raise AssertionError(f"expected an error, got {value!r}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def close(self, timeout: float = 30.0) -> int:
        """End the process as a script ends (its jax client disconnects); the exit code."""
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    """One line of `proc`'s stdout within `timeout` seconds (AssertionError otherwise)."""
    deadline = time.monotonic() + timeout
    stream = proc.stdout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            proc.kill()
            raise AssertionError(f"no answer from process {proc.pid} in {timeout:.0f} s")
        ready, _, _ = select.select([stream], [], [], min(left, 1.0))
        if ready:
            line = stream.readline()
            if not line:
                raise AssertionError(f"process {proc.pid} exited ({proc.wait(10)})")
            return line
        if proc.poll() is not None:
            raise AssertionError(f"process {proc.pid} exited ({proc.returncode})")


def bare_client_lines(address: str, initialization_data: dict[str, bytes]) -> str:
    """A script's first lines as ipu/docs/remote.md gives them to a client without jax-ipu (its
    bare-client block), in a process where jax-ipu cannot load (its jax_plugins entry point
    fails), with `initialization_data` for the session."""
    block = re.search(r"<!-- bare-client -->\n```python\n(.*?)^```", DOC.read_text(),
                      re.S | re.M)
    assert block, "ipu/docs/remote.md has no bare-client block"
    return "\n".join([
        "import sys",
        "sys.modules['jax_ipu'] = None  # as if jax-ipu were not installed",
        f"SERVER = {address!r}",
        block.group(1).replace("{}  # {", f"{initialization_data!r}  # {{"),
    ])


def wait_for(predicate: Any, timeout: float = 30.0, what: str = "a condition") -> None:
    """Poll `predicate` (every 0.2 s, at most `timeout` seconds) until it is true."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with 8 IPU Model devices, shared by a test module (started and stopped once)."""
    srv = Server(tmp_path_factory.mktemp("remote-server"))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[Client]:
    """A remote client of `server`, shared by a test module."""
    c = Client(server.address)
    try:
        yield c
    finally:
        c.close()


class RawSession:
    """A session opened by hand, with grpcio and the schema jaxlib embeds, for what jaxlib's
    client never sends: requests are messages built by the test, answers come back parsed."""

    SERVICE = "/xla.ifrt.proxy.GrpcIfrtService/"

    def __init__(self, address: str, token: str | None = None, devices: int | None = None,
                 protocol: int = 23, shared_dir: str | None = None) -> None:
        import queue
        import threading

        import grpc

        from jax_ipu.remote import schema

        self.schema = schema.load()
        self.m = self.schema.message
        self.channel = grpc.insecure_channel(address.removeprefix("grpc://"))
        metadata = self.m("xla.ifrt.proxy.GrpcIfrtSessionMetadata")()
        metadata.version.protocol_version = protocol
        metadata.version.ifrt_serdes_version_number = schema.SESSION_SERDES
        if token is not None:
            metadata.initialization_data.attributes["token"].string_value = token.encode()
        if devices is not None:
            metadata.initialization_data.attributes["devices"].int64_value = devices
        if shared_dir is not None:
            metadata.initialization_data.attributes["shared_dir"].string_value = \
                shared_dir.encode()
        self._outbox: queue.Queue = queue.Queue()
        self.answers: queue.Queue = queue.Queue()
        stream = self.channel.stream_stream(self.SERVICE + "IfrtSession",
                                            request_serializer=_raw, response_deserializer=_raw)
        self.call = stream(iter(self._outbox.get, None), metadata=[
            ("ifrt-proxy-grpc-ifrt-session-metadata-bin", metadata.SerializeToString())])
        threading.Thread(target=self._read, daemon=True).start()
        self._op = 0
        self.init = self.request(init_request={})

    def _read(self) -> None:
        try:
            for data in self.call:
                self.answers.put(data)
        except Exception as exc:  # noqa: BLE001 - the stream's end, as the test sees it
            self.answers.put(exc)
        self.answers.put(None)

    def send(self, data: bytes) -> None:
        self._outbox.put(data)

    def receive(self, timeout: float = 30.0) -> Any:
        """The next answer (an IfrtResponse), or the exception that ended the stream."""
        import queue

        try:
            data = self.answers.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no answer in {timeout:.0f} s") from None
        if not isinstance(data, bytes):
            return data
        return self.m("xla.ifrt.proxy.IfrtResponse").FromString(data)

    def send_request(self, **fields: Any) -> int:
        """Send one IfrtRequest with these fields and a fresh op_id, which it returns, without
        waiting for the answer."""
        self._op += 1
        message = self.m("xla.ifrt.proxy.IfrtRequest")(**fields)
        message.request_metadata.op_id = self._op
        self.send(message.SerializeToString())
        return self._op

    def array_request(self, device: int, buffer: int, array: int,
                      shape: tuple[int, ...] = (4,)) -> dict:
        """The fields of a MakeArrayFromHostBufferRequest: float32[shape] on `device`, from
        host buffer `buffer`, as array handle `array`."""
        from jax_ipu.remote.ifrt import Codec

        codec = Codec(self.schema)
        return dict(dtype=codec.dtype_proto(np.dtype(np.float32)), shape=codec.shape_proto(shape),
                    sharding=codec.single_device_sharding(device, None),
                    host_buffer_handle=buffer, array_handle=array)

    def request(self, timeout: float = 30.0, **fields: Any) -> Any:
        """Send one IfrtRequest with these fields (a fresh op_id) and return its answer."""
        op_id = self.send_request(**fields)
        answer = self.receive(timeout)
        assert not isinstance(answer, Exception) and answer is not None, answer
        assert answer.response_metadata.op_id == op_id, answer
        return answer

    def unary(self, method: str, data: bytes, metadata: tuple = (), timeout: float = 30.0
              ) -> bytes:
        call = self.channel.unary_unary(self.SERVICE + method, request_serializer=_raw,
                                        response_deserializer=_raw)
        return call(data, metadata=metadata, timeout=timeout)

    def store(self, handle: int, data: bytes, session_id: int | None = None,
              size: int | None = None, timeout: float = 30.0,
              chunks: list[bytes] | None = None) -> bytes:
        """HostBufferStore of `data` in chunks of 1000 bytes (the metadata may lie), or of the
        messages `chunks` as they are."""
        metadata = self.m("xla.ifrt.proxy.GrpcHostBufferStoreMetadata")(
            session_id=self.init.init_response.session_id if session_id is None else session_id,
            handle=handle, buffer_size=len(data) if size is None else size)
        Chunk = self.m("xla.ifrt.proxy.GrpcHostBufferStoreRequest")
        if chunks is None:
            chunks = [Chunk(data=data[i:i + 1000]).SerializeToString()
                      for i in range(0, len(data), 1000)]
        call = self.channel.stream_unary(self.SERVICE + "HostBufferStore",
                                         request_serializer=_raw, response_deserializer=_raw)
        return call(iter(chunks), timeout=timeout, metadata=[
            ("ifrt-proxy-grpc-host-buffer-store-metadata-bin", metadata.SerializeToString())])

    def read_from_disk(self, handle: int, size: int, session_id: int | None = None,
                       timeout: float = 30.0) -> bytes:
        """HostBufferReadFromDisk: the server reads host buffer `handle` from the session's
        shared directory (file lt_<handle>, `size` bytes)."""
        request = self.m("xla.ifrt.proxy.GrpcHostBufferReadFromDiskRequest")()
        request.metadata.session_id = (self.init.init_response.session_id
                                       if session_id is None else session_id)
        request.metadata.handle, request.metadata.buffer_size = handle, size
        return self.unary("HostBufferReadFromDisk", request.SerializeToString(),
                          timeout=timeout)

    def lookup(self, handle: int, timeout: float = 30.0) -> list[bytes]:
        """HostBufferLookup of `handle` in this session: the data of each message, in order."""
        request = self.m("xla.ifrt.proxy.GrpcHostBufferLookupRequest")(
            session_id=self.init.init_response.session_id, handle=handle)
        call = self.channel.unary_stream(self.SERVICE + "HostBufferLookup",
                                         request_serializer=_raw, response_deserializer=_raw)
        Response = self.m("xla.ifrt.proxy.GrpcHostBufferLookupResponse")
        return [Response.FromString(message).data
                for message in call(request.SerializeToString(), timeout=timeout)]

    def close(self) -> None:
        self._outbox.put(None)
        self.channel.close()


def _raw(data: bytes) -> bytes:
    return data
