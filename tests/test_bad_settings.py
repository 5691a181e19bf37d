"""Bad settings: a bad JAX_IPU_* or Poplar variable leaves jax's other backends working, and every
bad value gets one clear message naming it (issue 29, item 6 and its messages)."""

from __future__ import annotations

import jax
import pytest

from jax_ipu import config
from tests._subprocess import run_python

CPU_USER = """
    import logging, jax, jax.numpy as jnp
    print("VALUES", jnp.arange(3).tolist(), [d.platform for d in jnp.arange(3).devices()])
    try:
        jax.devices("ipu")
    except RuntimeError as e:
        print("IPU", e)
"""


@pytest.mark.parametrize("variable, value, named", [
    ("JAX_IPU_MODEL_NUM_TILES", "abc", "JAX_IPU_MODEL_NUM_TILES"),
    ("POPLAR_ENGINE_OPTIONS", '{"autoReport.all": "true", "debug.instrument": "true"}',
     "POPLAR_ENGINE_OPTIONS"),
])
def test_a_bad_variable_leaves_cpu_working_and_warns_once(variable, value, named):
    """Before: `Unable to initialize backend 'ipu'` from the first jnp call, on cpu too."""
    proc = run_python(CPU_USER, env={variable: value})
    assert "VALUES [0, 1, 2] ['cpu']" in proc.stdout
    assert proc.stderr.count("the ipu backend is off in this process") == 1, proc.stderr
    assert named in proc.stderr.split("the ipu backend is off")[1].splitlines()[0]
    ipu_error = proc.stdout.split("IPU ", 1)[1]
    assert "failed to initialize" in ipu_error and named in ipu_error


def test_asking_for_ipu_by_name_still_fails_loudly():
    proc = run_python(CPU_USER, env={"JAX_IPU_MODEL_NUM_TILES": "abc",
                                     "JAX_PLATFORMS": "ipu,cpu"}, check=False)
    assert proc.returncode != 0
    assert "Invalid value 'abc' for jax_ipu_model_num_tiles" in proc.stderr


def test_a_padded_boolean_is_read_as_the_flag_reads_it():
    """Before: jax's own parser raised "invalid truth value ' 1 '" at plugin import."""
    proc = run_python("""
        import jax, jax.numpy as jnp
        devices = jnp.arange(3).devices()
        print(jax.config.jax_ipu_use_model, devices)
    """, env={"JAX_IPU_USE_MODEL": " 1 "})
    assert proc.stdout.startswith("True {IpuDevice(id=0")


@pytest.mark.parametrize("flag, value", [("jax_ipu_model_num_tiles", "abc"),
                                         ("jax_ipu_device_count", 1.5),
                                         ("jax_ipu_available_memory_proportion", "x")])
def test_a_wrong_type_in_config_update_names_the_flag(flag, value):
    """Before: jax's "new int config value must be None or of type int", without the name."""
    before = getattr(jax.config, flag)
    with pytest.raises(config.IpuConfigError, match=f"Invalid value {value!r} for {flag} "
                       rf"\(set by jax.config.update\('{flag}', ...\)\): allowed values are"):
        jax.config.update(flag, value)
    assert getattr(jax.config, flag) == before


def test_a_number_written_as_a_string_is_read_as_a_number():
    """As its environment variable is: the flag's own parser, not jax's type check."""
    name = "jax_ipu_tile_worker_timeout_s"  # read on use: it may change after start-up
    saved = getattr(jax.config, name)
    try:
        jax.config.update(name, " 30 ")
        assert getattr(jax.config, name) == 30.0
        assert isinstance(getattr(jax.config, name), float)
    finally:
        jax.config.update(name, saved)


def test_deeply_nested_engine_options_are_one_clear_error(monkeypatch):
    """Before: RecursionError from the JSON reader."""
    monkeypatch.setenv(config.ENGINE_OPTIONS_VAR, "[" * 100_000 + "]" * 100_000)
    with pytest.raises(config.IpuConfigError, match=r"POPLAR_ENGINE_OPTIONS nests too deeply "
                       r"to be read: it must be one flat JSON object.*\(200000 characters\)"):
        config.engine_options()
