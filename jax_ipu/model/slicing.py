"""Planners for gathers and scatters of rows (PopLibs' multiSlice / multiUpdate): split the
table's columns, its rows and the lookups over tiles, and cost each plan from the vertex
cycles PopLibs estimates (G-5) and the calibrated exchange and sync rates.

A table of V rows of E elements is looked up (gather) or updated (scatter) N times. A plan
splits the columns over U tiles, the rows over S groups and the lookups over P groups:
- gather: with P > 1 each lookup group needs the table part of its tiles, broadcast to it
  (a small table is copied to the tiles that need it once, then rows are copied locally);
  with S > 1 each row group finds the lookups it holds and a second stage picks them;
- scatter: with S > 1 each update is multicast to the row groups, each keeping those it
  holds; with P > 1 each lookup group adds into float32 partials of the whole table,
  which a reduction across the groups then adds into the result."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from jax_ipu.model.mapping import tiles_used
from jax_ipu.model.plans import Choice, Plan, choose, splits
from jax_ipu.model.targets import (
    ACCUMULATOR_BYTES,
    FILL_CYCLES_PER_REGION,
    INDEX_BYTES,
    MULTISLICE_CYCLES_PER_OFFSET,
    MULTISLICE_CYCLES_PER_SKIPPED_OFFSET,
    MULTISLICE_CYCLES_PER_VECTOR,
    MULTISLICE_PROLOGUE_CYCLES,
    MULTIUPDATE_CYCLES_PER_ATOM,
    MULTIUPDATE_CYCLES_PER_OFFSET,
    MULTIUPDATE_CYCLES_PER_SKIPPED_OFFSET,
    MULTIUPDATE_PROLOGUE_CYCLES,
    VECTOR_BYTES,
    Target,
)


@dataclass(frozen=True)
class Table:
    """The shape of one gather or scatter: V rows of E elements of `itemsize` bytes, N
    lookups (or updates); `placed`: whether the table can be laid out for the plan (an
    argument, a constant, or a value made for this op) rather than read from another
    op's layout; `result_bytes` of the op's result, laid out linearly for its readers."""

    rows: int
    row_elems: int
    lookups: int
    itemsize: int
    placed: bool = True


def _exchange(nbytes: float, target: Target) -> float:
    return target.exchange_setup_cycles + nbytes / target.exchange_bytes_per_tile_cycle \
        if nbytes > 0 else 0.0


def _split_sizes(t: Table, target: Target, lookup_limit: int):
    """(U, S, P) candidates: columns in 64-bit grains, rows (at least 2 a group), lookups."""
    grain = max(1, min(t.row_elems, VECTOR_BYTES // t.itemsize))
    grains = -(-t.row_elems // grain)
    tiles = target.num_tiles
    for u in splits(grains, tiles):
        for s in splits(max(1, t.rows // 2), tiles // u):
            for p in splits(lookup_limit, tiles // (u * s)):
                yield u, s, p, grain, grains


def _tile_share(t: Table, u: int, s: int, p: int, grain: int, grains: int
                ) -> tuple[int, int, int, int]:
    """(elements of a row on a tile, its 64-bit vectors, table rows a tile holds, lookups)."""
    elems = -(-grains // u) * grain
    vectors = -(-elems * t.itemsize // VECTOR_BYTES)
    return min(elems, t.row_elems), vectors, -(-t.rows // s), -(-t.lookups // p)


def _slice_vertex(lookups: int, rows_here: int, rows: int, vectors: int, target: Target
                  ) -> tuple[float, float]:
    """MultiSlice vertex (G-5): the workers share the lookups; each copies those it holds
    and skips the rest. (cycles on the chip, PopLibs' estimate): the chip adds the vertex
    launch, PopLibs counts its own prologue instead."""
    w = target.worker_threads
    per_worker = -(-lookups // w)
    held = min(per_worker, math.ceil(per_worker * rows_here / max(1, rows)))
    work = w * (held * (MULTISLICE_CYCLES_PER_OFFSET + vectors * MULTISLICE_CYCLES_PER_VECTOR)
                + (per_worker - held) * MULTISLICE_CYCLES_PER_SKIPPED_OFFSET)
    return target.vertex_cycles + work, w * MULTISLICE_PROLOGUE_CYCLES + work


def _update_vertex(lookups: int, rows_here: int, rows: int, elems: int, itemsize: int,
                   target: Target) -> tuple[float, float]:
    """MultiUpdateOp vertex (G-5): the workers share the table rows; each scans every update
    and adds those that land on its rows, one 64-bit atom at a time. (cycles on the chip,
    PopLibs' estimate), as for _slice_vertex."""
    w = target.worker_threads
    rows_per_worker = -(-rows_here // w)
    held = min(lookups, math.ceil(lookups * rows_per_worker / max(1, rows)))
    atoms = max(1, -(-elems * itemsize // VECTOR_BYTES))
    work = w * (held * (MULTIUPDATE_CYCLES_PER_OFFSET + (atoms - 1) * MULTIUPDATE_CYCLES_PER_ATOM)
                + (lookups - held) * MULTIUPDATE_CYCLES_PER_SKIPPED_OFFSET)
    return target.vertex_cycles + work, w * MULTIUPDATE_PROLOGUE_CYCLES + work


def _estimated_exchange(nbytes: float, target: Target) -> float:
    """PopLibs' planners price an exchange by its bytes alone (G-5's ExchangeEstimator)."""
    return nbytes / target.exchange_bytes_per_tile_cycle


def _to_result(out_bytes_here: int, result_bytes: int, target: Target) -> float:
    """Rows move from the plan's tiles to the result's linear layout."""
    per_tile = -(-result_bytes // max(1, tiles_used(result_bytes, target.num_tiles)))
    return _exchange(max(out_bytes_here, per_tile), target)


@functools.lru_cache(maxsize=1024)
def plan_gather(t: Table, result_bytes: int, target: Target) -> Choice:
    """The multiSlice plan Poplar picks for N lookups of whole rows of the table: ranked by
    PopLibs' estimate (which biases towards tables spread over all tiles), charged for what
    the chip does (the rows then cross to the result's linear layout)."""
    plans = []
    spread = -(-t.rows * t.row_elems * t.itemsize // target.num_tiles)
    for u, s, p, grain, grains in _split_sizes(t, target, t.lookups):
        elems, vectors, rows_here, lookups = _tile_share(t, u, s, p, grain, grains)
        base = rows_here * elems * t.itemsize
        # the lookup groups each need the table part of their tiles: a broadcast; a table
        # laid out elsewhere arrives whole
        received = base if p > 1 or not t.placed else 0
        # PopLibs also charges a table held on fewer tiles than it could be spread over as
        # if it were rearranged (alwaysIncludeBaseRearrangementCost, G-5)
        biased = max(received, base - spread)
        indices = INDEX_BYTES * lookups
        compute, estimate = _slice_vertex(lookups, rows_here, t.rows, vectors, target)
        exchange = _exchange(indices + received, target)
        estimate += _estimated_exchange(indices + biased, target)
        temp = received + indices
        syncs, steps, csteps = 2, 1, 1
        out_here = lookups * elems * t.itemsize
        if s > 1:
            # second stage: the row groups' candidates cross to the lookups' tiles
            second = -(-lookups // s)
            candidates = s * second * elems * t.itemsize
            stage, judged = _slice_vertex(second * s, second, second * s, vectors, target)
            compute += stage
            exchange += _exchange(candidates, target)
            estimate += judged + _estimated_exchange(candidates, target)
            temp += out_here + candidates
            out_here = second * elems * t.itemsize
            syncs, steps, csteps = 4, 2, 2
        exchange += _to_result(out_here, result_bytes, target)
        family = ("lookups split, table broadcast" if p > 1 else "lookups whole") + \
            (", rows split, two stages" if s > 1 else "")
        plans.append(Plan(family, f"columns {u} x rows {s} x lookups {p}", compute, exchange,
                          syncs + 1, u * s * p, int(temp), steps + 1, csteps, estimate,
                          messages=2 * max(p, s)))
    return choose(plans, target)


def _fill(nbytes: int, regions: int, target: Target) -> float:
    """Writing a constant into nbytes of a tile held as `regions` separate pieces: PopLibs'
    Fill2d costs each piece its set-up (G-5), then one 64-bit store a cycle."""
    return target.vertex_cycles + regions * FILL_CYCLES_PER_REGION + \
        nbytes / target.local_bytes_per_tile_cycle


@functools.lru_cache(maxsize=1024)
def plan_scatter(t: Table, combine: bool, fill: bool, target: Target) -> Choice:
    """The multiUpdate plan Poplar picks for N updates of whole rows of the table, ranked by
    PopLibs' estimate. `combine`: the updates are added (lookup groups with partial sums
    are then allowed); `fill`: the table starts as a constant, written first. Charged for
    what the chip does: the constant written into the table as the plan lays it out (a row
    split over columns is one piece per row on a tile), and the result moved to its linear
    layout."""
    plans = []
    table_bytes = t.rows * t.row_elems * t.itemsize
    spread = -(-table_bytes // target.num_tiles)
    for u, s, p, grain, grains in _split_sizes(t, target, t.lookups if combine else 1):
        elems, vectors, rows_here, lookups = _tile_share(t, u, s, p, grain, grains)
        base = rows_here * elems * t.itemsize
        updates = lookups * elems * t.itemsize
        indices = INDEX_BYTES * lookups
        # updates are multicast to every row group; a table laid out elsewhere moves in and
        # back out, and PopLibs charges one held on too few tiles as if it did (G-5)
        multicast = updates if s > 1 else 0
        moved = 2 * base if not t.placed else 0
        biased = 2 * base if not t.placed else 2 * max(0, base - spread)
        compute, estimate = _update_vertex(lookups, rows_here, t.rows, elems, t.itemsize,
                                           target)
        exchange = _exchange(indices + multicast + moved, target)
        estimate += _estimated_exchange(indices + multicast + biased, target)
        temp = indices + multicast
        syncs, steps, csteps = 2, 1, 1
        stored = -(-base // p)  # the table's own bytes on a tile: spread over the groups too
        if p > 1:
            # float32 partials of the group's table part: zeroed, updated, then reduced
            # across the p groups onto the tiles that store the table, and added into it
            partials = rows_here * elems * ACCUMULATOR_BYTES
            incoming = partials * (p - 1) / p
            reduce = 2 * target.vertex_cycles + (partials + 3 * incoming) / \
                target.local_bytes_per_tile_cycle
            compute += reduce
            exchange += _exchange(incoming, target)
            estimate += reduce - 2 * target.vertex_cycles + \
                _estimated_exchange(incoming, target)
            temp += 2 * partials
            syncs, steps, csteps = syncs + 3, steps + 1, csteps + 2
        if fill:
            pieces = 1 if elems == t.row_elems else -(-rows_here // p)
            compute += _fill(stored, pieces, target)
            syncs, csteps = syncs + 1, csteps + 1
        exchange += _to_result(stored, table_bytes, target)
        family = ("updates split, partial sums reduced" if p > 1 else "updates whole") + \
            (", rows split, updates multicast" if s > 1 else "")
        plans.append(Plan(family, f"columns {u} x rows {s} x updates {p}", compute, exchange,
                          syncs + 1, u * s * p, int(temp), steps + 1, csteps, estimate,
                          messages=2 * max(p, s)))
    return choose(plans, target)


@dataclass(frozen=True)
class Slab:
    """A dynamic slice or update: `rows` positions along the dims sliced at a run-time
    offset, `row_elems` elements at each (the other dims), `slice_rows` of them taken or
    written; `placed`: the operand can be laid out for slicing (every row of a column on one
    tile) rather than read from another op's layout."""

    rows: int
    row_elems: int
    slice_rows: int
    itemsize: int
    placed: bool = True


def _copy(nbytes: float, regions: int, target: Target) -> float:
    """A copy vertex over `regions` pieces: their set-up, then a load and a store per 64 bits."""
    return target.vertex_cycles + regions * FILL_CYCLES_PER_REGION + \
        2 * nbytes / target.local_bytes_per_tile_cycle


@functools.lru_cache(maxsize=1024)
def plan_dynamic_slice(s: Slab, target: Target) -> Choice:
    """A slice at a run-time offset. The exchange is compiled, so it cannot depend on the
    offset: either every row of a column sits on one tile, which copies out the rows asked
    for (the operand rearranged so first unless laid out for it), or every candidate row
    crosses to the result's tiles, which keep the one asked for."""
    out_bytes = s.slice_rows * s.row_elems * s.itemsize
    grain = max(1, min(s.row_elems, VECTOR_BYTES // s.itemsize))
    columns = min(target.num_tiles, -(-s.row_elems // grain))
    width = -(-s.row_elems // columns) * s.itemsize  # bytes of a row on one column tile
    slab = s.rows * width
    here = s.slice_rows * width
    moved = 0 if s.placed else slab
    local = Plan("columns hold every row, slice copied out locally",
                 f"{columns} column tiles" + ("" if s.placed else ", operand rearranged"),
                 _copy(here, s.slice_rows, target),
                 _exchange(moved, target) + _to_result(here, out_bytes, target),
                 3 if moved else 2, columns, moved, 2 if moved else 1)
    receivers = max(1, min(target.num_tiles, -(-out_bytes // VECTOR_BYTES)))
    share = -(-out_bytes // receivers)
    candidates = share * -(-s.rows // s.slice_rows)
    every = Plan("every candidate row sent to the result's tiles",
                 f"{receivers} result tiles", _copy(share, 1, target),
                 _exchange(candidates, target), 2, receivers, candidates, 1)
    return choose([local, every], target)


@functools.lru_cache(maxsize=1024)
def plan_dynamic_update(s: Slab, target: Target) -> Choice:
    """A write at a run-time offset, in place. The update is multicast to the tiles that
    may hold its rows: with every row of a column on one tile (the operand rearranged in and
    back out unless laid out for it), each column tile takes its columns of the update;
    with the operand laid out linearly, every tile of it takes the whole update."""
    update_bytes = s.slice_rows * s.row_elems * s.itemsize
    grain = max(1, min(s.row_elems, VECTOR_BYTES // s.itemsize))
    columns = min(target.num_tiles, -(-s.row_elems // grain))
    width = -(-s.row_elems // columns) * s.itemsize
    here = s.slice_rows * width
    moved = 0 if s.placed else 2 * s.rows * width
    local = Plan("columns hold every row, update multicast by columns",
                 f"{columns} column tiles" + ("" if s.placed else ", operand rearranged"),
                 _copy(here, s.slice_rows, target), _exchange(here + moved, target),
                 2, columns, here, 1)
    operand_bytes = s.rows * s.row_elems * s.itemsize
    holders = max(1, min(target.num_tiles, -(-operand_bytes // VECTOR_BYTES)))
    held = -(-operand_bytes // holders)
    every = Plan("whole update multicast to every tile of the operand",
                 f"{holders} operand tiles", _copy(min(held, update_bytes), 1, target),
                 _exchange(update_bytes, target), 2, holders, update_bytes, 1)
    return choose([local, every], target)
