"""Slices and updates at indices fixed when the program is compiled: their window in the operand.

The reader marks the constant indices (attributes["constant_indices"]); costs.py and mapping.py
cost and place such ops as static slices and copies, as Poplar's XLA backend makes them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from jax_ipu.model.ir import Op


@dataclass(frozen=True)
class Window:
    """A slice taken or written at indices fixed when the program is compiled: where it
    starts in each dimension of the operand, and how far it reaches there."""

    starts: tuple[int, ...]
    shape: tuple[int, ...]

    def run(self, operand: tuple[int, ...]) -> int:
        """Elements of one contiguous run of the window in the row-major operand."""
        run = 1
        for d in range(len(self.shape) - 1, -1, -1):
            run *= self.shape[d]
            if self.shape[d] != operand[d]:
                break
        return max(1, run)


def static_window(op: Op) -> Window | None:
    """The window of a dynamic slice, a dynamic update or a scatter of one window that
    overwrites, when its indices are constants (the reader's attributes["constant_indices"]:
    x.at[1:-1, 1:-1].set(v), dynamic_update_slice(x, v, (1, 1))); None otherwise. Starts are
    clamped as XLA clamps a dynamic slice's; a scatter window out of bounds (which XLA skips)
    or one that adds is not a copy."""
    indices = op.attributes.get("constant_indices")
    if not isinstance(indices, list) or not op.operands or not op.results:
        return None
    dims = op.operands[0].shape
    if op.kind in ("dynamic_slice", "dynamic_update_slice"):
        piece = op.results[0].shape if op.kind == "dynamic_slice" else op.operands[1].shape
        if len(indices) != len(dims) or len(piece) != len(dims):
            return None
        starts = tuple(min(max(0, s), d - p) for s, d, p in zip(indices, dims, piece,
                                                                  strict=True))
        return Window(starts, tuple(piece))
    if op.kind != "scatter" or len(op.operands) != 3 or any(r.ops for r in op.regions):
        return None
    dn = op.attributes.get("scatter_dimension_numbers") or {}
    to_operand = list(dn.get("scattered_dims_to_operand_dims") or [])
    window_dims = list(dn.get("update_window_dims") or [])
    inserted = set(dn.get("inserted_window_dims") or [])
    updates = op.operands[2]
    if dn.get("input_batching_dims") or len(indices) != len(to_operand) or \
            math.prod(updates.shape[u] for u in window_dims) != updates.size:
        return None
    kept = [d for d in range(len(dims)) if d not in inserted]
    if len(kept) != len(window_dims):
        return None
    shape = [1] * len(dims)
    for d, u in zip(kept, window_dims, strict=True):
        shape[d] = updates.shape[u]
    starts = [0] * len(dims)
    for k, d in zip(indices, to_operand, strict=True):
        starts[d] = k
    if any(s < 0 or s + n > d for s, n, d in zip(starts, shape, dims, strict=True)):
        return None
    return Window(tuple(starts), tuple(shape))
