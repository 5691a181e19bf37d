"""The compiler's verdict on one program: read it, refuse what the chip lacks, model it.

The runtime calls judge() once per compile; out of memory fails here unless allowed."""

from __future__ import annotations

from jax_ipu.compiler.checks import check_program
from jax_ipu.compiler.program import read_program
from jax_ipu.errors import IpuOutOfMemoryError
from jax_ipu.model import analyze, format_out_of_memory
from jax_ipu.model.ir import Program
from jax_ipu.model.report import ProgramReport
from jax_ipu.model.targets import Target


def judge(code: bytes | str, target: Target, allow_out_of_memory: bool = False
          ) -> tuple[Program, ProgramReport]:
    """Program and report for the StableHLO `code` PJRT received; raises IpuCompileError for
    what the target cannot run and IpuOutOfMemoryError when a tile overflows (unless allowed,
    as with Poplar's debug.allowOutOfMemory)."""
    program = read_program(code)
    check_program(program, target)
    report = analyze(program, target)
    if report.memory.out_of_memory and not allow_out_of_memory:
        raise IpuOutOfMemoryError(format_out_of_memory(report))
    return program, report
