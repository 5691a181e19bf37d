"""A program's report folder is named by a fingerprint of a canonical form of what jax sent, so
the same program compiled in another process writes the same folder (issue 29, item 9)."""

from __future__ import annotations

import json

from jax_ipu.compiler.fingerprint import fingerprint
from jax_ipu.protowriter import Writer
from tests._subprocess import run_python

SCRIPT = """
    import os, jax, jax.numpy as jnp, numpy as np
    ipu = jax.devices("ipu")[0]
    step = jax.jit(lambda w, x: jnp.tanh(x @ w).sum())
    step(*jax.device_put((np.ones((16, 8), np.float32), np.ones((4, 16), np.float32)), ipu))
    print(sorted(os.listdir({folder!r})))
"""


def test_two_processes_write_the_same_report_folder(tmp_path):
    """Before: jit_<lambda>_<8 hex> differed per process (a protobuf map in the compile options
    is serialized in another order in each)."""
    env = {"POPLAR_ENGINE_OPTIONS": json.dumps({"autoReport.all": "true",
                                                "autoReport.directory": str(tmp_path)})}
    names = [run_python(SCRIPT.format(folder=str(tmp_path)), env=env).stdout.strip()
             for _ in range(2)]
    assert names[0] == names[1] and names[0].startswith("['jit__lambda_"), names


def _options(entries, value=b"1"):
    debug = Writer()
    for key, val in entries:
        debug.message(357, Writer().raw(1, key).raw(2, val))
    debug.integer(10, 7).raw(20, value)
    build = Writer().integer(1, 2).message(3, debug)
    return bytes(Writer().message(3, build).integer(4, 1))


def test_the_fingerprint_ignores_the_order_of_map_entries_only():
    entries = [(b"gpus_per_node", b"-1"), (b"chunk_size_bytes", b"0"), (b"chunk_prep_us", b"5")]
    first = fingerprint(b"code", _options(entries))
    assert fingerprint(b"code", _options(entries[::-1])) == first
    assert fingerprint(b"code", _options(entries[:2])) != first
    assert fingerprint(b"code", _options(entries, value=b"2")) != first
    assert fingerprint(b"code2", _options(entries)) != first
