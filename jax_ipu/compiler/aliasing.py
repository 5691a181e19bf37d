"""XLA:CPU's buffer assignment, read from the compiled executable: which entry parameters a
loop's state shares its buffer with, checked against the model's aliasing through loops."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from jax_ipu.model.report import ProgramReport
from jax_ipu.protowire import Message

logger = logging.getLogger(__name__)

# Field numbers of xla/service/hlo.proto: BufferAssignmentProto, LogicalBufferProto(.Location),
# BufferAllocationProto(.Assigned), HloModuleProto, HloComputationProto, HloInstructionProto.
_LOGICAL_BUFFERS, _ALLOCATIONS = 1, 3
_BUFFER_ID, _BUFFER_DEFINED_AT, _LOCATION_INSTRUCTION_ID = 1, 3, 4
_ALLOC_IS_PARAMETER, _ALLOC_PARAMETER_NUMBER, _ALLOC_ASSIGNED = 5, 6, 9
_ASSIGNED_BUFFER_ID = 1
_MODULE_COMPUTATIONS, _COMPUTATION_INSTRUCTIONS = 3, 2
_INSTRUCTION_OPCODE, _INSTRUCTION_ID = 2, 35


def loop_aliased_parameters(buffer_assignment: bytes, hlo_module: bytes) -> frozenset[int]:
    """Entry parameters whose allocation a while loop's state shares in XLA's buffer assignment
    (a serialized BufferAssignmentProto) of the module (a serialized HloModuleProto): those XLA
    updates in place through the loop instead of copying them into the loop first."""
    loops = {ins.integer(_INSTRUCTION_ID)
             for comp in Message(hlo_module).messages(_MODULE_COMPUTATIONS)
             for ins in comp.messages(_COMPUTATION_INSTRUCTIONS)
             if ins.text(_INSTRUCTION_OPCODE) == "while"}
    assignment = Message(buffer_assignment)
    defined_at = {}
    for b in assignment.messages(_LOGICAL_BUFFERS):
        at = b.message(_BUFFER_DEFINED_AT)
        defined_at[b.integer(_BUFFER_ID)] = at.integer(_LOCATION_INSTRUCTION_ID) if at else -1
    return frozenset(
        a.integer(_ALLOC_PARAMETER_NUMBER) for a in assignment.messages(_ALLOCATIONS)
        if a.integer(_ALLOC_IS_PARAMETER)
        and any(defined_at.get(x.integer(_ASSIGNED_BUFFER_ID)) in loops
                for x in a.messages(_ALLOC_ASSIGNED)))


def executable_loop_aliases(cpu_executable: Any) -> frozenset[int] | None:
    """loop_aliased_parameters of an XLA:CPU executable; None when it gives no buffer
    assignment (the report then rests on the model's aliasing alone)."""
    try:
        stats = cpu_executable.get_compiled_memory_stats()
        assignment = stats.serialized_buffer_assignment_proto
        if not assignment:
            return None
        module = cpu_executable.hlo_modules()[0].as_serialized_hlo_module_proto()
        return loop_aliased_parameters(assignment, module)
    except Exception:  # an executable we cannot read must never fail the compile
        logger.debug("cannot read XLA:CPU's buffer assignment", exc_info=True)
        return None


def check_loop_aliases(report: ProgramReport, xla: frozenset[int] | None) -> ProgramReport:
    """The report, with a warning when XLA's buffer assignment aliases other parameters through
    loops than the model counted (its memory is then off by those parameters' buffers)."""
    model = frozenset(report.memory.loop_aliased_parameters)
    if xla is None or xla == model:
        return report
    return replace(report, warnings=[
        *report.warnings,
        f"XLA's buffer assignment aliases parameter(s) {sorted(xla)} through loops, the model "
        f"{sorted(model)}: tile memory may be off by the difference's buffers"])
