"""JAX memory kinds on ipu: tile memory (device), Streaming Memory (pinned_host), host memory
(unpinned_host). Values are compared with jax on cpu, which has the same kinds; the model's
Streaming Memory figures (capacity, moves) are pinned with hand-computed numbers."""

from __future__ import annotations

import gc
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.ad_checkpoint import checkpoint_name
from jax.experimental.compute_on import compute_on
from jax.sharding import SingleDeviceSharding

import jax_ipu
from jax_ipu.model import engine_run_cycles, host_transfer
from jax_ipu.model.streaming import PINNED_HOST, Move, capacity, move
from jax_ipu.model.targets import get_target
from tests._subprocess import run_python

IPU, CPU = jax.devices("ipu")[0], jax.devices("cpu")[0]
KINDS = ("device", "pinned_host", "unpinned_host")
X = np.linspace(-1, 1, 8 * 16, dtype=np.float32).reshape(8, 16)
W = np.linspace(-0.5, 0.5, 16 * 16, dtype=np.float32).reshape(16, 16)


def on(device: jax.Device, kind: str) -> SingleDeviceSharding:
    return SingleDeviceSharding(device, memory_kind=kind)


def both(run):
    """run(device) on cpu and on ipu; the ipu result, after checking it equals cpu's."""
    expected, got = run(CPU), run(IPU)
    for e, g in zip(jax.tree.leaves(expected), jax.tree.leaves(got), strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(e))
    return got


# ---- the model's rules, by hand ----
def test_streaming_memory_capacity_per_ipu():
    # Bow-2000: 256 GB per machine of 4 IPUs; IPU-M2000: 448 GB per 4; C2 cards: none.
    assert capacity(get_target("ipu21"), PINNED_HOST) == 256 * 2**30 // 4 == 68_719_476_736
    assert capacity(get_target("ipu2"), PINNED_HOST) == 448 * 2**30 // 4 == 120_259_084_288
    assert capacity(get_target("ipu1"), PINNED_HOST) == 0
    assert capacity(get_target("ipu2", 4), "device") == 4 * 638_976
    assert capacity(get_target("ipu2"), "unpinned_host") is None


def test_moves_to_and_from_streaming_memory_cost_the_gateway_plus_set_up():
    ipu2, ipu21 = get_target("ipu2"), get_target("ipu21")
    # set-up: a stream copy's data phase (1,500 cycles at 1.33 GHz, H-3) plus one sync (90)
    # bytes: PCIe Gen4 x8, 16e9 * 128/130 B/s = 15.754 GB/s; 1 MiB takes 66.56 us
    m = move(2**20, PINNED_HOST, "device", ipu2)
    assert (m.setup_cycles, m.transfer_cycles) == (1500 + 90, 88_525)
    assert move(2**20, "device", PINNED_HOST, ipu2) == Move("device", PINNED_HOST, 2**20, 1590,
                                                            88_525)
    # Bow: the same seconds at 1.85 GHz: ceil(1500 / 1.33 * 1.85) + 90, ceil(66.56 us * 1.85e9)
    m21 = move(2**20, PINNED_HOST, "device", ipu21)
    assert (m21.setup_cycles, m21.transfer_cycles) == (2087 + 90, 123_136)
    assert move(32, "device", PINNED_HOST, ipu2).transfer_cycles == 3  # ceil(2.70)
    assert move(0, "device", PINNED_HOST, ipu2).total == 0
    assert move(2**20, PINNED_HOST, PINNED_HOST, ipu2).total == 0


def test_moves_to_host_memory_cost_a_host_link_stream_copy():
    ipu2 = get_target("ipu2")
    back, there = host_transfer(2**20, ipu2, "to_host"), host_transfer(2**20, ipu2, "to_device")
    m = move(2**20, "device", "unpinned_host", ipu2)
    assert (m.setup_cycles, m.transfer_cycles) == (back.setup_cycles, back.link_cycles)
    m = move(2**20, "unpinned_host", "device", ipu2)
    assert (m.setup_cycles, m.transfer_cycles) == (there.setup_cycles, there.link_cycles)
    with pytest.raises(ValueError, match="unknown memory kind 'hbm'"):
        move(4, "hbm", "device", ipu2)


# ---- devices, memories, device_put ----
def test_each_device_addresses_the_three_kinds_as_cpu_does():
    assert [m.kind for m in IPU.addressable_memories()] == [m.kind for m in
                                                            CPU.addressable_memories()]
    assert [m.kind for m in IPU.addressable_memories()] == list(KINDS)
    assert IPU.default_memory().kind == "device"
    assert all(m.addressable_by_devices() == [IPU] for m in IPU.addressable_memories())
    with pytest.raises(ValueError, match="Could not find memory addressable by device"):
        on(IPU, "hbm")


@pytest.mark.parametrize("kind", KINDS)
def test_device_put_to_a_kind(kind):
    gc.collect()
    before = jax_ipu.memory_stats(IPU)
    x = both(lambda d: jax.device_put(X, on(d, kind)))
    assert x.sharding.memory_kind == kind
    assert x.addressable_data(0).sharding.memory_kind == kind
    after = jax_ipu.memory_stats(IPU)
    for k in KINDS:
        grew = after[k]["bytes_in_use"] - before[k]["bytes_in_use"]
        assert grew == (X.nbytes if k == kind else 0), k
    back = jax.device_put(x, on(IPU, "device"))
    np.testing.assert_array_equal(back, X)
    del x, back
    gc.collect()
    assert jax_ipu.memory_stats(IPU)[kind]["bytes_in_use"] == before[kind]["bytes_in_use"]


def test_memory_stats_report_streaming_memory_in_the_reserved_fields():
    gc.collect()
    base = IPU.memory_stats()
    x = jax.device_put(np.zeros(1000, np.float32), on(IPU, PINNED_HOST))
    stats = IPU.memory_stats()
    assert stats["bytes_reserved"] == base["bytes_reserved"] + 4000
    assert stats["peak_bytes_reserved"] >= stats["bytes_reserved"]
    assert stats["bytes_reservable_limit"] == 448 * 2**30 // 4
    assert stats["bytes_in_use"] == base["bytes_in_use"]  # tile memory untouched
    assert stats["bytes_limit"] == 1472 * 638_976
    del x


def test_moving_between_kinds_of_one_device_charges_the_gateway_on_the_clock():
    x = jax.device_put(np.ones(2**18, np.float32), on(IPU, "device"))  # 1 MiB
    x.block_until_ready()
    before = jax_ipu.clock(IPU).breakdown
    y = jax.device_put(x, on(IPU, PINNED_HOST))
    np.testing.assert_array_equal(y, np.ones(2**18, np.float32))
    after = jax_ipu.clock(IPU).breakdown
    assert after["streaming_setup"] - before["streaming_setup"] == 1590
    assert after["streaming"] - before["streaming"] == 88_525
    assert after["host_to_device"] == before["host_to_device"]


@pytest.mark.parametrize("kind", KINDS)
def test_reading_back_charges_what_a_read_of_its_kind_costs(kind):
    """Every kind is host RAM underneath and is read in place, as on cpu; a read of tile memory
    or Streaming Memory is one stream copy to the host (set-up, link, staging) and the run of
    the program that streams it back; a read of host memory moves nothing. Outputs of a
    program are charged by the kind they land in."""
    target = get_target("ipu2")
    back = host_transfer(2**20, target, "to_host")
    expected = {"stream_setup": back.setup_cycles, "device_to_host": back.link_cycles,
                "host_staging": back.staging_cycles,
                "read_back_run": engine_run_cycles(target)} if kind != "unpinned_host" else {}
    fields = ("stream_setup", "device_to_host", "host_staging", "read_back_run")
    values = np.arange(2**18, dtype=np.float32)  # 1 MiB
    put = jax.device_put(values, on(IPU, kind))
    made = jax.jit(lambda a: a + 1, out_shardings=on(IPU, kind))(put)
    for array, want in ((put, values), (made, values + 1)):
        array.block_until_ready()
        before = jax_ipu.clock(IPU).breakdown
        np.testing.assert_array_equal(np.asarray(array), want)
        after = jax_ipu.clock(IPU).breakdown
        assert {f: after[f] - before[f] for f in fields} == {f: expected.get(f, 0)
                                                              for f in fields}


# ---- programs ----
def test_jit_with_shardings_that_name_kinds():
    def run(d):
        f = jax.jit(lambda a, w: (jax.device_put(a, on(d, "device")) @ w, jnp.tanh(w)),
                    in_shardings=(on(d, PINNED_HOST), on(d, "device")),
                    out_shardings=(on(d, PINNED_HOST), on(d, "unpinned_host")))
        out = f(jax.device_put(X, on(d, PINNED_HOST)), W)
        assert [o.sharding.memory_kind for o in out] == [PINNED_HOST, "unpinned_host"]
        return out

    both(run)
    f = jax.jit(lambda a: a * 2, in_shardings=on(IPU, PINNED_HOST),
                out_shardings=on(IPU, PINNED_HOST))
    compiled = f.lower(jax.device_put(X, on(IPU, PINNED_HOST))).compile()
    assert compiled.runtime_executable().get_output_memory_kinds() == [[PINNED_HOST]]
    stats = compiled.memory_analysis()
    assert (stats.argument_size_in_bytes, stats.output_size_in_bytes) == (0, 0)
    assert (stats.host_argument_size_in_bytes, stats.host_output_size_in_bytes) == (512, 512)
    report = jax_ipu.report(compiled)
    # The multiply streams its operand in and its result back out: two moves of 512 bytes.
    assert report.cycles.streaming_setup == 2 * 1590
    assert report.cycles.streaming == 2 * math.ceil(512 / (16e9 * 128 / 130) * 1.33e9)
    assert report.memory.streaming_memory_bytes == 1024
    costs = compiled.cost_analysis()
    assert costs["ipu_streaming_setup_cycles"] == 2 * 1590
    assert costs["ipu_cycles"] >= costs["ipu_streaming_setup_cycles"] + \
        costs["ipu_streaming_cycles"]


def test_tile_memory_counts_only_values_in_device():
    """A large array kept in Streaming Memory, passed through untouched, takes no tile memory."""
    big = np.zeros((512, 512), np.float32)  # 1 MiB

    def peak(kind):
        f = jax.jit(lambda b, a: (b, a * 2), in_shardings=(on(IPU, kind), on(IPU, "device")),
                    out_shardings=(on(IPU, kind), on(IPU, "device")))
        return jax_ipu.report(f.lower(jax.device_put(big, on(IPU, kind)), X).compile()).memory

    on_tiles, offloaded = peak("device"), peak(PINNED_HOST)
    # (less the one small temporary the offloaded program's tiles may hold at its peak)
    assert on_tiles.peak_bytes - offloaded.peak_bytes >= big.nbytes - X.nbytes
    assert offloaded.other_kinds[PINNED_HOST] == big.nbytes
    assert offloaded.host_argument_bytes == big.nbytes


def test_moves_inside_jit():
    def run(d):
        def f(a):
            h = jax.device_put(a, on(d, PINNED_HOST))
            return jax.device_put(h, on(d, "device")) + 1, h
        a, h = jax.jit(f)(jax.device_put(X, d))
        assert h.sharding.memory_kind == PINNED_HOST
        space = jax.jit(lambda v: jax.device_put(jax.device_put(v, jax.memory.Space.Host),
                                                 jax.memory.Space.Device) * 3)(X)
        return a, h, space

    both(run)
    f = jax.jit(lambda a: jax.device_put(jax.device_put(a, on(IPU, PINNED_HOST)),
                                         on(IPU, "device")) + 1)
    report = jax_ipu.report(f.lower(X).compile())
    assert report.cycles.streaming_setup == 2 * 1590  # out to Streaming Memory and back
    moves = [o for o in report.ops if o.streaming_cycles]
    assert [o.kind for o in moves] == ["custom_call", "custom_call"]  # the two moves


def test_compute_on_device_host():
    @compute_on("device_host")
    @jax.jit
    def scale(a):
        return a * 3

    both(lambda d: jax.jit(lambda a: scale(a) + 1)(jax.device_put(X, d)))
    report = jax_ipu.report(jax.jit(lambda a: scale(a) + 1).lower(
        jax.device_put(X, IPU)).compile())
    ipu2 = get_target("ipu2")
    # the operand goes to the host and the result comes back: two host-link stream copies
    expected = move(512, "device", "unpinned_host", ipu2).total + \
        move(512, "unpinned_host", "device", ipu2).total
    assert report.cycles.streaming_setup + report.cycles.streaming == expected


@pytest.mark.parametrize("policy", ["names", "dots"])
def test_remat_policies_that_offload(policy):
    policies = {
        "names": jax.checkpoint_policies.save_and_offload_only_these_names(
            names_which_can_be_saved=[], names_which_can_be_offloaded=["y"],
            offload_src="device", offload_dst=PINNED_HOST),
        "dots": jax.checkpoint_policies.offload_dot_with_no_batch_dims("device", PINNED_HOST),
    }

    def layer(x, w):
        return jnp.tanh(checkpoint_name(jnp.sin(x @ w), "y") @ w)

    grad = jax.jit(jax.grad(lambda x, w: jax.checkpoint(layer, policy=policies[policy])(
        x, w).sum(), argnums=1))
    both(lambda d: grad(jax.device_put(X, d), jax.device_put(W, d)))
    report = jax_ipu.report(grad.lower(jax.device_put(X, IPU), jax.device_put(W, IPU)).compile())
    assert report.memory.streaming_memory_bytes >= X.nbytes  # the offloaded residual(s)
    assert report.cycles.streaming_setup >= 2 * 1590  # out after the forward, back for the grad


def test_scan_offloading_keeps_the_stack_of_residuals_off_the_tiles():
    steps = 16
    w = jax.device_put(W, IPU)

    def grad(policy):
        def body(c, _):
            return jnp.tanh(checkpoint_name(jnp.sin(c @ w), "y")), None

        def loss(c0):
            c, _ = jax.lax.scan(jax.checkpoint(body, policy=policy), c0, None, length=steps)
            return c.sum()

        return jax.jit(jax.grad(loss))

    offload = jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["y"],
        offload_src="device", offload_dst=PINNED_HOST)
    save = jax.checkpoint_policies.save_only_these_names("y")
    x = jax.device_put(X, IPU)
    np.testing.assert_array_equal(grad(offload)(x), grad(save)(x))
    kept, moved = (jax_ipu.report(grad(p).lower(x).compile()) for p in (save, offload))
    # the stack of 16 residuals (16 x 512 bytes) lives in Streaming Memory, not on the tiles
    assert moved.memory.streaming_memory_bytes >= steps * X.nbytes
    assert kept.memory.peak_bytes - moved.memory.peak_bytes >= (steps - 1) * X.nbytes
    # each step moves its residual out, and the backward pass reads each back
    assert moved.cycles.streaming_setup == 2 * steps * 1590


def test_several_ipus_with_sharded_streaming_memory():
    run_python("""
        import jax, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        x = np.arange(64, dtype=np.float32).reshape(8, 8)
        results = []
        for platform in ("cpu", "ipu"):
            mesh = Mesh(np.array(jax.devices(platform)).reshape(2, 2), ("x", "y"))
            host = NamedSharding(mesh, P("x"), memory_kind="pinned_host")
            dev = NamedSharding(mesh, P("x"))
            f = jax.jit(lambda v: jax.device_put(jax.device_put(v, dev) * 2, host),
                        in_shardings=host, out_shardings=host, donate_argnums=0)
            a = jax.device_put(x, host)
            out = f(a)
            assert a.is_deleted()
            assert {s.data.sharding.memory_kind for s in out.addressable_shards} == {
                "pinned_host"}
            results.append(np.asarray(jax.device_put(out, dev)))
        np.testing.assert_array_equal(*results)
        # device 1 holds a quarter of the rows... of `out`: 4 x 8 float32; `a` (donated) is gone
        stats = jax.devices("ipu")[1].memory_stats()
        assert (stats["bytes_reserved"], stats["peak_bytes_reserved"]) == (128, 256), stats
    """, env={"JAX_IPU_DEVICE_COUNT": "4", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"})


def test_an_ipu_without_streaming_memory_refuses_it_clearly():
    proc = run_python("""
        import jax, numpy as np
        from jax.sharding import SingleDeviceSharding
        from jax_ipu.errors import IpuOutOfMemoryError

        ipu = jax.devices("ipu")[0]
        pinned = SingleDeviceSharding(ipu, memory_kind="pinned_host")
        try:
            jax.device_put(np.ones(4, np.float32), pinned)
        except Exception as e:
            print("PUT:", e)
        f = jax.jit(lambda a: a + 1, in_shardings=pinned, out_shardings=pinned)
        try:
            f.lower(jax.ShapeDtypeStruct((4,), np.float32, sharding=pinned)).compile()
        except Exception as e:
            print("COMPILE:", e)
    """, env={"JAX_IPU_MODEL_VERSION": "ipu1"})
    assert "PUT:" in proc.stdout and "an ipu1 has no Streaming Memory" in proc.stdout
    assert "Cannot place a transfer of float32[4] (16 bytes)" in proc.stdout
    assert "COMPILE:" in proc.stdout and "Out of Streaming Memory: program jit__lambda holds " \
        "32 bytes in memory kind pinned_host but an ipu1 has none" in proc.stdout


def test_serialized_executable_keeps_its_memory_kinds():
    from jax.experimental.serialize_executable import deserialize_and_load, serialize

    pinned = on(IPU, PINNED_HOST)
    f = jax.jit(lambda a: jax.device_put(jax.device_put(a, on(IPU, "device")) * 2, pinned),
                in_shardings=pinned, out_shardings=pinned)
    x = jax.device_put(X, pinned)
    loaded = deserialize_and_load(*serialize(f.lower(x).compile()))
    out = loaded(x)
    assert out.sharding.memory_kind == PINNED_HOST
    assert loaded.output_formats.sharding.memory_kind == PINNED_HOST
    np.testing.assert_array_equal(out, X * 2)
    assert jax_ipu.report(loaded).memory.streaming_memory_bytes == 2 * X.nbytes
