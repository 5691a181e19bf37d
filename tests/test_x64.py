"""jax_enable_x64 on ipu: 32-bit programs still run and match CPU; float64 is refused clearly.

Also: a custom call with no IPU implementation fails at compile with its name and source line."""

from __future__ import annotations

from tests._subprocess import run_python

X64_PROGRAM = """
    import jax, jax.numpy as jnp, numpy as np
    assert jax.config.jax_enable_x64
    ipu, cpu = jax.devices("ipu")[0], jax.devices("cpu")[0]

    def f32_step(w, x):
        return jnp.tanh(x @ w).sum(axis=0) + jnp.arange(3, dtype=jnp.int32).astype(jnp.float32)

    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    x = np.linspace(0, 2, 20, dtype=np.float32).reshape(5, 4)
    got = jax.jit(f32_step)(jax.device_put(w, ipu), jax.device_put(x, ipu))
    want = jax.jit(f32_step)(jax.device_put(w, cpu), jax.device_put(x, cpu))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    idx = jax.jit(lambda v: (v * 3) // 2)(jax.device_put(np.arange(6, dtype=np.int64), ipu))
    print("INT64", np.asarray(idx).tolist(), idx.dtype)
    try:
        jax.jit(lambda v: jnp.sin(v.astype(jnp.float64)))(jax.device_put(w, ipu))
    except Exception as e:
        print("REFUSED", e)
"""


def test_x64_keeps_32_bit_programs_running_and_refuses_float64():
    out = run_python(X64_PROGRAM, env={"JAX_ENABLE_X64": "1"}).stdout
    assert "INT64 [0, 1, 3, 4, 6, 7] int64" in out
    assert "REFUSED INVALID_ARGUMENT" in out
    assert "float64" in out and "ipu2 has no float64" in out
    assert "<string>:18 (<lambda>)" in out  # the line with the float64 conversion
    assert "disable x64" in out


def test_unknown_custom_call_fails_at_compile_with_name_and_line():
    out = run_python("""
        import jax, jax.numpy as jnp, numpy as np
        from jax._src.interpreters import mlir
        from jax.extend.core import Primitive
        from jax._src.lib.mlir.dialects import hlo

        secret = Primitive("secret_op")
        secret.def_abstract_eval(lambda x: x)

        def lowering(ctx, x):
            return hlo.CustomCallOp([x.type], [x], call_target_name="my_lapack_kernel").results

        mlir.register_lowering(secret, lowering)
        x = jax.device_put(np.ones(4, np.float32), jax.devices("ipu")[0])
        try:
            jax.jit(lambda v: secret.bind(v) * 2)(x)
        except Exception as e:
            print("REFUSED", e)
    """).stdout
    assert "REFUSED" in out
    assert "my_lapack_kernel" in out
    assert "<string>:16" in out
