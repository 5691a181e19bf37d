"""The 2-D heat equation on a grid split over the IPU's tiles, written three ways: tile by tile
with jax_ipu.tile (each tile owns a band of rows; halo rows cross to the neighbouring tiles with
tile_gather every step, inside a fori_loop), once with lax primitives as vertices and once with
one C++ stencil vertex per tile, and in plain jax.numpy. All compute the same floats in the same
order, so their grids agree bit for bit; the IPU Model says what each costs.

Each tile_map of a lax primitive is a compute set of its own (a vertex launch and a sync), so
the lax version pays them nine times a step, where the plain version is one fused pass; the C++
vertex does the whole step in one compute set.

On cpu the same tile program runs as plain vmaps; the model's figures come from judging the
same programs, so they match the ipu run's."""

from __future__ import annotations

import argparse
import time

import _common
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jax_ipu
from jax_ipu.model.targets import LOCAL_BYTES_PER_TILE_CYCLE, VERTEX_OVERHEAD_CYCLES
from jax_ipu.tile import (
    TileShardedArray,
    declare_vertex,
    tile_constant_replicated,
    tile_gather,
    tile_map,
    tile_put_sharded,
)

# One explicit step on a tile's band of rows, its halo rows above and below, zero columns beyond
# the edges: the same float operations in the same order as plain_step.
STENCIL = r"""
#include <cmath>
#include <poplar/Vertex.hpp>
using namespace poplar;

class HeatStep : public Vertex {
 public:
  Vector<Input<Vector<float>>> u;     // (rows, cols): this tile's band
  Input<Vector<float>> above;         // the row above the band (the upper tile's last)
  Input<Vector<float>> below;         // the row below the band (the lower tile's first)
  Vector<Output<Vector<float>>> out;  // (rows, cols)
  float alpha;

  bool compute() {
    const unsigned rows = u.size(), cols = u[0].size();
    for (unsigned r = 0; r < rows; ++r) {
      for (unsigned c = 0; c < cols; ++c) {
        const float up = r == 0 ? above[c] : u[r - 1][c];
        const float down = r + 1 == rows ? below[c] : u[r + 1][c];
        const float left = c == 0 ? 0.0f : u[r][c - 1];
        const float right = c + 1 == cols ? 0.0f : u[r][c + 1];
        const float laplacian = ((up + down) + (left + right)) - 4.0f * u[r][c];
        // XLA:CPU contracts u + alpha * laplacian into one fused multiply-add: so does this
        // codelet, so that its grid agrees bit for bit with the XLA versions.
        out[r][c] = std::fma(alpha, laplacian, u[r][c]);
      }
    }
    return true;
  }
};
"""
# The vertex reads five floats and writes one per element: 24 bytes at the tile's 8 bytes of
# loads and stores a cycle (the model's local-memory rate, C-3), plus a vertex launch.
STENCIL_BYTES_PER_ELEMENT = 6 * 4


@declare_vertex("HeatStep", source=STENCIL)
def heat_step(u, above, below):
    """One tile's band and halo rows in; the new band out; no constants or temporaries."""
    elements = u.shape[0] * u.shape[1]
    return {"out": u}, {}, {}, VERTEX_OVERHEAD_CYCLES + \
        elements * STENCIL_BYTES_PER_ELEMENT / LOCAL_BYTES_PER_TILE_CYCLE


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    _common.add_common_args(parser)
    parser.add_argument("--tiles", type=int, default=0,
                        help="tiles to split the grid over (0: every tile of the chip)")
    parser.add_argument("--rows", type=int, default=4, help="grid rows on each tile")
    parser.add_argument("--cols", type=int, default=256, help="grid columns")
    parser.add_argument("--steps", type=int, default=100, help="time steps")
    parser.add_argument("--alpha", type=float, default=0.2, help="diffusion number (< 0.25)")
    return parser.parse_args(argv)


def plain_step(u: jax.Array, alpha: float) -> jax.Array:
    """One explicit step with zero (Dirichlet) boundaries, in plain jax.numpy."""
    padded = jnp.pad(u, 1)
    up, down = padded[:-2, 1:-1], padded[2:, 1:-1]
    left, right = padded[1:-1, :-2], padded[1:-1, 2:]
    laplacian = ((up + down) + (left + right)) - 4.0 * u
    return u + alpha * laplacian


def halos(u: TileShardedArray) -> tuple[TileShardedArray, TileShardedArray]:
    """Each tile's halo rows: its upper neighbour's last row and its lower neighbour's first
    row (a zero row past the grid's edge, which every tile holds as a constant)."""
    n, rows, cols = u.shape
    tiles = u.tiles
    zero_row = jnp.zeros((1, cols), u.dtype)
    last = jnp.concatenate([u.array[:, rows - 1, :], zero_row])
    first = jnp.concatenate([u.array[:, 0, :], zero_row])
    up_halo = tile_gather(last, [n] + list(range(n - 1)), tiles).reshape(n, 1, cols)
    down_halo = tile_gather(first, list(range(1, n)) + [n], tiles).reshape(n, 1, cols)
    return up_halo, down_halo


def tile_step(u: TileShardedArray, consts: dict[str, TileShardedArray]) -> TileShardedArray:
    """The same step tile by tile with lax primitives as vertices: u is (tiles, rows, cols), a
    band of rows per tile."""
    n, rows, cols = u.shape
    up_halo, down_halo = halos(u)
    band = tile_map(lax.concatenate_p, up_halo, u, down_halo, dimension=0)
    padded = tile_map(lax.pad_p, band, consts["zero"], padding_config=((0, 0, 0), (1, 1, 0)))
    up = padded[:, 0:rows, 1:cols + 1]
    down = padded[:, 2:rows + 2, 1:cols + 1]
    left = padded[:, 1:rows + 1, 0:cols]
    right = padded[:, 1:rows + 1, 2:cols + 2]
    vertical = tile_map(lax.add_p, up, down)
    horizontal = tile_map(lax.add_p, left, right)
    four_u = tile_map(lax.mul_p, consts["four"], u)
    laplacian = tile_map(lax.sub_p, tile_map(lax.add_p, vertical, horizontal), four_u)
    return tile_map(lax.add_p, u, tile_map(lax.mul_p, consts["alpha"], laplacian))


def vertex_step(u: TileShardedArray, alpha: np.float32) -> TileShardedArray:
    """The same step with one C++ vertex per tile."""
    up_halo, down_halo = halos(u)
    n, _, cols = u.shape
    return tile_map(heat_step, u, up_halo.reshape(n, cols), down_halo.reshape(n, cols),
                    alpha=alpha)


def initial_grid(height: int, width: int) -> np.ndarray:
    grid = np.zeros((height, width), np.float32)
    grid[height // 4: height // 2, width // 4: width // 2] = 100.0
    return grid


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = _common.device_for(args.platform)
    from jax_ipu.tile.validate import chip_tiles

    n = args.tiles or chip_tiles()[0]
    tiles = tuple(range(n))
    height, width = n * args.rows, args.cols
    grid = jax.device_put(initial_grid(height, width), device)
    alpha = np.float32(args.alpha)
    block = (args.rows, width)

    def tile_solver(u0: jax.Array) -> jax.Array:
        consts = {"zero": tile_constant_replicated(np.float32(0), tiles),
                  "four": tile_constant_replicated(np.full(block, 4.0, np.float32), tiles),
                  "alpha": tile_constant_replicated(np.full(block, alpha, np.float32), tiles)}
        u = tile_put_sharded(u0.reshape(n, *block), tiles)
        u = lax.fori_loop(0, args.steps, lambda _, v: tile_step(v, consts), u)
        return u.array.reshape(height, width)

    def vertex_solver(u0: jax.Array) -> jax.Array:
        u = tile_put_sharded(u0.reshape(n, *block), tiles)
        u = lax.fori_loop(0, args.steps, lambda _, v: vertex_step(v, alpha), u)
        return u.array.reshape(height, width)

    def plain_solver(u0: jax.Array) -> jax.Array:
        return lax.fori_loop(0, args.steps, lambda _, v: plain_step(v, alpha), u0)

    results, figures = {}, {}
    solvers = (("tile", tile_solver), ("vertex", vertex_solver), ("plain", plain_solver))
    for name, solver in solvers:
        lowered = jax.jit(solver).lower(grid)
        compiled = lowered.compile()
        out = jax.block_until_ready(compiled(grid))
        start = time.perf_counter()
        out = jax.block_until_ready(compiled(grid))
        wall = time.perf_counter() - start
        results[name] = np.asarray(out)
        if name == "tile":
            _common.model_view(compiled, device, "the tile solver", args.plot)
        report = jax_ipu.report(compiled if args.platform == "ipu" else lowered)
        figures[name] = (report.cycles.total, report.memory.max_tile_bytes,
                         report.memory.max_tile)
        print(f"== {name}: {args.steps} steps on a {height}x{width} grid over {n} tiles: "
              f"{wall * 1e3:.1f} ms on the host")
        print(f"  model: {report.cycles.total:,.0f} cycles (compute "
              f"{report.cycles.compute:,.0f}, exchange {report.cycles.exchange:,.0f}, sync "
              f"{report.cycles.sync:,.0f}), {report.seconds * 1e6:,.1f} us on "
              f"{report.target.version}; busiest tile {report.memory.max_tile} holds "
              f"{report.memory.max_tile_bytes:,} bytes")
    same = all(np.array_equal(results[name], results["plain"]) for name in ("tile", "vertex"))
    print(f"== tile, vertex and plain grids equal bit for bit: {same}; heat left "
          f"{float(results['tile'].sum()):.6g} of {float(initial_grid(height, width).sum()):.6g}")
    _common.summary(
        "tile_heat_equation", platform=args.platform, tiles=n, steps=args.steps,
        bit_equal=int(same), checksum=float(results["tile"].sum()),
        **{f"{name}_cycles": int(figures[name][0]) for name, _ in solvers},
        **{f"{name}_max_tile_bytes": figures[name][1] for name, _ in solvers})


if __name__ == "__main__":
    main()
