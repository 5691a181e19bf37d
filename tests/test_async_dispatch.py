"""Asynchronous dispatch, as on jax's cpu backend: Execute returns at once, outputs carry events
that become ready when XLA:CPU's results do, and execution errors reach the first reader."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests._subprocess import run_python

N = 1536  # a chain of N x N matmuls takes long enough that dispatch returns first


def chain(a):
    for _ in range(6):
        a = jnp.tanh(a @ a / N)
    return a


@pytest.fixture(scope="module")
def operand():
    return np.random.default_rng(0).standard_normal((N, N), np.float32)


@pytest.mark.parametrize("platform", ["ipu", "cpu"])
def test_dispatch_returns_before_the_computation_ends(platform, operand):
    x = jax.device_put(operand, jax.devices(platform)[0])
    f = jax.jit(chain)
    f(x).block_until_ready()  # compile outside the measured call
    y = f(x)
    dispatched_ready = y.is_ready()
    y.block_until_ready()
    assert (dispatched_ready, y.is_ready()) == (False, True)


def test_pending_results_feed_later_calls_donations_and_reads(operand):
    ipu, cpu = jax.devices("ipu")[0], jax.devices("cpu")[0]
    f = jax.jit(chain)
    g = jax.jit(lambda a: a * 2 + 1, donate_argnums=0)

    def run(device):
        y = f(jax.device_put(operand, device))  # still running
        z = g(y)                                 # waits on y inside XLA:CPU, then consumes it
        return y, z, np.asarray(z)

    y_ipu, z_ipu, values_ipu = run(ipu)
    _, _, values_cpu = run(cpu)
    assert y_ipu.is_deleted() and z_ipu.is_ready()
    np.testing.assert_array_equal(values_ipu, values_cpu)


def test_deleting_a_pending_result_is_safe(operand):
    x = jax.device_put(operand, jax.devices("ipu")[0])
    y = jax.jit(chain)(x)
    y.delete()
    assert y.is_deleted()
    np.testing.assert_array_equal(np.asarray(jnp.sum(x)), np.asarray(jnp.sum(jnp.asarray(
        operand))))


def failing(a):
    def boom(v):
        raise ValueError("the host callback failed on purpose")

    return jax.pure_callback(boom, jax.ShapeDtypeStruct(a.shape, a.dtype), chain(a)) + 1


def test_a_failure_while_dispatching_raises_at_the_call_as_on_cpu(operand):
    # XLA:CPU runs programs with host callbacks inline: their errors come with the call.
    for platform in ("ipu", "cpu"):
        x = jax.device_put(operand[:256, :256], jax.devices(platform)[0])
        with pytest.raises(jax.errors.JaxRuntimeError, match="failed on purpose"):
            jax.jit(failing)(x)


FAILING_LATER = """
    import jax, jax.numpy as jnp, numpy as np
    n = 1024
    def failing(a):
        def boom(v):
            raise ValueError("the host callback failed on purpose")
        for _ in range(4):
            a = jnp.tanh(a @ a / n)
        return jax.pure_callback(boom, jax.ShapeDtypeStruct(a.shape, a.dtype), a) + 1
    x = np.ones((2, n, n), np.float32)
    for platform in ("ipu", "cpu"):
        for read in ("block_until_ready", "asarray"):
            y = jax.pmap(failing, devices=jax.devices(platform))(x)
            pending = not y.is_ready()
            try:
                y.block_until_ready() if read == "block_until_ready" else np.asarray(y)
                print(platform, read, pending, "no-error")
            except jax.errors.JaxRuntimeError as e:
                print(platform, read, pending, str(e).split(":")[0],
                      "failed on purpose" in str(e), flush=True)
    # jax's own exit handlers re-raise the failed pmap's error and sometimes abort, on cpu alone
    # too (JAX_PLATFORMS=cpu): not what this test is about.
    import os
    os._exit(0)
"""


def test_errors_of_background_executions_reach_the_first_reader_as_on_cpu():
    env = {"JAX_IPU_DEVICE_COUNT": "2", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    lines = run_python(FAILING_LATER, env=env, timeout=300).stdout.splitlines()
    seen = {tuple(line.split()[:2]): line.split()[2:] for line in lines}
    for read in ("block_until_ready", "asarray"):
        assert seen["ipu", read] == seen["cpu", read] == ["True", "INTERNAL", "True"]


SEVERAL_DEVICES = """
    import jax, jax.numpy as jnp, numpy as np
    n = 1024
    def chain(a):
        for _ in range(6):
            a = jnp.tanh(a @ a / n)
        return a
    x = np.random.default_rng(0).standard_normal((4, n, n), np.float32)
    out = {}
    for platform in ("ipu", "cpu"):
        f = jax.pmap(chain, devices=jax.devices(platform))
        f(x).block_until_ready()
        y = f(x)
        ready = y.is_ready()
        out[platform] = (ready, np.asarray(y))
    print(out["ipu"][0], out["cpu"][0], np.array_equal(out["ipu"][1], out["cpu"][1]))
"""


def test_several_devices_dispatch_asynchronously_and_agree_with_cpu():
    env = {"JAX_IPU_DEVICE_COUNT": "4", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    assert run_python(SEVERAL_DEVICES, env=env, timeout=300).stdout.split() == [
        "False", "False", "True"]


def test_the_fast_dispatch_falls_back_when_jax_config_changes():
    # The plan runs XLA:CPU through jax's own C++ dispatch, whose cache keys include jax's
    # config: a compiled program called under another config takes the slow path, correctly.
    x = jax.device_put(np.arange(6, dtype=np.float32), jax.devices("ipu")[0])
    compiled = jax.jit(lambda a: a * 3 - 1, donate_argnums=0).lower(x).compile()
    results = [np.asarray(compiled(jax.device_put(np.arange(6, dtype=np.float32),
                                                  jax.devices("ipu")[0])))]
    with jax.numpy_dtype_promotion("strict"), jax.debug_key_reuse(True):
        results.append(np.asarray(compiled(x)))
    assert x.is_deleted()
    for got in results:
        np.testing.assert_array_equal(got, np.arange(6, dtype=np.float32) * 3 - 1)


@pytest.mark.parametrize("platform", ["ipu", "cpu"])
def test_an_output_stays_readable_when_its_sibling_was_donated_while_pending(platform, operand):
    device = jax.devices(platform)[0]
    x = jax.device_put(operand, device)
    long, pair = jax.jit(chain), jax.jit(lambda a: (chain(a), jnp.sum(a)))
    donate = jax.jit(lambda a: a * 2, donate_argnums=0)
    for f in (long, pair):
        jax.block_until_ready(f(x))  # compiled
    first = long(x)  # keeps the ipu waiter busy while the next call is handed on
    matrix, total = pair(x)
    doubled = donate(matrix)  # matrix goes to a later call before anyone waited for it
    total.block_until_ready()
    expected = jax.jit(lambda a: (chain(a) * 2, jnp.sum(a)))(
        jax.device_put(operand, jax.devices("cpu")[0]))
    np.testing.assert_array_equal(np.asarray(total), np.asarray(expected[1]))
    np.testing.assert_array_equal(np.asarray(doubled), np.asarray(expected[0]))
    assert matrix.is_deleted() and first.block_until_ready() is first
