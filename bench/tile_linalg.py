"""The model's cycles for linear algebra on tiles (jax_ipu.tile.linalg) against jax.numpy's.

For each size: QR on tiles (a row of Q and of R^T per tile, Householder MultiVertex codelets)
against jnp.linalg.qr, and Jacobi eigh on tiles against jnp.linalg.eigh, both compiled for the
IPU Model; the figures are the model's cycles of one call (the report's total) and the busiest
tile's compute, plus the host wall time of one call."""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import jax_ipu
from jax_ipu.tile import linalg


def measure(fn, *args) -> tuple[float, float, float]:
    ipu = jax.devices("ipu")[0]
    placed = [jax.device_put(a, ipu) for a in args]
    compiled = jax.jit(fn).lower(*placed).compile()
    jax.block_until_ready(compiled(*placed))
    start = time.perf_counter()
    jax.block_until_ready(compiled(*placed))
    wall = time.perf_counter() - start
    report = jax_ipu.report(compiled)
    tiles = report.tiles or {}
    busiest = max(tiles.get("compute_cycles") or [0.0])
    return report.cycles.total, busiest, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--sweeps", type=int, default=5, help="Jacobi sweeps of ipu_eigh")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'op':<26}{'n':>5}{'model cycles':>14}{'busiest tile':>14}{'host ms':>10}")
    for n in args.sizes:
        x = rng.standard_normal((n, n)).astype(np.float32)
        x = (x + x.T) / 2
        signs = np.sign(np.diag(x)).astype(np.float32)
        rows = [("tile ipu_qr", measure(linalg.ipu_qr, x, signs)),
                ("jnp.linalg.qr", measure(jnp.linalg.qr, x)),
                (f"tile ipu_eigh ({args.sweeps} sweeps)",
                 measure(lambda x: linalg.ipu_eigh(x, num_iters=args.sweeps), x)),
                ("jnp.linalg.eigh", measure(jnp.linalg.eigh, x))]
        for name, (cycles, busiest, wall) in rows:
            print(f"{name:<26}{n:>5}{cycles:>14,.0f}{busiest:>14,.0f}{wall * 1e3:>10.1f}")


if __name__ == "__main__":
    main()
