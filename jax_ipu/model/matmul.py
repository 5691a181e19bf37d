"""Planner for dot and convolution on the multiply (AMP) units: split over tiles, cost each plan.

A search over (groups, rows, columns, contraction) splits and serial passes, like Poplin's."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from jax_ipu.model.targets import (
    ACCUMULATOR_BYTES,
    MATMUL_WORKSPACE_FRACTION,
    VECTOR_BYTES,
    VERTEX_OVERHEAD_CYCLES,
    Target,
)


@dataclass(frozen=True)
class MatmulPlan:
    """One way to spread G independent (M x K) @ (K x N) products over tiles."""

    splits: tuple[int, int, int, int]  # tiles over groups, M, N, K
    serial: int  # passes over K on each tile, so that blocks fit in tile memory
    compute_cycles: float
    exchange_cycles: float
    syncs: int
    workspace_bytes_per_tile: int

    @property
    def tiles(self) -> int:
        return math.prod(self.splits)


def _candidates(limit: int, extent: int) -> list[int]:
    top = max(1, min(limit, extent))
    values = {top, 1}
    p = 1
    while p <= top:
        values.add(p)
        p *= 2
    return sorted(values)


def _cost(g, m, n, k, splits, itemsize, target) -> MatmulPlan | None:
    pg, pm, pn, pk = splits
    gt, mt, nt, kt = (-(-g // pg), -(-m // pm), -(-n // pn), -(-k // pk))
    acc = gt * mt * nt * ACCUMULATOR_BYTES
    budget = MATMUL_WORKSPACE_FRACTION * target.bytes_per_tile - acc
    per_k = gt * (mt + nt) * itemsize
    if budget < per_k:
        return None
    serial = -(-kt // max(1, int(budget // per_k)))
    ks = -(-kt // serial)
    fpc = target.flops_per_tile_cycle("float16" if itemsize <= 2 else "float32")
    xbw = target.exchange_bytes_per_tile_cycle
    compute = serial * (VERTEX_OVERHEAD_CYCLES + math.ceil(2 * gt * mt * nt * ks / fpc))
    exchange = serial * math.ceil(per_k * ks / xbw)
    syncs = 2 * serial
    if pk > 1:
        # reduce-scatter of the float32 partials across the pk tiles sharing an output block
        moved = acc * (pk - 1) / pk
        exchange += math.ceil(moved / xbw)
        compute += VERTEX_OVERHEAD_CYCLES + math.ceil(moved / VECTOR_BYTES)
        syncs += 2
    workspace = per_k * ks + acc
    return MatmulPlan(splits, serial, compute, exchange, syncs, int(workspace))


def _search(g: int, m: int, n: int, k: int, itemsize: int, target: Target) -> MatmulPlan | None:
    best: MatmulPlan | None = None
    best_cycles = 0.0
    t = target.num_tiles
    for pg in _candidates(t, g):
        for pm in _candidates(t // pg, m):
            for pn in _candidates(t // (pg * pm), n):
                for pk in _candidates(t // (pg * pm * pn), k):
                    plan = _cost(g, m, n, k, (pg, pm, pn, pk), itemsize, target)
                    if plan is None:
                        continue
                    cycles = plan.compute_cycles + plan.exchange_cycles + \
                        plan.syncs * target.sync_cycles
                    if best is None or cycles < best_cycles:
                        best, best_cycles = plan, cycles
    return best


@functools.lru_cache(maxsize=1024)
def plan_matmul(g: int, m: int, n: int, k: int, itemsize: int, target: Target) -> MatmulPlan:
    """The cheapest plan (compute + exchange + sync cycles) on the target's tiles.

    Every plan for fewer tiles stays a candidate with more tiles, so more tiles never cost more.
    When no plan's blocks fit in tile memory, the best plan ignoring memory is returned and the
    memory model reports the overflow."""
    g, m, n, k = max(g, 1), max(m, 1), max(n, 1), max(k, 1)
    plan = _search(g, m, n, k, itemsize, target)
    if plan is None:
        plan = _search(g, m, n, k, itemsize, replace(target, bytes_per_tile=2**62))
    assert plan is not None  # (1,1,1,1) always fits unbounded memory
    return plan
