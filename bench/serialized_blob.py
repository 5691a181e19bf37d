"""Time to write and read back the serialized executable of a real program (what jax's
compilation cache stores and loads for ipu): runtime/serialized.py over runtime/codec.py.

The program is bench/compile_time.py's 12-layer transformer training step; medians of 5."""

from __future__ import annotations

import statistics
import time

import jax
import numpy as np
from compile_time import BATCH, LAYERS, SEQ, VOCAB, init, step

import jax_ipu  # noqa: F401 - registers the platform's flags
from jax_ipu.runtime import serialized
from jax_ipu.runtime.client import find_executable, live_clients


def _median_seconds(work, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ipu = jax.devices("ipu")[0]
    rng = np.random.default_rng(0)
    params = jax.device_put(init(rng, LAYERS), ipu)
    momentum = jax.tree.map(lambda a: a * 0, params)
    tokens = jax.device_put(rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32), ipu)
    compiled = jax.jit(step).lower(params, momentum, tokens).compile()
    exe = find_executable(compiled.runtime_executable().fingerprint.decode())
    client = live_clients()[0]
    data = client.serialize(exe)
    dump = _median_seconds(lambda: client.serialize(exe))
    load = _median_seconds(lambda: serialized.loads(data, client.build))
    ops = sum(1 for _ in exe.program.walk())
    print(f"{LAYERS}-layer transformer step ({ops} ops, {len(exe.report.ops)} report rows): "
          f"blob {len(data) / 1e6:.2f} MB, write {dump * 1e3:.0f} ms, read {load * 1e3:.0f} ms "
          "(median of 5)")


if __name__ == "__main__":
    main()
