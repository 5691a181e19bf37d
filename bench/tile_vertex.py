"""Wall-clock cost of a custom C++ vertex call (jax_ipu.tile, run per tile through XLA FFI)
against the same op in plain JAX, on ipu and cpu: y = x * 2 + 1 on each of T tiles' rows.

Run: .venv/bin/python bench/tile_vertex.py [--tiles 1472] [--size 256] [--calls 200]"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

from jax_ipu.tile import declare_vertex, tile_map, tile_put_sharded

SOURCE = r"""
#include <poplar/Vertex.hpp>
template <typename T>
class Axpb : public poplar::Vertex {
 public:
  poplar::Input<poplar::Vector<T>> x;
  poplar::Output<poplar::Vector<T>> y;
  bool compute() {
    for (unsigned i = 0; i < x.size(); ++i) y[i] = x[i] * T(2) + T(1);
    return true;
  }
};
"""


@declare_vertex("Axpb<{x}>", source=SOURCE)
def axpb(x):
    return {"y": x}, {}, {}, 2 * x.shape[0]


def median_us(fn, x, calls: int) -> float:
    jax.block_until_ready(fn(x))
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(fn(x))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tiles", type=int, default=1472)
    parser.add_argument("--size", type=int, default=256, help="float32 elements per tile")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    tiles = tuple(range(args.tiles))
    data = np.random.default_rng(0).standard_normal((args.tiles, args.size)).astype(np.float32)
    vertex = jax.jit(lambda x: tile_map(axpb, tile_put_sharded(x, tiles)).array)
    plain = jax.jit(lambda x: x * 2 + 1)
    for platform in ("ipu", "cpu"):
        x = jax.device_put(data, jax.devices(platform)[0])
        np.testing.assert_allclose(np.asarray(vertex(x)), np.asarray(plain(x)), rtol=1e-6)
        v, p = median_us(vertex, x, args.calls), median_us(plain, x, args.calls)
        print(f"{platform}: custom vertex {v:8.1f} us, plain jax {p:8.1f} us per call "
              f"({v / p:.2f}x) for {args.tiles} tiles x {args.size} float32")


if __name__ == "__main__":
    main()
