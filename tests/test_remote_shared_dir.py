"""Host buffers through a shared directory (jaxlib's large-transfer optimization): a client on the
server's host puts arrays of 1 MiB or more as files the server maps. Real servers on 127.0.0.1
(both transports) and stock jaxlib's client; hostile directories and files sent by hand."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jax_ipu.remote import client as remote
from jax_ipu.remote.session import CODES
from tests._remote import Client, RawSession, Server, _base_env, bare_client_lines, wait_for


@pytest.fixture(scope="module", params=["native", "grpcio"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("shared-dir-server"), devices=2,
                 transport=request.param)
    try:
        yield srv
    finally:
        srv.stop()


def _private_dir(path: Path) -> Path:
    path.mkdir()
    path.chmod(0o700)
    return path


def _closing_line(server: Server, shared: str) -> str:
    pattern = (r"session \w+ closed .*host buffers read from the shared directory "
               + re.escape(shared) + ".*")
    wait_for(lambda: re.search(pattern, server.log), what="the session to close")
    return re.search(pattern, server.log).group(0)


def test_large_puts_travel_as_files_with_the_same_numbers(server: Server, tmp_path: Path
                                                          ) -> None:
    parent = tmp_path / "parent"
    parent.mkdir()
    client = Client(server.address, env={"JAX_IPU_REMOTE_SHARED_DIR": str(parent)})
    try:
        shared, left, same = client.run("""
            import os, jax, numpy as np
            from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
            from jax_ipu.remote import client as remote
            ipu, cpu = jax.devices("ipu"), jax.devices("cpu")[0]
            rng = np.random.default_rng(5)
            arrays = [rng.standard_normal((1 << 18) - 1).astype(np.float32),  # under 1 MiB
                      rng.standard_normal(1 << 18).astype(np.float32),  # 1 MiB: a file
                      rng.integers(-100, 100, (3, 1 << 20)).astype(np.int8),  # 3 MiB
                      rng.standard_normal((2048, 1024)).astype(np.float32)]  # 8 MiB
            f = jax.jit(lambda x: (x * 3 - 1).sum(axis=-1))
            same = []
            for a in arrays:
                on_ipu = jax.device_put(a, ipu[0])
                same.append(np.array_equal(np.asarray(on_ipu), a) and np.array_equal(
                    np.asarray(f(on_ipu)), np.asarray(f(jax.device_put(a, cpu)))))
            # two shards of 4 MiB, one file each
            rows = NamedSharding(Mesh(np.array(ipu[:2]), ("x",)), P("x"))
            sharded = jax.device_put(arrays[3], rows)
            same.append(np.array_equal(np.asarray(jax.jit(lambda x: x - 1)(sharded)),
                                       arrays[3] - 1))
            # donated: the server's read-only mapping is copied into the device, never written
            overwrite = jax.jit(lambda x: x.at[0].set(-1), donate_argnums=0)
            same.append(np.asarray(overwrite(jax.device_put(arrays[1], ipu[0])))[0] == -1)
            shared = remote.shared_dir()
            result = [shared, os.listdir(shared), [bool(s) for s in same]]
        """)
    finally:
        assert client.close() == 0
    assert shared.startswith(str(parent) + "/jax-ipu-transfers-")
    assert left == [] and same == [True] * 6  # every file read and removed; the same numbers
    line = _closing_line(server, shared)
    assert "; 6 host buffers read from the shared directory" in line, line  # not the 1 MiB - 4
    assert "0 left unread there and removed" in line
    assert not os.path.exists(shared) and os.listdir(parent) == []  # removed at the client's exit


def test_a_client_without_jax_ipu_names_its_directory_itself(server: Server, tmp_path: Path
                                                             ) -> None:
    """What ipu/docs/remote.md tells a bare-jaxlib client: jaxlib's two variables and the
    directory in initialization_data, with the doc's lines."""
    shared = _private_dir(tmp_path / "bare")
    code = "\n".join([
        bare_client_lines(server.address, {"shared_dir": str(shared).encode()}),
        "import numpy as np",
        "x = np.arange(3 << 18, dtype=np.float32)  # 3 MiB",
        "y = jax.device_put(x, jax.devices('ipu')[0])",
        "print('same', np.array_equal(np.asarray(jax.jit(lambda a: a * 2)(y)), x * 2))",
    ])
    env = _base_env({remote.TRANSFER_DIR_VAR: str(shared),
                     remote.TRANSFER_THRESHOLD_VAR: str(remote.SHARED_DIR_THRESHOLD)})
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "same True" in proc.stdout
    line = _closing_line(server, str(shared))
    assert "; 1 host buffers read from the shared directory" in line, line


def test_a_directory_the_server_cannot_use_is_refused_when_the_session_opens(
        server: Server, tmp_path: Path) -> None:
    good = _private_dir(tmp_path / "good")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    link = tmp_path / "link"
    link.symlink_to(good)
    if os.geteuid() == 0:
        other = _private_dir(tmp_path / "other")
        os.chown(other, 65534, 65534)
        other_uid = (str(other), "it belongs to uid 65534, the server runs as uid 0")
    else:
        other_uid = ("/", f"it belongs to uid 0, the server runs as uid {os.geteuid()}")
    cases = [("relative/dir", "it is not an absolute path"),
             (str(tmp_path / "missing"), "no such directory on the server's host"),
             (str(shared), "other users may use it (mode 755"),
             (str(link), "it does not open as a directory"),
             other_uid]
    for path, why in cases:
        raw = RawSession(server.address, shared_dir=path)
        try:
            status = raw.init.response_metadata.status
            assert status.code == CODES["FAILED_PRECONDITION"], (path, status)
            assert status.message.startswith(
                f"the jax-ipu server cannot use the shared directory {path!r}: {why}"), status
            assert "unset JAX_IPU_REMOTE_SHARED_DIR on the client" in status.message
        finally:
            raw.close()
    assert server.proc.poll() is None


def test_hostile_files_get_errors_and_unread_files_go_with_the_session(
        server: Server, tmp_path: Path) -> None:
    shared = _private_dir(tmp_path / "shared")
    plain = RawSession(server.address, devices=1)
    raw = RawSession(server.address, devices=1, shared_dir=str(shared))
    try:
        assert raw.init.response_metadata.status.code == CODES["OK"]
        with pytest.raises(Exception, match="FAILED_PRECONDITION.*named no shared directory"):
            plain.read_from_disk(1, 4)
        with pytest.raises(Exception, match="INVALID_ARGUMENT.*GrpcHostBufferReadFromDisk"):
            raw.unary("HostBufferReadFromDisk", b"\x0a\xff\x01ab")
        with pytest.raises(Exception, match="NOT_FOUND.*no such session"):
            raw.read_from_disk(1, 4, session_id=987654321)
        with pytest.raises(Exception, match="NOT_FOUND.*no file lt_2"):
            raw.read_from_disk(2, 4)
        (shared / "lt_3").write_bytes(b"abc")
        with pytest.raises(Exception, match="INVALID_ARGUMENT.*lt_3 holds 3 bytes, its "
                                            "request says 4"):
            raw.read_from_disk(3, 4)
        (shared / "lt_4").symlink_to(shared / "lt_5")
        (shared / "lt_5").write_bytes(b"abcd")
        with pytest.raises(Exception, match="INVALID_ARGUMENT.*lt_4 in the shared directory "
                                            "does not open as a file"):
            raw.read_from_disk(4, 4)
        os.mkfifo(shared / "lt_9")  # opening it to read would wait for a writer
        with pytest.raises(Exception, match="INVALID_ARGUMENT.*lt_9 in the shared directory is "
                                            "not a file"):
            raw.read_from_disk(9, 4)
        os.link(shared / "lt_5", shared / "lt_6")
        with pytest.raises(Exception, match="INVALID_ARGUMENT.*not a file of the server's "
                                            "user with one link"):
            raw.read_from_disk(6, 4)
        with pytest.raises(Exception, match="RESOURCE_EXHAUSTED"):  # past the session's limit
            raw.read_from_disk(7, 1 << 40)
        assert sorted(os.listdir(shared)) == ["lt_5"]  # each file asked for is gone
        assert raw.read_from_disk(5, 4) == b""
        assert b"".join(raw.lookup(5)) == b"abcd"
        (shared / "lt_8").write_bytes(b"never read")
        (shared / "notes.txt").write_bytes(b"not the server's")
    finally:
        raw.close()
        plain.close()
    line = _closing_line(server, str(shared))
    assert "; 1 host buffers read from the shared directory" in line, line
    assert "1 left unread there and removed" in line
    assert os.listdir(shared) == ["notes.txt"]
    assert server.proc.poll() is None


_SWITCH = r"""
import json, logging, os, re, shutil, sys
import jax
from jax_ipu.errors import IpuConfigError
from jax_ipu.remote import client as remote

parent = sys.argv[1]
seen = []
def refused(value, threshold=None):
    jax.config.update("jax_ipu_remote_shared_dir", value)
    if threshold is not None:
        os.environ[remote.TRANSFER_THRESHOLD_VAR] = threshold
    try:
        remote.shared_dir()
    except IpuConfigError as exc:
        seen.append(str(exc))
    os.environ.pop(remote.TRANSFER_THRESHOLD_VAR, None)

seen.append(remote.shared_dir())
try:
    jax.config.update("jax_ipu_remote_shared_dir", "shm")
except IpuConfigError as exc:
    seen.append(str(exc))
refused(os.path.join(parent, "missing"))
refused(parent, threshold="1")
refused("", threshold="1")
jax.config.update("jax_ipu_remote_shared_dir", parent)
remote.SHARED_DIR_ROOM = shutil.disk_usage(parent).free + (1 << 20)  # as if short of space
logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
made = remote.shared_dir()
jax.config.update("jax_ipu_remote_shared_dir", "")
again = remote.shared_dir()
sent = remote.connection_options().initialization_data["shared_dir"].decode()
print(json.dumps(dict(seen=seen, made=made, again=again, sent=sent, mode=os.stat(made).st_mode,
                      env=[os.environ[remote.TRANSFER_DIR_VAR],
                           os.environ[remote.TRANSFER_THRESHOLD_VAR]])))
"""


def test_the_client_makes_its_private_directory_and_sets_jaxlibs_variables(
        tmp_path: Path) -> None:
    """In a process of its own: jaxlib's variables, once set, stay for the process's life."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_IPU_", "IFRT_PROXY_GRPC_"))}
    proc = subprocess.run([sys.executable, "-c", _SWITCH, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    none, relative, missing, both, alone = out["seen"]
    assert none is None  # no flag, no directory
    assert re.search(r"jax_ipu_remote_shared_dir.*absolute", relative)
    assert "cannot make a directory there" in missing
    assert both == ("JAX_IPU_REMOTE_SHARED_DIR sets jaxlib's "
                    "IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_THRESHOLD_BYTES: unset it.")
    assert "jaxlib would write large host buffers to files" in alone
    assert "set JAX_IPU_REMOTE_SHARED_DIR" in alone
    made = Path(out["made"])
    assert made.parent == tmp_path and made.name.startswith("jax-ipu-transfers-")
    assert out["mode"] & 0o777 == 0o700
    assert out["env"] == [str(made), str(1 << 20)]
    assert out["again"] == out["sent"] == str(made)  # jaxlib keeps its first directory
    assert re.search(r"has \d+ MiB free: a device_put of an array \(or shard\) larger than "
                     r"that fails, and jaxlib's client then ends its session", proc.stderr)
    assert not made.exists()  # removed at exit
