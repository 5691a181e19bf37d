"""The model clock: what each call and transfer costs the chip and its host, shown apart.

Every figure is computed here from the model's own functions, so a change of rule shows."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jax_ipu
from jax_ipu.model import TO_DEVICE, TO_HOST, call_overhead_cycles, host_transfer
from jax_ipu.model.targets import get_target
from tests._subprocess import run_python


def test_clock_fields_are_the_calls_and_transfers_made():
    ipu = jax.devices("ipu")[0]
    target = get_target("ipu2")
    before = jax_ipu.clock(ipu).breakdown
    host = np.arange(1024 * 64, dtype=np.float32).reshape(1024, 64)
    x = jax.device_put(host, ipu)
    compiled = jax.jit(lambda a: jnp.tanh(a) * 2).lower(x).compile()
    for _ in range(3):
        y = compiled(x)
    np.asarray(y)
    after = jax_ipu.clock(ipu).breakdown
    spent = {k: after[k] - before[k] for k in after}
    report = jax_ipu.report(compiled)
    put, get = host_transfer(host.nbytes, target, TO_DEVICE), host_transfer(host.nbytes,
                                                                           target, TO_HOST)
    assert spent["call"] == 3 * call_overhead_cycles(target) == 3 * report.cycles.call
    assert spent["stream_setup"] == put.setup_cycles + get.setup_cycles
    assert spent["host_to_device"] == put.link_cycles
    assert spent["device_to_host"] == get.link_cycles
    assert spent["host_staging"] == put.staging_cycles + get.staging_cycles > 0
    assert spent["compute"] == 3 * round(report.cycles.compute)
    assert spent["sync"] == 3 * round(report.cycles.sync)
    assert jax_ipu.clock(ipu).cycles == sum(after.values())
    assert jax_ipu.clock(ipu).seconds == jax_ipu.clock(ipu).cycles / target.clock_hz


def test_reading_back_is_slower_than_sending():
    # H-1: an M2000 moves 7.06 GB/s to the device and 2.93 GB/s back.
    target = get_target("ipu2")
    nbytes = 64 << 20
    send, back = host_transfer(nbytes, target, TO_DEVICE), host_transfer(nbytes, target,
                                                                         TO_HOST)
    assert abs(back.link_cycles / send.link_cycles - 7.06 / 2.93) < 1e-3
    assert send.link_cycles == -(-nbytes * target.clock_hz // 7.06e9)


ON_DEVICE_LOOP = """
    import jax, jax.numpy as jnp, numpy as np, jax_ipu
    from jax import lax
    ipu = jax.devices("ipu")[0]
    w = jax.device_put(np.zeros((64, 10), np.float32), ipu)
    batches = jax.device_put(np.ones((20, 32, 64), np.float32), ipu)
    step = jax.jit(lambda w, b: w - 0.01 * b.T @ (b @ w))
    loop = jax.jit(lambda w, bs: lax.fori_loop(0, 20, lambda i, w: step(w, bs[i]), w))
    step(w, batches[0]).block_until_ready(); loop(w, batches).block_until_ready()
    for name, run in (("per_step", lambda w: [w := step(w, batches[i]) for i in range(20)][-1]),
                      ("loop", lambda w: loop(w, batches))):
        start = jax_ipu.clock().breakdown
        run(w).block_until_ready()
        end = jax_ipu.clock().breakdown
        print(name, end["call"] - start["call"], sum(end.values()) - sum(start.values()))
"""


def test_a_loop_on_the_device_saves_the_host_cost_of_each_call():
    lines = dict((line.split()[0], line.split()[1:]) for line in
                 run_python(ON_DEVICE_LOOP).stdout.splitlines())
    call = call_overhead_cycles(get_target("ipu2"))
    # 20 steps is 20 calls one way (plus 20 slices of the batch array, calls of their own);
    # one call the other.
    assert int(lines["loop"][0]) == call
    assert int(lines["per_step"][0]) >= 20 * call
    assert int(lines["per_step"][1]) - int(lines["loop"][1]) >= 19 * call
