"""Code, vertex state and exchange code on each tile, from a rule for each (Poplar's categories).

Each costed op adds, on the tiles it runs on: one vertex per compute step (a descriptor, a
pointer per field, worklists for the AMP), exchange code per exchange step (set-up and one
instruction per message), its codelet once per tile; every tile holds the control program
and a few instructions per BSP step. Ops start on rotating tiles, as Poplar spreads them, and
identical ops share their code."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jax_ipu.model.cycles import OpRow
from jax_ipu.model.targets import (
    AMP_WORKLIST_BYTES,
    CONTROL_CODE_BYTES_PER_STEP,
    CONTROL_CODE_BYTES_PER_TILE,
    EXCHANGE_CODE_BYTES_PER_INSTRUCTION,
    EXCHANGE_CODE_BYTES_PER_STEP,
    POINTER_BYTES,
    VERTEX_CODE_BYTES_PER_KIND,
    VERTEX_DESCRIPTOR_BYTES,
    Target,
)

CATEGORIES = ("control code", "vertex code", "vertex state", "exchange code")
_AMP_CLASSES = frozenset({"dot", "conv"})


@dataclass(frozen=True)
class OpCode:
    """What one op adds on each tile it runs on."""

    vertex_state: int
    exchange_code: int


def op_code(row: OpRow, target: Target) -> OpCode:
    """Vertex state and exchange code one op adds to each of its tiles.

    A vertex is a descriptor (its codelet and state addresses) and a pointer per field: each
    operand it reads and result it writes, fused ones included. An AMP vertex also holds
    worklists: per kernel position and worker, an output offset, a count and an input
    offset. An exchange step is its set-up and one instruction per message sent or
    received (a planned op says how many; else one each way)."""
    cost = row.cost
    compute_steps = cost.compute_steps or (1 if cost.compute_cycles > 0 else 0)
    exchange_steps = cost.exchange_steps or (1 if cost.exchange_cycles > 0 else 0)
    fields = len(row.op.operands) + len(row.op.results) + \
        sum(len(o.operands) for o in row.fused) - len(row.fused)
    vertex = VERTEX_DESCRIPTOR_BYTES + POINTER_BYTES * fields
    if row.op_class in _AMP_CLASSES:
        vertex += AMP_WORKLIST_BYTES * target.worker_threads * max(1, cost.kernel_positions)
    messages = cost.messages or 2
    return OpCode(compute_steps * vertex, exchange_steps * (
        EXCHANGE_CODE_BYTES_PER_STEP + EXCHANGE_CODE_BYTES_PER_INSTRUCTION * messages))


def _signature(row: OpRow) -> tuple:
    """Ops alike in kind, shapes, fusion and plan compile to the same code: Poplar outlines
    identical operations into one function called from each place (G-7), as it does for
    repeated layers and for the forward ops a recomputation runs again."""
    return (row.op.name, row.op.operands, row.op.results, tuple(o.kind for o in row.fused),
            row.cost.tiles, row.cost.plan, row.cost.exchange_cycles, row.cost.compute_cycles)


def code_per_tile(rows: list[OpRow], target: Target) -> dict[str, np.ndarray]:
    """Bytes of each code category on each tile (CATEGORIES, arrays of num_tiles); an op
    alike another already placed adds no vertex state, exchange code or codelet of its own
    (it still takes its BSP steps in the control program)."""
    t = target.num_tiles
    out = {name: np.zeros(t, dtype=np.int64) for name in CATEGORIES}
    codelets: dict[str, np.ndarray] = {}
    compiled: set[tuple] = set()
    start, control = 0, CONTROL_CODE_BYTES_PER_TILE
    for row in rows:
        repeat = _signature(row) in compiled
        if row.cost.syncs:
            # an outlined op's steps are a call where it repeats
            control += POINTER_BYTES if repeat else CONTROL_CODE_BYTES_PER_STEP
        tiles = min(t, row.cost.tiles)
        if (tiles <= 0 and not row.cost.on_tiles) or repeat:
            continue
        compiled.add(_signature(row))
        if row.cost.on_tiles:
            where = np.asarray(row.cost.on_tiles, dtype=np.int64) % t
        else:
            where = (start + np.arange(tiles)) % t
            start = (start + tiles) % t if tiles < t else start
        code = op_code(row, target)
        out["vertex state"][where] += code.vertex_state
        out["exchange code"][where] += code.exchange_code
        if code.vertex_state:
            for kind in {o.kind for o in (row.op, *row.fused)}:
                held = codelets.setdefault(kind, np.zeros(t, dtype=bool))
                held[where] = True
    for held in codelets.values():
        out["vertex code"] += VERTEX_CODE_BYTES_PER_KIND * held
    out["control code"] += control
    return out
