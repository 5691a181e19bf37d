"""The graph profile of one compiled program: target, graph size, memory and the per-op table.

Built from the model's ProgramReport.to_dict(), so its numbers are those of jax_ipu.report()."""

from __future__ import annotations

from typing import Any

from jax_ipu.model.ir import Program
from jax_ipu.model.report import ProgramReport

KIND = "jax-ipu graph profile"
SCHEMA_VERSION = 1


def graph_counts(program: Program, ops: list[dict[str, Any]]) -> dict[str, int]:
    """Poplar's graph vocabulary as the model sees it: one compute set per computing op, one
    vertex per tile it runs on, one variable per program input and op result."""
    computing = [o for o in ops if o["compute_cycles"] > 0]
    return {
        "ops": len(ops),
        "compute_sets": len(computing),
        "vertices": sum(o["tiles"] for o in computing),
        "variables": len(program.inputs) + sum(len(op.results) for op in program.walk()),
    }


def graph_profile(report: ProgramReport, program: Program, fingerprint: str,
                  include_flops: bool) -> dict[str, Any]:
    """graph.json. Schema (version 1) is ProgramReport.to_dict() plus:

    - kind: "jax-ipu graph profile"; profile_schema_version: 1; fingerprint: str (sha256)
    - graph: {ops, compute_sets, vertices, variables} (counts, see graph_counts)
    - include_flops: bool. When false, the flop estimates (top-level `flops`, per-op `flops`)
      are left out, as Poplar leaves them out without profiler.includeFlopEstimates.
    """
    doc = report.to_dict()
    if not include_flops:
        del doc["flops"]
        for op in doc["ops"]:
            del op["flops"]
    doc.update(kind=KIND, profile_schema_version=SCHEMA_VERSION, fingerprint=fingerprint,
               graph=graph_counts(program, doc["ops"]), include_flops=include_flops)
    return doc
