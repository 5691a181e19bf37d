"""Host callbacks on ipu: pure_callback, io_callback, debug.print and debug.callback inside jit,
scan and vmap, against CPU; data streamed from the host inside an on-device loop."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

import jax_ipu

IPU = jax.devices("ipu")[0]
CPU = jax.devices("cpu")[0]


def _run(device, fn, *args):
    out = jax.jit(fn)(*(jax.device_put(a, device) for a in args))
    jax.effects_barrier()
    return out


def _sin_on_host(x):
    return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


def test_pure_callback_output_in_jit():
    x = np.linspace(0, 1, 5, dtype=np.float32)
    got = _run(IPU, lambda x: _sin_on_host(x) * 2 + 1, x)
    assert got.devices() == {IPU}
    want = _run(CPU, lambda x: _sin_on_host(x) * 2 + 1, x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_pure_callback_under_vmap_and_scan():
    xs = np.arange(12, dtype=np.float32).reshape(3, 4)

    def fn(xs):
        def step(c, x):
            y = jax.vmap(lambda v: jax.pure_callback(
                lambda a: np.asarray(a * a, np.float32), jax.ShapeDtypeStruct((), jnp.float32), v,
                vmap_method="sequential"))(x)
            return c + y.sum(), y

        return jax.lax.scan(step, jnp.float32(0), xs)

    (total, ys), (total_c, ys_c) = _run(IPU, fn, xs), _run(CPU, fn, xs)
    assert float(total) == float(total_c) == float((xs ** 2).sum())
    np.testing.assert_array_equal(np.asarray(ys), np.asarray(ys_c))


def test_io_callback_streams_host_data_into_a_device_loop():
    batches = np.arange(20, dtype=np.float32).reshape(5, 4)
    served = []

    def next_batch(i):
        served.append(int(i))
        return batches[int(i)]

    def train(w):
        def body(i, w):
            batch = io_callback(next_batch, jax.ShapeDtypeStruct((4,), jnp.float32), i)
            return w + batch * 0.5

        return jax.lax.fori_loop(0, 5, body, w)

    got = _run(IPU, train, np.zeros(4, np.float32))
    np.testing.assert_allclose(np.asarray(got), batches.sum(0) * 0.5)
    assert sorted(served) == [0, 1, 2, 3, 4]


def test_io_callback_side_effect_unordered():
    seen = []

    def record(x):
        seen.append(np.asarray(x).copy())
        return np.int32(len(seen))

    count = _run(IPU, lambda x: io_callback(record, jax.ShapeDtypeStruct((), jnp.int32), x + 1),
                 np.arange(3, dtype=np.int32))
    assert int(count) == 1
    np.testing.assert_array_equal(seen[0], [1, 2, 3])


def test_debug_print_and_callback(capsys):
    def fn(x):
        jax.debug.print("x sum = {s}", s=x.sum())
        jax.debug.callback(lambda v: print("max", float(v)), x.max())
        return x * 3

    got = _run(IPU, fn, np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(got), [0, 3, 6, 9])
    out = capsys.readouterr().out
    assert "x sum = 6.0" in out and "max 3.0" in out


def test_debug_print_in_scan_prints_every_step(capsys):
    def fn(xs):
        def step(c, x):
            jax.debug.print("step {x}", x=x)
            return c + x, None

        return jax.lax.scan(step, jnp.int32(0), xs)[0]

    assert int(_run(IPU, fn, np.arange(3, dtype=np.int32))) == 3
    lines = sorted(line for line in capsys.readouterr().out.splitlines() if "step" in line)
    assert lines == ["step 0", "step 1", "step 2"]


def test_model_counts_callbacks_as_host_exchange():
    x = jax.device_put(np.ones(256, np.float32), IPU)
    with_cb = jax_ipu.report(jax.jit(lambda x: _sin_on_host(x) + 1).lower(x).compile())
    without = jax_ipu.report(jax.jit(lambda x: jnp.sin(x) + 1).lower(x).compile())
    callback, = [op for op in with_cb.ops if op.name == "stablehlo.custom_call"]
    assert callback.host_cycles > 0
    assert with_cb.cycles.host_exchange == callback.host_cycles
    assert without.cycles.host_exchange == 0
