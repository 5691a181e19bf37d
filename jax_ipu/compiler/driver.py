"""compile(): StableHLO in, an IPU program out: read once, checked, judged by the model, numerics.

The runtime calls it once per PJRT compile; nothing else in the compiler is the runtime's."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from jax_ipu.compiler import numerics
from jax_ipu.compiler.aliasing import check_loop_aliases, executable_loop_aliases
from jax_ipu.compiler.fingerprint import fingerprint
from jax_ipu.compiler.judge import judge_partitioned, judge_program
from jax_ipu.compiler.partitioned import entry_result_types
from jax_ipu.compiler.program import lent_context, parse, read_program
from jax_ipu.model.ir import Program, TensorType
from jax_ipu.model.report import ProgramReport
from jax_ipu.model.targets import Target
from jax_ipu.model.tiles import CYCLE_COUNT_TARGET

logger = logging.getLogger(__name__)

WAKE_S = 0.05  # how often a compile waiting for XLA:CPU's build can be stopped
# Programs this large or larger build on a thread of their own beside the judgement (all of
# them: bench/compile_overlap.py sets it past every program to measure the two in turn).
OVERLAP_MIN_BYTES = 0


@dataclass
class Compiled:
    """A program ready to load: the model's view of it and the XLA:CPU executable that runs it."""

    program: Program
    report: ProgramReport
    cpu_executable: Any
    assignment: np.ndarray  # device ids by (replica, partition)
    outputs: tuple[TensorType, ...]  # what each device's execution returns
    fingerprint: str  # compiler/fingerprint.py's, of the program and options jax sent


def compile(code: bytes, options: bytes, target: Target, cpu_client: Any,
            cpu_device_of: Mapping[int, Any], allow_out_of_memory: bool = False) -> Compiled:
    """Read the StableHLO `code` once, refuse what `target` cannot run, judge it with the model
    (IpuOutOfMemoryError unless `allow_out_of_memory`), build its numerics on `cpu_client` for
    the CPU devices of the IPU devices in `options`' assignment, and add to the report the
    collectives XLA's SPMD partitioner inserted while building them.

    XLA:CPU builds the program on a thread of its own, from its own reading of `code`, while
    the model reads and judges it here: XLA:CPU's build holds no GIL. A program with jax_ipu.tile
    cycle counters (the judgement stamps its counts into it) is built after the judgement. An
    error of the model wins over one of the build, and comes once the build ended."""
    start = time.perf_counter()
    parsed_options = numerics.parse_options(options)
    assignment = numerics.device_assignment(parsed_options)
    build = None
    if len(code) >= OVERLAP_MIN_BYTES and CYCLE_COUNT_TARGET.encode() not in code:
        build = _Build(_parse_and_build, (cpu_client, code, parsed_options, assignment,
                                          cpu_device_of))
        build.start()
    try:
        with lent_context(len(code)) as context:
            module = parse(code, context)
            program = read_program(module)
            read = time.perf_counter()
            report = judge_program(program, target, allow_out_of_memory)
            judged = time.perf_counter()
            if build is None:
                # jax_ipu.tile's cycle counters return the model's count at their point of the
                # program (XLA:CPU compiles the module so stamped).
                numerics.stamp_cycle_counts(module, (report.tiles or {}).get("counters", {}))
                cpu_executable = numerics.build(cpu_client, code, module, parsed_options,
                                                assignment, cpu_device_of)
            del module  # nothing of the context outlives the compile that borrowed it
        # worked out while XLA:CPU builds (a few hundred fields of options, read in Python)
        fingerprinted = fingerprint(code, options)
    except Exception:
        # A refusal once nothing of this compile runs on. A compile abandoned by its caller
        # (a BaseException, as Ctrl-C is) leaves at once: the build ends on its own.
        if build is not None:
            build.wait()
        raise
    if build is not None:
        cpu_executable = build.result()
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
    logger.debug("compiled %s: read %.3f s, model %.3f s, XLA:CPU %.3f s more, partitioned "
                 "%.3f s", program.name, read - start, judged - read, built - judged,
                 time.perf_counter() - built)
    return Compiled(program, report, cpu_executable, assignment, outputs, fingerprinted)


def _parse_and_build(cpu_client: Any, code: bytes, options: Any, assignment: np.ndarray,
                     cpu_device_of: Mapping[int, Any], entering: Callable[[], None]) -> Any:
    """XLA:CPU's executable of `code`, read into a context of its own (MLIR contexts are not
    shared between threads); `entering` is called once XLA is about to take it."""
    with lent_context(len(code)) as context:
        module = parse(code, context)
        executable = numerics.build(cpu_client, code, module, options, assignment,
                                    cpu_device_of, entering)
        del module
    return executable


class _Build:
    """A call on a thread of its own (XLA:CPU's build), waited for in short sleeps so that a
    compile abandoned meanwhile can leave at once.

    start() returns once the call is about to enter XLA, which releases the GIL after its first
    millisecond or so: a thread that asks for the GIL while this one runs Python waits out the
    interpreter's switch interval (5 ms), longer than a small program's whole judgement, so
    the build would start after it."""

    def __init__(self, build: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._build, self._args = build, args
        self._value, self._error = None, None
        self._entering = threading.Event()
        self._done = threading.Event()
        # not a daemon (as threads made by jaxlib's are): the interpreter waits for a build
        # left running by a Ctrl-C before it exits, and does not kill it inside XLA
        self._thread = threading.Thread(target=self._run, name="jax_ipu-xla-build",
                                        daemon=False)

    def start(self) -> None:
        self._thread.start()
        while not self._entering.wait(WAKE_S) and not self._done.is_set():
            pass

    def _run(self) -> None:
        try:
            self._value = self._build(*self._args, self._entering.set)
        except BaseException as e:  # noqa: BLE001 - handed to the compile that waits
            self._error = e
        finally:
            self._args = None
            self._done.set()

    def wait(self) -> None:
        """Until the build ended; wakes every WAKE_S to let an exception raised in this thread
        (the compile abandoned) through."""
        while not self._done.wait(WAKE_S):
            pass

    def result(self) -> Any:
        """The XLA:CPU executable, once built (its error, if the build failed)."""
        self.wait()
        if self._error is not None:
            raise self._error
        return self._value


def load(code: bytes, options: bytes, cpu_executable: bytes, program: Program,
         report: ProgramReport, outputs: tuple[TensorType, ...], cpu_client: Any,
         cpu_device_of: Mapping[int, Any]) -> Compiled:
    """A program compiled earlier (its parts as serialize kept them: `code` is what jax sent),
    loaded for the devices `options` assign: XLA:CPU deserializes its executable; the model's
    report is reused."""
    parsed_options = numerics.parse_options(options)
    assignment = numerics.device_assignment(parsed_options)
    executable = numerics.load(cpu_client, cpu_executable, parsed_options, assignment,
                               cpu_device_of)
    return Compiled(program, report, executable, assignment, outputs, fingerprint(code, options))
