"""Dispatch cost of the ipu platform against jax's CPU backend, interleaved in one run.

Median wall time of a tiny jitted call and of 512x512 and 1024x1024 float32 matmuls."""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np


def median_seconds(fn, arg, calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn(arg).block_until_ready()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per case")
    args = parser.parse_args()
    devices = {"ipu": jax.devices("ipu")[0], "cpu": jax.devices("cpu")[0]}
    cases = {
        "tiny a*2+1": (jax.jit(lambda a: a * 2 + 1), np.ones(4, np.float32), 2000),
        "matmul 512": (jax.jit(lambda a: a @ a), np.ones((512, 512), np.float32), 60),
        "matmul 1024": (jax.jit(lambda a: a @ a), np.ones((1024, 1024), np.float32), 15),
    }
    print(f"jax {jax.__version__}, {args.rounds} interleaved rounds, median of each round's median")
    print(f"{'case':<14}{'ipu':>12}{'cpu':>12}{'ratio':>8}")
    for name, (fn, host, calls) in cases.items():
        placed = {p: jax.device_put(host, d) for p, d in devices.items()}
        for x in placed.values():
            fn(x).block_until_ready()
        rounds: dict[str, list[float]] = {p: [] for p in devices}
        for _ in range(args.rounds):
            for p, x in placed.items():
                rounds[p].append(median_seconds(fn, x, calls))
        ipu, cpu = (statistics.median(rounds[p]) for p in ("ipu", "cpu"))
        print(f"{name:<14}{ipu * 1e6:>10.1f}us{cpu * 1e6:>10.1f}us{ipu / cpu:>8.2f}")


if __name__ == "__main__":
    main()
