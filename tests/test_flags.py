"""The jax_ipu_* flags: defaults, environment variables, jax.config.update, and clear errors.

Each case runs in a fresh interpreter because the ipu client reads the flags once."""

from __future__ import annotations

import jax
import pytest

from jax_ipu import config
from jax_ipu.errors import IpuConfigError
from tests._subprocess import run_python

SHOW = """
    import jax
    {setup}
    ds = jax.devices("ipu")
    print([repr(d) for d in ds], ds[0].memory_stats()["bytes_limit"])
"""


def devices_with(env=None, setup=""):
    return run_python(SHOW.format(setup=setup), env=env).stdout


def test_defaults_are_one_full_ipu2():
    out = devices_with()
    assert "['IpuDevice(id=0, num_tiles=1472, version=ipu2)'] 940572672" in out


@pytest.mark.parametrize("version,tiles,per_tile",
                         [("ipu1", 1216, 262144), ("ipu21", 1472, 638976)])
def test_model_version_from_env(version, tiles, per_tile):
    out = devices_with({"JAX_IPU_MODEL_VERSION": version})
    assert f"num_tiles={tiles}, version={version}" in out
    assert str(tiles * per_tile) in out


def test_num_tiles_and_device_count_from_config_update():
    out = devices_with(setup="import jax_ipu; jax.config.update('jax_ipu_model_num_tiles', 4); "
                             "jax.config.update('jax_ipu_device_count', 3)")
    assert out.count("num_tiles=4, version=ipu2") == 3
    assert "id=2" in out and str(4 * 638976) in out


def test_visible_devices_pick_ids():
    out = devices_with({"JAX_IPU_VISIBLE_DEVICES": "1,3"})
    assert "IpuDevice(id=1," in out and "IpuDevice(id=3," in out and "id=0" not in out


def test_each_device_runs_jit():
    proc = run_python("""
        import jax, numpy as np
        for d in jax.devices("ipu"):
            x = jax.device_put(np.arange(4.0, dtype=np.float32), d)
            y = jax.jit(lambda v: v * 2)(x)
            assert y.devices() == {d}, (y.devices(), d)
            print(d.id, np.asarray(y).tolist())
    """, env={"JAX_IPU_DEVICE_COUNT": "4"})
    assert proc.stdout.split("\n")[:4] == [f"{i} [0.0, 2.0, 4.0, 6.0]" for i in range(4)]


def test_asking_for_hardware_says_there_is_none():
    proc = run_python("""
        import jax
        try:
            jax.devices("ipu")
        except RuntimeError as e:
            print("ERROR", e)
    """, env={"JAX_IPU_USE_MODEL": "false"})
    assert "ERROR" in proc.stdout
    assert "Poplar SDK" in proc.stdout and "no hardware path" in proc.stdout


@pytest.mark.parametrize("name,bad,allowed", [
    ("jax_ipu_model_version", "ipu3", "'ipu1', 'ipu2', 'ipu21' or 'c600'"),
    ("jax_ipu_device_count", "0", "-1 (all)"),
    ("jax_ipu_model_num_tiles", "-5", "0 (full chip)"),
    ("jax_ipu_visible_devices", "0,0", "distinct"),
    ("jax_ipu_use_model", "maybe", "True or False"),
])
def test_invalid_values_name_the_flag_and_the_allowed_values(name, bad, allowed):
    flag = config.BY_NAME[name]
    with pytest.raises(IpuConfigError) as info:
        flag.parse(bad, origin=f"the environment variable {flag.env_var}")
    assert name in str(info.value) and allowed in str(info.value)
    assert flag.env_var in str(info.value)
    value = bad if flag.kind is int else repr(bad)
    proc = run_python(f"""
        import jax, jax_ipu
        try:
            jax.config.update({name!r}, {value})
        except Exception as e:
            print("ERROR", type(e).__name__, e)
    """)
    assert "ERROR" in proc.stdout and name in proc.stdout


def test_too_many_tiles_for_the_chip():
    proc = run_python("""
        import jax, jax_ipu
        jax.config.update("jax_ipu_model_version", "ipu1")
        jax.config.update("jax_ipu_model_num_tiles", 1300)
        try:
            jax.devices("ipu")
        except RuntimeError as e:
            print("ERROR", e)
    """)
    assert "jax_ipu_model_num_tiles=1300" in proc.stdout and "1216" in proc.stdout


def test_flag_sources():
    proc = run_python("""
        import jax
        from jax_ipu import config
        import jax_ipu
        jax.config.update("jax_ipu_device_count", 2)
        print(config.source("jax_ipu_model_version"), config.source("jax_ipu_device_count"),
              config.source("jax_ipu_model_num_tiles"), config.value("jax_ipu_model_num_tiles"))
    """, env={"JAX_IPU_MODEL_NUM_TILES": "16"})
    assert proc.stdout.split() == ["default", "config", "env", "16"]


def test_changing_a_flag_after_the_backend_started_is_refused():
    proc = run_python("""
        import jax, jax_ipu
        jax.devices("ipu")
        try:
            jax.config.update("jax_ipu_model_version", "ipu1")
        except Exception as e:
            print("ERROR", e)
    """)
    assert "ERROR jax_ipu_model_version is read when the ipu backend starts" in proc.stdout


def test_every_flag_is_a_jax_option_of_its_own_type():
    # absl (jax.config.config_with_absl, as upstream tests use) builds a flag of the option's
    # type from its default: a float option registered as a string would break it.
    for flag in config.FLAGS:
        kind, _, _ = jax.config.meta[flag.name]
        assert (kind, type(getattr(jax.config, flag.name))) == (flag.kind, flag.kind), flag.name


def test_a_bad_float_value_is_refused_at_update():
    proc = run_python("""
        import jax, jax_ipu
        try:
            jax.config.update("jax_ipu_available_memory_proportion", 1.5)
            print("ACCEPTED")
        except Exception as e:
            print("ERROR", e)
    """)
    assert "ERROR" in proc.stdout and "jax_ipu_available_memory_proportion" in proc.stdout


def test_the_chip_flags_take_their_values_from_the_targets():
    from jax_ipu.model import targets

    version = config.BY_NAME["jax_ipu_model_version"]
    assert [v for v in ("ipu0", *targets.VERSIONS, "ipu3") if version.check(v)] == \
        list(targets.VERSIONS)
    assert all(f"{n} on {v}" in config.BY_NAME["jax_ipu_model_num_tiles"].help
               for v, n in targets.FULL_CHIP_TILES.items())
    proportion = config.BY_NAME["jax_ipu_available_memory_proportion"]
    assert proportion.default == targets.DEFAULT_AVAILABLE_MEMORY_PROPORTION
    assert proportion.check is targets.memory_proportion_ok
