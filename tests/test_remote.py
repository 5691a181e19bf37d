"""The same JAX on a remote IPU Model as on a local one (issue 26, item 3): a real server process
on 127.0.0.1 with 8 devices, a real client process running stock jaxlib's IFRT proxy client, and
every result compared with jax on CPU (in the client) or with a local compile (in this process)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import jax
import numpy as np
import pytest

import jax_ipu
from jax_ipu import _internals
from jax_ipu.protowire import Message
from jax_ipu.remote import schema
from jax_ipu.remote.backend import CLIENT_CALLS, NO_INSPECT_SHARDING, Backend
from jax_ipu.remote.callback_poller import USED_INSIDE
from tests._remote import Client, Server
from tests.test_profile_trace import check_trace_events

REPORTS = {"autoReport.all": "true", "autoReport.directory": "server-reports"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # The server writes Poplar-style reports of every compile, as a local run would.
    srv = Server(tmp_path_factory.mktemp("remote-server"),
                 env={"POPLAR_ENGINE_OPTIONS": json.dumps(REPORTS)})
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[Client]:
    # 8 CPU devices beside the 8 remote ipu ones, for the references of the multi-device tests.
    c = Client(server.address, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
    c.run("""
        import jax, jax.numpy as jnp, numpy as np, jax_ipu
        from functools import partial
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        ipus, cpus = jax.devices("ipu"), jax.devices("cpu")
        def both(f, *args):
            # f on the remote ipu devices and on cpu, as lists for JSON
            return [np.asarray(f(ipus, *args)).tolist(), np.asarray(f(cpus, *args)).tolist()]
    """)
    try:
        yield c
    finally:
        c.close()


def test_devices_are_the_servers(client: Client) -> None:
    devices = client.run("""
        result = [(d.id, d.platform, d.device_kind, repr(d), d.num_tiles) for d in ipus]
        result.append(ipus[0].client.runtime_type)
    """)
    assert devices[-1] == "proxy/jax-ipu"  # no local IPU Model in the client
    assert [d[0] for d in devices[:-1]] == list(range(8))
    assert devices[0][1:] == ["ipu", "IPU Model ipu2",
                              "IpuDevice(id=0, num_tiles=1472, version=ipu2)", 1472]
    info = client.run("""
        import contextlib, io
        from jax_ipu.__main__ import info
        with contextlib.redirect_stdout(io.StringIO()) as out:
            info()
        result = out.getvalue()
    """)
    assert "remote: the IPU Model of the jax-ipu server at grpc://127.0.0.1:" in info
    assert "IpuDevice(id=7, num_tiles=1472, version=ipu2): IPU Model ipu2, 1,472 tiles" in info


def test_jaxlibs_flusher_thread_gets_a_millisecond_of_timer_slack(client: Client) -> None:
    # jaxlib's client wakes a thread every 50 us for its life (18% of a core while idle): the
    # threads it starts while connecting get 1 ms of slack, the program's own threads keep theirs.
    slack = client.run("""
        import os, threading
        def slack_of(tid):
            try:
                with open(f"/proc/{tid}/timerslack_ns") as f:
                    return int(f.read())
            except FileNotFoundError:  # a thread that ended since it was listed
                return None
        later = []
        t = threading.Thread(target=lambda: later.append(slack_of(threading.get_native_id())))
        t.start(); t.join()
        tids = [int(t) for t in os.listdir("/proc/self/task")]
        result = [slack_of(os.getpid()), later[0],
                  sorted(s for s in map(slack_of, tids) if s is not None)]
    """)
    main, later, every = slack
    assert main == later != 1_000_000  # what the process started with (Linux's default: 50 us)
    assert every.count(1_000_000) >= 1  # the flusher's thread among them
    assert set(every) == {main, 1_000_000}


def test_device_put_and_read_back(client: Client) -> None:
    """Bytes come back as from a cpu device, for each dtype, a scalar, an empty and a strided
    array (int64 becomes int32 without x64, on both)."""
    back = client.run("""
        cases = {
            "f32": np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4),
            "f16": np.arange(10, dtype=np.float16) / 7,
            "i32": np.arange(-5, 5, dtype=np.int32), "u8": np.arange(256, dtype=np.uint8),
            "bool": np.array([True, False, True]), "i64": np.array([2**40, -3], np.int64),
            "scalar": np.float32(2.5), "empty": np.zeros((0, 3), np.float32),
            "strided": np.arange(40, dtype=np.float32).reshape(5, 8)[::2, 1::3],
        }
        result = {}
        for name, host in cases.items():
            x = jax.device_put(host, ipus[3])
            value = np.asarray(x)
            result[name] = [value.dtype.str, list(value.shape), value.tobytes().hex(),
                            np.asarray(jax.device_put(host, cpus[0])).tobytes().hex(),
                            sorted(d.id for d in x.devices())]
    """)
    for name, (_, _, got, want, devices) in back.items():
        assert got == want, name
        assert devices == [3], name
    assert back["i64"][0] == "<i4" and back["strided"][1] == [3, 3]
    assert back["u8"][2] == bytes(range(256)).hex()


def test_host_arrays_in_layouts_jaxlibs_client_refuses_arrive_as_on_cpu(client: Client) -> None:
    """numpy arrays laid out as jaxlib's proxy client will not send (a zero stride, a negative
    one, a stride that is not a multiple of the item size) reach the server by every way in:
    device_put, jnp.asarray and a jit argument, an eager op, pmap, a sharded put and
    make_array_from_callback, each equal to cpu (without jax_ipu's client each is UNIMPLEMENTED
    in jaxlib, see test_a_client_without_jax_ipu)."""
    got = client.run("""
        base = np.arange(48, dtype=np.float32).reshape(6, 8)
        record = np.zeros(6, dtype=[("a", np.float32), ("b", np.uint8)])  # 5-byte records
        record["a"] = np.arange(6) * 1.5
        hosts = {"broadcast": np.broadcast_to(np.arange(8, dtype=np.float32), (6, 8)),
                 "reversed": base[::-1, ::-2], "field": record["a"]}
        strides = {name: list(h.strides) for name, h in hosts.items()}

        def on(device, f):
            with jax.default_device(device):
                return f()

        def halves(devices):
            return NamedSharding(Mesh(np.array(devices[:2]), ("x",)), P("x"))

        ways = {
            "device_put": lambda d, h: jax.device_put(h, d[1]),
            "asarray and jit": lambda d, h: on(d[0], lambda: jnp.sin(jnp.asarray(h))
                                                + jax.jit(lambda a: a * 2)(h)),
            "eager op": lambda d, h: jax.device_put(np.ones(h.shape, h.dtype), d[0]) + h,
            "pmap": lambda d, h: jax.pmap(lambda a: a * 3, devices=d[:6])(h),
            "sharded put": lambda d, h: jax.device_put(h, halves(d)),
            "callback": lambda d, h: jax.make_array_from_callback(h.shape, halves(d),
                                                                  lambda i: h[i]),
        }
        result = [strides, {f"{name} {way}": both(f, h) for name, h in hosts.items()
                            for way, f in ways.items()}]
    """)
    strides, cases = got
    assert strides == {"broadcast": [0, 4], "reversed": [-32, -8], "field": [5]}
    assert len(cases) == 18
    for case, (ipu, cpu) in cases.items():
        assert ipu == cpu, case
    assert cases["broadcast device_put"][1] == [list(range(8))] * 6
    assert cases["field pmap"][1] == [4.5 * i for i in range(6)]


def test_arrays_move_between_remote_ipus_and_cpus_by_any_sharding(client: Client) -> None:
    """jaxlib's proxy client copies arrays only among its own devices; as on a local ipu, a
    device_put to another platform's sharding (or jnp.arange(..., device=cpu) while ipu is the
    default) goes through the host."""
    got = client.run("""
        x = np.arange(16, dtype=np.float32).reshape(4, 4)
        one = jax.sharding.SingleDeviceSharding

        def halves(devices):
            return NamedSharding(Mesh(np.array(devices[:2]), ("x",)), P("x"))

        moves = {"ipu to a cpu": (jax.device_put(x, ipus[0]), one(cpus[1])),
                 "cpu to an ipu": (jax.device_put(x, cpus[0]), one(ipus[1])),
                 "split ipus to split cpus": (jax.device_put(x, halves(ipus)), halves(cpus)),
                 "split cpus to split ipus": (jax.device_put(x, halves(cpus)), halves(ipus))}
        result = {"default": jax.default_backend()}
        for name, (a, sharding) in moves.items():
            y = jax.device_put(a, sharding)
            result[name] = [np.asarray(y).tolist(), y.sharding == sharding, a.is_deleted()]
        r = jnp.arange(6.0, device=cpus[2])
        result["arange"] = [np.asarray(r).tolist(), [(d.platform, d.id) for d in r.devices()]]
    """)
    assert got.pop("default") == "ipu"
    assert got.pop("arange") == [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [["cpu", 2]]]
    for name, (values, placed, deleted) in got.items():
        assert values == np.arange(16).reshape(4, 4).tolist(), name
        assert placed and not deleted, name


def test_which_host_arrays_the_client_lays_out_again() -> None:
    """jaxlib's rule (ifrt_proxy ArrayMemRegion): each dimension longer than 1 needs a positive
    stride, a multiple of the item size. Only the remote switch wraps jax's transfers."""
    from jax._src.interpreters import pxla

    from jax_ipu import _internals
    from jax_ipu.remote.client import refused_by_proxy

    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    record = np.zeros(4, dtype=[("a", np.float32), ("b", np.uint8)])
    for sent in (x, x.T, x[:, ::2], x[::-1][:1], np.broadcast_to(x[:, :1], (4, 1)),
                 np.zeros((0, 3), np.float32)[::-1], np.float32(2), [1.0, 2.0]):
        assert not refused_by_proxy(sent), sent
    for laid_out_again in (x[::-1], x[:, ::-3], np.broadcast_to(x[0], (4, 6)), record["a"]):
        assert refused_by_proxy(laid_out_again), laid_out_again.strides
    # a local run: neither of jax's paths is wrapped
    assert not getattr(pxla.batched_device_put, "_jax_ipu_wrapped", False)
    assert not getattr(pxla.shard_arg_handlers[_internals.ArrayImpl], "_jax_ipu_wrapped", False)


def test_a_loop_that_never_waits_stays_within_the_put_window(client: Client) -> None:
    """jax dispatches puts without waiting and jaxlib's client sends each from a thread of its
    own until it lands: without the window, 2,000 steps of this loop grew about 1,250 threads
    and 1.2 GB in the client (20,000 were killed by the kernel); a local ipu needs none."""
    got = client.run("""
        import os
        def threads():
            return len(os.listdir(f"/proc/{os.getpid()}/task"))
        step = jax.jit(lambda acc, batch: acc + batch.sum(axis=0))
        batches = np.random.default_rng(0).standard_normal((8, 128, 784)).astype(np.float32)
        acc, start, most = jax.device_put(np.zeros(784, np.float32), ipus[0]), threads(), 0
        for i in range(2000):
            acc = step(acc, jax.device_put(batches[i % 8], ipus[0]))
            if i % 50 == 0:
                most = max(most, threads())
        result = [most - start, np.asarray(acc).tolist()]
    """)
    grown, acc = got
    want = 250 * np.random.default_rng(0).standard_normal((8, 128, 784)).astype(
        np.float32).sum(axis=(0, 1), dtype=np.float64)
    np.testing.assert_allclose(acc, want, rtol=1e-4, atol=1e-2)
    assert grown <= 150, f"the client grew {grown} threads"  # 64 puts on their way at most


def test_device_get_of_a_large_tree_stays_within_the_read_window(client: Client) -> None:
    """jax.device_get starts a read-back of every leaf first, and jaxlib's client runs each on
    a thread of its own, kept for the process's life: 5,000 leaves made 4,280 threads. The
    values come back as from cpu, with at most READS_ON_THE_WAY on their way."""
    got = client.run("""
        import os
        def threads():
            return len(os.listdir(f"/proc/{os.getpid()}/task"))
        leaves = [np.full((16,), k, np.float32) for k in range(3000)]
        on_ipu = jax.block_until_ready(jax.device_put(leaves, ipus[1]))
        start = threads()
        back = jax.device_get(on_ipu)
        result = [threads() - start, all(np.array_equal(b, h) for b, h in zip(back, leaves)),
                  float(np.asarray(on_ipu[-1])[0])]
    """)
    grown, equal, last = got
    assert equal and last == 2999.0
    assert grown <= 200, f"the client grew {grown} threads"


def test_the_read_window_reads_the_oldest_once_too_many_are_on_their_way() -> None:
    from jax_ipu.remote.inflight import READS_ON_THE_WAY, ReadWindow

    assert READS_ON_THE_WAY == 64

    class Read:  # an Array whose read-back was started: counts the reads that finish it
        def __init__(self, error: str = "") -> None:
            self.reads, self.error = 0, error

        @property
        def _value(self) -> np.ndarray:
            self.reads += 1
            if self.error:
                raise RuntimeError(self.error)
            return np.zeros(1)

    window = ReadWindow()
    held = [Read() for _ in range(READS_ON_THE_WAY + 3)]
    for array in held:
        window.started(array)
    assert [a.reads for a in held] == [1, 1, 1] + [0] * READS_ON_THE_WAY
    for _ in range(READS_ON_THE_WAY):  # the program let these go: nothing to read
        window.started(Read())
    assert [a.reads for a in held] == [1, 1, 1] + [1] * READS_ON_THE_WAY
    window = ReadWindow(limit=1)
    failed = Read("Array has been deleted.")
    window.started(failed)
    window.started(Read())  # reading a deleted one raises nothing
    assert failed.reads == 1


def test_the_put_window_waits_at_each_mark_for_the_mark_before_it() -> None:
    """The rule (inflight.py): every MARK_PUTS-th put (or the one making MARK_BYTES) is a mark
    and waits for the mark before it while the program holds that array, else every second
    mark waits for itself; a put that failed or was deleted is not waited for with an error."""
    from jax_ipu.remote.inflight import MARK_BYTES, MARK_PUTS, PutWindow

    assert (MARK_PUTS, MARK_BYTES) == (32, 32 << 20)

    class Put:  # a dispatched put: counts the waits for it, may fail as jaxlib's arrays do
        def __init__(self, error: str = "") -> None:
            self.waited, self.error = 0, error

        def block_until_ready(self) -> Put:
            self.waited += 1
            if self.error:
                raise RuntimeError(self.error)
            return self

    window = PutWindow()
    held = [Put() for _ in range(3 * MARK_PUTS)]  # a tree of parameters: all still held
    for put in held:
        window.sent(put, 1000)
    marks = [MARK_PUTS - 1, 2 * MARK_PUTS - 1, 3 * MARK_PUTS - 1]
    assert [i for i, p in enumerate(held) if p.waited] == marks[:2]  # each by the next mark

    window = PutWindow()
    waited = []
    for i in range(4 * MARK_PUTS):  # a loop's batches: let go at once
        put = Put()
        window.sent(put, 1000)
        if put.waited:
            waited.append(i)
        del put
    assert waited == [2 * MARK_PUTS - 1, 4 * MARK_PUTS - 1]  # every second mark, for itself

    window = PutWindow()
    first, big = Put(), Put()
    window.sent(first, MARK_BYTES - 10)  # bytes count too
    window.sent(big, 10)
    window.sent(Put(), MARK_BYTES)  # a large put is a mark by itself: waits for the one before
    assert (first.waited, big.waited) == (0, 1)
    gone = Put("Array has been deleted.")
    window.sent(gone, MARK_BYTES)
    window.sent(Put(), MARK_BYTES)  # waiting for a deleted array raises nothing
    assert gone.waited == 1


def test_a_sessions_codec_reads_each_sharding_once_and_keeps_a_bounded_number() -> None:
    from jax_ipu.remote.ifrt import PLACEMENTS_KEPT, Codec, Placement, ProtocolError

    codec = Codec(schema.load())
    first = codec.sharding(codec.single_device_sharding(3, "pinned_host"))
    assert first == Placement((3,), "pinned_host", None, None)
    assert codec.sharding(codec.single_device_sharding(3, "pinned_host")) is first
    for device in range(PLACEMENTS_KEPT + 50):  # a hostile client cannot grow it
        codec.sharding(codec.single_device_sharding(device, None))
    assert codec._placement.cache_info().currsize == PLACEMENTS_KEPT
    bad = codec.Sharding(serialized_sharding=codec.Serialized(
        type_name="xla::ifrt::SingleDeviceSharding", data=b"\xff"))
    for _ in range(2):  # an error is not kept: it is raised again
        with pytest.raises(ProtocolError, match="the bytes are not a SingleDeviceShardingProto"):
            codec.sharding(bad)


def test_a_host_buffer_is_read_in_the_clients_byte_strides() -> None:
    from jax_ipu.remote.backend import host_view
    from jax_ipu.remote.ifrt import ProtocolError

    f32 = np.dtype(np.float32)
    data = np.arange(12, dtype=np.float32).tobytes()
    assert host_view(data, f32, (3, 4), [16, 4]).tolist() == np.arange(12).reshape(3, 4).tolist()
    assert host_view(data, f32, (3, 2), [16, 8]).tolist() == [[0, 2], [4, 6], [8, 10]]
    assert host_view(data, f32, (4, 3), [4, 16]).tolist() == np.arange(12).reshape(3, 4).T.tolist()
    # a dimension of length 1 is never stepped along: a record field's 5 bytes are not an error
    assert host_view(data[:4], f32, (1,), [5]).tolist() == [0.0]
    assert host_view(data, f32, (1, 3), [5, 16]).tolist() == [[0, 4, 8]]
    for shape, strides, words in (((3, 4), [-16, 4], "do not fit"), ((3, 4), [16, 2], "do not fit"),
                                  ((3, 4), [4], "do not fit"), ((4, 2), [16, 8], "too short"),
                                  ((3, 4), None, r"44 bytes for float32\[3, 4\]")):
        with pytest.raises(ProtocolError, match=words):
            host_view(data[:44] if strides is None else data, f32, shape, strides)


def test_jax_export_serializes_and_runs_on_the_remote_ipu(client: Client) -> None:
    """jax.export reads the default backend's serialize_with_sdy, which jaxlib's client takes
    from the server's client attributes (no attribute: every export failed, cpu's too)."""
    got = client.run("""
        from jax import export
        x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
        spec = jax.ShapeDtypeStruct((3, 4), np.float32)
        client = ipus[0].client
        result = {"attributes": [client.serialize_with_sdy,
                                 client.supports_executable_serialization]}
        for platforms in (["ipu"], ["cpu"], ["cpu", "ipu"]):
            exported = export.export(jax.jit(lambda a: jnp.tanh(a @ a.T) * 2),
                                     platforms=platforms)(spec)
            back = export.deserialize(exported.serialize())
            result["+".join(platforms)] = [
                np.asarray(back.call(jax.device_put(x, jax.devices(p)[0]))).tolist()
                for p in platforms]
    """)
    assert got.pop("attributes") == [True, False]
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    want = np.tanh(x @ x.T) * 2
    for platforms, values in got.items():
        for value in values:
            np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6, err_msg=platforms)
    assert got["cpu+ipu"][0] == got["cpu+ipu"][1]


def test_a_client_with_x64_keeps_its_64_bit_arrays(client: Client) -> None:
    """The server holds the dtypes each client's jax chose: with jax_enable_x64 an int64 array
    stays int64 there (it was narrowed to int32, and the next call failed on its size)."""
    got = client.run("""
        big = np.array([2**40, -3, 7], np.int64)
        result = {}
        with jax.enable_x64(True):
            for name, host in (("i64", big), ("u64", big.astype(np.uint64) // 2),
                               ("f64", np.array([1e300, 0.1], np.float64))):
                x = jax.device_put(host, ipus[2])
                result[name] = [x.dtype.name, np.asarray(x).tolist(), host.tolist()]
            add = jax.jit(lambda a: a * 3 + 1)
            result["jit"] = [np.asarray(add(jax.device_put(big, d[2]))).tolist()
                             for d in (ipus, cpus)]
        result["x64 off"] = jax.device_put(big, ipus[2]).dtype.name
    """)
    for name in ("i64", "u64", "f64"):
        dtype, back, sent = got[name]
        assert dtype == {"i64": "int64", "u64": "uint64", "f64": "float64"}[name]
        assert back == sent, name
    assert got["jit"][0] == got["jit"][1] == [3 * 2**40 + 1, -8, 22]
    assert got["x64 off"] == "int32"


def test_jit_and_eager_ops_match_cpu(client: Client) -> None:
    got, want = client.run("""
        def f(devices, x):
            x = jax.device_put(x, devices[0])
            g = jax.jit(lambda a: jnp.tanh(a @ a.T) / (1 + jnp.abs(a).sum()))
            eager = jnp.sin(x) * 2 - jnp.cumsum(x, axis=1)   # op by op
            return jnp.concatenate([g(x), eager], axis=1)
        x = np.random.default_rng(0).normal(size=(6, 6)).astype(np.float32)
        result = both(f, x)
    """)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_donation(client: Client) -> None:
    result = client.run("""
        step = jax.jit(lambda p, g: p - 0.5 * g, donate_argnums=0)
        p = jax.device_put(np.arange(4, dtype=np.float32), ipus[0])
        q = step(p, np.ones(4, np.float32))
        try:
            np.asarray(p)
            reuse = "no error"
        except Exception as e:
            reuse = str(e)
        result = [p.is_deleted(), np.asarray(q).tolist(), reuse]
    """)
    deleted, values, reuse = result
    assert deleted and values == [-0.5, 0.5, 1.5, 2.5]
    assert "deleted" in reuse  # jax's own error for a donated array


def test_device_put_copies_aliases_and_donates_as_asked(client: Client) -> None:
    """jax.device_put(x, may_alias=False) is a copy of its own, donate=True deletes x: the
    server honours each request's copy semantics (it aliased every copy to where x already
    was, so deleting x broke the 'copy'). Found by JAX's memories_test."""
    assert client.run("""
        mesh = jax.sharding.Mesh(np.array(ipus[:2]), ("x",))
        out = []
        for kind in ("device", "pinned_host"):
            for where in (jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"),
                                                     memory_kind=kind),
                          jax.sharding.SingleDeviceSharding(ipus[0], memory_kind=kind)):
                x = jax.device_put(np.arange(8, dtype=np.float32), where)
                copy = jax.device_put(x, may_alias=False)
                x.delete()
                moved = jax.device_put(copy, where, donate=True)
                out.append([copy.is_deleted(), np.asarray(moved).tolist(),
                            moved.sharding == where])
        result = out
    """) == [[True, list(range(8)), True]] * 4


def test_pmap_over_8_devices(client: Client) -> None:
    got, want = client.run("""
        def f(devices, x):
            return jax.pmap(lambda v: v * jax.lax.axis_index("i") + jax.lax.psum(v, "i")
                            - jax.lax.pmean(v ** 2, "i"), axis_name="i", devices=devices)(x)
        result = both(f, np.arange(24, dtype=np.float32).reshape(8, 3))
    """)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_shard_map_ppermute_and_psum(client: Client) -> None:
    got, want = client.run("""
        def f(devices, x):
            mesh = Mesh(np.array(devices), ("x",))
            ring = [(i, (i + 1) % 8) for i in range(8)]
            @jax.jit
            @partial(jax.shard_map, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
            def step(v):
                halo = jax.lax.ppermute(v[-1:], "x", ring)   # each block's left neighbour
                return jnp.concatenate([halo, v[:-1]]) + jax.lax.psum(v.sum(), "x")
            return step(x)
        result = both(f, np.arange(32, dtype=np.float32) ** 1.5)
    """)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_an_eager_shard_map_with_a_scan_runs_as_under_jit(client: Client) -> None:
    """Eagerly, jax compiles the scan's pieces one by one, among them a program with no
    results over two devices, whose output sharding XLA still names: the server refused it
    ('zip() argument 2 is shorter than argument 1'). Found by JAX's shard_map_test."""
    got, want = client.run("""
        def f(devices, x):
            mesh = Mesh(np.array(devices[:2]), ("x",))
            body = lambda v: jax.lax.scan(lambda c, _: (c, None), v, None, length=1)[0] * 2
            return jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(x)
        result = both(f, np.arange(4, dtype=np.float32))
    """)
    assert got == want == [0.0, 2.0, 4.0, 6.0]


def test_arrays_move_to_their_devices_in_another_order(client: Client) -> None:
    """An array over devices 0..7 put over the same devices reversed: jax sends pmap's move as
    a copy and a NamedSharding's as a remap of shards; the server refused both (an
    AssertionError inside jax, 'remap_arrays is not served'). Found by JAX's pmap_test."""
    got, want = client.run("""
        def f(devices, x):
            a = jax.pmap(lambda v: v * 2, devices=devices)(x)
            b = jax.pmap(lambda v: v + 1, devices=devices[::-1])(a)
            c = jax.device_put(b, NamedSharding(Mesh(np.array(devices[::-1]), "x"), P("x")))
            order = [shard.device.id - devices[0].id for shard in c.addressable_shards]
            return np.concatenate([np.asarray(c).ravel(), order])
        result = both(f, np.arange(16, dtype=np.float32).reshape(8, 2))
    """)
    assert got == want == [*(2.0 * np.arange(16) + 1), *range(7, -1, -1)]


def test_an_array_donated_to_a_move_to_its_devices_in_another_order_is_gone(
        client: Client) -> None:
    """The remap's outputs take the donated input's buffers: reading the input fails, as
    locally (it stayed readable). jaxlib's client answers is_deleted() itself, without asking,
    so it still says False remotely (found by JAX's pjit_test)."""
    result = client.run("""
        def f(devices, x):
            mesh = Mesh(np.array(devices), "x")
            back = Mesh(np.array(devices[::-1]), "x")
            a = jax.device_put(x, NamedSharding(mesh, P("x")))
            kept = jax.device_put(x + 1, NamedSharding(mesh, P("x")))
            b, c = jax.device_put((a, kept), NamedSharding(back, P("x")), donate=(True, False))
            try:
                np.asarray(a)
                read = "read"
            except Exception as exc:
                read = "deleted" if "deleted" in str(exc) else str(exc)
            return [np.asarray(b).tolist(), np.asarray(c).tolist(), np.asarray(kept).tolist(),
                    read]
        x = np.arange(8, dtype=np.float32)
        result = [f(ipus, x), f(cpus, x)]
    """)
    got, want = result
    assert got == want
    assert got[3] == "deleted" and got[0] == list(range(8))


def test_a_shard_map_manual_over_part_of_an_explicit_mesh(client: Client) -> None:
    """XLA's partitioned module of this program does not convert to StableHLO, and the program
    jax sent (sdy.manual_computation) has no HLO form, so the server could not read its layouts
    ('unsupported op for export to XLA'). The partitioned module is now answered as HLO. Found
    by JAX's shard_map_test (test_explicit_vmap_grad_shmap)."""
    got, want = client.run("""
        from jax.sharding import AxisType
        def f(devices, x):
            mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2,
                                 devices=devices[:4])
            with jax.set_mesh(mesh):
                arr = jax.device_put(x, P("x", None))
                def g(v):
                    v = jax.reshard(v, P("y"))
                    return jax.shard_map(jnp.cos, in_specs=P("y"), out_specs=P("y"))(v).sum()
                return jax.jit(jax.vmap(jax.grad(g)))(arr)
        result = both(f, np.arange(6 * 8, dtype=np.float32).reshape(6, 8) / 10)
    """)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(got, -np.sin(np.arange(48).reshape(6, 8) / 10), rtol=1e-5,
                               atol=1e-6)


def test_sharded_jit(client: Client) -> None:
    result = client.run("""
        def f(devices, a):
            mesh = Mesh(np.array(devices).reshape(4, 2), ("data", "model"))
            a = jax.device_put(a, NamedSharding(mesh, P("data", "model")))
            w = jax.device_put(np.eye(6, dtype=np.float32) * 3,
                               NamedSharding(mesh, P(None, "model")))
            out = jax.jit(lambda a, w: jax.nn.relu(a @ w) - a.mean(axis=0))(a, w)
            return out
        a = np.random.default_rng(1).normal(size=(8, 6)).astype(np.float32)
        out = f(ipus, a)
        result = both(f, a) + [str(out.sharding.spec), len(out.sharding.device_set),
                               [s.data.shape for s in out.addressable_shards][:2]]
    """)
    got, want, spec, count, shard_shapes = result
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert count == 8 and spec == "P('data', 'model')" and shard_shapes == [[2, 3]] * 2


def test_tokens_pass_in_and_out_of_jitted_functions(client: Client) -> None:
    """A token is an array of bool[0] to jax's dispatch and the protocol; XLA has no layout for
    one, so the executable's output layouts are answered as an error, as jaxlib's own are (the
    server refused such programs: 'result type !stablehlo.token has no fixed array shape')."""
    result = client.run("""
        def f(devices, x):
            mesh = Mesh(np.array(devices[:2]), ("x",))
            x = jax.device_put(x, NamedSharding(mesh, P("x")))
            made = jax.jit(lambda a: (jax.lax.create_token(), a * 2))
            passed = jax.jit(lambda t, a: (jax.lax.after_all(t), a + 1))
            t, y = made(x)
            t2, z = passed(t, y)
            t3, w = passed(jax.lax.create_token(), z)  # an eager token, on one device
            kinds.append([type(v).__name__ for v in (t, t2, t3)]
                         + [len(t._buf.sharding.device_set), list(t._buf.shape)])
            return w
        kinds = []
        result = both(f, np.arange(8, dtype=np.float32)) + kinds
    """)
    got, want, ipu_kinds, cpu_kinds = result
    assert got == want == [2.0 * i + 2 for i in range(8)]
    assert ipu_kinds == cpu_kinds == ["Token", "Token", "Token", 2, [0]]


def test_memory_kinds(client: Client) -> None:
    result = client.run("""
        d = ipus[1]
        kinds = [m.kind for m in d.addressable_memories()]
        on = lambda kind: jax.sharding.SingleDeviceSharding(d, memory_kind=kind)
        x = jax.device_put(np.arange(6, dtype=np.float32), on("pinned_host"))
        y = jax.device_put(x, on("unpinned_host"))
        @partial(jax.jit, out_shardings=on("pinned_host"))
        def step(a):   # brought in from Streaming Memory, computed, and sent back
            return jax.device_put(a, on("device")) * 2 + 1
        z = step(x)
        result = [kinds, str(d.default_memory()), x.sharding.memory_kind, y.sharding.memory_kind,
                  z.sharding.memory_kind, np.asarray(y).tolist(), np.asarray(z).tolist()]
    """)
    kinds, default, x_kind, y_kind, z_kind, y, z = result
    assert kinds == ["device", "pinned_host", "unpinned_host"]
    assert default == "IpuMemory(id=3, kind=device, device=1)"
    assert (x_kind, y_kind, z_kind) == ("pinned_host", "unpinned_host", "pinned_host")
    assert y == [0, 1, 2, 3, 4, 5] and z == [1, 3, 5, 7, 9, 11]


def test_host_callbacks_run_in_the_client_as_on_cpu(client: Client) -> None:
    """The server's program calls back the client's functions (hostcalls.py): debug.print,
    debug.callback, pure_callback with several results, an ordered io_callback, and a callback
    in each of 4 pmap devices, against the same on cpu (prints captured from the client's
    answering thread too: redirect_stdout swaps sys.stdout for every thread)."""
    result = client.run("""
        import contextlib, io
        from jax.experimental import io_callback
        def f(devices, x):
            seen.clear()
            x = jax.device_put(x, devices[0])
            @jax.jit
            def g(a):
                jax.debug.print("a = {a}", a=a)
                jax.debug.callback(lambda v: seen.append(np.asarray(v).tolist()), a * 2)
                b = io_callback(lambda v: np.asarray(v * 3), jax.ShapeDtypeStruct((3,), a.dtype),
                                a, ordered=True)
                c, n = jax.pure_callback(lambda v: (np.asarray(v + 1), np.int32(7)),
                                         (jax.ShapeDtypeStruct((3,), a.dtype),
                                          jax.ShapeDtypeStruct((), np.int32)), b)
                return c * n
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                y = np.asarray(g(x))
                y2 = np.asarray(g(x + 1))
            @partial(jax.pmap, axis_name="i", devices=devices[:4])
            def p(v):
                jax.debug.callback(lambda w: seen.append(float(w)), v)
                return jax.lax.psum(v, "i")
            z = np.asarray(p(jnp.arange(4.0)))
            return [y.tolist(), y2.tolist(), z.tolist(), out.getvalue(),
                    seen[:2], sorted(seen[2:])]
        seen = []
        result = [f(ipus, np.arange(3, dtype=np.float32)), f(cpus, np.arange(3, dtype=np.float32))]
    """)
    got, want = result
    assert got == want
    assert got[0] == [7.0, 28.0, 49.0] and got[3] == "a = [0. 1. 2.]\na = [1. 2. 3.]\n"
    assert got[4] == [[0.0, 2.0, 4.0], [2.0, 4.0, 6.0]] and got[5] == [0.0, 1.0, 2.0, 3.0]


def test_effects_barrier_waits_for_the_callbacks_of_a_program_without_outputs(
        client: Client) -> None:
    """jax waits for such a program through its execute's status (it asks for tokens): the
    server answers that when every device has finished, callbacks included (it answered at
    once, and 3 of 8 prints of JAX's debugging_primitives_test came before the barrier)."""
    assert client.run("""
        import time
        seen = []
        @partial(jax.pmap, devices=ipus)
        def f(x):
            jax.debug.callback(lambda v: (time.sleep(0.05), seen.append(int(v))), x)
        counts = []
        for _ in range(3):
            seen.clear()
            f(jnp.arange(8))
            jax.effects_barrier()
            counts.append(sorted(seen))
        result = counts
    """) == [list(range(8))] * 3


def test_a_failing_host_callback_fails_its_program_and_the_client_goes_on(
        client: Client) -> None:
    err = client.error("""
        def bad(v):
            raise RuntimeError("the user's callback says no")
        jax.jit(lambda a: jax.pure_callback(bad, a, a))(jax.device_put(np.ones(2), ipus[0])
                                                        ).block_until_ready()
    """)
    assert err.type == "JaxRuntimeError", err
    assert "host callback" in err.message and "the user's callback says no" in err.message
    assert client.run("result = float(jnp.sum(jax.device_put(np.ones(3), ipus[0])))") == 3.0


def test_a_callback_that_uses_the_remote_devices_fails_clearly_instead_of_waiting_forever(
        client: Client) -> None:
    """The server reads nothing more of the client while it waits for the callback, so a put,
    a compile or a read on the remote devices from inside one would wait forever (it hung).
    jnp on the callback's own arguments runs on cpu, as jax hands them, and works."""
    result = client.run("""
        from jax.experimental import io_callback
        d = ipus[0]
        w = jax.device_put(np.ones(3, np.float32), d)
        triple = jax.jit(lambda a: a * 3)
        triple(w).block_until_ready()  # compiled: a call inside takes the C++ fast path
        uses = {
            "put": lambda v: np.asarray(jax.device_put(v, d)),
            "compile": lambda v: np.asarray(jax.jit(lambda a: a - 1)(w)),
            "read": lambda v: np.asarray(triple(w)),
            "cpu": lambda v: np.asarray(jnp.sin(v) + 1),
        }
        out = {}
        for name, use in uses.items():
            f = jax.jit(lambda a: io_callback(use, jax.ShapeDtypeStruct((3,), np.float32), a))
            try:
                out[name] = np.asarray(f(jax.device_put(np.arange(3, dtype=np.float32), d)))
                out[name] = out[name].round(4).tolist()
            except Exception as exc:
                out[name] = str(exc)
        result = out
    """)
    # (what jax does first for "read" depends on its caches: a compile or the wait)
    for name, what in (("put", "put an array on"), ("compile", "compiled a program for"),
                       ("read", "")):
        said = USED_INSIDE.format(what).split(":")[0]  # the rest may come quoted as a repr
        assert said.split("  ")[-1] in result[name], (name, result)
        assert "compute with numpy" in result[name], (name, result)
    assert result["cpu"] == np.round(np.sin(np.arange(3, dtype=np.float32)) + 1, 4).tolist()


def test_infeed_and_outfeed_queues(client: Client) -> None:
    assert client.run("""
        q = jax_ipu.InfeedQueue(jax.ShapeDtypeStruct((2,), np.float32))
        q.put(np.ones(2, np.float32))
        q.put(np.full(2, 3, np.float32))
        take = jax.jit(lambda: q.get() * 2)
        out = jax_ipu.OutfeedQueue()
        @jax.jit
        def step(x):
            out.put(x * 10)
            return x + 1
        y = step(jax.device_put(np.arange(3, dtype=np.float32), ipus[0]))
        result = [np.asarray(take()).tolist(), np.asarray(take()).tolist(),
                  np.asarray(y).tolist(), [np.asarray(a).tolist() for a in out.drain()]]
    """) == [[2.0, 2.0], [6.0, 6.0], [1.0, 2.0, 3.0], [[0.0, 10.0, 20.0]]]


def test_inspecting_a_sharding_inside_jit_is_refused_and_the_server_lives(
        server: Server, client: Client) -> None:
    """XLA's partitioner calls inspect_array_sharding's callback, a pointer into the process that
    lowered the program, while it compiles: on the server that crashed the server (every session
    with it). It is refused with the reason and the fix; outside jit it works."""
    err = client.error("""
        mesh = jax.sharding.Mesh(np.array(ipus[:2]), ("x",))
        def f(a):
            jax.debug.inspect_array_sharding(a, callback=print)
            return a * 2
        jax.jit(f, out_shardings=jax.sharding.NamedSharding(
            mesh, jax.sharding.PartitionSpec("x")))(np.ones(8, np.float32))
    """)
    assert err.type == "JaxRuntimeError" and "UNIMPLEMENTED" in err.message, err
    assert NO_INSPECT_SHARDING in err.message and "custom_call @InspectSharding" in err.message
    assert server.proc.poll() is None
    assert client.run("""
        y = jax.device_put(np.arange(8.0, dtype=np.float32), jax.sharding.NamedSharding(
            mesh, jax.sharding.PartitionSpec("x")))
        seen = []
        jax.debug.inspect_array_sharding(y, callback=seen.append)  # outside jit: at once
        result = [seen == [y.sharding], len(y.sharding.device_set), float(jnp.sum(y * 2))]
    """) == [True, 2, 56.0]


@pytest.mark.parametrize("target", sorted(CLIENT_CALLS))
def test_programs_naming_the_clients_functions_are_refused_before_they_compile(
        target: str) -> None:
    """What a client (a hostile one too) could send: a custom call naming a function of its own
    process, even without asking for host callbacks. Refused before XLA sees it, wherever it
    sits (here inside a while loop's body)."""
    code = f"""
    module @m {{
      func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {{
        %c = stablehlo.constant dense<0> : tensor<i32>
        %r:2 = stablehlo.while(%i = %c, %x = %arg0) : tensor<i32>, tensor<4xf32>
          cond {{
            %k = stablehlo.constant dense<1> : tensor<i32>
            %p = stablehlo.compare LT, %i, %k : (tensor<i32>, tensor<i32>) -> tensor<i1>
            stablehlo.return %p : tensor<i1>
          }} do {{
            %y = stablehlo.custom_call @{target}(%x) {{backend_config = "140737488355328"}}
                : (tensor<4xf32>) -> tensor<4xf32>
            stablehlo.return %i, %y : tensor<i32>, tensor<4xf32>
          }}
        return %r#1 : tensor<4xf32>
      }}
    }}"""
    options = _internals.CompileOptions()
    options.executable_build_options.device_assignment = _internals.DeviceAssignment.create(
        np.array([[0]]))
    with pytest.raises(NotImplementedError, match=f"custom_call @{target} at") as refused:
        Backend().compile(code.encode(), options.SerializeAsString(), frozenset({0}))
    assert str(refused.value).startswith(CLIENT_CALLS[target])


def test_why_host_callbacks_take_a_channel_of_their_own() -> None:
    """jaxlib's client refuses to run the protocol's own host callbacks (a stub outside
    Google's builds), so jax-ipu's client answers them itself (hostcalls.py). If a jaxlib ever
    runs them, this fails, and the protocol's own could serve clients without jax-ipu."""
    data = Path(schema.libjax_common()).read_bytes()
    assert b"ExecuteLoadedHostCallback is unsupported." in data


def _local_and_remote_figures(client: Client) -> tuple[dict, dict]:
    code = """
        def step(w, x):
            h = jnp.tanh(x @ w)
            return (h @ w.T).sum(axis=1)
        compiled = jax.jit(step).lower(np.ones((64, 32), np.float32),
                                       np.ones((16, 64), np.float32)).compile()
        memory = compiled.memory_analysis()
        costs = {k: v for k, v in compiled.cost_analysis().items() if k != "ipu_report"}
        report = jax_ipu.report(compiled)
        result = {
            "memory": [memory.argument_size_in_bytes, memory.output_size_in_bytes,
                       memory.temp_size_in_bytes, memory.alias_size_in_bytes],
            "costs": costs,
            "report": [report.program, report.cycles.total, report.cycles.compute,
                       report.memory.max_tile_bytes, report.memory.peak_bytes,
                       len(report.ops), report.flops, report.target.num_tiles,
                       [o.location for o in report.ops][:3]],
        }
    """
    remote = client.run(code)
    local: dict = {}
    exec(textwrap.dedent(code).replace("result =", "local_result ="), {
        "jax": jax, "jnp": jax.numpy, "np": np, "jax_ipu": jax_ipu}, local)
    return remote, json.loads(json.dumps(local["local_result"]))


def test_model_figures_of_a_remote_compile(client: Client) -> None:
    """memory_analysis(), cost_analysis() and jax_ipu.report of a remote compile are the local
    compile's figures."""
    remote, local = _local_and_remote_figures(client)
    assert remote["memory"] == local["memory"]
    assert remote["costs"].keys() == local["costs"].keys()
    for key, value in local["costs"].items():
        assert remote["costs"][key] == pytest.approx(value, rel=1e-7), key
    assert remote["report"][:8] == local["report"][:8]
    assert remote["report"][1] > 0


def test_out_of_memory_names_the_users_line(client: Client, tmp_path: Path) -> None:
    (tmp_path / "remote_user_model.py").write_text(textwrap.dedent("""
        import jax.numpy as jnp

        def big(x):
            y = jnp.outer(x, x)  # 3.6 GB of float32: no IPU holds it
            return (y @ y).sum()
    """))
    err = client.error(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import remote_user_model
        jax.jit(remote_user_model.big).lower(
            jax.ShapeDtypeStruct((30000,), np.float32)).compile()
    """)
    assert err.message.startswith("RESOURCE_EXHAUSTED: Out of memory on tile")
    assert "remote_user_model.py:5 (big)" in err.message
    assert "What to try:" in err.message


def test_a_client_trace_holds_its_host_and_the_server_timeline_the_ipus(tmp_path: Path) -> None:
    """The protocol has no profiler calls: jax.profiler.trace in a remote client records the
    client's host work and no IPU plane (a local run has one, tests/test_profile_trace.py); the
    IPU lanes are in the server's own timeline when PVTI_OPTIONS is set on the server."""
    timeline = tmp_path / "server-timeline"
    srv = Server(tmp_path / "server", devices=1, env={"PVTI_OPTIONS": json.dumps(
        {"enable": "true", "directory": str(timeline)})})
    try:
        traced = Client(srv.address)
        try:
            traced.run(f"""
                import jax, numpy as np
                x = jax.device_put(np.ones((64, 64), np.float32), jax.devices("ipu")[0])
                f = jax.jit(lambda a: a @ a)
                f(x).block_until_ready()
                with jax.profiler.trace({str(tmp_path / "xprof")!r}):
                    f(x).block_until_ready()
                result = None
            """)
        finally:
            traced.close()
    finally:
        srv.stop()
    (xplane,) = (tmp_path / "xprof").glob("plugins/profile/*/*.xplane.pb")
    planes = [plane.text(2) for plane in Message(xplane.read_bytes()).messages(1)]
    assert "/host:CPU" in planes and not any("IPU" in name for name in planes), planes
    (path,) = timeline.glob("host_timeline_*.json")
    trace = json.loads(path.read_text())
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["name"] == "thread_name"}
    busy = {names[e["tid"]] for e in check_trace_events(trace)}  # lanes with events on them
    assert {"compile", "execute ipu0", "transfers ipu0"} <= busy, busy


def test_reports_are_written_on_the_server(server: Server, client: Client) -> None:
    client.run("""
        jax.jit(lambda a: a * 41 + 1, device=ipus[0])(np.ones(5, np.float32)).block_until_ready()
    """)
    folders = sorted(p.parent.name for p in (server.workdir / "server-reports").glob(
        "*/graph.json"))
    assert any("lambda" in name for name in folders), folders
    assert not (Path.cwd() / "server-reports").exists()  # nothing in the client's directory
