"""Compiling a small new program, ipu (with the IPU Model's judgement) against jax's CPU backend.

a*2+1 on float32[n], a new n for every compile (what every eager op's first call and every test
pays); the persistent cache is off. Each round compiles --programs programs on each platform,
alternately; the ratio is of the medians of the rounds' medians."""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from typing import Any

import jax
import numpy as np

_sizes = itertools.count(8)


def compile_ms(device: Any) -> float:
    """Wall milliseconds of compiling a program never compiled before for `device`."""
    x = jax.device_put(np.ones(next(_sizes), np.float32), device)
    lowered = jax.jit(lambda a: a * 2 + 1).lower(x)
    start = time.perf_counter()
    lowered.compile()
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--programs", type=int, default=20)
    args = parser.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)
    devices = {p: jax.devices(p)[0] for p in ("ipu", "cpu")}
    for device in devices.values():
        compile_ms(device)  # the first compile of a process sets things up
    rounds: dict[str, list[float]] = {p: [] for p in devices}
    for _ in range(args.rounds):
        times: dict[str, list[float]] = {p: [] for p in devices}
        for _ in range(args.programs):
            for platform, device in devices.items():
                times[platform].append(compile_ms(device))
        for platform in devices:
            rounds[platform].append(statistics.median(times[platform]))
    ipu, cpu = rounds["ipu"], rounds["cpu"]
    print(f"jax {jax.__version__}, a*2+1 on float32[n], {args.rounds} rounds of "
          f"{args.programs} new programs per platform")
    print(f"  ipu {statistics.median(ipu):.1f} ms, cpu {statistics.median(cpu):.1f} ms, ratio "
          f"{statistics.median(ipu) / statistics.median(cpu):.2f}")
    print("  ratio per round: " + " ".join(f"{i / c:.2f}" for i, c in zip(ipu, cpu, strict=True)))


if __name__ == "__main__":
    main()
