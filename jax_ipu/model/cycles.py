"""Cycles of a program: cost rules applied per op, fusion, loops x trip counts, BSP totals.

host_transfer_cycles (model/host.py) is importable from here too, for the runtime."""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections import Counter
from dataclasses import dataclass, field

from jax_ipu.model import collectives, fft, linalg, tiles
from jax_ipu.model.costs import (
    FUSABLE,
    IN_PLACE,
    OP_CLASSES,
    RULES,
    OpCost,
    alu_cycles,
    carry_copies,
    op_class,
    reshape_like,
)
from jax_ipu.model.host import host_transfer_cycles
from jax_ipu.model.ir import Op, Program, TensorType
from jax_ipu.model.mapping import Layouts
from jax_ipu.model.targets import SIMPLE_CYCLES_PER_VECTOR, Target

__all__ = ["OpRow", "cost_block", "cost_program", "fusion", "host_transfer_cycles",
           "use_counts"]

logger = logging.getLogger(__name__)


@dataclass
class OpRow:
    """One costed op (with what was fused into it), as run `executions` times per call."""

    op: Op
    op_class: str
    cost: OpCost
    executions: int = 1
    depth: int = 0
    fused: list[Op] = field(default_factory=list)
    unknown_trip_count: bool = False

    def cycles(self, target: Target) -> float:
        """Cycles of one execution: busiest tile's compute, exchange, syncs."""
        c = self.cost
        return c.compute_cycles + c.exchange_cycles + c.syncs * target.sync_cycles


def use_counts(program: Program) -> Counter:
    """How many times each value is read (by ops, region returns or the entry's outputs)."""
    uses: Counter = Counter(program.output_ids)
    for op in program.walk():
        uses.update(op.operand_ids)
        for region in op.regions:
            uses.update(region.result_ids)
    return uses


def fusion(ops: list[Op], uses: Counter) -> dict[int, list[Op]]:
    """Which ops of a block are folded into a later op that computes them: root index ->
    producers.

    A fusable op folds into its one reader when that reader is elementwise over as many
    elements (or a reduction of it); folded results are never stored, and their passes over
    memory disappear. Reshapes (and reductions over dimensions of size 1, which are
    reshapes) are transparent. A cheap elementwise op read by several such expressions is
    computed again in each rather than stored, as XLA's fusion duplicates cheap producers."""
    readers: dict[int, list[int]] = {}
    for j, op in enumerate(ops):
        for v in op.operand_ids:
            if not readers.get(v) or readers[v][-1] != j:
                readers.setdefault(v, []).append(j)
    parents: dict[int, list[int]] = {}
    for i, op in enumerate(ops):
        if not _fusable(op) or len(op.result_ids) != 1:
            continue
        r = op.result_ids[0]
        js = readers.get(r, [])
        # every read must be by the block's ops (not a region's return or an output)
        if not js or uses[r] != sum(ops[j].operand_ids.count(r) for j in js):
            continue
        if len(js) > 1 and not (_cheap(op) and len(js) <= MAX_DUPLICATES):
            continue
        if all(_folds_into(op, r, ops[j]) for j in js):
            parents[i] = js

    groups: dict[int, list[Op]] = {}
    for i, found in sorted(_roots(ops, parents).items()):
        for root in sorted(found):
            groups.setdefault(root, []).append(ops[i])
    return groups


def _roots(ops: list[Op], parents: dict[int, list[int]]) -> dict[int, frozenset[int]]:
    """The ops each folded op ends up computed in (those of its readers that are not folded
    themselves, through any chain of folded readers). An expression must end in ops that
    compute it: an op that would end in another (a broadcast a scatter reads, say) is not
    folded, and is the end of its own producers' expression if it computes. A reader comes
    after what it reads, so one pass from the block's end sees every reader's roots first:
    linear in the block, where walking each path would be exponential in a residual
    chain's depth (a = a + f(a)). Ops left unfolded are removed from `parents`."""
    found: dict[int, frozenset[int]] = {}
    for i in sorted(parents, reverse=True):
        here: set[int] = set()
        for j in parents[i]:
            here |= found.get(j, {j})
        if any(op_class(ops[k]) not in _ROOTS for k in here):
            del parents[i]
        else:
            found[i] = frozenset(here)
    return found


def _folds_into(op: Op, r: int, consumer: Op) -> bool:
    """Whether `op` (making value r) can be computed inside `consumer`."""
    if not consumer.results:
        return False
    # Broadcasts (and reshapes) become operands of the expression; others must match in size.
    if (op_class(op) == "broadcast" or reshape_like(op)) and _fusable(consumer):
        return True
    if (op_class(consumer) in _EXPRESSIONS or reshape_like(consumer)) and \
            consumer.results[0].size == op.results[0].size:
        return True
    # A scalar made for a broadcast is computed inside the expression that reads the
    # broadcast (popops' expressions take scalar operands): no compute set of its own.
    if op_class(op) in _EXPRESSIONS and op_class(consumer) == "broadcast" and \
            op.results[0].size == 1:
        return True
    # a reduction reads an expression of its input as it goes (a conversion to a wider
    # accumulator, a square...), never storing it
    return op_class(consumer) == "reduction" and op_class(op) in _EXPRESSIONS and \
        consumer.operand_ids[:1] == (r,)


def fused_note(fused: list[Op]) -> str:
    """What the report says of an expression: its computing ops (broadcasts and reshapes
    only feed it) run as one vertex per tile in one compute set, as Poplar's map expressions."""
    computing = 1 + sum(1 for o in fused if op_class(o) in _EXPRESSIONS)
    return f"fused: {computing} ops, 1 compute set"


def _cheap(op: Op) -> bool:
    """Elementwise ops worth computing twice rather than storing: one ALU step a vector."""
    return op_class(op) in _EXPRESSIONS and alu_cycles(op.kind) == SIMPLE_CYCLES_PER_VECTOR


# Readers a cheap producer is computed again in, at most, instead of being stored.
MAX_DUPLICATES = 4
_EXPRESSIONS = frozenset({"elementwise", "conversion"})
_ROOTS = frozenset({"elementwise", "conversion", "reduction"})


def _fusable(op: Op) -> bool:
    return op_class(op) in FUSABLE or reshape_like(op)


def _cost(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    cls = op_class(op)
    try:
        return RULES[cls](op, fused, target, layouts)
    except (ArithmeticError, IndexError, KeyError, TypeError, ValueError):
        # A malformed or unexpected op must not stop compilation: cost it as unmodelled.
        logger.warning("cost rule %s failed on %s; costing it as unmodelled", cls, op.name,
                       exc_info=True)
        try:
            return RULES["unmodelled"](op, [], target, layouts)
        except (ArithmeticError, IndexError, KeyError, TypeError, ValueError):
            # Not even an elementwise pass over its result can be placed (its operands are
            # views of another size): it is counted, at no cost, and named in the warnings.
            return OpCost(unmodelled=True, note=f"no cost rule could cost {op.name}")


def _record(layouts: Layouts, op: Op, cls: str, cost: OpCost) -> None:
    try:
        layouts.record(op, cls, cost.placement)
    except (ArithmeticError, IndexError, KeyError, TypeError, ValueError):
        # An op of an unexpected form must not stop compilation: its results then count as
        # laid out on their own, as those of an unmodelled op.
        logger.warning("cannot place the results of %s", op.name, exc_info=True)


def cost_block(ops: list[Op], target: Target, uses: Counter, executions: int = 1,
               depth: int = 0, layouts: Layouts | None = None) -> list[OpRow]:
    """Rows of one block in program order; region bodies follow their op, deeper by one.

    `layouts` records where each value lives as ops are costed (one per program)."""
    layouts = layouts or Layouts(target.num_tiles)
    groups = fusion(ops, uses)
    skip = {id(o) for producers in groups.values() for o in producers}
    rows: list[OpRow] = []
    for i, op in enumerate(ops):
        if id(op) in skip:
            continue
        cls = op_class(op)
        if cls == "control":
            rows.extend(_control(op, target, uses, executions, depth, layouts))
            _record(layouts, op, cls, OpCost())
            continue
        fused = groups.get(i, [])
        cost = _cost(op, fused, target, layouts)
        if cls in _ROOTS and any(op_class(o) in _EXPRESSIONS for o in fused):
            cost.note = "; ".join(n for n in (fused_note(fused), cost.note) if n)
        _record(layouts, op, cls, cost)
        rows.append(OpRow(op, cls, cost, executions, depth, fused))
    _share_links(ops, rows, target)
    return rows


def _share_links(ops: list[Op], rows: list[OpRow], target: Target) -> None:
    """Independent collective permutes of a block go over the links in one exchange (the two
    directions of a halo swap): the first row is charged the group's exchange, the others none."""
    groups = collectives.concurrent_permutes(ops)
    by_op = {id(r.op): r for r in rows} if groups else {}
    for group in groups:
        members = [by_op[id(op)] for op in group if id(op) in by_op]
        if len(members) < 2:
            continue
        plan = collectives.permute_plan([r.op for r in members], target)
        first, *others = members
        first.cost.exchange_cycles = plan.cycles
        first.cost.note = f"{plan.describe()}; with {len(others)} more permute(s) of the " \
            "same exchange (IPU-Links are full-duplex)"
        for row in others:
            row.cost.exchange_cycles, row.cost.syncs = 0.0, 0
            row.cost.note = f"{row.cost.note}; sent in one exchange with {first.op.name} " \
                f"at {first.op.location}"


def one_tile_cost(ops: list[Op], target: Target) -> tuple[float, int]:
    """(compute cycles, flops) of a vertex program run on one tile, by the model's own rules."""
    one = dataclasses.replace(target, num_tiles=1)
    uses: Counter = Counter()
    for o in ops:
        for inner in o.walk():
            uses.update(inner.operand_ids)
            for region in inner.regions:
                uses.update(region.result_ids)
    rows = cost_block(ops, one, uses, layouts=Layouts(1))
    return (sum(r.cost.compute_cycles * r.executions for r in rows),
            sum(r.cost.flops * r.executions for r in rows))


# Tile-level programs (jax_ipu.tile) name their tiles: their rules are model/tiles.py's; a
# tile_map's vertex of lax primitives costs what this module costs them on one tile.
OP_CLASSES.update(tiles.OP_CLASSES)
RULES.update(tiles.RULES, tile_vertex=functools.partial(tiles.vertex, one_tile=one_tile_cost))
# stablehlo.fft: a planned tiled FFT (model/fft.py).
OP_CLASSES.update(fft.OP_CLASSES)
RULES.update(fft.RULES)
# Library routines the lowering marks (Cholesky, triangular solve, QR): model/linalg.py.
OP_CLASSES.update(linalg.OP_CLASSES)
RULES.update(linalg.RULES)


def _control(op: Op, target: Target, uses: Counter, executions: int, depth: int,
             layouts: Layouts) -> list[OpRow]:
    if op.kind == "manual_computation":
        # shard_map: the region is what every device runs, on its own shard, collectives
        # included; the wrapper itself does nothing on the device.
        head = OpRow(op, "control", OpCost(note="shard_map body: per-device ops follow"),
                     executions, depth)
        return [head, *(row for r in op.regions
                        for row in cost_block(r.ops, target, uses, executions, depth + 1,
                                              layouts))]
    head = OpRow(op, "control", OpCost(syncs=1), executions, depth)
    if op.kind == "while" and len(op.regions) == 2:
        trips = op.trip_count
        head.unknown_trip_count = trips is None
        # Unknown trip count: counted once, and flagged in the report.
        n = 1 if trips is None else trips
        head.cost.note = f"trip count {trips}" if trips is not None else \
            "trip count unknown: body counted once"
        cond = cost_block(op.regions[0].ops, target, uses, executions * (n + 1), depth + 1,
                          layouts)
        body = cost_block(op.regions[1].ops, target, uses, executions * n, depth + 1, layouts)
        counting = _counter_ops(op) if trips is not None else set()
        for row in cond + body:
            if id(row.op) in counting:
                row.cost = OpCost(note="loop counter: a counted loop is Poplar's Repeat, "
                                       "which counts in control code")
        copied = _replaced_carries(op, counting)
        if copied:
            types = tuple(t for t, _ in copied)
            homes = [layouts.of(vid, t) for t, vid in copied]
            copy = Op("ipu.loop_carry_copy", types, types, location=op.location)
            body.append(OpRow(copy, "rearrange", carry_copies(list(types), homes, target),
                              executions * n, depth + 1))
        return [head, *cond, *body]
    # case / if: one branch runs; charge the most expensive one (worst case).
    branches = [cost_block(r.ops, target, uses, executions, depth + 1, layouts)
                for r in op.regions]
    head.cost.note = f"{len(branches)} branches: costliest counted"
    worst = max(branches, key=lambda rows: sum(r.cycles(target) for r in rows), default=[])
    return [head, *worst]


def _replaced_carries(loop: Op, counting: set[int]) -> list[tuple[TensorType, int]]:
    """(type, the body's result id) of each carry a loop body replaces with a value made
    elsewhere: a Poplar loop
    repeats one program over fixed tensors, so each such result is copied into its carry at
    the end of every iteration (PopART's LoopOpx copies body outputs into the loop's inputs
    the same way). A carry passed through, updated in place (a dynamic update or scatter
    into it, an elementwise op over it) or counted by the loop itself needs no copy."""
    body = loop.regions[1]
    made = {v: o for o in body.ops for v in o.result_ids}
    copied = []
    for k, (arg, res) in enumerate(zip(body.arg_ids, body.result_ids, strict=False)):
        if res == arg or k >= len(loop.results):
            continue
        producer = made.get(res)
        if producer is not None and (id(producer) in counting or _in_place_on(producer, arg)):
            continue
        copied.append((loop.results[k], res))
    return copied


def _in_place_on(op: Op, arg: int) -> bool:
    """Whether op writes its result into the carry `arg` it reads."""
    if tiles.is_tile_op(op):
        return tiles.writes_in_place(op, arg)
    if op_class(op) in IN_PLACE:
        return op.operand_ids[:1] == (arg,)
    return op_class(op) in _EXPRESSIONS and len(op.results) == 1 and any(
        v == arg and t.size == op.results[0].size
        for v, t in zip(op.operand_ids, op.operands, strict=False))


def _counter_ops(loop: Op) -> set[int]:
    """Ops of a counted while that only count: its condition, and the body's increment of
    the counter when nothing else in the body reads the counter (else the body needs it as
    a tensor, and it is kept)."""
    cond, body = loop.regions
    ops = {id(o) for o in cond.ops}
    compare = next((o for o in cond.ops if cond.result_ids and
                    cond.result_ids[0] in o.result_ids), None)
    counters = [cond.arg_ids.index(v) for v in (compare.operand_ids if compare else ())
                if v in cond.arg_ids]
    for k in counters:
        if k >= len(body.arg_ids):
            continue
        arg = body.arg_ids[k]
        readers = [o for o in body.ops for _ in range(o.operand_ids.count(arg))]
        if len(readers) == 1 and readers[0].kind == "add" and \
                body.result_ids[k:k + 1] == readers[0].result_ids[:1]:
            ops.add(id(readers[0]))
    return ops


def cost_program(program: Program, target: Target) -> list[OpRow]:
    """Every costed op of the program, nested ones included."""
    return cost_block(program.ops, target, use_counts(program))
