"""The IPU as data and formulas: targets, tile memory, cycles, reports. No JAX in here.

analyze() is the entry point: one Program and one Target in, one ProgramReport out."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from jax_ipu.model.cycles import OpRow, cost_block, cost_program
from jax_ipu.model.host import (
    TO_DEVICE,
    TO_HOST,
    HostTransfer,
    call_overhead_cycles,
    host_transfer,
    host_transfer_cycles,
)
from jax_ipu.model.ir import Op, Program
from jax_ipu.model.memory import analyze_memory, unsharded_values
from jax_ipu.model.report import (
    CyclesReport,
    OpReport,
    ProgramReport,
    format_out_of_memory,
)
from jax_ipu.model.streaming import Placement, place
from jax_ipu.model.targets import Target, get_target
from jax_ipu.model.tiles import tile_view

__all__ = ["TO_DEVICE", "TO_HOST", "HostTransfer", "ProgramReport", "Target", "add_collectives",
           "analyze", "call_overhead_cycles", "format_out_of_memory", "get_target",
           "host_transfer", "host_transfer_cycles"]


def _op_report(row: OpRow, target: Target, placement: Placement | None = None) -> OpReport:
    c, n = row.cost, row.executions
    moves = placement.moves_of((row.op, *row.fused)) if placement else []
    setup, moved = sum(m.setup_cycles for m in moves), sum(m.transfer_cycles for m in moves)
    shapes = ", ".join(str(t) for t in row.op.operands) + " -> " + \
        ", ".join(str(t) for t in row.op.results)
    host = host_transfer_cycles(c.host_bytes_to_host, target, TO_HOST) + \
        host_transfer_cycles(c.host_bytes_to_device, target, TO_DEVICE)
    sync = c.syncs * target.sync_cycles
    return OpReport(
        name=row.op.name, kind=row.op.kind, op_class=row.op_class,
        location=str(row.op.location), file=row.op.location.file, line=row.op.location.line,
        shapes=shapes, executions=n, depth=row.depth, fused=[o.kind for o in row.fused],
        flops=c.flops * n, bytes_accessed=c.bytes_accessed * n,
        compute_cycles=c.compute_cycles * n, exchange_cycles=c.exchange_cycles * n,
        sync_cycles=sync * n, host_cycles=host * n,
        cycles=(c.compute_cycles + c.exchange_cycles + sync + host + setup + moved) * n,
        tiles=c.tiles, note=c.note, link_bytes=c.link_bytes * n,
        streaming_setup_cycles=setup * n, streaming_cycles=moved * n, plan=c.plan,
        runner_up=c.alternative)


def analyze(program: Program, target: Target) -> ProgramReport:
    """The model's judgement of a program on a target: memory per tile and cycles.

    The report's target counts the IPUs the program runs on (replicas x partitions)."""
    devices = (program.num_replicas or 1) * (program.num_partitions or 1)
    target = replace(target, num_ipus=max(target.num_ipus, devices))
    rows = cost_program(program, target)
    placement = place(program, target)
    ops = [_op_report(r, target, placement) for r in rows]
    memory = analyze_memory(program, rows, target, placement)
    unknown = sum(1 for r in rows if r.unknown_trip_count)
    unmodelled = sorted({r.op.name for r in rows if r.cost.unmodelled})
    warnings = []
    if unknown:
        warnings.append(f"{unknown} loop(s) with a data-dependent trip count: body counted once")
    unsharded = unsharded_values(program) if devices > 1 else 0
    if unsharded:
        warnings.append(f"{unsharded} value(s) outside shard_map bodies with no readable "
                        f"sharding: counted whole on each of the {devices} IPUs, so memory "
                        f"may be overstated")
    if unmodelled:
        warnings.append(f"ops without a cost rule (costed as elementwise): "
                        f"{', '.join(unmodelled)}")
    phases = _phase_cycles(ops)
    cycles = CyclesReport(
        **phases,
        host_input_cycles_per_call=sum(host_transfer_cycles(t.nbytes, target, TO_DEVICE)
                                       for t in program.inputs),
        host_output_cycles_per_call=sum(host_transfer_cycles(t.nbytes, target, TO_HOST)
                                        for t in program.outputs),
        unknown_trip_counts=unknown, unmodelled_ops=unmodelled,
        call=call_overhead_cycles(target))
    return ProgramReport(
        program=program.name, target=target, memory=memory, cycles=cycles, ops=ops,
        flops=sum(o.flops for o in ops), bytes_accessed=sum(o.bytes_accessed for o in ops),
        seconds=phases["total"] / target.clock_hz, warnings=warnings,
        tiles=tile_view(rows, [o.cycles for o in ops], target))


def _phase_cycles(ops: list[OpReport]) -> dict[str, float]:
    """The program's cycles in each phase, and in all, from its op rows."""
    phases = {"compute": sum(o.compute_cycles for o in ops),
              "exchange": sum(o.exchange_cycles for o in ops),
              "sync": sum(o.sync_cycles for o in ops),
              "host_exchange": sum(o.host_cycles for o in ops),
              "streaming_setup": sum(o.streaming_setup_cycles for o in ops),
              "streaming": sum(o.streaming_cycles for o in ops)}
    return {"total": sum(phases.values()), **phases}


def _after_source(ops: list[OpReport], op: Op) -> int:
    """Where a row for `op` goes: after the last row of the same kind (the last part of its
    name-stack scope, e.g. dot_general) from its source line, else of that line, else last."""
    if op.location.file is None:
        return len(ops)
    where = (op.location.file, op.location.line)
    kind = (op.location.scope or "").rsplit("/", 1)[-1]
    for same_kind in (True, False):
        for i in range(len(ops) - 1, -1, -1):
            if (ops[i].file, ops[i].line) == where and (ops[i].kind == kind or not same_kind):
                return i + 1
    return len(ops)


def add_collectives(report: ProgramReport, ops: list[Op], note: str) -> ProgramReport:
    """The report with collectives the judged program does not contain itself (those XLA's
    SPMD partitioner inserts), costed by the same rules as its own: a row each, placed after
    the rows of its source line and marked with `note`, and counted in every total.

    `ops` are per-device collectives, possibly inside while and case ops that repeat or choose
    them; those control ops only set how often each runs and add no rows themselves."""
    rows = [r for r in cost_block(ops, report.target, Counter()) if r.op_class == "collective"]
    merged = list(report.ops)
    for row in rows:
        added = _op_report(row, report.target)
        added.note = f"{added.note}; {note}"
        merged.insert(_after_source(merged, row.op), added)
    phases = _phase_cycles(merged)
    return replace(report, ops=merged, cycles=replace(report.cycles, **phases),
                   flops=sum(o.flops for o in merged),
                   bytes_accessed=sum(o.bytes_accessed for o in merged),
                   seconds=phases["total"] / report.target.clock_hz)
