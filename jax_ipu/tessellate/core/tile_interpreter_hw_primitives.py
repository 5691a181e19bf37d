"""TessellateIPU's cycle counters: jax_ipu.tile.ipu_cycle_count, and its hw_cycle_count_p."""

from __future__ import annotations

from typing import Any

import jax.extend.core

from jax_ipu.tessellate.core.tile_interpreter import register_handler
from jax_ipu.tile import ipu_cycle_count
from jax_ipu.tile.counters import ipu_cycle_count_overhead

# tile_map(hw_cycle_count_p, x) -> (x, count), as TessellateIPU's CycleCountBarrier vertex.
hw_cycle_count_p = jax.extend.core.Primitive("hw_cycle_count")
hw_cycle_count_p.multiple_results = True


def _hw_cycle_count(args: tuple[Any, ...], tiles: Any, sync: bool,
                    attributes: dict[str, Any]) -> tuple[Any, ...]:
    return ipu_cycle_count(*args, sync=sync)


register_handler(hw_cycle_count_p, _hw_cycle_count)
# Backward compatibility naming (as TessellateIPU keeps it).
ipu_hw_cycle_count = ipu_cycle_count

__all__ = ["hw_cycle_count_p", "ipu_cycle_count", "ipu_cycle_count_overhead",
           "ipu_hw_cycle_count"]
