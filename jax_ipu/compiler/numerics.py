"""The numerics of an IPU program: an XLA:CPU executable built from the same program bytes.

The model judges the program; this executable computes its values, so results match jax on CPU."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from jaxlib.mlir import ir

from jax_ipu import _internals
from jax_ipu.compiler import lowering
from jax_ipu.errors import IpuError


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
          assignment: np.ndarray, cpu_device_of: Mapping[int, Any]) -> Any:
    """Compile the program for the CPU devices that hold the data of the IPU devices it runs on.

    `code` is the program jax sent and `module` the same program parsed, which XLA:CPU compiles
    (sooner than it would read `code` again) once the model has read it: its host callbacks are
    renumbered here. `cpu_device_of` maps an IPU device id to its CPU device."""
    devices = _place(options, assignment, cpu_device_of)
    callbacks = _host_callbacks(module) if calls_host(code) else []
    return cpu_client.compile_and_load(module, devices, options, host_callbacks=callbacks)


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
