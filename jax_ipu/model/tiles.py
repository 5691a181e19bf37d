"""Tile-level programs (jax_ipu.tile): the placement the user wrote, costed and laid out exactly.

Puts and gathers exchange the bytes that change tiles, from the tiles that hold them to the tiles
that need them; each mapped vertex computes on its own tiles (the model's vertex rates on one
tile, or a custom vertex's declared estimate); every phase ends in a sync. Results, constants and
vertex temporaries take memory on the tiles named, nowhere else. Pure: no jax."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from jax_ipu.model.costs import OpCost, exchange_cycles
from jax_ipu.model.ir import Op, TensorType
from jax_ipu.model.mapping import KEY_SHIFT, Layouts, Placement
from jax_ipu.model.targets import (
    CYCLE_COUNT_READ_CYCLES,
    FILL_CYCLES_PER_REGION,
    HW_SEEDS_GET_CYCLES,
    HW_SEEDS_SET_CYCLES,
    RANDOM_CYCLES_PER_VECTOR,
    RANDOM_INT_CYCLES_PER_PAIR,
    RANDOM_SUPERVISOR_CYCLES,
    RANDOM_WORKER_SETUP_CYCLES,
    Target,
)

# Op kinds (the composite's name without "jax_ipu.") -> cost class.
OP_CLASSES = {"tile_put": "tile_put", "tile_gather": "tile_put", "tile_barrier": "tile_barrier",
              "tile_map": "tile_vertex", "tile_vertex": "tile_vertex",
              "tile_cycle_count": "tile_counter"}
CONSTANT_MODES = ("constant_sharded", "constant_replicated")
# The custom call the cycle counter's decomposition makes; the compiler writes each call's count.
CYCLE_COUNT_TARGET = "jax_ipu_cycle_count"
_uids = iter(range(1 << 20, 1 << 40))


def is_tile_op(op: Op) -> bool:
    return op.kind in OP_CLASSES and op.name.startswith("jax_ipu.")


@dataclass(eq=False)
class TileRows(Placement):
    """Rows of `row` elements, row i on tile tiles[i] (a TileShardedArray's array)."""

    size: int
    tiles: np.ndarray
    row: int
    uid: int = 0

    def __post_init__(self) -> None:
        self.uid = self.uid or next(_uids)

    def locate(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.tiles[r // max(1, self.row)], (self.uid << KEY_SHIFT) + r

    def named_tiles(self) -> np.ndarray:
        return self.tiles


@dataclass
class TileFigures:
    """What one tile op does on each tile it touches, per execution."""

    vertex: str
    tiles: tuple[int, ...]  # where it computes (or where its rows go)
    compute_per_tile: float = 0.0
    received: dict[int, int] = field(default_factory=dict)  # bytes each tile receives
    sent: dict[int, int] = field(default_factory=dict)  # bytes each tile sends


# ---- reading the op's attributes -----------------------------------------------------------
def _tiles(op: Op) -> np.ndarray:
    return np.asarray(op.attributes.get("tiles") or [0], dtype=np.int64)


def _inputs(op: Op) -> list[tuple[int, TensorType]]:
    """The op's own inputs: its last `operands` operands (constants its decomposition closes
    over come first)."""
    n = int(op.attributes.get("operands", len(op.operands)))
    pairs = list(zip(op.operand_ids, op.operands, strict=False))
    return pairs[len(pairs) - n:] if n else []


def rows_of(t: TensorType, tiles: np.ndarray) -> TileRows:
    return TileRows(t.size, tiles, t.size // max(1, len(tiles)))


def _layout(t: TensorType, tiles: np.ndarray) -> dict[int, int]:
    """Bytes on each tile of a value whose first axis is mapped on `tiles` (a tile named k
    times holds k rows)."""
    per = t.nbytes // max(1, len(tiles))
    held: dict[int, int] = {}
    for x in tiles:
        held[int(x)] = held.get(int(x), 0) + per
    return held


def _most_rows(tiles: np.ndarray) -> int:
    """The most rows any one tile holds: its vertices run one after another."""
    return int(np.unique(tiles, return_counts=True)[1].max()) if len(tiles) else 0


# ---- exchange ------------------------------------------------------------------------------
def _moves(src: Placement, needed: np.ndarray, dest: np.ndarray, num_tiles: int,
           itemsize: int) -> tuple[np.ndarray, np.ndarray]:
    """(bytes each tile receives, bytes each tile sends) when tile dest[j] needs source element
    needed[j]. A tile sends an element once however many tiles take it (the exchange
    multicasts); elements every tile holds (constants) move nowhere."""
    src_tiles, keys = src.locate(needed)
    remote = (src_tiles >= 0) & (src_tiles != dest)
    received = np.bincount(dest[remote], minlength=num_tiles) * itemsize
    distinct = np.unique(np.stack([keys[remote], src_tiles[remote]]), axis=1) \
        if remote.any() else np.zeros((2, 0), np.int64)
    sent = np.bincount(distinct[1], minlength=num_tiles) * itemsize
    return received[:num_tiles], sent[:num_tiles]


def _exchange(op: Op, src: Placement, src_type: TensorType, dest: np.ndarray, row: int,
               target: Target) -> tuple[np.ndarray, np.ndarray]:
    mode = op.attributes.get("mode", "gather")
    tiles = max(target.num_tiles, int(dest.max()) + 1)
    if mode == "replicated":
        # Every destination needs all of it: it receives what it does not hold, and each
        # holder sends its part once (multicast) if any other tile needs it.
        src_tiles, _ = src.locate(np.arange(src_type.size, dtype=np.int64))
        held = np.bincount(src_tiles[src_tiles >= 0], minlength=tiles)[:tiles]
        received = np.zeros(tiles, np.int64)
        received[dest] = (int((src_tiles >= 0).sum()) - held[dest]) * src_type.itemsize
        others = np.ones(tiles, bool) if len(dest) > 1 else np.arange(tiles) != dest[0]
        sent = np.where(others, held * src_type.itemsize, 0)
        return received, sent
    picks = np.asarray(op.attributes.get("indices") or range(len(dest)), dtype=np.int64)
    needed = (picks[:, None] * row + np.arange(row, dtype=np.int64)).reshape(-1)
    return _moves(src, needed, np.repeat(dest, row), tiles, src_type.itemsize)


def _source(op: Op, vid: int, t: TensorType, layouts: Layouts) -> Placement:
    """Where a put's input lives: the tiles its TileShardedArray names, else where the program
    put it (linearly, for a plain array)."""
    sources = op.attributes.get("source_tiles") or []
    if sources:
        return rows_of(t, np.asarray(sources, dtype=np.int64))
    return layouts.of(vid, t)


def put(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """tile_put_* and tile_gather: one exchange phase moving the bytes whose tile changes, then
    a sync; constants are laid out on their tiles when the program is built."""
    dest = _tiles(op)
    out = op.results[0]
    figures = TileFigures(f"{op.kind}:{op.attributes.get('mode', 'gather')}",
                          tuple(int(t) for t in dest))
    cost = OpCost(tiles=len(dest), placement=rows_of(out, dest), tile_figures=figures)
    if op.attributes.get("mode") in CONSTANT_MODES:
        cost.note = f"constant laid out on {len(dest)} tile(s) when the program is built"
        return cost
    (vid, src_type), = _inputs(op)[-1:]
    received, sent = _exchange(op, _source(op, vid, src_type, layouts), src_type, dest,
                               out.size // max(1, len(dest)), target)
    busiest = int(max(received.max(initial=0), sent.max(initial=0)))
    figures.received = {int(t): int(b) for t, b in enumerate(received) if b}
    figures.sent = {int(t): int(b) for t, b in enumerate(sent) if b}
    cost.exchange_cycles = exchange_cycles(busiest, target)
    cost.syncs = 1 if busiest else 0
    # exchange code goes on the tiles that send or receive, not on rotating ones
    cost.on_tiles = tuple(sorted(figures.sent.keys() | figures.received.keys())) or None
    cost.bytes_accessed = int(received.sum())
    cost.note = (f"{int(received.sum())} B exchanged from {len(figures.sent)} tile(s) to "
                 f"{len(figures.received)} tile(s); busiest tile moves {busiest} B"
                 if busiest else "every row already on its tile: nothing moves")
    return cost


# ---- vertices ------------------------------------------------------------------------------
OneTileCost = Callable[[list[Op], Target], tuple[float, int]]


def _row(op: Op, k: int = 0) -> TensorType | None:
    """Result k of a tile op as one row (one tile's part)."""
    if k >= len(op.results):
        return None
    t = op.results[k]
    rows = max(1, len(_tiles(op)))
    return TensorType(t.shape[1:], t.dtype) if t.shape and t.shape[0] == rows else t


def fill_cycles(op: Op, target: Target) -> float:
    """A Fill vertex writing a constant into one row: PopLibs' set-up of one region, then one
    64-bit store a cycle (as model/slicing.py charges a fill)."""
    row = _row(op)
    return target.vertex_cycles + FILL_CYCLES_PER_REGION + \
        row.nbytes / target.local_bytes_per_tile_cycle


def copy_cycles(op: Op, target: Target) -> float:
    """An on-tile copy of one row (tile_copy): a load and a store per 64 bits."""
    row = _row(op)
    return target.vertex_cycles + FILL_CYCLES_PER_REGION + \
        2 * row.nbytes / target.local_bytes_per_tile_cycle


def random_cycles(op: Op, target: Target) -> float:
    """poprand's Uniform / Normal supervisor vertices on one row, by PopLibs' estimates: a
    supervisor call, each worker's set-up, then a few cycles per 64-bit vector of results
    (uniform integers by pairs: a modulo each)."""
    row = _row(op)
    dtype = row.dtype if row.dtype in RANDOM_WORKER_SETUP_CYCLES else "float32"
    cycles = RANDOM_SUPERVISOR_CYCLES + RANDOM_WORKER_SETUP_CYCLES[dtype] * target.worker_threads
    if row.dtype.startswith("int"):
        return cycles + RANDOM_INT_CYCLES_PER_PAIR * (row.size // 2) + 2 * (row.size % 2)
    per_vector = max(1, 8 // row.itemsize)
    return cycles + RANDOM_CYCLES_PER_VECTOR * -(-row.size // per_vector)


def seeds_cycles(op: Op, target: Target) -> float:
    """Poplar's runtime vertices reading or writing a tile's hardware seeds."""
    base, per_worker = HW_SEEDS_SET_CYCLES if op.attributes.get("primitive") == \
        "ipu_set_hw_seeds" else HW_SEEDS_GET_CYCLES
    return base + per_worker * target.worker_threads


# tile_map of jax_ipu.tile's own primitives whose one-tile program says nothing of their cost
# (a constant, a copy XLA elides, a host generator): their vertex's cycles on one row.
PRIMITIVE_RULES: dict[str, Callable[[Op, Target], float]] = {
    "fill": fill_cycles, "tile_copy": copy_cycles,
    "ipu_random_uniform": random_cycles, "ipu_random_normal": random_cycles,
    "ipu_get_hw_seeds": seeds_cycles, "ipu_set_hw_seeds": seeds_cycles,
}


def vertex(op: Op, fused: list[Op], target: Target, layouts: Layouts,
           one_tile: OneTileCost) -> OpCost:
    """tile_map: one compute set; each tile runs the vertex on its own rows (lax primitives at
    the model's rates on one tile, as `one_tile` costs them, custom vertices at their declared
    estimate; a tile holding several rows runs a vertex for each in turn), then a sync."""
    dest = _tiles(op)
    rule = PRIMITIVE_RULES.get(str(op.attributes.get("primitive")))
    if op.kind == "tile_map" and rule is not None:
        per_row, flops = rule(op, target), 0
        how = "its vertex's cycles on one row"
    elif op.kind == "tile_map":
        per_row, flops = one_tile(op.vertex_ops, target)
        flops *= len(dest)
        how = "the model's vertex rates on one tile"
    else:
        per_row, flops = float(op.attributes.get("estimate") or 0), 0
        how = "its declared estimate"
    for rid, t in zip(op.result_ids[1:], op.results[1:], strict=False):
        layouts.assign(rid, rows_of(t, dest))
    name = str(op.attributes.get("vertex", op.kind))
    rows = _most_rows(dest)
    per_tile = per_row * rows
    stacked = f" ({rows} rows on the busiest tile)" if rows > 1 else ""
    on_tiles = tuple(sorted({int(t) for t in dest}))
    return OpCost(
        flops=int(flops), compute_cycles=per_tile, tiles=len(on_tiles), on_tiles=on_tiles,
        syncs=1 + int(op.attributes.get("sync") or 0),
        bytes_accessed=sum(t.nbytes for _, t in _inputs(op)) + sum(t.nbytes for t in op.results),
        workspace_bytes_per_tile=int(op.attributes.get("temporary_bytes") or 0),
        placement=rows_of(op.results[0], dest) if op.results else None,
        note=f"vertex {name} on {len(on_tiles)} tile(s): {per_row:,.0f} cycles a row{stacked}, "
             f"from {how}",
        tile_figures=TileFigures(name, tuple(int(t) for t in dest), per_row))


def barrier(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """tile_data_barrier: the arrays stay where they are; their tiles sync once."""
    for rid, (vid, t) in zip(op.result_ids, _inputs(op), strict=False):
        layouts.assign(rid, layouts.of(vid, t), planned=layouts.planned(vid))
    return OpCost(syncs=1, tiles=len(_tiles(op)), on_tiles=tuple(int(t) for t in _tiles(op)),
                  note="data barrier: one sync of its tiles")


def counter(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """ipu_cycle_count: reads the tiles' cycle counters, which costs what TessellateIPU
    measured between two successive counts on the chip; a count is the cycles of every row
    before it and its own read, so two counts differ by the rows between them plus one read
    (ipu_cycle_count_overhead())."""
    data = _inputs(op)
    for rid, (vid, t) in zip(op.result_ids, data, strict=False):
        layouts.assign(rid, layouts.of(vid, t), planned=layouts.planned(vid))
    if len(op.results) > len(data):
        layouts.assign(op.result_ids[-1], rows_of(op.results[-1], _tiles(op)))
    tiles = tuple(sorted({int(t) for t in _tiles(op)}))
    return OpCost(compute_cycles=CYCLE_COUNT_READ_CYCLES, tiles=len(tiles), on_tiles=tiles,
                  syncs=int(op.attributes.get("sync") or 0),
                  note=f"cycle counter (site {op.attributes.get('site')})",
                  tile_figures=TileFigures("cycle count", tiles, CYCLE_COUNT_READ_CYCLES))


# The rules of tile ops but tile_vertex, whose one-tile costing is model/cycles.py's.
RULES = {"tile_put": put, "tile_barrier": barrier, "tile_counter": counter}


# ---- memory --------------------------------------------------------------------------------
def result_layout(op: Op, k: int) -> dict[int, int] | None:
    """Bytes per tile of result k of a tile op, when it is a new buffer on its tiles."""
    if not is_tile_op(op) or op.kind in ("tile_barrier",) or k >= len(op.results):
        return None
    if op.kind == "tile_cycle_count" and k < len(op.results) - 1:
        return None
    return _layout(op.results[k], _tiles(op))


def aliased_operand(op: Op, k: int) -> int | None:
    """The operand whose buffer result k of a tile op is: barriers and counters pass data
    through; a constant's result is the constant itself, laid out on its tiles."""
    if not is_tile_op(op):
        return None
    first = len(op.operands) - int(op.attributes.get("operands", len(op.operands)))
    if op.kind == "tile_barrier" or op.kind == "tile_cycle_count" and \
            k < len(op.results) - 1:
        return first + k
    if op.kind == "tile_put" and op.attributes.get("mode") in CONSTANT_MODES:
        return len(op.operands) - 1
    return None


def in_place_operand(op: Op, k: int) -> int | None:
    """The operand result k of a tile op writes into (an InOut field, a *_inplace primitive):
    Poplar's vertex updates that tensor, so the result is its buffer when the operand dies
    there (else the operand is copied first, as XLA's in-place aliasing does)."""
    if not is_tile_op(op):
        return None
    inplace = op.attributes.get("inplace") or ()
    if k >= len(inplace) or int(inplace[k]) < 0:
        return None
    first = len(op.operands) - int(op.attributes.get("operands", len(op.operands)))
    return first + int(inplace[k])


def writes_in_place(op: Op, value: int) -> bool:
    """Whether a tile op writes one of its results into the value `value` it reads."""
    return any(j is not None and op.operand_ids[j] == value
               for j in (in_place_operand(op, k) for k in range(len(op.results))))


def operand_layouts(op: Op) -> dict[int, dict[int, int]]:
    """Constant operands a tile op lays out on its tiles: a tile constant's data, and a custom
    vertex's constants (a copy on each of its tiles)."""
    if not is_tile_op(op):
        return {}
    tiles = _tiles(op)
    if op.kind == "tile_put" and op.attributes.get("mode") in CONSTANT_MODES:
        return {len(op.operands) - 1: _layout(op.results[0], tiles)}
    if op.kind == "tile_vertex":
        n = int(op.attributes.get("constants") or 0)
        first = len(op.operands) - n
        return {first + j: {int(x): op.operands[first + j].nbytes for x in tiles}
                for j in range(n)}
    return {}


def workspace_layout(op: Op) -> dict[int, int] | None:
    """A custom vertex's temporaries: on each of its tiles while it runs."""
    nbytes = int(op.attributes.get("temporary_bytes") or 0) if is_tile_op(op) else 0
    return {int(x): nbytes for x in _tiles(op)} if nbytes else None


# ---- the report's tile view ----------------------------------------------------------------
def tile_view(rows: list[Any], cycles: list[float], target: Target) -> dict[str, Any] | None:
    """Per-tile compute cycles and exchanged bytes of a program's tile ops, its vertices by
    tile, and each cycle counter's count (see counter_counts); None when the program has no
    tile ops. `cycles` are the rows' total cycles, as the report counts them."""
    if not any(is_tile_op(r.op) for r in rows):
        return None
    compute = np.zeros(target.num_tiles)
    exchanged = np.zeros(target.num_tiles)
    vertices = []
    for row in rows:
        op, figures = row.op, row.cost.tile_figures
        if figures is None:
            continue
        n = row.executions
        for t in figures.tiles:
            if t < target.num_tiles:
                compute[t] += figures.compute_per_tile * n
        for moved in (figures.received, figures.sent):
            for t, b in moved.items():
                if t < target.num_tiles:
                    exchanged[t] += b * n
        if figures.compute_per_tile:
            vertices.append({"vertex": figures.vertex, "location": str(op.location),
                             "tiles": list(figures.tiles), "executions": n,
                             "cycles_per_tile": float(figures.compute_per_tile)})
    return {"compute_cycles": [float(c) for c in compute],
            "exchange_bytes": [float(b) for b in exchanged],
            "vertices": vertices, "counters": counter_counts(rows, cycles)}


def counter_counts(rows: list[Any], cycles: list[float]) -> dict[str, dict[str, Any]]:
    """Each cycle counter's count, by site: `cycles` (the count on the first pass: every row
    before it and its own read) and, for a counter inside counted loops, the cycles one trip
    of each adds and its trips (`strides`, `trips`, innermost loop first), so that trip k of
    a loop reads cycles + k x stride. A counter the model cannot give such a count (a loop
    whose trip count it does not know, a site reached at several points) has a `problem`."""
    parents = _parents(rows)
    counts: dict[str, dict[str, Any]] = {}
    for i, (row, spent) in enumerate(zip(rows, cycles, strict=True)):
        op = row.op
        if op.kind == "tile_cycle_count" and is_tile_op(op):
            site = str(op.attributes.get("site"))
            loops = [h for h in _ancestors(i, parents) if rows[h].op.kind == "while"]
            entry = {"cycles": None, "strides": [], "trips": [], "location": str(op.location),
                     "problem": None}
            if site in counts:
                entry["problem"] = "reached at several points of the program"
            elif any(rows[h].unknown_trip_count for h in loops):
                entry["problem"] = "inside a loop whose trip count the model does not know"
            else:
                own = spent / max(1, row.executions)
                count, strides, trips = _loop_counts(i, loops, rows, cycles, parents)
                outer = loops[0] if loops else i
                entry.update(cycles=int(round(sum(cycles[:outer]) + count + own)),
                             strides=[int(round(x)) for x in reversed(strides)],
                             trips=list(reversed(trips)))
            counts[site] = entry
    return counts


def _parents(rows: list[Any]) -> list[int]:
    """Index of each row's enclosing row (a loop or branch head), -1 at the top."""
    parents, stack = [], []
    for i, row in enumerate(rows):
        while stack and rows[stack[-1]].depth >= row.depth:
            stack.pop()
        parents.append(stack[-1] if stack else -1)
        stack.append(i)
    return parents


def _ancestors(i: int, parents: list[int]) -> list[int]:
    """The rows enclosing row i, outermost first."""
    chain = []
    while parents[i] >= 0:
        i = parents[i]
        chain.append(i)
    return chain[::-1]


def _loop_counts(i: int, loops: list[int], rows: list[Any], cycles: list[float],
                 parents: list[int]) -> tuple[float, list[float], list[int]]:
    """For row i inside `loops` (outermost first): the cycles from the outermost loop's start
    to row i on the first trip of each, and each loop's cycles a trip and trips."""
    count, strides, trips = 0.0, [], []
    for level, h in enumerate(loops):
        head = rows[h]
        n = head.op.trip_count or 0
        executions = max(1, head.executions)
        end = h + 1
        while end < len(rows) and _within(end, h, parents):
            end += 1
        cond_ids = {id(o) for o in head.op.regions[0].ops} if head.op.regions else set()
        split = next((j for j in range(h + 1, end)
                      if parents[j] == h and id(rows[j].op) not in cond_ids), end)
        cond = sum(cycles[h + 1:split]) / (executions * (n + 1))
        body = sum(cycles[split:end]) / (executions * max(1, n))
        inner = loops[level + 1] if level + 1 < len(loops) else i
        ahead = sum(cycles[split:inner]) / (executions * max(1, n))
        count += cycles[h] / executions + cond + ahead
        strides.append(cond + body)
        trips.append(n)
    return count, strides, trips


def _within(j: int, h: int, parents: list[int]) -> bool:
    while j >= 0:
        j = parents[j]
        if j == h:
            return True
    return False
