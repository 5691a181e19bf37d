"""Donation on ipu: every argument position and output order, and JAX's deleted-array error.

The values must match CPU, and donated inputs must be deleted (and their bytes given back)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

IPU = jax.devices("ipu")[0]


def put(*arrays):
    return [jax.device_put(np.asarray(a, np.float32), IPU) for a in arrays]


CASES = {
    "first": (lambda a, b: (a + b,), (0,)),
    "second": (lambda a, b: (a * b,), (1,)),
    "both": (lambda a, b: (a + 1, b + 2), (0, 1)),
    "reversed outputs": (lambda a, b: (b * 2, a * 3), (0, 1)),
    "interleaved": (lambda a, b, c: (c - a, b, a + c), (0, 2)),
    "more outputs than donations": (lambda a, b, c: (a, b + c, c * 2, a - b), (1,)),
    "last of three": (lambda a, b, c: (a + b + c,), (2,)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_donation_patterns_match_cpu(name):
    fn, donate = CASES[name]
    nargs = fn.__code__.co_argcount
    host = [np.arange(6, dtype=np.float32) * (i + 1) for i in range(nargs)]
    expected = jax.jit(fn)(*[jax.device_put(h, jax.devices("cpu")[0]) for h in host])
    args = put(*host)
    outs = jax.jit(fn, donate_argnums=donate)(*args)
    for got, want in zip(outs, expected, strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    for i, arg in enumerate(args):
        assert arg.is_deleted() == (i in donate), (name, i)


def test_donate_argnames():
    def step(params, grads):
        return params - 0.1 * grads

    params, grads = put(np.ones(4), np.arange(4))
    new = jax.jit(step, donate_argnames="params")(params, grads)
    np.testing.assert_allclose(np.asarray(new), 1 - 0.1 * np.arange(4, dtype=np.float32))
    assert params.is_deleted() and not grads.is_deleted()


def test_using_a_donated_array_raises_jax_error():
    (x,) = put(np.ones(3))
    jax.jit(lambda v: v * 2, donate_argnums=0)(x)
    with pytest.raises(RuntimeError, match="deleted"):
        np.asarray(x)
    with pytest.raises(RuntimeError, match="deleted"):
        jnp.sin(x)


def test_donated_bytes_are_given_back():
    stats = IPU.memory_stats
    before = stats()["bytes_in_use"]
    (x,) = put(np.ones(1000))
    assert stats()["bytes_in_use"] == before + 4000
    y = jax.jit(lambda v: v + 1, donate_argnums=0)(x)
    assert stats()["bytes_in_use"] == before + 4000  # the output took the donated buffer's place
    del y
    assert stats()["bytes_in_use"] == before


def test_donating_an_array_also_passed_again_fails_as_on_cpu():
    for device in (IPU, jax.devices("cpu")[0]):
        x = jax.device_put(np.arange(3, dtype=np.float32), device)
        with pytest.raises(jax.errors.JaxRuntimeError, match="^INVALID_ARGUMENT: .*donated"):
            jax.jit(lambda a, b: a + b, donate_argnums=0)(x, x)


def test_loop_with_donated_state_matches_cpu():
    def update(w, x):
        return w - 0.01 * jax.grad(lambda v: jnp.sum((x @ v) ** 2))(w)

    rng = np.random.default_rng(0)
    w0, x = rng.normal(size=(4, 2)).astype(np.float32), rng.normal(size=(8, 4)).astype(np.float32)
    cpu_w, ipu_w = jnp.asarray(w0), jax.device_put(w0, IPU)
    step = jax.jit(update, donate_argnums=0)
    cpu_step = jax.jit(update)
    for _ in range(5):
        cpu_w = cpu_step(cpu_w, x)
        ipu_w = step(ipu_w, jax.device_put(x, IPU))
    np.testing.assert_array_equal(np.asarray(ipu_w), np.asarray(cpu_w))
