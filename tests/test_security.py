"""The attacks on what jax-ipu loads from disk, built and refused before anything in them runs.

A serialized executable or cache entry re-sealed around another program's code, a vertex library
planted with a plain SHA-256 beside it, and cache directories others can write into."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import subprocess
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import serialize_executable

from jax_ipu import sealing
from jax_ipu.runtime import client as runtime_client
from jax_ipu.runtime import codec, serialized
from jax_ipu.tile import build
from tests.test_compilation_cache import run


def program_a(a):
    return jnp.sin(a) * 2 + a


def program_b(a):  # the attacker's program: 42s where program_a's numbers were
    return jnp.maximum(a, 42.0)


X = np.linspace(0.5, 1.5, 8, dtype=np.float32)


def _blob(fn, *args):
    ipu = jax.devices("ipu")[0]
    compiled = jax.jit(lambda *a: fn(*a)).lower(*jax.device_put(args or (X,), ipu)).compile()
    exe = runtime_client.find_executable(compiled.runtime_executable().fingerprint.decode())
    client = runtime_client.live_clients()[0]
    return compiled, serialized.loads(client.serialize(exe), client.build)


def reseal(blob: serialized.Blob, mac) -> bytes:
    """`blob` in today's format, its seal made by `mac` from the bytes it covers."""
    build_id = blob.build.encode()
    head = (serialized.MAGIC + serialized.FORMAT.to_bytes(4, "little")
            + len(build_id).to_bytes(2, "little") + build_id)
    body = codec.dumps(serialized.Blob, blob)
    return head + mac(head + body) + body


def plain_sha(data: bytes) -> bytes:
    """What anyone can compute: the unkeyed SHA-256 the format used to carry."""
    return hashlib.sha256(data).digest()


def other_key(data: bytes) -> bytes:
    """A seal under a key that is not this user's."""
    return hmac.new(b"k" * 32, data, hashlib.sha256).digest()


def _load_with(compiled, crafted: bytes):
    """serialize_executable's payload of `compiled`, its plugin bytes replaced by `crafted`,
    loaded back through deserialize_and_load (the PJRT slot jax's cache also uses)."""
    original = runtime_client.IpuClient.serialize
    runtime_client.IpuClient.serialize = lambda self, exe: crafted
    try:
        payload, in_tree, out_tree = serialize_executable.serialize(compiled)
    finally:
        runtime_client.IpuClient.serialize = original
    return serialize_executable.deserialize_and_load(payload, in_tree, out_tree, backend="ipu")


def test_an_executable_resealed_around_another_programs_code_is_refused():
    compiled, blob = _blob(program_a)
    _, other = _blob(program_b)
    swapped = dataclasses.replace(blob, cpu_executable=other.cpu_executable)
    x = jax.device_put(X, jax.devices("ipu")[0])
    # The attack is live: sealed with this user's key, the swap runs program b's code.
    np.testing.assert_array_equal(np.asarray(_load_with(compiled, reseal(swapped,
                                                                         sealing.seal))(x)), 42.0)
    # Re-sealed as anyone can (unkeyed SHA-256, or another key): refused, nothing loaded.
    for mac in (plain_sha, other_key):
        with pytest.raises(jax.errors.JaxRuntimeError, match="seal does not hold.*Nothing in it "
                           "was run"):
            _load_with(compiled, reseal(swapped, mac))
    np.testing.assert_allclose(np.asarray(compiled(x)), np.sin(X) * 2 + X, rtol=1e-6)


def test_a_blob_under_another_key_file_is_refused(tmp_path):
    _, blob = _blob(program_a)
    data = serialized.dumps(blob)
    key = tmp_path / "team.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o640)  # a key a team shares may be group-readable
    jax.config.update("jax_ipu_key_file", str(key))
    try:
        with pytest.raises(serialized.StaleExecutableError, match="seal does not hold"):
            serialized.loads(data, blob.build)
        assert serialized.loads(serialized.dumps(blob), blob.build).code == blob.code
        key.chmod(0o660)
        sealing._keys.clear()
        with pytest.raises(sealing.KeyFileError, match="no other user can write"):
            serialized.dumps(blob)
    finally:
        jax.config.update("jax_ipu_key_file", "")
        sealing._keys.clear()


def test_the_users_key_is_made_private_and_a_readable_one_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    sealing._keys.clear()
    try:
        mac = sealing.seal(b"data")
        path = tmp_path / "jax_ipu" / "seal.key"
        assert path.stat().st_mode & 0o777 == 0o600 and len(path.read_bytes()) == 32
        assert mac == hmac.new(path.read_bytes(), b"data", hashlib.sha256).digest()
        path.chmod(0o644)
        sealing._keys.clear()
        with pytest.raises(sealing.KeyFileError, match=r"only you can read or write \(mode 600\)"):
            sealing.seal(b"data")
    finally:
        sealing._keys.clear()


def _swap_entries(cache, mac):
    """Rewrite each ipu entry of `cache` to hold another program's code (constant 42s) behind
    the original header and report, sealed by `mac`."""
    from jax._src import compilation_cache

    _, other = _blob(lambda w, x: (jnp.maximum(x @ w, 42.0), jnp.minimum(jnp.sum(w * w), 42.0)),
                     np.ones((64, 32), np.float32), np.ones((16, 64), np.float32))
    entries = list(cache.glob("jit_step*"))
    assert entries
    for entry in entries:
        data = compilation_cache.decompress_executable(entry.read_bytes())
        executable, time = compilation_cache.extract_executable_and_time(data)
        at = executable.index(serialized.MAGIC)
        blob = serialized.loads(executable[at:], serialized.build_id())
        crafted = reseal(dataclasses.replace(blob, cpu_executable=other.cpu_executable), mac)
        entry.write_bytes(compilation_cache.compress_executable(
            compilation_cache.combine_executable_and_time(executable[:at] + crafted, time)))


def test_a_cache_entry_resealed_around_other_code_is_compiled_afresh(tmp_path):
    first = run(tmp_path)
    _swap_entries(tmp_path, plain_sha)
    again = run(tmp_path)
    assert again["hits"] == 0
    refused = [w for w in again["warnings"] if "Error reading persistent compilation cache" in w]
    assert len(refused) == 1 and "seal does not hold" in refused[0], again["warnings"]
    assert again["ipu"] == first["ipu"]


def test_a_cache_directory_others_can_write_is_not_read(tmp_path):
    cache = tmp_path / "cache"
    first = run(cache)
    _swap_entries(cache, sealing.seal)  # even an entry whose seal holds: anyone could plant it
    cache.chmod(0o777)
    again = run(cache)
    assert again["hits"] == 0
    refused = [w for w in again["warnings"] if "Error reading persistent compilation cache" in w]
    assert len(refused) == 1 and "writable by other users" in refused[0], again["warnings"]
    assert again["ipu"] == first["ipu"]


# A library whose constructor runs when it is loaded: it leaves a file behind.
PLANT = """
#include <cstdio>
__attribute__((constructor)) static void planted() {{
  if (FILE* f = std::fopen("{marker}", "w")) std::fclose(f);
}}
"""


@pytest.fixture()
def vertex_cache(tmp_path, monkeypatch):
    cache = tmp_path / "vertices"
    monkeypatch.setattr(build, "cache_dir", lambda: cache)
    return cache


def _plant(tmp_path, out):
    marker = tmp_path / "constructor-ran"
    source = tmp_path / "plant.cc"
    source.write_text(PLANT.format(marker=marker))
    lib = tmp_path / "plant.so"
    subprocess.run([*build.compiler(), "-shared", "-fPIC", str(source), "-o", str(lib)],
                   check=True, capture_output=True, timeout=120)
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    data = lib.read_bytes()
    (out / build.LIBRARY).write_bytes(data)
    for name in (build.SEAL, "vertex.so.sha256"):  # the digest the old sidecar held
        (out / name).write_text(hashlib.sha256(data).hexdigest())
    for path in out.iterdir():
        path.chmod(0o600)
    return lib, marker


def test_a_planted_vertex_library_is_rebuilt_not_loaded(tmp_path, vertex_cache):
    b = build.Build("class Nothing {};", "<test>", "")
    out = vertex_cache / b.digest(build.compiler())[:32]
    lib, marker = _plant(tmp_path, out)
    import ctypes
    ctypes.CDLL(str(lib))
    assert marker.exists()  # the plant is live: loading it runs its constructor
    marker.unlink()
    built = build.library(b)
    assert built.read_bytes() != lib.read_bytes()
    ctypes.CDLL(str(built))
    assert not marker.exists()


def test_vertex_directories_others_can_write_are_refused(tmp_path, vertex_cache):
    b = build.Build("class Nothing {};", "<test>", "")
    vertex_cache.mkdir(mode=0o700)
    vertex_cache.chmod(0o777)  # as a pre-created, world-writable directory
    with pytest.raises(sealing.UntrustedDirectoryError, match=r"writable by other users "
                       r"\(mode 777\).*chmod go-w"):
        build.library(b)
    vertex_cache.chmod(0o700)
    out = vertex_cache / b.digest(build.compiler())[:32]
    _, marker = _plant(tmp_path, out)
    out.chmod(0o777)
    with pytest.raises(sealing.UntrustedDirectoryError, match="writable by other users"):
        build.library(b)
    assert not marker.exists()


def test_a_codelet_name_with_a_newline_stays_a_name():
    name = 'evil\nint broken = "unterminated;\n#error planted'
    b = build.Build("class Nothing {};", name, "")
    directive = b.translation_unit().splitlines()[1]
    assert directive.startswith('#line 1 "evil\\012int broken = \\042unterminated;')
    assert directive.endswith('#error planted"')
    assert build.library(b).exists()  # it builds: the rest of the name is not C++


def test_a_name_too_long_for_the_file_system_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "cache_dir", lambda: tmp_path / ("x" * 300))
    with pytest.raises(build.IpuVertexBuildError, match="cannot make the vertex build cache.*"
                       "JAX_IPU_TILE_CACHE_DIR"):
        build.library(build.Build("class Nothing {};", "<test>", ""))


def test_fuzzed_resealed_entries_never_load():
    """The fuzz script's attack in small (bench/fuzz_entries.py runs 2,000): any change,
    re-sealed as anyone can, is refused with StaleExecutableError."""
    import random

    _, blob = _blob(program_a)
    data = serialized.dumps(blob)
    rng = random.Random(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(200):
            body = bytearray(data[len(data) - len(codec.dumps(serialized.Blob, blob)):])
            body[rng.randrange(len(body))] ^= 1 << rng.randrange(8)
            head = data[:len(data) - len(body) - sealing.SEAL_BYTES]
            with pytest.raises(serialized.StaleExecutableError, match="seal does not hold"):
                serialized.loads(head + plain_sha(head + bytes(body)) + bytes(body), blob.build)


def test_a_wrapper_naming_an_unknown_memory_kind_is_refused_at_load():
    """jaxlib's wrapper before the sealed bytes names each output's memory kind; a changed one
    aborted the process (jaxlib's CHECK) at the first call. Legitimate kinds still load."""
    ipu = jax.devices("ipu")[0]
    x = jax.device_put(X, ipu)
    host = jax.sharding.SingleDeviceSharding(ipu, memory_kind="pinned_host")
    compiled = jax.jit(lambda a: (a * 3, a + 1), out_shardings=(None, host)).lower(x).compile()
    payload, in_tree, out_tree = serialize_executable.serialize(compiled)
    loaded = serialize_executable.deserialize_and_load(payload, in_tree, out_tree, backend="ipu")
    assert [o.sharding.memory_kind for o in loaded(x)] == ["device", "pinned_host"]
    crafted = payload.replace(b"\x06device", b"\x06devicx", 1)
    assert crafted != payload
    with pytest.raises(serialized.StaleExecutableError, match=r"memory kinds \('devicx', "
                       r"'pinned_host'\), not in the program's \['device', 'pinned_host'\] "
                       r"\(ipu has no memory kind 'devicx'\)"):
        serialize_executable.deserialize_and_load(crafted, in_tree, out_tree, backend="ipu")


def test_processes_making_the_key_at_once_agree_on_it(tmp_path):
    """The first process to link its key in place wins; the others read that one (an entry one
    writes, another can load)."""
    import sys

    code = ("import sys; from jax_ipu import sealing; "
            "sys.stdout.write(sealing.seal(b'entry').hex())")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_IPU_")}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    children = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                 text=True) for _ in range(4)]
    seals = {child.communicate(timeout=120)[0] for child in children}
    key = (tmp_path / "jax_ipu" / "seal.key").read_bytes()
    assert seals == {hmac.new(key, b"entry", hashlib.sha256).hexdigest()}
    assert [p.name for p in (tmp_path / "jax_ipu").iterdir()] == ["seal.key"]
