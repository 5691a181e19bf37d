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
from jax_ipu.model.targets import Target

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
    """Bytes on each tile of a value whose first axis is mapped on `tiles`."""
    per = t.nbytes // max(1, len(tiles))
    return {int(x): per for x in tiles}


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


def vertex(op: Op, fused: list[Op], target: Target, layouts: Layouts,
           one_tile: OneTileCost) -> OpCost:
    """tile_map: one compute set; each tile runs the vertex on its own rows (lax primitives at
    the model's rates on one tile, as `one_tile` costs them, custom vertices at their declared
    estimate), then a sync."""
    dest = _tiles(op)
    if op.kind == "tile_map":
        per_tile, flops = one_tile(op.vertex_ops, target)
        flops *= len(dest)
        how = "the model's vertex rates on one tile"
    else:
        per_tile, flops = float(op.attributes.get("estimate") or 0), 0
        how = "its declared estimate"
    for rid, t in zip(op.result_ids[1:], op.results[1:], strict=False):
        layouts.assign(rid, rows_of(t, dest))
    name = str(op.attributes.get("vertex", op.kind))
    return OpCost(
        flops=int(flops), compute_cycles=per_tile, tiles=len(dest),
        on_tiles=tuple(int(t) for t in dest),
        syncs=1 + int(op.attributes.get("sync") or 0),
        bytes_accessed=sum(t.nbytes for _, t in _inputs(op)) + sum(t.nbytes for t in op.results),
        workspace_bytes_per_tile=int(op.attributes.get("temporary_bytes") or 0),
        placement=rows_of(op.results[0], dest) if op.results else None,
        note=f"vertex {name} on {len(dest)} tile(s): {per_tile:,.0f} cycles each, from {how}",
        tile_figures=TileFigures(name, tuple(int(t) for t in dest), per_tile))


def barrier(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """tile_data_barrier: the arrays stay where they are; their tiles sync once."""
    for rid, (vid, t) in zip(op.result_ids, _inputs(op), strict=False):
        layouts.assign(rid, layouts.of(vid, t), planned=layouts.planned(vid))
    return OpCost(syncs=1, tiles=len(_tiles(op)), on_tiles=tuple(int(t) for t in _tiles(op)),
                  note="data barrier: one sync of its tiles")


def counter(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """ipu_cycle_count: reads the model's count here; free, so two counts differ by exactly the
    cycles of the rows between them (on hardware a read costs about 45 cycles)."""
    data = _inputs(op)
    for rid, (vid, t) in zip(op.result_ids, data, strict=False):
        layouts.assign(rid, layouts.of(vid, t), planned=layouts.planned(vid))
    if len(op.results) > len(data):
        layouts.assign(op.result_ids[-1], rows_of(op.results[-1], _tiles(op)))
    return OpCost(syncs=int(op.attributes.get("sync") or 0),
                  note=f"cycle counter (site {op.attributes.get('site')})")


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
    tile, and each cycle counter's count (the cycles of every row before it); None when the
    program has no tile ops. `cycles` are the rows' total cycles, as the report counts them."""
    if not any(is_tile_op(r.op) for r in rows):
        return None
    compute = np.zeros(target.num_tiles)
    exchanged = np.zeros(target.num_tiles)
    vertices, counters = [], {}
    before = 0.0
    for row, spent in zip(rows, cycles, strict=True):
        op, figures = row.op, row.cost.tile_figures
        if op.kind == "tile_cycle_count" and is_tile_op(op):
            before += spent  # its own sync, if it asked for one, comes before the read
            spent = 0.0
            site = str(op.attributes.get("site"))
            problem = None
            if row.executions != 1 or row.unknown_trip_count or _in_loop(row, rows):
                problem = "inside a loop, where it would count differently on each trip"
            elif site in counters:
                problem = "reached at several points of the program"
            counters[site] = {"cycles": None if problem else int(round(before)),
                              "location": str(op.location), "problem": problem}
        before += spent
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
            "vertices": vertices, "counters": counters}


def _in_loop(row: Any, rows: list[Any]) -> bool:
    """Whether a row sits in a while body (its depth is under a while head before it)."""
    i = next(k for k, r in enumerate(rows) if r is row)
    depth = row.depth
    for r in reversed(rows[:i]):
        if r.depth < depth:
            if r.op.kind == "while":
                return True
            depth = r.depth
    return False
