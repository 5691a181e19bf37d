"""jax.export for ipu: one platform and several, serialized and read back, called on each.

Results are compared with the same function run by jax on cpu; a multi-platform artifact must
pick each platform's own lowering (platform_dependent branches, ipu's linalg rules)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from tests._subprocess import run_python

IPU = jax.devices("ipu")[0]
CPU = jax.devices("cpu")[0]
X = np.arange(12, dtype=np.float32).reshape(3, 4) / 7


def mlp(x):
    w = jnp.arange(20, dtype=jnp.float32).reshape(4, 5) / 10
    return jnp.tanh(x @ w).sum(axis=0) + jnp.sin(x).mean()


def by_platform(x):
    """x + 1 on cpu, x * 10 on ipu, x - 1 anywhere else."""
    return jax.lax.platform_dependent(x, cpu=lambda v: v + 1, ipu=lambda v: v * 10,
                                      default=lambda v: v - 1)


def _roundtrip(exp: export.Exported) -> export.Exported:
    return export.deserialize(exp.serialize())


@pytest.mark.parametrize("platforms", [("ipu",), ("cpu", "ipu"), ("ipu", "cpu")])
def test_export_serialize_call_matches_cpu(platforms):
    exp = _roundtrip(export.export(jax.jit(mlp), platforms=platforms)(
        jax.ShapeDtypeStruct(X.shape, X.dtype)))
    assert exp.platforms == platforms
    expected = jax.jit(mlp)(jax.device_put(X, CPU))
    for platform in platforms:
        x = jax.device_put(X, jax.devices(platform)[0])
        out = exp.call(x)
        assert out.devices() == {jax.devices(platform)[0]}
        np.testing.assert_array_equal(out, expected)
        np.testing.assert_array_equal(jax.jit(exp.call)(x), expected)


@pytest.mark.parametrize("platforms", [("ipu",), ("cpu", "ipu"), ("cpu", "tpu", "ipu")])
def test_multi_platform_picks_each_platforms_branch(platforms):
    exp = _roundtrip(export.export(jax.jit(by_platform), platforms=platforms)(X))
    np.testing.assert_array_equal(exp.call(jax.device_put(X, IPU)), X * 10)
    if "cpu" in platforms:
        np.testing.assert_array_equal(exp.call(jax.device_put(X, CPU)), X + 1)


def test_multi_platform_with_ipu_lowering_rules():
    """cholesky lowers to LAPACK on cpu and to an HLO decomposition on ipu: both are in the
    artifact, and each platform runs its own (so the last bits may differ)."""
    a = X @ X.T + 3 * np.eye(3, dtype=np.float32)
    exp = _roundtrip(export.export(jax.jit(jnp.linalg.cholesky), platforms=("cpu", "ipu"))(a))
    text = exp.mlir_module()
    assert "lapack" in text  # the cpu branch
    on_cpu = exp.call(jax.device_put(a, CPU))
    on_ipu = exp.call(jax.device_put(a, IPU))
    np.testing.assert_array_equal(on_cpu, jnp.linalg.cholesky(jax.device_put(a, CPU)))
    np.testing.assert_allclose(on_ipu, on_cpu, rtol=1e-6, atol=1e-6)


def test_exported_vjp_on_ipu():
    exp = export.export(jax.jit(mlp), platforms=("cpu", "ipu"))(X)
    vjp = _roundtrip(exp.vjp())
    ct = np.ones(5, np.float32)
    (on_ipu,) = vjp.call(jax.device_put(X, IPU), jax.device_put(ct, IPU))
    (on_cpu,) = vjp.call(jax.device_put(X, CPU), jax.device_put(ct, CPU))
    np.testing.assert_array_equal(on_ipu, on_cpu)
    expected = jax.vjp(mlp, jax.device_put(X, CPU))[1](jax.device_put(ct, CPU))[0]
    np.testing.assert_allclose(on_ipu, expected, rtol=1e-6)


def test_calling_on_a_platform_not_exported_names_both():
    exp = export.export(jax.jit(mlp), platforms=("cpu",))(X)
    with pytest.raises(ValueError, match=r"exported for platforms '\('cpu',\)'.*'\('ipu',\)'"):
        exp.call(jax.device_put(X, IPU))


def test_sharded_export_over_ipus_matches_cpu():
    """An artifact exported for 4 devices with a sharded input runs on 4 ipus as on 4 cpus."""
    run_python("""
        import jax, numpy as np
        from jax import export
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        x = np.arange(32, dtype=np.float32).reshape(8, 4)
        results = []
        for platform in ("cpu", "ipu"):
            mesh = Mesh(np.array(jax.devices(platform)), ("d",))
            f = jax.jit(lambda a: (a * 2).sum(axis=1),
                        in_shardings=NamedSharding(mesh, P("d")),
                        out_shardings=NamedSharding(mesh, P("d")))
            exp = export.deserialize(export.export(f, platforms=(platform,))(x).serialize())
            assert exp.nr_devices == 4
            out = exp.call(jax.device_put(x, NamedSharding(mesh, P("d"))))
            assert len(out.devices()) == 4 and {d.platform for d in out.devices()} == {platform}
            results.append(np.asarray(out))
        np.testing.assert_array_equal(*results)
    """, env={"JAX_IPU_DEVICE_COUNT": "4", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"})


def test_multi_platform_shape_polymorphic_and_nested():
    """The ipu analogue of upstream's multi-platform-and-poly tests (which export for cpu and
    tpu only): symbolic shapes, then the exported function called inside another export."""
    f = jax.jit(lambda x: jnp.reshape(by_platform(x), (-1,)))
    exp = export.export(f, platforms=("cpu", "ipu"))(
        jax.ShapeDtypeStruct(export.symbolic_shape("b1, b2"), np.float32))
    x = jax.device_put(X, IPU)
    np.testing.assert_array_equal(exp.call(x), (X * 10).reshape(-1))
    np.testing.assert_array_equal(exp.call(jax.device_put(X, CPU)), (X + 1).reshape(-1))
    nested = _roundtrip(export.export(jax.jit(exp.call), platforms=("ipu",))(X))
    np.testing.assert_array_equal(nested.call(x), (X * 10).reshape(-1))
