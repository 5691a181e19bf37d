"""Compiling a small new program, ipu (with the IPU Model's judgement) against jax's CPU backend.

a*2+1 on float32[n], a new n for every compile (what every eager op's first call and every test
pays); the persistent cache is off. Each round compiles --programs programs on each platform,
alternately, and on ipu also with XLA:CPU's build after the judgement rather than beside it
(what the overlap buys); the ratio is of the medians of the rounds' medians."""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from typing import Any

import jax
import numpy as np

from jax_ipu.compiler import driver

_sizes = itertools.count(8)


def compile_ms(device: Any, overlap_from: int = driver.OVERLAP_MIN_BYTES) -> float:
    """Wall milliseconds of compiling a program never compiled before for `device`, overlapping
    XLA:CPU's build with the judgement for programs of `overlap_from` bytes or more."""
    x = jax.device_put(np.ones(next(_sizes), np.float32), device)
    lowered = jax.jit(lambda a: a * 2 + 1).lower(x)
    default, driver.OVERLAP_MIN_BYTES = driver.OVERLAP_MIN_BYTES, overlap_from
    try:
        start = time.perf_counter()
        lowered.compile()
        return (time.perf_counter() - start) * 1e3
    finally:
        driver.OVERLAP_MIN_BYTES = default


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--programs", type=int, default=20)
    args = parser.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)
    ipu, cpu = jax.devices("ipu")[0], jax.devices("cpu")[0]
    runs = {"ipu": (ipu, driver.OVERLAP_MIN_BYTES), "ipu, built after the judgement":
            (ipu, 1 << 62), "cpu": (cpu, driver.OVERLAP_MIN_BYTES)}
    for device, overlap_from in runs.values():
        compile_ms(device, overlap_from)  # the first compile of a process sets things up
    rounds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.programs):
            for name, (device, overlap_from) in runs.items():
                times[name].append(compile_ms(device, overlap_from))
        for name in runs:
            rounds[name].append(statistics.median(times[name]))
    print(f"jax {jax.__version__}, a*2+1 on float32[n], {args.rounds} rounds of "
          f"{args.programs} new programs per platform")
    cpu_ms = rounds["cpu"]
    for name, ms in rounds.items():
        print(f"  {name}: {statistics.median(ms):.1f} ms, ratio "
              f"{statistics.median(ms) / statistics.median(cpu_ms):.2f}; per round: "
              + " ".join(f"{i / c:.2f}" for i, c in zip(ms, cpu_ms, strict=True)))


if __name__ == "__main__":
    main()
