"""The shape of graph.json and execution.json as data, and a checker for files read back.

A spec is a type, a dict of key -> spec, or a one-element list [element spec]."""

from __future__ import annotations

from typing import Any

NUMBER = (int, float)

OP = {"name": str, "kind": str, "op_class": str, "location": str, "shapes": str,
      "executions": int, "depth": int, "fused": [str], "bytes_accessed": int,
      "compute_cycles": NUMBER, "exchange_cycles": NUMBER, "sync_cycles": NUMBER,
      "host_cycles": NUMBER, "cycles": NUMBER, "tiles": int, "note": str, "plan": str,
      "runner_up": str}

GRAPH: dict[str, Any] = {
    "kind": str, "profile_schema_version": int, "schema_version": int, "program": str,
    "fingerprint": str, "include_flops": bool,
    "target": {"version": str, "num_tiles": int, "bytes_per_tile": int, "total_bytes": int,
               "clock_hz": NUMBER},
    "graph": {"ops": int, "compute_sets": int, "vertices": int, "variables": int},
    "memory": {
        "fits": bool, "by_category": dict, "always_live_bytes": int,
        "not_always_live_peak_bytes": int, "peak_bytes": int, "peak_step": int,
        "code_bytes_per_tile": int, "per_tile_bytes": [int], "max_tile": int,
        "max_tile_bytes": int, "tiles_out_of_memory": [int], "num_tiles_out_of_memory": int,
        "top_contributors": [{"name": str, "category": str, "bytes_on_tile": int,
                              "total_bytes": int, "location": str}],
        "liveness": [{"step": int, "op": str, "location": str, "bytes": int}],
        "argument_bytes": int, "output_bytes": int, "alias_bytes": int, "temporary_bytes": int,
    },
    "cycles": {"total": NUMBER, "compute": NUMBER, "exchange": NUMBER, "sync": NUMBER,
               "host_exchange": NUMBER, "unknown_trip_counts": int, "unmodelled_ops": [str]},
    "ops": [OP], "bytes_accessed": int, "seconds": NUMBER, "warnings": [str],
}

PHASES = {"compute": NUMBER, "exchange": NUMBER, "sync": NUMBER, "host_exchange": NUMBER}

EXECUTION: dict[str, Any] = {
    "kind": str, "schema_version": int, "program": str, "fingerprint": str, "clock_hz": NUMBER,
    "num_tiles": int,
    "per_run": {"cycles": NUMBER, "microseconds": NUMBER, **PHASES},
    "tile_average_per_run": PHASES,
    "total": {"runs": int, "cycles": NUMBER, "microseconds": NUMBER},
    "runs": [{"index": int, "device": int, "host_start_s": NUMBER, "host_seconds": NUMBER,
              "device_clock_cycles": int}],
    "ops": [{"name": str, "location": str, "executions": int, "cycles": NUMBER,
             "share": NUMBER, **PHASES}],
    "bsp_trace": [{"step": int, "op": str, "location": str, "executions": int,
                   "start": NUMBER, **PHASES}],
}


def check(doc: Any, spec: Any, path: str = "") -> list[str]:
    """Every way `doc` departs from `spec` ("memory.peak_bytes: missing"); empty when it fits.
    Extra keys are allowed, so later versions can add fields."""
    where = path or "<root>"
    if isinstance(spec, dict):
        if not isinstance(doc, dict):
            return [f"{where}: expected an object"]
        problems = []
        for key, sub in spec.items():
            if key not in doc:
                problems.append(f"{path + '.' if path else ''}{key}: missing")
            else:
                problems += check(doc[key], sub, f"{path + '.' if path else ''}{key}")
        return problems
    if isinstance(spec, list):
        if not isinstance(doc, list):
            return [f"{where}: expected a list"]
        return [p for i, item in enumerate(doc) for p in check(item, spec[0], f"{where}[{i}]")]
    # bool is an int in Python; a count must not be a flag.
    if isinstance(doc, bool) and spec is not bool:
        return [f"{where}: expected {_name(spec)}, got a boolean"]
    return [] if isinstance(doc, spec) else [f"{where}: expected {_name(spec)}, "
                                             f"got {type(doc).__name__}"]


def _name(spec: Any) -> str:
    return " or ".join(t.__name__ for t in spec) if isinstance(spec, tuple) else spec.__name__
