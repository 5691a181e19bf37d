"""What building XLA:CPU beside the model's judgement buys: one process compiles the transformer
step of bench/compile_time.py on ipu with XLA:CPU built after the judgement, on ipu with the two
overlapped (the default), and on cpu, in alternating rounds; medians and ratios to cpu.

The overlap hides the model's reading and judgement behind XLA:CPU's build only where a core
is free for it: on a host whose cores are all busy the two take turns."""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compile_time import LAYERS, compile_seconds  # noqa: E402

from jax_ipu.compiler import driver  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layers", type=int, default=LAYERS)
    args = parser.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)
    ipu, cpu = jax.devices("ipu")[0], jax.devices("cpu")[0]
    overlap_from = driver.OVERLAP_MIN_BYTES
    runs = {"ipu, built after the judgement": (ipu, 1 << 62),
            "ipu, overlapped": (ipu, overlap_from), "cpu": (cpu, overlap_from)}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, (device, threshold) in runs.items():
            driver.OVERLAP_MIN_BYTES = threshold
            times[name].append(compile_seconds(device, args.layers)[1])
    driver.OVERLAP_MIN_BYTES = overlap_from
    cpu_s = statistics.median(times["cpu"])
    print(f"{args.layers}-layer transformer step, median of {args.rounds} alternating compiles")
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(f"  {name}: {median:.2f} s, {median / cpu_s:.2f}x cpu")


if __name__ == "__main__":
    main()
