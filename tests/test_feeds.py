"""Infeed and outfeed queues (jax_ipu.feeds): on-device loops fed by the host and drained by it,
under jit with donation, in fori_loop and scan, on one and several IPUs, against cpu; the model's
host transfers; and the errors of bad use."""

from __future__ import annotations

import re
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_ipu
from jax_ipu.errors import IpuFeedError
from tests._subprocess import run_python

IPU = jax.devices("ipu")[0]
CPU = jax.devices("cpu")[0]
BATCH = (jax.ShapeDtypeStruct((8, 3), jnp.float32), jax.ShapeDtypeStruct((8,), jnp.int32))
STEPS = 5


def _batches(seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(8, 3)).astype(np.float32), rng.integers(0, 3, 8).astype(np.int32))
            for _ in range(STEPS)]


def _step(w: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A least-squares step of a 3x3 linear map towards one-hot targets."""
    def loss(w):
        return jnp.mean((x @ w - jax.nn.one_hot(y, 3)) ** 2)

    value, grad = jax.value_and_grad(loss)(w)
    return w - 0.1 * grad, value


def _train_fori(feed: jax_ipu.InfeedQueue, out: jax_ipu.OutfeedQueue):
    @partial(jax.jit, donate_argnums=0)
    def epoch(w):
        def body(_, w):
            w, loss = _step(w, *feed.get())
            out.put(loss)
            return w

        return jax.lax.fori_loop(0, STEPS, body, w)

    return epoch


def _train_scan(feed: jax_ipu.InfeedQueue, out: jax_ipu.OutfeedQueue):
    @partial(jax.jit, donate_argnums=0)
    def epoch(w):
        def body(w, _):
            w, loss = _step(w, *feed.get())
            out.put({"loss": loss, "norm": jnp.linalg.norm(w)})
            return w, loss

        return jax.lax.scan(body, w, None, length=STEPS)

    return epoch


def _reference() -> tuple[np.ndarray, list[float]]:
    """The same training as one jitted step per batch on cpu."""
    w = jnp.zeros((3, 3), jnp.float32, device=CPU)
    losses = []
    for x, y in _batches():
        w, loss = jax.jit(_step)(w, x, y)
        losses.append(float(loss))
    return np.asarray(w), losses


@pytest.mark.parametrize("device", [IPU, CPU], ids=["ipu", "cpu"])
def test_fori_loop_with_donation_matches_one_call_per_step(device):
    feed, out = jax_ipu.InfeedQueue(BATCH), jax_ipu.OutfeedQueue()
    epoch = _train_fori(feed, out)
    for batch in _batches():
        feed.put(batch)
    w0 = jax.device_put(np.zeros((3, 3), np.float32), device)
    w = epoch(w0)
    assert w0.is_deleted()  # donated: updated in place
    assert w.devices() == {device}
    want_w, want_losses = _reference()
    np.testing.assert_allclose(np.asarray(w), want_w, rtol=1e-6, atol=1e-7)
    losses = out.drain()
    assert [x.shape for x in losses] == [()] * STEPS
    np.testing.assert_allclose(np.stack(losses), want_losses, rtol=1e-6)
    assert len(feed) == 0 and out.drain() == []


def test_scan_on_ipu_matches_cpu_bit_for_bit():
    results = {}
    for device in (IPU, CPU):
        feed, out = jax_ipu.InfeedQueue(BATCH), jax_ipu.OutfeedQueue()
        epoch = _train_scan(feed, out)
        for _ in range(2):  # two epochs, one call each, the queue refilled in between
            for batch in _batches():
                feed.put(batch)
            w, losses = epoch(jax.device_put(np.zeros((3, 3), np.float32), device))
        metrics = out.drain()
        results[device.platform] = (np.asarray(w), np.asarray(losses), metrics)
    (w_ipu, l_ipu, m_ipu), (w_cpu, l_cpu, m_cpu) = results["ipu"], results["cpu"]
    np.testing.assert_array_equal(w_ipu, w_cpu)
    np.testing.assert_array_equal(l_ipu, l_cpu)
    assert len(m_ipu) == len(m_cpu) == 2 * STEPS
    for a, b in zip(m_ipu, m_cpu, strict=True):
        assert a.keys() == {"loss", "norm"}
        np.testing.assert_array_equal(a["loss"], b["loss"])
        np.testing.assert_array_equal(a["norm"], b["norm"])
    # The outfeed's losses are the scan's own outputs, in order.
    np.testing.assert_array_equal([m["loss"] for m in m_ipu[STEPS:]], l_ipu)


def test_model_charges_each_dequeue_and_enqueue_as_a_host_transfer():
    feed, out = jax_ipu.InfeedQueue(BATCH), jax_ipu.OutfeedQueue()
    epoch = _train_fori(feed, out)
    report = jax_ipu.report(epoch.lower(jax.device_put(np.zeros((3, 3), np.float32), IPU))
                            .compile())
    transfers = sorted((op for op in report.ops if op.host_cycles > 0),
                       key=lambda op: op.bytes_accessed)
    assert len(transfers) == 2
    enqueue, dequeue = transfers
    # Per step: one batch in (8x3 float32 + 8 int32), one float32 loss out.
    assert dequeue.executions == enqueue.executions == STEPS
    assert dequeue.bytes_accessed == STEPS * (8 * 3 * 4 + 8 * 4)
    assert enqueue.bytes_accessed == STEPS * 4
    assert report.cycles.host_exchange == pytest.approx(sum(op.host_cycles for op in transfers))
    assert all(op.file == __file__ for op in transfers)


def test_model_clock_advances_by_the_program_including_its_transfers():
    feed, out = jax_ipu.InfeedQueue(BATCH), jax_ipu.OutfeedQueue()
    epoch = _train_fori(feed, out)
    w = jax.device_put(np.zeros((3, 3), np.float32), IPU)
    compiled = epoch.lower(w).compile()
    for batch in _batches():
        feed.put(batch)
    before = jax_ipu.clock().cycles
    jax.block_until_ready(epoch(w))
    cycles = jax_ipu.report(compiled).cycles  # the program, and the host's start and end of it
    assert jax_ipu.clock().cycles - before == int(cycles.total) + cycles.call


def test_put_refuses_wrong_structure_shape_and_dtype_and_keeps_a_copy():
    feed = jax_ipu.InfeedQueue(BATCH, name="train")
    x, y = _batches()[0]
    with pytest.raises(IpuFeedError, match=r"'train'.*leaf 0 .*float64\[8, 3\].*takes "
                                           r"float32\[8, 3\].*np.float32"):
        feed.put((x.astype(np.float64), y))
    with pytest.raises(IpuFeedError, match=r"leaf 1 .*int32\[4\].*takes int32\[8\]"):
        feed.put((x, y[:4]))
    with pytest.raises(IpuFeedError, match="structure"):
        feed.put([x, y, y])
    assert len(feed) == 0
    feed.put((x, y))
    x[:] = 0  # the caller reuses its buffer: the queued batch keeps its values
    got = jax.jit(feed.get)()
    assert np.asarray(got[0]).any() and got[0].devices() == {IPU}


EMPTY = ("InfeedQueue 'train' is empty: the program asked for a batch after reading all {n} put "
         "since the queue was last empty, and none has been put since. Put one batch per get() "
         "the call makes (e.g. every batch of the epoch) before calling the jitted function.")


def test_empty_queue_fails_the_call_with_the_queues_error_first():
    feed, out = jax_ipu.InfeedQueue(BATCH, name="train"), jax_ipu.OutfeedQueue()
    epoch = _train_fori(feed, out)

    def w():  # the epoch donates its argument, even to a call that fails
        return jax.device_put(np.zeros((3, 3), np.float32), IPU)

    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        epoch(w())
    assert str(info.value).startswith(
        "INVALID_ARGUMENT: InfeedQueue 'train' is empty: the program asked for a batch but "
        "none has been put since the queue was made or cleared. Put one batch per get()")
    for batch in _batches()[:3]:
        feed.put(batch)
    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        epoch(w())
    # The queue's own words come first, then the callback's traceback (not jaxlib's INTERNAL
    # "CpuCallback error calling callback: Traceback..." with them buried at the end).
    message = str(info.value)
    assert message.startswith(f"INVALID_ARGUMENT: {EMPTY.format(n=3)}\n\nRaised by a host "
                              "callback while the program ran; its traceback:\nTraceback")
    assert "CpuCallback" not in message and "IpuFeedError" not in message
    # The queue is usable again once filled; its count is of this fill, not of its whole life.
    for _ in range(3):
        for batch in _batches():
            feed.put(batch)
        trained = epoch(w())
    assert len(feed) == 0 and np.isfinite(np.asarray(trained)).all()
    with pytest.raises(jax.errors.JaxRuntimeError, match=re.escape(EMPTY.format(n=STEPS))):
        epoch(w())
    feed.put(_batches()[0])
    feed.clear()
    with pytest.raises(jax.errors.JaxRuntimeError, match="none has been put since the queue "
                                                         "was made or cleared"):
        epoch(w())


def test_feeds_inside_a_differentiated_function():
    feed = jax_ipu.InfeedQueue(jax.ShapeDtypeStruct((3,), jnp.float32))
    out = jax_ipu.OutfeedQueue()

    def loss(w):
        value = jnp.sum(w ** 2 * feed.get())
        out.put(value)  # observed only: no gradient flows into the outfeed
        return value

    feed.put(np.array([1, 2, 3], np.float32))
    g = jax.jit(jax.grad(loss))(jax.device_put(np.arange(3, dtype=np.float32), IPU))
    np.testing.assert_array_equal(np.asarray(g), [0, 4, 12])
    assert [float(v) for v in out.drain()] == [14.0]


def test_misuse_is_refused_while_tracing():
    with pytest.raises(IpuFeedError, match="shape and a dtype"):
        jax_ipu.InfeedQueue([1.0, 2.0])
    with pytest.raises(IpuFeedError, match="replicas"):
        jax_ipu.OutfeedQueue(replicas=0)
    feed = jax_ipu.InfeedQueue(BATCH, replicas=2)
    with pytest.raises(IpuFeedError, match="serves 2 devices.*axis_name"):
        jax.jit(feed.get)()
    with pytest.raises(IpuFeedError, match="'i' is not a mapped axis"):
        jax.jit(lambda: feed.get("i"))()


MULTI_DEVICE = """
    import jax, jax.numpy as jnp, numpy as np
    from functools import partial
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import jax_ipu

    n, steps = 4, 3
    rng = np.random.default_rng(0)
    # Each put holds one batch per device, on a leading axis of n (as pmap takes arguments).
    data = [rng.normal(size=(n, 2, 5)).astype(np.float32) for _ in range(steps)]

    def body(feed, out, axis, _, w):
        x = feed.get(axis)
        w = w - 0.1 * lax.pmean(x.sum(0), "i")
        out.put(w.sum() + lax.axis_index("i"), axis)
        return w

    def run(platform):
        devices = jax.devices(platform)[:n]
        results = {}
        # pmap, every device its own queue row
        feed, out = jax_ipu.InfeedQueue(jax.ShapeDtypeStruct((2, 5), jnp.float32), replicas=n), \\
            jax_ipu.OutfeedQueue(replicas=n)
        epoch = jax.pmap(lambda w: lax.fori_loop(0, steps, partial(body, feed, out, "i"), w),
                         axis_name="i", devices=devices, donate_argnums=0)
        for d in data:
            feed.put(d)
        results["pmap"] = np.asarray(epoch(np.zeros((n, 5), np.float32)))
        results["pmap_out"] = np.stack(out.drain())
        # shard_map over a mesh, the same queues
        mesh = Mesh(np.array(devices), ("i",))
        epoch = jax.jit(jax.shard_map(
            lambda w: lax.fori_loop(0, steps, partial(body, feed, out, "i"), w[0])[None],
            mesh=mesh, in_specs=P("i"), out_specs=P("i")), donate_argnums=0)
        for d in data:
            feed.put(d)
        w0 = jax.device_put(np.zeros((n, 5), np.float32), NamedSharding(mesh, P("i")))
        results["shard_map"] = np.asarray(epoch(w0))
        results["shard_map_out"] = np.stack(out.drain())
        # sharded jit: one queue for the whole program, the batch split by XLA
        whole = jax_ipu.InfeedQueue(jax.ShapeDtypeStruct((8, 5), jnp.float32))
        @partial(jax.jit, out_shardings=NamedSharding(mesh, P()))
        def total(w):
            return lax.fori_loop(0, steps, lambda _, w: w + whole.get().sum(0), w)
        for d in data:
            whole.put(d.reshape(8, 5))
        results["sharded_jit"] = np.asarray(total(np.zeros(5, np.float32)))
        return results

    ipu, cpu = run("ipu"), run("cpu")
    for key in ipu:
        np.testing.assert_allclose(ipu[key], cpu[key], rtol=1e-6, err_msg=key)
    # Each device's own rows: device k took data[s][k] at step s.
    want = np.zeros(5, np.float32)
    for d in data:
        want = want - 0.1 * d.sum(1).mean(0)
    np.testing.assert_allclose(ipu["pmap"], np.tile(want, (n, 1)), rtol=1e-5)
    assert ipu["pmap_out"].shape == (steps, n)
    np.testing.assert_allclose(ipu["pmap_out"][-1] - ipu["pmap_out"][-1][0], np.arange(n))
    np.testing.assert_allclose(ipu["sharded_jit"], sum(d.reshape(8, 5).sum(0) for d in data),
                               rtol=1e-5)
    print("OK", ipu["pmap"][0].round(4).tolist())
"""


def test_several_ipus_pmap_shard_map_and_sharded_jit_match_cpu():
    env = {"JAX_IPU_DEVICE_COUNT": "4", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    assert "OK" in run_python(MULTI_DEVICE, env=env, timeout=300).stdout


def test_eager_get_and_put_outside_jit():
    # Outside jit each get()/put() is one small program of its own: it works, one batch a call.
    feed, out = jax_ipu.InfeedQueue(jax.ShapeDtypeStruct((2,), jnp.float32)), jax_ipu.OutfeedQueue()
    feed.put(np.array([1.5, -2], np.float32))
    with jax.default_device(IPU):
        x = feed.get()
        out.put(x * 2)
    assert x.devices() == {IPU}
    np.testing.assert_array_equal(np.asarray(x), [1.5, -2])
    np.testing.assert_array_equal(out.drain()[0], [3, -4])
