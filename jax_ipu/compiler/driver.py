"""compile(): StableHLO in, an IPU program out: read once, checked, judged by the model, numerics.

The runtime calls it once per PJRT compile; nothing else in the compiler is the runtime's."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from jax_ipu.compiler import numerics
from jax_ipu.compiler.aliasing import check_loop_aliases, executable_loop_aliases
from jax_ipu.compiler.judge import judge_partitioned, judge_program
from jax_ipu.compiler.partitioned import entry_result_types
from jax_ipu.compiler.program import lent_context, parse, read_program
from jax_ipu.model.ir import Program, TensorType
from jax_ipu.model.report import ProgramReport
from jax_ipu.model.targets import Target

logger = logging.getLogger(__name__)


@dataclass
class Compiled:
    """A program ready to load: the model's view of it and the XLA:CPU executable that runs it."""

    program: Program
    report: ProgramReport
    cpu_executable: Any
    assignment: np.ndarray  # device ids by (replica, partition)
    outputs: tuple[TensorType, ...]  # what each device's execution returns


def compile(code: bytes, options: bytes, target: Target, cpu_client: Any,
            cpu_device_of: Mapping[int, Any], allow_out_of_memory: bool = False) -> Compiled:
    """Read the StableHLO `code` once, refuse what `target` cannot run, judge it with the model
    (IpuOutOfMemoryError unless `allow_out_of_memory`), build its numerics on `cpu_client` for
    the CPU devices of the IPU devices in `options`' assignment, and add to the report the
    collectives XLA's SPMD partitioner inserted while building them."""
    start = time.perf_counter()
    parsed_options = numerics.parse_options(options)
    assignment = numerics.device_assignment(parsed_options)
    with lent_context(len(code)) as context:
        module = parse(code, context)
        program = read_program(module)
        read = time.perf_counter()
        report = judge_program(program, target, allow_out_of_memory)
        judged = time.perf_counter()
        # jax_ipu.tile's cycle counters return the model's count at their point of the program
        # (XLA:CPU compiles the module so stamped).
        numerics.stamp_cycle_counts(module, (report.tiles or {}).get("counters", {}))
        cpu_executable = numerics.build(cpu_client, code, module, parsed_options, assignment,
                                        cpu_device_of)
        del module  # nothing of the context outlives the compile that borrowed it
    built = time.perf_counter()
    # The model's aliasing through loops, checked against XLA:CPU's own buffer assignment
    # (read only for programs with loops: it is as large as the program).
    if any(op.kind == "while" for op in program.walk()):
        report = check_loop_aliases(report, executable_loop_aliases(cpu_executable))
    outputs = program.outputs
    if assignment.shape[1] > 1:  # SPMD: per-device shapes and collectives are XLA's
        hlo = cpu_executable.hlo_modules()[0].as_serialized_hlo_module_proto()
        outputs = entry_result_types(hlo)
        report = judge_partitioned(program, report, hlo)
    logger.debug("compiled %s: read %.3f s, model %.3f s, XLA:CPU %.3f s, partitioned %.3f s",
                 program.name, read - start, judged - read, built - judged,
                 time.perf_counter() - built)
    return Compiled(program, report, cpu_executable, assignment, outputs)


def load(options: bytes, cpu_executable: bytes, program: Program, report: ProgramReport,
         outputs: tuple[TensorType, ...], cpu_client: Any, cpu_device_of: Mapping[int, Any]
         ) -> Compiled:
    """A program compiled earlier (its parts as serialize kept them), loaded for the devices
    `options` assign: XLA:CPU deserializes its executable; the model's report is reused."""
    parsed_options = numerics.parse_options(options)
    assignment = numerics.device_assignment(parsed_options)
    executable = numerics.load(cpu_client, cpu_executable, parsed_options, assignment,
                               cpu_device_of)
    return Compiled(program, report, executable, assignment, outputs)
