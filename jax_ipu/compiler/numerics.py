"""The numerics of an IPU program: an XLA:CPU executable built from the same program bytes.

The model judges the program; this executable computes its values, so results match jax on CPU."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
from jax.experimental.layout import Layout
from jaxlib.mlir import ir

from jax_ipu import _internals
from jax_ipu.compiler import lowering
from jax_ipu.compiler.program import lent_context, parse
from jax_ipu.errors import IpuCompileError, IpuError
from jax_ipu.model.tiles import CYCLE_COUNT_TARGET


def parse_options(serialized: bytes) -> Any:
    """The CompileOptions jax sent through PJRT."""
    return _internals.CompileOptions.ParseFromString(serialized)


def device_assignment(options: Any) -> np.ndarray:
    """The (replica, partition) -> device id grid the program runs on.

    jaxlib exposes a DeviceAssignment only serialized; _internals reads it."""
    build = options.executable_build_options
    replicas, partitions = max(build.num_replicas, 1), max(build.num_partitions, 1)
    if build.device_assignment is None:
        return np.arange(replicas * partitions, dtype=np.int64).reshape(replicas, partitions)
    columns = _internals.device_assignment_columns(build.device_assignment)
    return np.asarray(columns, dtype=np.int64).T.reshape(replicas, partitions)


def build(cpu_client: Any, code: bytes, module: ir.Module, options: Any,
          assignment: np.ndarray, cpu_device_of: Mapping[int, Any],
          entering: Callable[[], None] = lambda: None) -> Any:
    """Compile the program for the CPU devices that hold the data of the IPU devices it runs on.

    `code` is the program jax sent and `module` the same program parsed, which XLA:CPU compiles
    once the compiler rewrote it (stamp_cycle_counts): its host callbacks are renumbered here.
    Handed bytes, jaxlib would read them into an MLIR context it makes for the purpose, holding
    the GIL for about 5 ms; a module it compiles at once, without the GIL. `entering` is called
    just before. `cpu_device_of` maps an IPU device id to its CPU device."""
    devices = _place(options, assignment, cpu_device_of)
    callbacks = _host_callbacks(module) if calls_host(code) else []
    entering()
    return cpu_client.compile_and_load(module, devices, options, host_callbacks=callbacks)


def entry_layouts(cpu_executable: Any) -> tuple[list[Layout], list[Layout]]:
    """(parameters, results) layouts of an XLA:CPU executable's entry: JAX's row-major
    defaults, or what the program asked for (mhlo.layout_mode from user Formats)."""
    return ([Layout.from_pjrt_layout(p) for p in cpu_executable.get_parameter_layouts()],
            [Layout.from_pjrt_layout(r) for r in cpu_executable.get_output_layouts()])


def with_entry_layouts(code: bytes, parameters: list[Layout], results: list[Layout]) -> bytes:
    """The StableHLO `code` as bytecode, with its entry layouts (and tiles) stated as the module
    attributes XLA's HLO-to-StableHLO conversion writes.

    jaxlib reads a plugin's executable layouts from the program it answers for
    Executable_OptimizedProgram; without these attributes its StableHLO-to-HLO conversion
    invents them (a transpose's result came out column-major)."""
    with lent_context(len(code)) as context:
        return _with_entry_layouts(parse(code, context), parameters, results)


def _with_entry_layouts(module: ir.Module, parameters: list[Layout], results: list[Layout]
                        ) -> bytes:
    with module.context, ir.Location.unknown(module.context):
        _drop_sharding_constraints(module)
        index = ir.IndexType.get()

        def dense(values: tuple[int, ...]) -> ir.Attribute:
            return ir.DenseElementsAttr.get(np.array(values, np.int64).reshape(len(values)),
                                            type=index)

        def order(layout: Layout) -> ir.Attribute:
            return dense(tuple(layout.major_to_minor[::-1]))

        def tiles(layout: Layout) -> ir.Attribute:
            return ir.ArrayAttr.get([dense(tuple(t)) for t in layout.tiling or ()])

        def result(describe: Any) -> ir.Attribute:
            # One result entry: a tuple's when the function returns several values.
            each = [describe(r) for r in results]
            return ir.ArrayAttr.get([each[0] if len(each) == 1 else ir.ArrayAttr.get(each)])

        attrs = module.operation.attributes
        attrs["mhlo.xla_entry_computation_parameter_layouts"] = ir.ArrayAttr.get(
            [order(p) for p in parameters])
        attrs["mhlo.xla_entry_computation_result_layout"] = result(order)
        if any(x.tiling for x in (*parameters, *results)):
            attrs["mhlo.xla_entry_computation_parameter_tiles"] = ir.ArrayAttr.get(
                [tiles(p) for p in parameters])
            attrs["mhlo.xla_entry_computation_result_tiles"] = result(tiles)
        return module.operation.get_asm(binary=True)


def _drop_sharding_constraints(module: ir.Module) -> None:
    """Replace each sdy.sharding_constraint by its operand: jaxlib's StableHLO-to-HLO conversion
    cannot export it, and the program answered for layouts is one device's, whose constraints
    constrain nothing (a device_put inside jit leaves one before each move between kinds)."""
    constraints = [op for op in _walk(module.body.operations)
                   if op.name == "sdy.sharding_constraint"]
    for op in constraints:
        op.results[0].replace_all_uses_with(op.operands[0])
        op.erase()


def load(cpu_client: Any, serialized: bytes, options: Any, assignment: np.ndarray,
         cpu_device_of: Mapping[int, Any]) -> Any:
    """The XLA:CPU executable `serialized` (what serialize() of a build() gave), loaded for the
    CPU devices of the IPU devices in `assignment`."""
    devices = _place(options, assignment, cpu_device_of)
    return cpu_client.deserialize_executable(serialized, devices, options)


def _place(options: Any, assignment: np.ndarray, cpu_device_of: Mapping[int, Any]) -> Any:
    """The CPU devices of the IPU devices in `assignment`, with the options' device assignment
    rewritten in their ids (XLA:CPU knows only those)."""
    missing = sorted({int(i) for i in assignment.flat} - set(cpu_device_of))
    if missing:
        raise IpuError(f"the program runs on ipu devices {missing}, which this process lacks "
                       f"(it has {sorted(cpu_device_of)}): set jax_ipu_device_count (or "
                       "jax_ipu_visible_devices) to include them")
    cpu_ids = np.vectorize(lambda i: cpu_device_of[i].id, otypes=[np.int64])(assignment)
    options.executable_build_options.device_assignment = _internals.DeviceAssignment.create(
        cpu_ids)
    return _internals.DeviceList(tuple(cpu_device_of[i] for i in assignment.flat))


def _host_callbacks(module: ir.Module) -> list[Any]:
    """The callables of the module's host callbacks, renumbering each custom call's key to its
    position in the list the executable is built with (what XLA:CPU's handler indexes)."""
    calls = [op for op in _walk(module.body.operations)
             if op.name == "stablehlo.custom_call"
             and ir.StringAttr(op.attributes["call_target_name"]).value
             in lowering.HOST_CALLBACK_TARGETS]
    if not calls:
        return []
    with module.context, ir.Location.unknown(module.context):
        keys = [ir.IntegerAttr(ir.DictAttr(op.attributes["mhlo.backend_config"])["index"]).value
                for op in calls]
        order = sorted(set(keys))
        u64 = ir.IntegerType.get_unsigned(64)
        for op, key in zip(calls, keys, strict=True):
            op.attributes["mhlo.backend_config"] = ir.DictAttr.get(
                {"index": ir.IntegerAttr.get(u64, order.index(key))})
    return lowering.host_callbacks(order)


def stamp_cycle_counts(module: ir.Module, counters: Mapping[str, Any]) -> bool:
    """Write the model's count into each of the module's cycle-counter calls (jax_ipu.tile's
    ipu_cycle_count): its first count, and inside counted loops each loop's cycles a trip and
    trips; whether there were any. IpuCompileError for a count the model cannot give (a loop of
    unknown trip count, a site reached twice)."""
    calls = [op for op in _walk(module.body.operations)
             if op.name == "stablehlo.custom_call"
             and ir.StringAttr(op.attributes["call_target_name"]).value == CYCLE_COUNT_TARGET]
    if not calls:
        return False
    with module.context, ir.Location.unknown(module.context):
        i64 = ir.IntegerType.get_signless(64)
        for op in calls:
            config = ir.DictAttr(op.attributes["mhlo.backend_config"])
            site = config["site"]
            entry = counters.get(str(ir.IntegerAttr(site).value))
            if entry is None:
                raise IpuCompileError(
                    "an ipu_cycle_count sits in a branch of lax.cond/switch that the model does "
                    "not count (it counts the costliest branch): count outside the branch")
            if entry["cycles"] is None:
                raise IpuCompileError(
                    f"ipu_cycle_count at {entry['location']} is {entry['problem']}: the model "
                    "counts a call site once per trip of counted loops only; count before and "
                    "after the loop (or the repeated function) instead")
            op.attributes["mhlo.backend_config"] = ir.DictAttr.get(
                {"site": site, "cycles": ir.IntegerAttr.get(i64, int(entry["cycles"])),
                 "strides": _i64s(entry.get("strides", [])),
                 "trips": _i64s(entry.get("trips", []))})
    return True


def _i64s(values: Any) -> Any:
    """A 1-D int64 dense attribute, as jax writes an FFI call's array attributes."""
    return ir.DenseElementsAttr.get(np.asarray(values, np.int64).reshape(-1))


def _walk(operations: Any) -> Iterator[Any]:
    for mop in operations:
        op = mop.operation
        yield op
        for region in op.regions:
            for block in region.blocks:
                yield from _walk(block.operations)


def calls_host(code: bytes) -> bool:
    """Whether the program (as jax sent it) calls back into the host."""
    return any(name.encode() in code for name in lowering.HOST_CALLBACK_TARGETS)
