"""Messages a user meets when something is refused: one clear text each, at the user's line, with
advice that fits (issue 29, "Messages")."""

from __future__ import annotations

import json

from tests._subprocess import run_python


def test_a_memory_of_no_capacity_gives_no_advice_to_delete_arrays():
    """Before: an ipu1 (no Streaming Memory) advised deleting and donating arrays."""
    proc = run_python("""
        import jax, numpy as np
        ipu = jax.devices("ipu")[0]
        pinned = jax.sharding.SingleDeviceSharding(ipu, memory_kind="pinned_host")
        try:
            jax.device_put(np.ones(4, np.float32), pinned)
        except Exception as e:
            print(e)
    """, env={"JAX_IPU_MODEL_VERSION": "ipu1"})
    assert "an ipu1 has no Streaming Memory (memory kind pinned_host)" in proc.stdout
    assert "Keep them in host memory (memory_kind='unpinned_host') or on cpu" in proc.stdout
    assert "Delete arrays" not in proc.stdout and "donate" not in proc.stdout


def test_an_eager_op_refusal_is_printed_without_jax_frames():
    """Before: about 30 lines of jax-internal frames came before the message."""
    proc = run_python("""
        import jax.numpy as jnp
        jnp.ones(4, dtype=jnp.bfloat16)
    """, check=False)
    assert proc.returncode == 1
    assert 'File "<string>", line 3, in <module>' in proc.stderr
    assert "ipu2 has no bfloat16" in proc.stderr
    assert "jax/_src/core.py" not in proc.stderr and "dispatch.py" not in proc.stderr
    assert proc.stderr.count('  File "') <= 2, proc.stderr


def test_out_of_memory_names_a_constants_source_line_and_an_unwritable_report_once(tmp_path):
    """Before: a closed-over constant was listed at the call's line, and each program whose
    report could not be written printed a traceback."""
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    env = {"JAX_IPU_MODEL_NUM_TILES": "16",
           "POPLAR_ENGINE_OPTIONS": json.dumps({"autoReport.all": "true",
                                                "autoReport.directory": str(blocked / "r")})}
    proc = run_python("""
        import jax, jax.numpy as jnp, numpy as np
        table = np.ones((2048, 1024), np.float32)  # 8 MiB: more than 16 tiles hold

        def f(x):
            return x + table  # line 6

        x = jax.device_put(np.ones(1024, np.float32), jax.devices("ipu")[0])
        for k in range(3):
            jax.jit(lambda a, k=k: a * k)(x).block_until_ready()
        try:
            jax.jit(f)(x)
        except Exception as e:
            print(e)
    """, env=env)
    assert "bytes  constant [constants] at <string>:6 (f)" in proc.stdout, proc.stdout
    assert proc.stderr.count("could not write the IPU Model report") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
