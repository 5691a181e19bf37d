"""A compiled IPU program on its devices: the model's report, its XLA:CPU numerics, and its plan.

The plan (runtime/plan.py, read once by the PJRT layer) says how Execute runs it; execution is
C's."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.extend.mlir import hlo_to_stablehlo

from jax_ipu import _internals
from jax_ipu.compiler import Compiled, hlo, numerics
from jax_ipu.dtypes import element_type, numpy_dtype
from jax_ipu.model.ir import Program
from jax_ipu.model.report import ProgramReport
from jax_ipu.profile import Profiler
from jax_ipu.runtime.device import CLOCK_FIELDS, IpuDevice
from jax_ipu.runtime.plan import ExecutePlan

logger = logging.getLogger(__name__)

NOT_FITTING = (
    "Program {name!r} does not fit in the IPU's tile memory: it was compiled only because "
    "POPLAR_ENGINE_OPTIONS has debug.allowOutOfMemory, so that its report can be written. "
    "Nothing can execute it; make it fit (see the compile report) or unset "
    "debug.allowOutOfMemory."
)


@dataclass(frozen=True)
class OutputSpec:
    """What every execution's output k is: its dtype name, dims, bytes and PJRT element type."""

    dtype: str
    dims: tuple[int, ...]
    nbytes: int
    element_type: int


class IpuExecutable:
    """One program loaded on one or more IPU Model devices, and how Execute runs it."""

    def __init__(self, compiled: Compiled, devices: Sequence[IpuDevice], code: bytes,
                 options: bytes, profiler: Profiler | None, process_index: int) -> None:
        self.compiled = compiled
        self.devices = list(devices)
        self.code = code
        self.options = options
        self.num_replicas, self.num_partitions = compiled.assignment.shape
        self.profiler = profiler
        self.name = self.program.name
        self.fingerprint = compiled.fingerprint
        self.outputs = [OutputSpec(t.dtype, tuple(t.shape), t.nbytes, element_type(t.dtype))
                        for t in compiled.outputs]
        # Of a multi-process program, this process runs the devices it owns.
        self.addressable_positions = [k for k, d in enumerate(self.devices)
                                      if d.process_index == process_index]
        self.addressable = [self.devices[k] for k in self.addressable_positions]
        self._cpu_devices = tuple(d.cpu_device for d in self.addressable)

    @property
    def program(self) -> Program:
        return self.compiled.program

    @property
    def report(self) -> ProgramReport:
        return self.compiled.report

    @property
    def cpu_executable(self) -> Any:
        return self.compiled.cpu_executable

    @property
    def num_args(self) -> int:
        return len(self.program.inputs)

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    @property
    def output_types(self) -> tuple[int, ...]:
        return tuple(o.element_type for o in self.outputs)

    @property
    def output_dims(self) -> tuple[tuple[int, ...], ...]:
        return tuple(o.dims for o in self.outputs)

    # ---- memory kinds: where each argument and output lives ----
    @property
    def parameter_kinds(self) -> tuple[str, ...]:
        """The memory kind of each argument, as the program declares it."""
        kinds = self.program.input_kinds
        return kinds if len(kinds) == self.num_args else ("device",) * self.num_args

    @functools.cached_property
    def output_kinds(self) -> tuple[str, ...]:
        """The memory kind of each output, where XLA:CPU leaves it (what the program asked)."""
        return tuple(self.cpu_executable.get_output_memory_kinds()[0])

    @functools.cached_property
    def advance(self) -> np.ndarray:
        """What one execution adds to each of its devices' model clocks (CLOCK_FIELDS)."""
        cycles = self.report.cycles
        spent = {"compute": cycles.compute, "exchange": cycles.exchange, "sync": cycles.sync,
                 "host_exchange": cycles.host_exchange, "call": cycles.call,
                 "streaming_setup": cycles.streaming_setup, "streaming": cycles.streaming}
        return np.array([round(spent.get(f, 0)) for f in CLOCK_FIELDS], np.int64)

    @property
    def cycles(self) -> int:
        return int(self.advance.sum())

    @property
    def uses_tokens(self) -> bool:
        """Whether an argument or output is a token (ordered effects)."""
        return "token" in {t.dtype for t in (*self.program.inputs, *self.outputs)}

    @property
    def output_reordered(self) -> tuple[bool, ...]:
        """Per output: laid out other than row-major (a user's Format, tiles), so that the host
        must not read its bytes in place. XLA gives no layouts of a program with tokens, whose
        outputs keep XLA:CPU's row-major defaults."""
        if self.uses_tokens:
            return (False,) * self.num_outputs
        return tuple(not _row_major(layout) for layout in self.layouts[1])

    @property
    def may_fail(self) -> bool:
        """Whether a run can fail while XLA:CPU runs it, after the call returned: a custom call
        (host callbacks, jax_ipu.tile's codelets) can, and so can devices of other processes.
        Other programs fail only on inputs that failed, which C sees in their events."""
        return len(self.devices) > len(self.addressable) or b"custom_call" in self.code

    @functools.cached_property
    def plan(self) -> ExecutePlan:
        """How Execute runs the program (read once by the PJRT layer, when it loads this)."""
        # Several devices (all must finish), or no outputs to watch: completion is the token's.
        with_token = len(self.addressable) > 1 or not self.outputs
        # run(*args) returns the outputs: one device in all (not one of several processes').
        direct = len(self.devices) == 1 and not with_token and not self.uses_tokens
        # jax's own C++ dispatch over the executable (it makes output arrays from cached avals
        # and shardings) when direct, else execute_sharded.
        run = _dispatcher(self.name, self.cpu_executable, self.addressable[0].cpu_device,
                          self.parameter_kinds, self.outputs, self.output_kinds) if direct \
            else self.cpu_executable.execute_sharded
        program = self.program
        # Output k lands in memory kind output_kinds[k] of each device; reading it back costs
        # what that kind's reads cost.
        kinds = self.output_kinds
        first = self.addressable[0]
        return ExecutePlan(
            name=self.name, num_replicas=self.num_replicas, num_partitions=self.num_partitions,
            num_args=self.num_args,
            donated=tuple(sorted(set(program.aliases) | set(program.donated_inputs))),
            output_types=self.output_types, output_dims=self.output_dims,
            output_nbytes=tuple(o.nbytes for o in self.outputs),
            output_read_advance=tuple(first.memory_of(kind).read_advance(o.nbytes)
                                      for o, kind in zip(self.outputs, kinds, strict=True)),
            devices=tuple(d.handle for d in self.addressable),
            output_reordered=self.output_reordered,
            output_memories=tuple(tuple(d.memory_of(kind).handle for kind in kinds)
                                  for d in self.addressable),
            clocks=tuple(d.clock for d in self.addressable), advance=self.advance,
            run=run, direct=direct, with_token=with_token, may_fail=self.may_fail,
            assemble=self.assemble if len(self.addressable) > 1 else None,
            after=self._profile if self.profiler else None,
            refusal=NOT_FITTING.format(name=self.name) if self.report.memory.out_of_memory
            else None)

    def _profile(self, start: float, end: float) -> None:
        for device in self.addressable:
            self.profiler.executed(self, device, start, end)

    def assemble(self, per_device: list[list[Any]]) -> list[Any]:
        """One multi-device CPU array per argument from each device's arrays (device order).

        XLA:CPU takes a program's per-device arguments as one array over its devices. A
        replicated sharding places shard d on device d for any shard shape; the executable, not
        the sharding, decides what the shards mean, so the shards need not be equal."""
        joined = []
        for shards, sharding in zip(zip(*per_device, strict=True), self._argument_shardings,
                                    strict=True):
            aval = jax.core.ShapedArray(shards[0].shape, shards[0].dtype)
            joined.append(_internals.ArrayImpl(aval, sharding, list(shards), committed=True,
                                               _skip_checks=True))
        return joined

    @functools.cached_property
    def _argument_shardings(self) -> tuple[Any, ...]:
        """Per argument: the replicated sharding of its memory kind over this process's CPU
        devices (made once, not on every call)."""
        return tuple(_replicated(self._cpu_devices, kind) for kind in self.parameter_kinds)

    # ---- what jax asks about the program ----
    def shardings(self, which: str) -> list[bytes]:
        """Serialized OpShardings XLA chose for the parameters or outputs."""
        exe = self.cpu_executable
        found = (exe.get_parameter_shardings() if which == "parameter"
                 else exe.get_output_shardings())
        if found is None:  # one device holds everything: REPLICATED, the empty OpSharding
            count = len(self.program.inputs if which == "parameter" else self.program.outputs)
            # No outputs is an empty tuple, whose sharding is one TUPLE OpSharding (type 2).
            return [b""] * count if count or which == "parameter" else [b"\x08\x02"]
        return [s.SerializeToString() for s in found]

    @functools.cached_property
    def layouts(self) -> tuple[list[Any], list[Any]]:
        """(parameters, outputs) layouts (jax Layouts), as XLA:CPU compiled the program."""
        return numerics.entry_layouts(self.cpu_executable)

    def optimized_program(self) -> tuple[str, bytes]:
        """What jax reads back as the compiled program (Executable_OptimizedProgram), with the
        entry layouts XLA:CPU compiled it with: (PJRT program format, bytes).

        Of one device, XLA:CPU's optimized module, as cpu answers for its own executables (the
        model judged the program jax sent: jax_ipu.report lists its ops); as the program jax
        sent for one that calls the host (answered as HLO, jaxlib let go of its executable, and
        so of the user's callables, only some time after jax dropped it). Of several, what one
        device runs after XLA's SPMD partitioner, as StableHLO (jaxlib cannot print the Shardy
        program jax sent, nor read its layouts), or as XLA's HLO where jaxlib's conversion to
        StableHLO does not verify."""
        if len(self.devices) > 1:
            partitioned = self.partitioned_program()
            if partitioned is not None:
                return "mlir", numerics.with_entry_layouts(partitioned, *self.layouts)
        if not numerics.calls_host(self.code):
            return "hlo_with_config", hlo.hlo_with_config(self.cpu_executable, self.num_replicas,
                                                          self.num_partitions)
        return "mlir", numerics.with_entry_layouts(self.code, *self.layouts)

    def partitioned_program(self) -> bytes | None:
        """What one device runs after XLA's SPMD partitioner, as StableHLO bytecode; None when
        jaxlib's conversion gives a module that does not verify (some all-to-all replica
        groups)."""
        from jax_ipu.compiler.program import verifies

        module = self.cpu_executable.hlo_modules()[0].as_serialized_hlo_module_proto()
        converted = hlo_to_stablehlo(module)
        if verifies(converted):
            return converted
        logger.info("%s: the partitioned program does not convert to valid StableHLO; "
                    "answering it as XLA's HLO", self.name)
        return None

    def memory_analysis(self) -> dict[str, int]:
        """The model's memory figures under the names of JAX's compiled.memory_analysis()."""
        memory = self.report.memory
        code = memory.code_bytes_per_tile * self.report.target.num_tiles
        return {
            "generated_code": code,
            "argument": memory.argument_bytes,
            "output": memory.output_bytes,
            "alias": memory.alias_bytes,
            "temp": memory.temporary_bytes,
            "peak": memory.peak_bytes,
            "total": memory.argument_bytes + memory.output_bytes - memory.alias_bytes
            + memory.temporary_bytes + code,
            # Streaming Memory and host memory (JAX's host memory kinds)
            "host_argument": memory.host_argument_bytes,
            "host_output": memory.host_output_bytes,
            "host_temp": max(0, sum(memory.other_kinds.values()) - memory.host_argument_bytes
                             - memory.host_output_bytes),
        }

    def cost_analysis(self) -> dict[str, float]:
        """JAX's cost_analysis() keys (flops, bytes accessed) plus the model's IPU figures."""
        report, cycles = self.report, self.report.cycles
        return {
            "flops": report.flops,
            "bytes accessed": report.bytes_accessed,
            "ipu_cycles": cycles.total,
            "ipu_compute_cycles": cycles.compute,
            "ipu_exchange_cycles": cycles.exchange,
            "ipu_sync_cycles": cycles.sync,
            "ipu_host_exchange_cycles": cycles.host_exchange,
            "ipu_call_cycles": cycles.call,
            "ipu_streaming_setup_cycles": cycles.streaming_setup,
            "ipu_streaming_cycles": cycles.streaming,
            "ipu_streaming_memory_bytes": report.memory.streaming_memory_bytes,
            "ipu_seconds": report.seconds,
            "ipu_clock_hz": report.target.clock_hz,
            "ipu_max_tile_bytes": report.memory.max_tile_bytes,
            "ipu_tiles_out_of_memory": len(report.memory.tiles_out_of_memory),
        }


def _dispatcher(name: str, executable: Any, cpu_device: Any, input_kinds: Sequence[str],
                outputs: Sequence[OutputSpec], output_kinds: Sequence[str]) -> Any:
    """A callable running `executable` on one CPU device as jax dispatches its own compiled
    programs: f(*arrays) -> tuple of output arrays. Its first call (and a call whose arguments
    jax's cache does not recognise) runs execute_sharded and hands jax what its C++ fast path
    needs next time. Arguments and outputs are in the CPU device's memory of their kind."""
    def sharding(kind: str) -> Any:
        return jax.sharding.SingleDeviceSharding(cpu_device, memory_kind=kind)

    avals = [jax.core.ShapedArray(o.dims, numpy_dtype(o.dtype)) for o in outputs]
    n_in, n_out = len(input_kinds), len(outputs)
    fastpath = _internals.MeshExecutableFastpathData(
        executable, jax.tree_util.tree_structure(tuple(range(n_out))),
        [sharding(k) for k in input_kinds], [sharding(k) for k in output_kinds], avals,
        [True] * n_out, [True] * n_in, [None] * n_in, [])

    def cache_miss(*args: Any) -> tuple[Any, Any, bool]:
        results = executable.execute_sharded(list(args))
        outs = tuple(per_device[0] for per_device in
                     results.disassemble_into_single_device_arrays())
        return outs, fastpath, False

    return _internals.pjit(name, None, cache_miss, [], [], _internals.JitGlobalCppCacheKeys(),
                           _internals.dispatch_registry, _internals.cc_shard_arg)


def _row_major(layout: Any) -> bool:
    """Whether a jax Layout is the plain row-major order (no tiles) of every ipu buffer."""
    order = layout.major_to_minor
    return tuple(order) == tuple(range(len(order))) and not layout.tiling


@functools.lru_cache(maxsize=64)
def _replicated(cpu_devices: tuple[Any, ...], kind: str) -> Any:
    mesh = jax.sharding.Mesh(np.array(cpu_devices), ("devices",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(), memory_kind=kind)


