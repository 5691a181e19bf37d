"""How Execute learns that a run ended: a run that fails after the call returned still reaches the
user, though Execute no longer asks a ready output for its error when the run cannot fail late."""

from __future__ import annotations

import jax
import numpy as np

from tests._subprocess import run_python

# XLA:CPU runs a program with host callbacks inline on one device, so its errors come with the
# call; on several devices it fails in the background. A call on an array that failed so is run
# in the background too and fails there, often before Execute looks at its outputs: its error
# must reach block_until_ready and the read, though that program (a * 2 + 1) cannot fail itself.
FAILED_ARGUMENT = """
    import os, jax, jax.numpy as jnp, numpy as np
    n = 512
    def failing(a):
        def boom(v):
            raise ValueError("the host callback failed on purpose")
        for _ in range(3):
            a = jnp.tanh(a @ a / n)
        return jax.pure_callback(boom, jax.ShapeDtypeStruct(a.shape, a.dtype), a) + 1
    g = jax.jit(lambda a: a[:4, :4] * 2 + 1)
    x = np.ones((2, n, n), np.float32)
    for platform in ("ipu", "cpu"):
        y = jax.pmap(failing, devices=jax.devices(platform))(x)
        pending = not y.is_ready()
        shard = y.addressable_shards[0].data  # one device's array: what a plain jit runs on
        seen = set()
        for _ in range(200):
            z = g(shard)
            for wait in ("block", "read"):
                try:
                    z.block_until_ready() if wait == "block" else np.asarray(z)
                    seen.add(wait + ":no-error")
                except jax.errors.JaxRuntimeError as e:
                    seen.add(wait + ":" + str("failed on purpose" in str(e)))
        print(platform, pending, *sorted(seen), flush=True)
    os._exit(0)  # jax's exit handlers re-raise the failed pmap's error (on cpu alone too)
"""


def test_a_call_on_an_array_that_failed_late_fails_at_every_wait_as_on_cpu():
    env = {"JAX_IPU_DEVICE_COUNT": "2", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    lines = run_python(FAILED_ARGUMENT, env=env, timeout=300).stdout.splitlines()
    seen = {line.split()[0]: line.split()[1:] for line in lines}
    assert seen["ipu"] == seen["cpu"] == ["True", "block:True", "read:True"]


def test_a_ready_result_of_a_program_that_cannot_fail_late_is_served_without_an_event():
    # The trusted path: a pure program on arguments that succeeded, run inline by XLA:CPU.
    x = jax.device_put(np.arange(4, dtype=np.float32), jax.devices("ipu")[0])
    f = jax.jit(lambda a: a * 2 + 1)
    ys = [f(x) for _ in range(20)]
    assert all(y.is_ready() for y in ys)
    np.testing.assert_array_equal(np.asarray(ys[-1]), np.arange(4, dtype=np.float32) * 2 + 1)
