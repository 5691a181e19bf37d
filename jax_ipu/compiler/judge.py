"""The compiler's verdict on a program read from StableHLO: refuse what the chip lacks, model it.

compiler.driver.compile() calls judge_program() once per compile, and judge_partitioned() for
SPMD programs; out of memory fails here unless allowed."""

from __future__ import annotations

import logging
from dataclasses import replace

from jax_ipu.compiler.checks import check_program
from jax_ipu.compiler.partitioned import inserted_collectives
from jax_ipu.errors import IpuOutOfMemoryError
from jax_ipu.model import add_collectives, analyze, format_out_of_memory
from jax_ipu.model.ir import Program
from jax_ipu.model.report import ProgramReport
from jax_ipu.model.targets import Target

logger = logging.getLogger(__name__)

PARTITIONER_NOTE = "inserted by XLA's SPMD partitioner"


def judge_program(program: Program, target: Target, allow_out_of_memory: bool = False
                  ) -> ProgramReport:
    """The model's report of a program; raises IpuCompileError for what the target cannot run
    and IpuOutOfMemoryError when a tile overflows (unless allowed, as with Poplar's
    debug.allowOutOfMemory)."""
    check_program(program, target)
    report = analyze(program, target)
    if report.memory.out_of_memory and not allow_out_of_memory:
        raise IpuOutOfMemoryError(format_out_of_memory(report))
    return report


def judge_partitioned(program: Program, report: ProgramReport, partitioned_hlo: bytes
                      ) -> ProgramReport:
    """The report with the collectives XLA's SPMD partitioner put into a partitioned program.

    A sharded jax.jit program carries shardings, not collectives: they appear only in XLA's
    partitioned module (`partitioned_hlo`, a serialized HloModuleProto). If that module cannot
    be read, the report says so instead."""
    try:
        ops = inserted_collectives(program, partitioned_hlo)
    except Exception as e:  # a module we cannot read must never fail the compile
        logger.warning("cannot read XLA's partitioned program of %s", program.name,
                       exc_info=True)
        return replace(report, warnings=[
            *report.warnings, f"exchange between IPUs that XLA's SPMD partitioner inserted is "
            f"not counted: its partitioned program could not be read ({e})"])
    return add_collectives(report, ops, PARTITIONER_NOTE) if ops else report
