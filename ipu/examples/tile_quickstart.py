"""A tour of jax_ipu.tile: data on named tiles, a lax primitive mapped over three tiles, a custom
C++ vertex with its cycle estimate, and cycle counts bracketing a region, with what the IPU
Model makes of each. On cpu the same program runs (vmaps, and the same compiled codelet)."""

from __future__ import annotations

import argparse

import _common
import jax
import numpy as np
from jax import lax

from jax_ipu.tile import (
    cycles_of,
    declare_vertex,
    ipu_cycle_count,
    ipu_cycle_count_overhead,
    tile_constant_replicated,
    tile_gather,
    tile_map,
    tile_put_replicated,
    tile_put_sharded,
)

# A codelet against the Poplar vertex API: y = x * scale + offset[0] on each tile.
AXPB = r"""
#include <poplar/Vertex.hpp>
using namespace poplar;

template <typename T>
class Axpb : public Vertex {
 public:
  Input<Vector<T>> x;
  Input<Vector<T>> offset;
  Output<Vector<T>> y;
  float scale;

  bool compute() {
    for (unsigned i = 0; i < x.size(); ++i) y[i] = x[i] * T(scale) + offset[0];
    return true;
  }
};
"""


@declare_vertex("Axpb<{x}>", source=AXPB)
def axpb(x):
    """One tile's x in; y out, a constant offset, no temporaries, about 2 cycles an element."""
    outputs = {"y": x}
    constants = {"offset": np.array([1.0], x.dtype)}
    return outputs, constants, {}, lambda x: 20 + 2 * x.shape[0]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    _common.add_common_args(parser, needs=["a C++17 compiler (g++) for the custom vertex"])
    parser.add_argument("--size", type=int, default=1024, help="elements on each tile")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = _common.device_for(args.platform)
    tiles = (0, 2, 5)
    rng = np.random.default_rng(args.seed)
    x = jax.device_put(rng.standard_normal((3, args.size)).astype(np.float32), device)
    w = jax.device_put(rng.standard_normal(args.size).astype(np.float32), device)

    def program(x: jax.Array, w: jax.Array):
        xs = tile_put_sharded(x, tiles)  # row i on tile tiles[i]
        ws = tile_put_replicated(w, tiles)  # a copy of w on each tile
        xs, start = ipu_cycle_count(xs)
        prod = tile_map(lax.mul_p, xs, ws)  # one vertex per tile
        total = tile_map(lax.reduce_sum_p, prod, axes=(0,))
        total, end = ipu_cycle_count(total)
        shifted = tile_gather(prod, [2, 0, 1], tiles)  # rows move between tiles
        out = tile_map(axpb, shifted, scale=0.5)  # the custom vertex
        ones = tile_constant_replicated(np.ones(4, np.float32), (7,))
        return total, out, start, end, ones

    compiled = jax.jit(program).lower(x, w).compile()
    total, out, start, end, ones = compiled(x, w)
    xn, wn = np.asarray(x), np.asarray(w)
    expect_total = (xn * wn).sum(axis=1)
    expect_out = (xn * wn)[[2, 0, 1]] * np.float32(0.5) + np.float32(1.0)
    error = max(float(np.abs(np.asarray(total.array) - expect_total).max()),
                float(np.abs(np.asarray(out.array) - expect_out).max()))
    print("== placement")
    print(f"  x on tiles {tiles}: {total.shape[0]} rows; w replicated: shape {(3, args.size)}; "
          f"constant on tile 7: {ones.shape}")
    print(f"== results: sum of x*w per tile {np.round(np.asarray(total.array), 3)}, "
          f"custom vertex output {out.shape}, largest error against numpy {error:.2e}")
    # A count includes its own read: take one read off for the work between (TessellateIPU's
    # idiom); off the IPU Model both counts are 0.
    counted = int(cycles_of(end.array)[0] - cycles_of(start.array)[0])
    if counted:
        counted -= ipu_cycle_count_overhead()
    print(f"== cycle counts: start {cycles_of(start.array)}, end {cycles_of(end.array)}: "
          f"{counted:,} cycles between them" + ("" if args.platform == "ipu" else
                                                " (0: no model off the IPU Model)"))
    _common.model_view(compiled, device, "the tile program", args.plot)
    between = 0.0
    if args.platform == "ipu":
        import jax_ipu

        report = jax_ipu.report(compiled)
        print("== the IPU Model's view (one row per op)")
        for op in report.ops:
            if op.kind.startswith("tile_"):
                print(f"  {op.kind:<18} tiles={op.tiles:<3} compute={op.compute_cycles:>7,.0f} "
                      f"exchange={op.exchange_cycles:>6,.0f} sync={op.sync_cycles:>4,.0f}  "
                      f"{op.note}")
        rows = [o for o in report.ops]
        marks = [i for i, o in enumerate(rows) if o.kind == "tile_cycle_count"]
        between = sum(o.cycles for o in rows[marks[0] + 1:marks[1]])
        print(f"  the report's cycles between the counts: {between:,.0f}")
        memory = report.memory.per_tile_bytes
        print(f"  memory on tiles 0, 2, 5, 7: {[int(memory[t]) for t in (0, 2, 5, 7)]} bytes; "
              f"tile 1: {int(memory[1])}")
    _common.summary("tile_quickstart", platform=args.platform, max_error=error,
                    counted_cycles=counted, report_cycles=int(between))


if __name__ == "__main__":
    main()
