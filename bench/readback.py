"""Calling a tiny program and reading its result back, ipu against jax's CPU backend.

`np.asarray(f(x))` for f = a*2+1 on float32[8]: the `float(loss)` of every training loop. Each
round takes the median of many calls on ipu, then on cpu; the ratio is of the medians of the
rounds' medians. The call and the read are also timed apart."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np


def median_us(fn: Callable[[], Any], calls: int) -> float:
    for _ in range(calls // 10):
        fn()  # warm up
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def read_us(f: Callable[[Any], Any], x: Any, calls: int) -> float:
    """Median time of np.asarray on a result just returned (the call itself not counted)."""
    times = []
    for _ in range(calls):
        y = f(x)
        start = time.perf_counter()
        np.asarray(y)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5000)
    args = parser.parse_args()
    f = jax.jit(lambda a: a * 2 + 1)
    xs = {p: jax.device_put(np.ones(8, np.float32), jax.devices(p)[0]) for p in ("ipu", "cpu")}
    cases = {
        "call+read": lambda x: (lambda: np.asarray(f(x))),
        "call": lambda x: (lambda: f(x)),
    }
    rounds: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for name, case in cases.items():
            for platform, x in xs.items():
                rounds.setdefault((name, platform), []).append(median_us(case(x), args.calls))
        for platform, x in xs.items():
            rounds.setdefault(("read", platform), []).append(read_us(f, x, args.calls))
    print(f"jax {jax.__version__}, a*2+1 on float32[8], {args.rounds} rounds of {args.calls}")
    print(f"{'case':<12}{'ipu':>10}{'cpu':>10}{'ratio':>8}   ratio per round")
    for name in (*cases, "read"):
        ipu, cpu = rounds[(name, "ipu")], rounds[(name, "cpu")]
        per_round = " ".join(f"{i / c:.2f}" for i, c in zip(ipu, cpu, strict=True))
        print(f"{name:<12}{statistics.median(ipu):>8.1f}us{statistics.median(cpu):>8.1f}us"
              f"{statistics.median(ipu) / statistics.median(cpu):>8.2f}   {per_round}")


if __name__ == "__main__":
    main()
