"""Compile time of long chains of small ops on ipu against cpu: the model's cost per op.

A chain of n steps `x = x[::-1] + 1` (a view and an elementwise op over it, issue 18) and of
n reversals with nothing between them, each compiled fresh for several n, so that the time per
op shows whether the model's cost grows linearly with the program."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import jax
import numpy as np


def reverse_add(n: int) -> Callable:
    def f(x):
        for _ in range(n):
            x = x[::-1] + 1
        return x
    return f


def reverses(n: int) -> Callable:
    def f(x):
        for _ in range(n):
            x = x[::-1]
        return x * 2
    return f


def compile_seconds(make: Callable[[int], Callable], n: int, device) -> float:
    x = jax.device_put(np.arange(1000, dtype=np.float32), device)
    start = time.perf_counter()
    jax.jit(make(n)).lower(x).compile()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, nargs="+", default=[250, 500, 1000, 2000])
    args = parser.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)
    devices = {"ipu": jax.devices("ipu")[0], "cpu": jax.devices("cpu")[0]}
    for name, make in (("x = x[::-1] + 1", reverse_add), ("x = x[::-1]", reverses)):
        print(f"chain of {name!r}:")
        for n in args.steps:
            ipu, cpu = (compile_seconds(make, n, d) for d in devices.values())
            print(f"  {n:>5} steps: ipu {ipu:6.2f} s ({ipu / n * 1e3:5.2f} ms a step), "
                  f"cpu {cpu:6.2f} s, ipu/cpu {ipu / cpu:4.2f}")


if __name__ == "__main__":
    main()
