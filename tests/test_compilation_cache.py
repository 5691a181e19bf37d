"""jax's persistent compilation cache and serialized executables on ipu.

A cached ipu program loads without compiling XLA:CPU again or re-running the model, keeps its
report, and a corrupt or stale entry is compiled afresh with a warning."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import serialize_executable

import jax_ipu
from tests._subprocess import run_python

PROGRAM = """
    import json, sys, warnings
    import jax, jax.numpy as jnp, numpy as np
    from jax._src import monitoring
    events = []
    monitoring.register_event_listener(lambda name, **kw: events.append(name))
    jax.config.update("jax_compilation_cache_dir", {cache!r})
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    import jax_ipu
    {prelude}
    def step(w, x):
        return jnp.tanh(x @ w) @ w.T, jnp.sum(w * w)
    w = np.linspace(-1, 1, 64 * 32, dtype=np.float32).reshape(64, 32)
    x = np.linspace(0, 1, 16 * 64, dtype=np.float32).reshape(16, 64)
    out = {{}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for platform in {platforms!r}:
            device = jax.devices(platform)[0]
            args = jax.device_put((w, x), device)
            compiled = jax.jit(step).lower(*args).compile()
            values = [np.asarray(v).tolist() for v in compiled(*args)]
            report = jax_ipu.report(compiled).to_dict() if platform == "ipu" else None
            out[platform] = {{"values": values, "report": report}}
    out["hits"] = events.count("/jax/compilation_cache/cache_hits")
    out["misses"] = events.count("/jax/compilation_cache/cache_misses")
    out["warnings"] = [str(w.message) for w in caught]
    print(json.dumps(out))
"""


def run(cache, platforms=("ipu",), prelude=""):
    code = PROGRAM.format(cache=str(cache), platforms=tuple(platforms), prelude=prelude)
    return json.loads(run_python(code, timeout=300).stdout.splitlines()[-1])


# A process whose compiler is unusable: only a cache hit can give it an executable.
NO_COMPILING = """
    from jax_ipu.compiler import driver, numerics
    def refuse(*args, **kwargs):
        raise AssertionError("compiled although the program is in the cache")
    driver.judge_program = refuse
    numerics.build = refuse
"""


def test_a_second_process_loads_the_program_and_its_report_from_the_cache(tmp_path):
    first = run(tmp_path)
    second = run(tmp_path, prelude=NO_COMPILING)
    assert (first["hits"], second["hits"]) == (0, 1)
    assert second["ipu"]["values"] == first["ipu"]["values"]
    assert second["ipu"]["report"] == first["ipu"]["report"]
    assert second["ipu"]["report"]["cycles"]["total"] > 0


def test_cpu_programs_stay_cached_when_ipu_compiles_first(tmp_path):
    first = run(tmp_path, platforms=("ipu", "cpu"))
    second = run(tmp_path, platforms=("ipu", "cpu"))
    assert (first["misses"], first["hits"]) == (2, 0)
    assert second["hits"] == 2  # the ipu and the cpu program
    assert second["cpu"]["values"] == first["cpu"]["values"] == first["ipu"]["values"]


@pytest.mark.parametrize("damage", ["corrupt", "stale"])
def test_a_bad_entry_is_compiled_again_with_a_warning(tmp_path, damage):
    if damage == "corrupt":
        run(tmp_path)
        for entry in tmp_path.glob("jit_step*"):
            data = bytearray(entry.read_bytes())
            data[len(data) // 2:len(data) // 2 + 64] = bytes(64)
            entry.write_bytes(bytes(data))
    else:  # written by another jax-ipu build under the same key
        run(tmp_path, prelude="""
    from jax_ipu.runtime.client import live_clients
    jax.devices("ipu")
    live_clients()[0].build = "0.0.1+another-build"
""")
    again = run(tmp_path)
    assert again["hits"] == 0
    assert any("Error reading persistent compilation cache entry" in w
               for w in again["warnings"]), again["warnings"]
    fresh = run(tmp_path / "fresh")
    assert again["ipu"] == fresh["ipu"]


def test_a_planted_pickle_in_the_cache_is_refused_without_running(tmp_path):
    """An entry rewritten to hold a pickle that creates a file when loaded (behind the header
    format 1 accepted, with a correct checksum): refused, nothing runs, compiled afresh."""
    from jax._src import compilation_cache

    from tests.test_serialized import old_format_payload

    cache, planted = tmp_path / "cache", tmp_path / "planted"
    first = run(cache)
    entries = list(cache.glob("jit_step*"))
    assert entries
    for entry in entries:
        data = compilation_cache.decompress_executable(entry.read_bytes())
        executable, time = compilation_cache.extract_executable_and_time(data)
        metadata = executable[:executable.index(b"JAX-IPU EXECUTABLE")]  # jaxlib's own
        entry.write_bytes(compilation_cache.compress_executable(
            compilation_cache.combine_executable_and_time(
                metadata + old_format_payload(planted), time)))
    again = run(cache)
    assert not planted.exists()
    assert again["hits"] == 0
    assert any("Error reading persistent compilation cache entry" in w
               and "of format 1, not 3" in w for w in again["warnings"]), again["warnings"]
    assert again["ipu"] == first["ipu"]


def test_serialize_executable_round_trips_on_ipu():
    ipu = jax.devices("ipu")[0]
    x = jax.device_put(np.arange(12, dtype=np.float32).reshape(3, 4), ipu)
    compiled = jax.jit(lambda a: (jnp.sin(a) @ a.T, a.sum())).lower(x).compile()
    payload, in_tree, out_tree = serialize_executable.serialize(compiled)
    loaded = serialize_executable.deserialize_and_load(payload, in_tree, out_tree,
                                                       backend="ipu")
    for got, want in zip(loaded(x), compiled(x), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert jax_ipu.report(loaded).to_dict() == jax_ipu.report(compiled).to_dict()
    assert loaded(x)[0].devices() == {ipu}


def test_a_foreign_blob_is_refused_with_a_clear_error():
    on_cpu = jax.device_put(np.ones(3, np.float32), jax.devices("cpu")[0])
    payload, in_tree, out_tree = serialize_executable.serialize(
        jax.jit(lambda a: a + 1).lower(on_cpu).compile())
    with pytest.raises(Exception, match="not a serialized jax-ipu executable"):
        serialize_executable.deserialize_and_load(payload, in_tree, out_tree, backend="ipu")


def test_the_cache_key_changes_with_every_setting_the_model_judges_by():
    code = "import jax; print(jax.devices('ipu')[0].client.platform_version)"
    versions = {
        run_python(code, env=env).stdout.strip()
        for env in ({}, {"JAX_IPU_AVAILABLE_MEMORY_PROPORTION": "0.3"},
                    {"JAX_IPU_MODEL_NUM_TILES": "64"}, {"JAX_IPU_MODEL_VERSION": "ipu21"},
                    {"POPLAR_ENGINE_OPTIONS": '{"debug.allowOutOfMemory": "true"}'})}
    assert len(versions) == 5
    assert all("jax-ipu 0.1.0+" in v for v in versions)
