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
from jax_ipu.model.plans import Choice, Plan, choose, splits, steps
from jax_ipu.model.targets import (
    ACCUMULATOR_BYTES,
    BINARY_OP_WORKER_OVERHEAD,
    FILL_CYCLES_PER_REGION,
    INDEX_BYTES,
    INDEX_DIVIDE_WORKER_CYCLES,
    INT_ALU_WORKER_CYCLES,
    MIN_INDICES_PER_TILE,
    MULTISLICE_CYCLES_PER_OFFSET,
    MULTISLICE_CYCLES_PER_SKIPPED_OFFSET,
    MULTISLICE_CYCLES_PER_VECTOR,
    MULTISLICE_PROLOGUE_CYCLES,
    MULTIUPDATE_CYCLES_PER_ATOM,
    MULTIUPDATE_CYCLES_PER_OFFSET,
    MULTIUPDATE_CYCLES_PER_SKIPPED_OFFSET,
    MULTIUPDATE_PROLOGUE_CYCLES,
    REDUCTION_STAGE_DEPTH,
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


def _estimated_slice(elems: int, lookups: int, rows_here: int, rows: int,
                     single_region: bool, target: Target) -> int:
    """PopLibs' estimate of a MultiSlice vertex (G-5, getMultiSliceCycleEstimate): a worker's
    share of the lookups, those in its tile's rows copied, the rest skipped, its prologue;
    one lookup alone is spread over the workers."""
    w = target.worker_threads
    per_worker = -(-lookups // w)
    held = math.ceil(per_worker * rows_here / max(1, rows))
    vectors = -(-elems // (VECTOR_BYTES // 4))
    if single_region:
        vectors = -(-vectors // w)
    return w * (MULTISLICE_PROLOGUE_CYCLES + held * (
        MULTISLICE_CYCLES_PER_OFFSET + vectors * MULTISLICE_CYCLES_PER_VECTOR)
        + (per_worker - held) * MULTISLICE_CYCLES_PER_SKIPPED_OFFSET)


def index_rewrite_cycles(lookups: int, rows_per_group: int, target: Target) -> float:
    """The second stage's indices, computed from the first's on the tiles holding them
    (PopLibs' multiSlicePlanned: index / rows per group x lookups + position, one map
    expression): the busiest tile's indices, each an unsigned divide (a shift when the rows
    per group are a power of two, as popops rewrites it), a multiply and an add."""
    held = min(lookups, max(MIN_INDICES_PER_TILE, -(-lookups // target.num_tiles)))
    shift = rows_per_group & (rows_per_group - 1) == 0
    per_index = (INT_ALU_WORKER_CYCLES if shift else INDEX_DIVIDE_WORKER_CYCLES) + \
        2 * INT_ALU_WORKER_CYCLES
    w = target.worker_threads
    return target.vertex_cycles + w * (BINARY_OP_WORKER_OVERHEAD + -(-held // w) * per_index)


@functools.lru_cache(maxsize=1024)
def plan_gather(t: Table, result_bytes: int, target: Target) -> Choice:
    """The multiSlice plan PopLibs' embedding planner picks for N lookups of whole rows: its
    columns split U ways, its rows S ways, the lookups P ways, ranked by PopLibs' own
    estimate (G-5: vertex estimates, exchange by bytes alone, and a bias towards tables
    spread over every tile) under its limits (temporaries within the memory proportion; no
    split that cannot write the result at 8 B a cycle), and charged for what the chip runs.

    A split of the rows runs two stages: each row group copies the lookups it holds, then
    the indices are rewritten on the tiles that hold them (an iota, then one map
    expression: a divide or a shift, a multiply and an add per index) and a second stage
    picks each lookup's row among the groups' candidates. The rows then cross to the
    result's linear layout."""
    plans = []
    isz = t.itemsize
    grain = max(1, min(t.row_elems, VECTOR_BYTES // isz))
    grains = -(-t.row_elems // grain)
    grain_bytes = grain * isz
    tiles = target.num_tiles
    spread = -(-t.rows * grains // tiles) * grain_bytes
    writes = -(-t.lookups * t.row_elems * isz // VECTOR_BYTES)
    single = t.lookups == 1
    for u in steps(grains, tiles):
        held_grains = -(-grains // u)
        elems = held_grains * grain
        vectors = -(-min(elems, t.row_elems) * isz // VECTOR_BYTES)
        for s in steps(t.rows, min(-(-t.rows // 2), tiles // u)):
            rows_here = -(-t.rows // s)
            base = rows_here * held_grains * grain_bytes
            for p in steps(t.lookups, tiles // (u * s)):
                lookups = -(-t.lookups // p)
                first = _estimated_slice(elems, lookups, rows_here, t.rows, single, target)
                if writes > p * u * first:
                    continue
                biased = max(base if p > 1 else 0, base - spread)
                estimate = first + _estimated_exchange(biased, target)
                indices = INDEX_BYTES * lookups
                out_here = lookups * held_grains * grain_bytes
                budgeted = biased + indices
                received = base if p > 1 or not t.placed else 0
                temp = received + indices
                compute, _ = _slice_vertex(lookups, rows_here, t.rows, vectors, target)
                exchange = _exchange(indices + received, target)
                syncs, xsteps, csteps = 2, 1, 1
                if s > 1:
                    second = -(-lookups // s)
                    candidates = s * second * held_grains * grain_bytes
                    # PopLibs passes the second stage grains for elements (its estimate)
                    estimate += _estimated_exchange(candidates, target) + _estimated_slice(
                        held_grains, second, rows_here, t.rows, single, target)
                    staged = out_here + candidates + INDEX_BYTES * second
                    budgeted = max(budgeted + out_here, staged)
                    temp = max(temp + out_here, staged)
                    transform = index_rewrite_cycles(t.lookups, rows_here, target)
                    stage, _ = _slice_vertex(second * s, second, second * s, vectors, target)
                    compute += target.vertex_cycles + transform + stage  # iota, map, stage 1
                    exchange += _exchange(2 * INDEX_BYTES * min(
                        t.lookups, MIN_INDICES_PER_TILE), target) + \
                        _exchange(candidates + INDEX_BYTES * second, target)
                    syncs, xsteps, csteps = 7, 3, 4
                    out_here = second * held_grains * grain_bytes
                exchange += _to_result(out_here, result_bytes, target)
                family = ("lookups split, table broadcast" if p > 1 else "lookups whole") + \
                    (", rows split, two stages" if s > 1 else "")
                plans.append(Plan(family, f"columns {u} x rows {s} x lookups {p}", compute,
                                  exchange, syncs + 1, u * s * p, int(temp), xsteps + 1,
                                  csteps, estimate, messages=2 * max(p, s),
                                  budgeted_bytes=int(budgeted)))
    return choose(plans, target, unbounded=True)


def reduction_extra(partials: float, p: int, tiles: int, target: Target) -> Plan:
    """What popops' reduction of p groups' float32 partials (`partials` bytes a tile, on
    `tiles` tiles) adds to one balanced exchange and add (G-5, ReductionPlan.cpp): its
    intermediate stages (reduction_stages), each an exchange of the partials and an add, and
    the sums' move to the tiles of the table that stores them, unless reducing where the
    table lives costs less (shouldReduceAtDestination: the table's tiles then receive every
    group's partials and add them)."""
    incoming = partials * (p - 1) / p
    compute = exchange = 0.0
    syncs = xsteps = csteps = 0
    spread = _exchange(partials, target) + target.sync_cycles
    at_table = _exchange((p - 1) * partials, target) - _exchange(incoming, target) + \
        (p - 1) * partials / target.local_bytes_per_tile_cycle
    if spread <= at_table:
        exchange, syncs, xsteps = _exchange(partials, target), 1, 1
    else:
        exchange = _exchange((p - 1) * partials, target) - _exchange(incoming, target)
        compute = (p - 1) * partials / target.local_bytes_per_tile_cycle
    for _ in range(reduction_stages(p, tiles, target) - 1):
        compute += target.vertex_cycles + partials / target.local_bytes_per_tile_cycle
        exchange += _exchange(incoming, target)
        syncs, xsteps, csteps = syncs + 2, xsteps + 1, csteps + 1
    return Plan("partials reduced", "", compute, exchange, syncs, tiles, 0, xsteps, csteps)


def reduction_stages(depth: int, tiles: int, target: Target) -> int:
    """Stages popops' reduction library runs to reduce `depth` partials an output held on
    `tiles` tiles (G-5, ReductionPlan.cpp's calculateNextStep): straight to the output when
    the sources of an output are fewer than twice the square root of the chip's tiles and
    the partials cover most of its tiles, or when no more than REDUCTION_STAGE_DEPTH remain
    an output; else an intermediate stage first, which leaves about the square root of the
    depth (calculateSplit's pieces)."""
    stages = 1
    while depth > REDUCTION_STAGE_DEPTH and not (
            depth < 2 * math.sqrt(target.num_tiles) and tiles > target.num_tiles * 3 // 4):
        depth = math.ceil(math.sqrt(depth))
        stages += 1
    return stages


def fill_cycles(nbytes: int, regions: int, target: Target) -> float:
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
            more = reduction_extra(partials, p, u * s * p, target)
            compute, exchange = compute + more.compute_cycles, exchange + more.exchange_cycles
            syncs, steps = syncs + more.syncs, steps + more.exchange_steps
            csteps += more.compute_steps
        if fill:
            pieces = 1 if elems == t.row_elems else -(-rows_here // p)
            compute += fill_cycles(stored, pieces, target)
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


def copy_cycles(nbytes: float, regions: int, target: Target) -> float:
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
                 copy_cycles(here, s.slice_rows, target),
                 _exchange(moved, target) + _to_result(here, out_bytes, target),
                 3 if moved else 2, columns, moved, 2 if moved else 1)
    receivers = max(1, min(target.num_tiles, -(-out_bytes // VECTOR_BYTES)))
    share = -(-out_bytes // receivers)
    candidates = share * -(-s.rows // s.slice_rows)
    every = Plan("every candidate row sent to the result's tiles",
                 f"{receivers} result tiles", copy_cycles(share, 1, target),
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
                 copy_cycles(here, s.slice_rows, target), _exchange(here + moved, target),
                 2, columns, here, 1)
    operand_bytes = s.rows * s.row_elems * s.itemsize
    holders = max(1, min(target.num_tiles, -(-operand_bytes // VECTOR_BYTES)))
    held = -(-operand_bytes // holders)
    every = Plan("whole update multicast to every tile of the operand",
                 f"{holders} operand tiles", copy_cycles(min(held, update_bytes), 1, target),
                 _exchange(update_bytes, target), 2, holders, update_bytes, 1)
    return choose([local, every], target)
