"""The 2-D heat equation written three ways, as a JAX user would, and what the IPU Model makes of
each: plain slices with `.at[].set`, plain slices with `jnp.pad`, and blocked, one band of rows
per tile with jax_ipu.tile (tile_heat_equation.py's C++ stencil vertex, one per tile). All three
compute the same floats in the same order, so their grids agree bit for bit; the model says what
each costs on the chip.

The first two carry the grid with its zero border through a donated fori_loop: XLA gives the
loop's state the donated argument's buffer (the report says "aliased with parameter 0 through the
loop"), so the loop holds one grid and the step's temporaries, never a third copy.

The blocked form is faster because its layout is the stencil's: each tile owns a band of rows and
one vertex a tile does the whole step on them in one compute set; only each band's two halo rows
cross the exchange. The plain forms' step is a fused expression over shifted slices of a grid
the tile mapping spread without regard to its rows, run element by element, with the elements at
each tile's edges fetched from other tiles. `.at[].set` with constant indices is a static copy
in Poplar (XLA's backend makes it one), and the model costs it as one: an in-place copy, on-tile
where the layouts agree, so the first two forms cost about the same."""

from __future__ import annotations

import argparse
import time

import _common
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from tile_heat_equation import initial_grid, vertex_step

import jax_ipu
from jax_ipu.tile import tile_put_sharded

FORMS = ("at_set", "pad", "blocked")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    _common.add_common_args(parser)
    parser.add_argument("--tiles", type=int, default=0,
                        help="tiles the blocked form splits the grid over (0: every tile)")
    parser.add_argument("--rows", type=int, default=4, help="grid rows on each tile")
    parser.add_argument("--cols", type=int, default=256, help="grid columns")
    parser.add_argument("--steps", type=int, default=100, help="time steps")
    parser.add_argument("--alpha", type=float, default=0.2, help="diffusion number (< 0.25)")
    return parser.parse_args(argv)


def new_interior(p: jax.Array, alpha: np.float32) -> jax.Array:
    """One explicit step of the interior of a grid `p` with its zero border, from plain slices
    (the same float operations in the same order as tile_heat_equation.plain_step)."""
    u = p[1:-1, 1:-1]
    up, down = p[:-2, 1:-1], p[2:, 1:-1]
    left, right = p[1:-1, :-2], p[1:-1, 2:]
    laplacian = ((up + down) + (left + right)) - 4.0 * u
    return u + alpha * laplacian


def at_set_step(p: jax.Array, alpha: np.float32) -> jax.Array:
    """The step written into the interior of the bordered grid with `.at[].set`."""
    return p.at[1:-1, 1:-1].set(new_interior(p, alpha))


def pad_step(p: jax.Array, alpha: np.float32) -> jax.Array:
    """The same step with the border put back by `jnp.pad`."""
    return jnp.pad(new_interior(p, alpha), 1)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = _common.device_for(args.platform)
    from jax_ipu.tile.validate import chip_tiles

    n = args.tiles or chip_tiles()[0]
    tiles = tuple(range(n))
    height, width = n * args.rows, args.cols
    alpha = np.float32(args.alpha)
    block = (args.rows, width)
    grid = initial_grid(height, width)

    def plain_solver(step):
        def solve(p0: jax.Array) -> jax.Array:
            return lax.fori_loop(0, args.steps, lambda _, p: step(p, alpha), p0)
        return solve

    def blocked_solver(u0: jax.Array) -> jax.Array:
        u = tile_put_sharded(u0.reshape(n, *block), tiles)
        u = lax.fori_loop(0, args.steps, lambda _, v: vertex_step(v, alpha), u)
        return u.array.reshape(height, width)

    solvers = {"at_set": (plain_solver(at_set_step), np.pad(grid, 1)),
               "pad": (plain_solver(pad_step), np.pad(grid, 1)),
               "blocked": (blocked_solver, grid)}
    results, figures = {}, {}
    for name in FORMS:
        solver, start_grid = solvers[name]
        # The grid is donated: the loop's state takes over its buffer.
        jitted = jax.jit(solver, donate_argnums=0)
        lowered = jitted.lower(jax.ShapeDtypeStruct(start_grid.shape, start_grid.dtype))
        compiled = lowered.compile()
        begin = time.perf_counter()
        out = np.asarray(compiled(jax.device_put(start_grid, device)))
        wall = time.perf_counter() - begin
        results[name] = out if name == "blocked" else out[1:-1, 1:-1]
        report = jax_ipu.report(compiled if args.platform == "ipu" else lowered)
        mem = report.memory
        figures[name] = (report.cycles.total, mem.max_tile_bytes)
        print(f"== {name}: {args.steps} steps on a {height}x{width} grid: "
              f"{wall * 1e3:.1f} ms on the host")
        print(f"  model: {report.cycles.total:,.0f} cycles (compute {report.cycles.compute:,.0f}, "
              f"exchange {report.cycles.exchange:,.0f}, sync {report.cycles.sync:,.0f}), "
              f"{report.seconds * 1e6:,.1f} us on {report.target.version}; busiest tile "
              f"{mem.max_tile} holds {mem.max_tile_bytes:,} bytes")
        for c in mem.top_contributors[:4]:
            print(f"    {c.bytes_on_tile:>8,} bytes  {c.name} [{c.category}]")
    same = all(np.array_equal(results[name], results["pad"]) for name in FORMS)
    print(f"== at_set, pad and blocked grids equal bit for bit: {same}")
    at_set, pad, blocked = (figures[name] for name in FORMS)
    print(f"== cycles: at_set / pad {at_set[0] / pad[0]:.2f}x, pad / blocked "
          f"{pad[0] / blocked[0]:.2f}x; busiest tile: at_set / pad {at_set[1] / pad[1]:.2f}x")
    print("   The blocked form lays the grid out as the stencil reads it: a band of rows per "
          "tile, one vertex a tile for the whole step, and only two halo rows per tile cross "
          "the exchange; the plain forms run a fused expression over shifted slices, fetching "
          "the elements at each tile's edges from other tiles.")
    _common.summary(
        "heat_equation", platform=args.platform, tiles=n, steps=args.steps,
        bit_equal=int(same), checksum=float(results["pad"].sum()),
        **{f"{name}_cycles": int(figures[name][0]) for name in FORMS},
        **{f"{name}_max_tile_bytes": figures[name][1] for name in FORMS})


if __name__ == "__main__":
    main()
