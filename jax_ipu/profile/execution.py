"""The execution profile of one program: its runs, cycles by phase and op, and a BSP trace.

Cycles are the model's (the busiest tile sets the pace of each bulk-synchronous step)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KIND = "jax-ipu execution profile"
SCHEMA_VERSION = 1
PHASES = ("sync", "exchange", "compute", "host_exchange")
# Detailed run records kept per program; later runs are only counted, so long loops stay small.
MAX_RUNS_LISTED = 1000


@dataclass(frozen=True)
class Run:
    """One execution as the runtime saw it (host seconds are time.perf_counter() values)."""

    device: int
    host_start: float
    host_end: float
    device_clock: int  # the device's model clock after the run, in cycles


def bsp_trace(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One step per costed op in program order: sync, then exchange, then compute, then host
    exchange, each starting where the previous phase ended (cycles over all of its executions)."""
    steps, at = [], 0.0
    for i, op in enumerate(ops):
        phases = {"sync": op["sync_cycles"], "exchange": op["exchange_cycles"],
                  "compute": op["compute_cycles"], "host_exchange": op["host_cycles"]}
        steps.append({"step": i, "op": op["name"], "location": op["location"],
                      "executions": op["executions"], "start": at,
                      **{k: float(v) for k, v in phases.items()}})
        at += sum(phases.values())
    return steps


def tile_averages(graph: dict[str, Any]) -> dict[str, float]:
    """Cycles per phase averaged over all tiles: an op's compute and exchange occupy only the
    tiles it is mapped to, while every tile takes part in each sync and host exchange."""
    tiles = graph["target"]["num_tiles"]
    ops, cycles = graph["ops"], graph["cycles"]
    return {
        "compute": sum(o["compute_cycles"] * o["tiles"] for o in ops) / tiles,
        "exchange": sum(o["exchange_cycles"] * o["tiles"] for o in ops) / tiles,
        "sync": float(cycles["sync"]),
        "host_exchange": float(cycles["host_exchange"]),
    }


def execution_profile(graph: dict[str, Any], runs: list[Run], run_count: int,
                      origin: float) -> dict[str, Any]:
    """execution.json for a program (its graph profile `graph`) run `run_count` times.

    Schema (version 1):
    - kind: "jax-ipu execution profile"; schema_version: 1; program; fingerprint
    - clock_hz, num_tiles
    - per_run: {cycles, microseconds, compute, exchange, sync, host_exchange, streaming}: one
      run's cycles on the chip (streaming: its moves between memory kinds, set-ups included);
      call: what the host adds to each call (starting it, hearing it end), and
      with_call: {cycles, microseconds} of one call including it
    - tile_average_per_run: {compute, exchange, sync, host_exchange} (see tile_averages)
    - total: {runs, cycles, microseconds}: over every run
    - runs: [{index, device, host_start_s, host_seconds, device_clock_cycles}] (at most
      MAX_RUNS_LISTED; host_start_s counts from the profiler's start)
    - ops: [{name, location, executions, cycles, compute, exchange, sync, host_exchange,
      share}] ordered by cycles, largest first; share is the fraction of one run's cycles
    - bsp_trace: [{step, op, location, executions, start, sync, exchange, compute,
      host_exchange}] in program order; start and phases in cycles of one run
    """
    cycles, clock = graph["cycles"], graph["target"]["clock_hz"]
    total = float(cycles["total"])
    call = cycles.get("call", 0)
    ops = sorted(
        ({"name": o["name"], "location": o["location"], "executions": o["executions"],
          "cycles": float(o["cycles"]), "compute": float(o["compute_cycles"]),
          "exchange": float(o["exchange_cycles"]), "sync": float(o["sync_cycles"]),
          "host_exchange": float(o["host_cycles"]),
          "share": float(o["cycles"]) / total if total else 0.0} for o in graph["ops"]),
        key=lambda o: -o["cycles"])
    return {
        "kind": KIND, "schema_version": SCHEMA_VERSION, "program": graph["program"],
        "fingerprint": graph["fingerprint"], "clock_hz": clock,
        "num_tiles": graph["target"]["num_tiles"],
        "per_run": {"cycles": total, "microseconds": total / clock * 1e6,
                    **{k: float(cycles[k]) for k in PHASES}, "call": float(call),
                    "streaming": float(cycles.get("streaming_setup", 0)
                                       + cycles.get("streaming", 0)),
                    "with_call": {"cycles": total + call,
                                  "microseconds": (total + call) / clock * 1e6}},
        "tile_average_per_run": tile_averages(graph),
        "total": {"runs": run_count, "cycles": total * run_count,
                  "microseconds": total * run_count / clock * 1e6},
        "runs": [{"index": i, "device": r.device, "host_start_s": r.host_start - origin,
                  "host_seconds": r.host_end - r.host_start,
                  "device_clock_cycles": r.device_clock} for i, r in enumerate(runs)],
        "ops": ops,
        "bsp_trace": bsp_trace(graph["ops"]),
    }
