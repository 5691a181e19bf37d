"""Compiling residual chains, ipu (with the IPU Model's judgement) against jax's CPU backend.

`a = a + jnp.cos(a)` repeated n times (n=22 and n=200), and 12 stacked jax.nn.gelu: the shape of
every residual network, whose fusion DAG has exponentially many paths (issue 29 item 4)."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def residual(n: int) -> Callable[[Any], Any]:
    def chain(a: Any) -> Any:
        for _ in range(n):
            a = a + jnp.cos(a)
        return a
    return chain


def gelus(n: int) -> Callable[[Any], Any]:
    def stack(a: Any) -> Any:
        for _ in range(n):
            a = jax.nn.gelu(a)
        return a
    return stack


def compile_s(fn: Callable[[Any], Any], size: int, device: Any) -> float:
    """Wall seconds of compiling `fn` on float32[size] for `device` (a size never compiled)."""
    x = jax.device_put(np.ones(size, np.float32), device)
    lowered = jax.jit(fn).lower(x)
    start = time.perf_counter()
    lowered.compile()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)
    devices = {p: jax.devices(p)[0] for p in ("ipu", "cpu")}
    programs = {"residual n=22": residual(22), "residual n=200": residual(200),
                "12 x gelu": gelus(12)}
    for device in devices.values():
        compile_s(residual(2), 7, device)  # the first compile of a process sets things up
    size = 1024
    print(f"jax {jax.__version__}, float32[~1024], median of {args.rounds} compiles each")
    for name, fn in programs.items():
        times: dict[str, list[float]] = {p: [] for p in devices}
        for _ in range(args.rounds):
            for platform, device in devices.items():
                size += 1  # a new shape: nothing cached
                times[platform].append(compile_s(fn, size, device))
        ipu, cpu = (statistics.median(times[p]) for p in ("ipu", "cpu"))
        print(f"  {name:16s} ipu {ipu:.3f} s, cpu {cpu:.3f} s, ratio {ipu / cpu:.2f}")


if __name__ == "__main__":
    main()
