"""The ipu platform seen from vanilla JAX: devices, transfers, jit, eager ops, transformations.

Every result is compared with the same computation on jax's CPU backend."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests._subprocess import run_python

IPU = jax.devices("ipu")[0]
CPU = jax.devices("cpu")[0]


def on_both(fn, *args):
    """fn on ipu and on cpu, with the inputs committed to each device."""
    outs = []
    for device in (IPU, CPU):
        placed = [jax.device_put(a, device) for a in args]
        outs.append(jax.tree.map(np.asarray, fn(*placed)))
    return outs


def test_devices_describe_the_ipu_model():
    devices = jax.devices("ipu")
    assert devices[0].platform == "ipu"
    assert repr(devices[0]) == "IpuDevice(id=0, num_tiles=1472, version=ipu2)"
    assert devices[0].device_kind == "IPU Model ipu2"
    assert devices[0].num_tiles == 1472
    assert devices[0].version == "ipu2"
    assert devices[0].tile_memory_bytes == 638976


@pytest.mark.parametrize("how", ["env", "config"])
def test_ipu_can_be_the_default_backend(how):
    setup = ("import jax" if how == "env"
             else "import jax; jax.config.update('jax_platforms', 'ipu,cpu')")
    proc = run_python(f"""
        {setup}
        import jax.numpy as jnp
        x = jnp.arange(4.0) * 2
        print(jax.default_backend(), x.devices(), x.tolist())
    """, env={"JAX_PLATFORMS": "ipu"} if how == "env" else {})
    assert proc.stdout.split()[0] == "ipu"
    assert "IpuDevice(id=0" in proc.stdout
    assert "[0.0, 2.0, 4.0, 6.0]" in proc.stdout


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "int16", "int32", "uint8",
                                   "uint16", "uint32", "bool"])
def test_device_put_round_trip(dtype):
    host = (np.arange(-12, 12).reshape(4, 6) % 7).astype(dtype)
    x = jax.device_put(host, IPU)
    assert x.devices() == {IPU}
    assert x.dtype == host.dtype and x.shape == host.shape
    np.testing.assert_array_equal(np.asarray(x), host)
    np.testing.assert_array_equal(np.asarray(x.block_until_ready()), host)


def test_non_contiguous_host_arrays_arrive_intact():
    host = np.arange(60, dtype=np.float32).reshape(6, 10)[::2, 1::3]
    np.testing.assert_array_equal(np.asarray(jax.device_put(host, IPU)), host)


def test_jit_with_backend_argument_matches_cpu():
    def f(x):
        return jnp.tanh(x) * 3 + jnp.exp(-x)

    x = np.linspace(-3, 3, 101, dtype=np.float32)
    with pytest.warns(DeprecationWarning):
        ipu_f = jax.jit(f, backend="ipu")
    y = ipu_f(x)
    assert y.devices() == {IPU}
    np.testing.assert_array_equal(np.asarray(y), np.asarray(jax.jit(f, backend="cpu")(x)))


def test_jit_follows_committed_arrays():
    a, b = on_both(jax.jit(lambda x, y: x @ y + 1), np.eye(8, dtype=np.float32) * 2,
                   np.arange(64, dtype=np.float32).reshape(8, 8))
    np.testing.assert_array_equal(a, b)


def test_eager_ops_run_on_ipu():
    x = jax.device_put(np.linspace(0, 1, 10, dtype=np.float32), IPU)
    y = jnp.sin(x) + 1
    assert y.devices() == {IPU}
    np.testing.assert_array_equal(np.asarray(y), np.sin(np.linspace(0, 1, 10, dtype=np.float32))
                                  + np.float32(1))


def test_transformations_match_cpu():
    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    w = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    x = np.random.default_rng(1).normal(size=(7, 5)).astype(np.float32)
    a, b = on_both(jax.jit(jax.grad(loss)), w, x)
    np.testing.assert_array_equal(a, b)
    a, b = on_both(jax.vmap(lambda r: jnp.dot(r, r)), x)
    np.testing.assert_array_equal(a, b)


def test_control_flow_matches_cpu():
    def scan_fn(x):
        return jax.lax.scan(lambda c, v: (c * 0.5 + v, c), 0.0, x)

    def while_fn(x):
        return jax.lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 1.1), (0, x))

    def cond_fn(x):
        return jax.lax.cond(x.sum() > 0, lambda v: v * 2, lambda v: -v, x)

    def fori_fn(x):
        return jax.lax.fori_loop(0, 7, lambda i, c: c + i * x, x)

    x = np.arange(6, dtype=np.float32) - 2
    for fn in (scan_fn, while_fn, cond_fn, fori_fn):
        a, b = on_both(jax.jit(fn), x)
        jax.tree.map(np.testing.assert_array_equal, a, b)


def test_random_bits_match_cpu():
    def draw(key):
        k1, k2 = jax.random.split(key)
        return jax.random.normal(k1, (32,)), jax.random.uniform(k2, (8, 4))

    a, b = on_both(jax.jit(draw), jax.random.key_data(jax.random.key(42)))
    jax.tree.map(np.testing.assert_array_equal, a, b)
    key = jax.device_put(jax.random.key(7), IPU)
    np.testing.assert_array_equal(np.asarray(jax.random.bernoulli(key, 0.3, (16,))),
                                  np.asarray(jax.random.bernoulli(jax.random.key(7), 0.3, (16,))))


def test_float16_arithmetic_matches_cpu():
    x = np.linspace(-4, 4, 64, dtype=np.float16)
    a, b = on_both(jax.jit(lambda v: jnp.sum(v * v, dtype=jnp.float16) + jnp.exp(v)), x)
    np.testing.assert_array_equal(a, b)


def test_compile_error_is_a_python_exception_with_the_source_line():
    x = np.ones(3, np.float32)

    def f(v):
        return v.astype(jnp.bfloat16) * 2  # bfloat16: no such type on ipu2

    with pytest.raises(Exception, match=r"bfloat16") as info:
        jax.jit(f, backend="ipu")(x)
    assert "test_platform.py" in str(info.value)
    assert "ipu2" in str(info.value)


def test_copy_between_backends():
    x = jax.device_put(np.arange(5, dtype=np.int32), IPU)
    y = jax.device_put(x, CPU)
    assert y.devices() == {CPU}
    z = jax.device_put(y, IPU)
    np.testing.assert_array_equal(np.asarray(z), np.arange(5))


def test_zero_size_arrays():
    x = jax.device_put(np.ones((7, 5, 3), np.float32), IPU)
    y = jax.jit(lambda a, i: jax.lax.dynamic_slice(a, i, (2, 0, 1)))(x, np.array((4, 1, 0)))
    assert np.asarray(y).shape == (2, 0, 1) and y.nbytes == 0
    empty = jax.device_put(np.zeros((0, 3), np.int32), IPU)
    assert np.asarray(jax.jit(lambda a: a * 2)(empty)).shape == (0, 3)
    assert float(jax.jit(jnp.sum)(empty)) == 0.0


def test_programs_without_outputs_and_user_numpy_rules():
    x = jax.device_put(np.arange(4, dtype=np.float32), IPU)
    assert jax.jit(lambda v: ())(x) == ()
    # The ipu linear-algebra lowerings follow jax's own rules whatever the user's config says.
    with jax.numpy_rank_promotion("raise"):
        coeffs = jnp.polyfit(x, x * 2 + 1, 1)
    np.testing.assert_allclose(np.asarray(coeffs), [2.0, 1.0], rtol=1e-5, atol=1e-5)
