"""The MLIR contexts compiles borrow: reused while small, one compile at a time, then retired.

A context keeps every type and constant it has read, so reuse is bounded by bytes of programs."""

from __future__ import annotations

import threading

import jax
import numpy as np

from jax_ipu.compiler import program


def test_a_context_is_reused_until_it_has_read_its_share():
    with program.lent_context(1000) as first:
        pass
    with program.lent_context(program._RETIRE_BYTES) as again:
        assert again is first  # reused: its dialects are loaded already
    with program.lent_context(1000) as fresh:
        assert fresh is not first  # the first retired once it had read 64 MiB and more


def test_concurrent_compiles_never_share_a_context():
    both_inside, held = threading.Barrier(2), []

    def borrow():
        with program.lent_context(10) as context:
            held.append(context)
            both_inside.wait()  # the two compiles hold their contexts at once

    threads = [threading.Thread(target=borrow) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(held) == 2 and held[0] is not held[1]


def test_programs_compiled_one_after_another_match_cpu():
    ipu, cpu = jax.devices("ipu")[0], jax.devices("cpu")[0]
    for n in (3, 5, 7):  # new programs, compiled in the contexts earlier compiles used
        f = jax.jit(lambda a: jax.numpy.cumsum(a * a)[::-1])
        host = np.arange(n, dtype=np.float32)
        np.testing.assert_array_equal(np.asarray(f(jax.device_put(host, ipu))),
                                      np.asarray(f(jax.device_put(host, cpu))))
