"""Several IPU Model devices: pmap, shard_map and sharded jit with collectives, against CPU.

Each device count runs in its own interpreter with as many CPU devices, so results compare
program by program with the same device count."""

from __future__ import annotations

import pytest

from tests._subprocess import run_python

PROGRAMS = """
    import jax, jax.numpy as jnp, numpy as np
    from jax import lax, shard_map
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    n = {n}
    ipus, cpus = jax.devices("ipu"), jax.devices("cpu")
    assert len(ipus) == len(cpus) == n, (ipus, cpus)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 6)).astype(np.float32)

    def collectives(v):
        i = lax.axis_index("i")
        return dict(
            psum=lax.psum(v, "i"), pmean=lax.pmean(v, "i"), pmax=lax.pmax(v, "i"),
            gather=lax.all_gather(v, "i"),
            perm=lax.ppermute(v, "i", [(k, (k + 1) % n) for k in range(n)]),
            index=v * i,
            scatter=lax.psum_scatter(jnp.tile(v, n), "i", tiled=True),
            to_all=lax.all_to_all(jnp.tile(v[None], (n, 1)), "i", 0, 0, tiled=True),
        )

    def run(devices):
        out = {{}}
        out["pmap"] = jax.pmap(collectives, axis_name="i", devices=devices)(x)
        if n % 2 == 0 and n > 1:
            # jax 0.10 implements pmap with shard_map and refuses nested pmap on every platform:
            # ipu must fail the same way cpu does.
            nested = jax.pmap(jax.pmap(lambda v: lax.psum(v, ("a", "b")), axis_name="b"),
                              axis_name="a", devices=devices)
            try:
                nested(x.reshape(2, n // 2, 6))
            except ValueError as e:
                out["nested_error"] = np.array(["should match the mesh" in str(e)])
            vmapped = jax.pmap(jax.vmap(lambda v: lax.psum(v, "a"), axis_name="b"),
                               axis_name="a", devices=devices)
            out["pmap_of_vmap"] = vmapped(x.reshape(n, 1, 6))
        mesh = Mesh(np.array(devices), ("i",))
        sm = jax.jit(shard_map(lambda v: lax.psum(v, "i") + v, mesh=mesh, in_specs=P("i"),
                               out_specs=P("i")))
        out["shard_map"] = sm(jax.device_put(x, NamedSharding(mesh, P("i"))))
        sharded = jax.device_put(x, NamedSharding(mesh, P("i", None)))
        def step(v):
            v = lax.with_sharding_constraint(v * 2, NamedSharding(mesh, P(None, None)))
            return jnp.tanh(v @ v.T).sum(0)
        out["jit"] = jax.jit(step, out_shardings=NamedSharding(mesh, P("i")))(sharded)
        assert sharded.sharding.device_set == set(devices)
        assert out["jit"].sharding.device_set == set(devices)
        return jax.tree.map(np.asarray, out)

    got, want = run(ipus), run(cpus)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6), got, want)
    print("OK", sorted(got), sorted(got["pmap"]))
"""


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16])
def test_collectives_and_shardings_match_cpu(n):
    proc = run_python(PROGRAMS.format(n=n), env={
        "JAX_IPU_DEVICE_COUNT": str(n),
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={n}",
    }, timeout=300)
    assert proc.stdout.startswith("OK"), proc.stdout
    assert "shard_map" in proc.stdout and "psum" in proc.stdout


def test_program_for_more_devices_than_exist_says_how_many():
    proc = run_python("""
        import jax, numpy as np
        try:
            jax.pmap(lambda v: v * 2, devices=jax.devices("ipu"))(np.ones((3, 2), np.float32))
        except Exception as e:
            print("ERROR", e)
    """, env={"JAX_IPU_DEVICE_COUNT": "2"})
    assert "ERROR" in proc.stdout


def test_as_text_of_multi_device_programs_is_the_partitioned_program():
    # jaxlib cannot print the Shardy program jax sends (sdy.manual_computation has no HLO form),
    # so a multi-device program answers as XLA's partitioner made it: one device's shapes.
    proc = run_python("""
        import jax, jax.numpy as jnp, numpy as np
        from jax import lax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        x = np.ones((4, 3), np.float32)
        pmapped = jax.pmap(lambda v: lax.psum(v, "i"), axis_name="i").lower(x).compile()
        print("PMAP", "all-reduce(" in pmapped.as_text(), "f32[1,3]" in pmapped.as_text())
        mesh = Mesh(np.array(jax.devices()), ("d",))
        rows = jax.device_put(np.ones((8, 4), np.float32), NamedSharding(mesh, P("d")))
        compiled = jax.jit(lambda a: a.sum(0)).lower(rows).compile()
        text = compiled.as_text()
        print("JIT", "f32[2,4]" in text, "all-reduce(" in text, np.asarray(compiled(rows)))
        # Resharding by all-to-all: jaxlib's conversion of XLA's module does not verify, so
        # XLA's module is answered as HLO, as cpu answers it: one device's shapes either side.
        columns = NamedSharding(mesh, P(None, "d"))
        reshard = jax.jit(lambda a: a * 2, out_shardings=columns).lower(rows).compile()
        text = reshard.as_text()
        print("RESHARD", "all-to-all(" in text, "f32[2,4]" in text, "f32[8,1]" in text,
              float(np.asarray(reshard(rows)).sum()))
    """, env={"JAX_IPU_DEVICE_COUNT": "4", "JAX_PLATFORMS": "ipu"})
    assert "RESHARD True True True 64.0" in proc.stdout, proc.stdout
    assert "PMAP True True" in proc.stdout, proc.stdout
    assert "JIT True True [8. 8. 8. 8.]" in proc.stdout, proc.stdout


def test_inspect_array_sharding_reports_the_sharding_as_on_cpu():
    proc = run_python("""
        import jax, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        for platform in ("ipu", "cpu"):
            mesh = Mesh(np.array(jax.devices(platform)), ("d",))
            x = jax.device_put(np.arange(32.0, dtype=np.float32).reshape(8, 4),
                               NamedSharding(mesh, P("d")))
            seen = []

            @jax.jit
            def f(a):
                jax.debug.inspect_array_sharding(a, callback=seen.append)
                return a * 2

            print(platform, float(np.asarray(f(x)).sum()), seen[0].spec, len(seen[0].device_set))
    """, env={"JAX_IPU_DEVICE_COUNT": "4",
              "XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    assert "ipu 992.0 P('d',) 4" in proc.stdout, proc.stdout
    assert "cpu 992.0 P('d',) 4" in proc.stdout, proc.stdout
