"""One small handler per PJRT slot served in Python: unpack args, call the runtime, pack results.

Runtime errors become PJRT errors with their code; a slot with no handler answers UNIMPLEMENTED."""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jax_ipu import _internals, dtypes
from jax_ipu.errors import IpuCompileError, IpuError, IpuOutOfMemoryError, from_host_callback
from jax_ipu.pjrt import _table, abi, cancel
from jax_ipu.pjrt.waiter import Waiter
from jax_ipu.profile import tracing
from jax_ipu.runtime.client import IpuClient, Settings, live_clients
from jax_ipu.runtime.cluster import Cluster
from jax_ipu.runtime.device import IpuDevice, IpuMemory
from jax_ipu.runtime.executable import IpuExecutable
from jax_ipu.runtime.plan import ExecutePlan

logger = logging.getLogger(__name__)

SLOT_NAMES: tuple[str, ...] = _table.slot_names()
Handler = Callable[[Any], None]
_HANDLERS: list[tuple[Handler, type] | None] = [None] * len(SLOT_NAMES)

# Strings, arrays and NamedValues handed to jaxlib must outlive their owner's use; they are kept
# in the owner's `_pjrt_keep` dict (or here, for process-lifetime values).
_FOREVER: dict[Any, Any] = {}


def slot(name: str, layout: type) -> Callable[[Handler], Handler]:
    """Register the handler of slot PJRT_<name>, whose args have `layout`."""
    index = SLOT_NAMES.index("PJRT_" + name)

    def register(fn: Handler) -> Handler:
        _HANDLERS[index] = (fn, layout)
        return fn

    return register


def _error(code: str, message: str) -> int:
    return _table.make_error(abi.CODE[code], message)


def status_of(exc: BaseException) -> tuple[int, str]:
    """The PJRT error code and message a Python exception becomes.

    jaxlib's own errors (XLA:CPU's statuses, raised as JaxRuntimeError, ValueError and others)
    start with their code, "INVALID_ARGUMENT: ...": the code is kept and the prefix dropped, as
    jaxlib writes the code again in front of the message it raises. A jax_ipu error a host
    callback raised while the program ran becomes what it would have been raised directly."""
    if isinstance(exc, IpuOutOfMemoryError):
        return abi.CODE["RESOURCE_EXHAUSTED"], str(exc)
    if isinstance(exc, cancel.CompileAbandoned):  # nobody waits for this error
        return abi.CODE["CANCELLED"], "the compile was abandoned by its caller"
    if not isinstance(exc, IpuError):
        code, separator, message = str(exc).partition(": ")
        if separator and code in abi.CODE:
            raised = from_host_callback(message)  # ours, from a host callback: its words first
            return status_of(raised) if raised is not None else (abi.CODE[code], message)
    if isinstance(exc, (IpuCompileError, ValueError, TypeError)):
        return abi.CODE["INVALID_ARGUMENT"], str(exc)
    if isinstance(exc, NotImplementedError):
        return abi.CODE["UNIMPLEMENTED"], str(exc)
    if isinstance(exc, IpuError):
        return abi.CODE["FAILED_PRECONDITION"], str(exc)
    logger.error("jax_ipu: internal error", exc_info=exc)
    return abi.CODE["INTERNAL"], f"jax_ipu internal error: {type(exc).__name__}: {exc}"


def _error_for(exc: BaseException) -> int:
    return _table.make_error(*status_of(exc))


def dispatch(index: int, address: int) -> int:
    """Entry point of every Python-served slot: 0 on success, else a PJRT_Error address."""
    entry = _HANDLERS[index]
    if entry is None:
        return _error("UNIMPLEMENTED", f"{SLOT_NAMES[index]} is not implemented by jax_ipu.")
    handler, layout = entry
    try:
        caller_size = ctypes.c_size_t.from_address(address).value
        if caller_size >= layout.STRUCT_SIZE:
            handler(layout.from_address(address))
        else:  # an older caller: work on a zero-padded copy, write back only its bytes
            scratch = ctypes.create_string_buffer(ctypes.sizeof(layout))
            ctypes.memmove(scratch, address, caller_size)
            handler(layout.from_buffer(scratch))
            ctypes.memmove(address, scratch, caller_size)
    except Exception as exc:  # noqa: BLE001 - every failure must become a PJRT error
        return _error_for(exc)
    return 0


# ---- helpers to hand values to jaxlib ----
def _obj(address: int) -> Any:
    return _table.deref(address).obj


def _keep(owner: Any, key: Any, make: Callable[[], Any]) -> Any:
    store = _FOREVER if owner is None else owner.__dict__.setdefault("_pjrt_keep", {})
    if key not in store:
        store[key] = make()
    return store[key]


def _string(owner: Any, text: str) -> tuple[int, int]:
    data = _keep(owner, ("str", text), lambda: ctypes.create_string_buffer(text.encode()))
    return ctypes.addressof(data), len(text.encode())


def _handles(owner: Any, key: Any, objs: Sequence[Any]) -> tuple[int, int]:
    """A PJRT array of the handles of `objs` (devices, memories), built once per owner and key."""
    array = _keep(owner, key, lambda: (ctypes.c_void_p * max(len(objs), 1))(
        *[o.handle.address for o in objs]))
    return ctypes.addressof(array), len(objs)


def _named_values(owner: Any, key: Any, values: dict[str, Any]) -> tuple[int, int]:
    def make() -> Any:
        array = (abi.NamedValue * max(len(values), 1))()
        keep: list[Any] = [array]
        for item, (name, value) in zip(array, values.items(), strict=False):
            encoded = name.encode()
            name_buf = ctypes.create_string_buffer(encoded)
            keep.append(name_buf)
            item.struct_size = abi.NamedValue.STRUCT_SIZE
            item.name, item.name_size = ctypes.addressof(name_buf), len(encoded)
            if isinstance(value, bool):
                item.type, item.value.bool_value, item.value_size = abi.NAMED_BOOL, value, 1
            elif isinstance(value, int):
                item.type, item.value.int64_value, item.value_size = abi.NAMED_INT64, value, 1
            elif isinstance(value, float):
                item.type, item.value.float_value, item.value_size = abi.NAMED_FLOAT, value, 1
            elif isinstance(value, str):
                text = ctypes.create_string_buffer(value.encode())
                keep.append(text)
                item.type, item.value.string_value = abi.NAMED_STRING, ctypes.addressof(text)
                item.value_size = len(value.encode())
            else:
                ints = (ctypes.c_int64 * len(value))(*value)
                keep.append(ints)
                item.type = abi.NAMED_INT64_LIST
                item.value.int64_array_value = ctypes.addressof(ints)
                item.value_size = len(value)
        return keep

    kept = _keep(owner, key, make)
    return ctypes.addressof(kept[0]), len(values)


def _bytes_out(owner: Any, key: Any, data: bytes) -> tuple[int, int]:
    buf = _keep(owner, key, lambda: ctypes.create_string_buffer(data, len(data) or 1))
    return ctypes.addressof(buf), len(data)


# ---- plugin ----
@slot("Plugin_Initialize", abi.PluginInitialize)
def plugin_initialize(args: Any) -> None:
    """Nothing to do: plugin.initialize() checked the versions before registering the table."""


@slot("Plugin_Attributes", abi.PluginAttributes)
def plugin_attributes(args: Any) -> None:
    from jaxlib.mlir.dialects import stablehlo

    current = [int(p) for p in stablehlo.get_current_version().split(".")]
    minimum = [int(p) for p in stablehlo.get_minimum_version().split(".")]
    attrs = {"stablehlo_current_version": current, "stablehlo_minimum_version": minimum}
    args.attributes, args.num_attributes = _named_values(None, "plugin", attrs)


# ---- client ----

@slot("Client_Create", abi.ClientCreate)
def client_create(args: Any) -> None:
    state = _distributed_state()
    cluster = None if state is None else Cluster.join(
        state.client, state.process_index, state.num_processes, state.coordinator_address)
    client = IpuClient(Settings.from_config(), cluster)
    for device in client.devices:
        for memory in device.memories.values():
            limit = -1 if memory.bytes_limit is None else memory.bytes_limit  # -1: none
            memory.handle = _table.new_memory(memory, memory.kind.encode(), memory.kind_id,
                                              memory.stats_counters, limit)
        # its memories, the default (tile memory) first as in memories_of
        device.handle = _table.new_device(device, [m.handle for m in device.memories.values()],
                                          device.clock, client.fetched(device))
    client.handle = _table.new_handle(client)
    args.client = _table.give(client.handle)


@slot("Client_PlatformName", abi.ClientString)
def client_platform_name(args: Any) -> None:
    args.value, args.value_size = _string(None, IpuClient.platform_name)


@slot("Client_PlatformVersion", abi.ClientString)
def client_platform_version(args: Any) -> None:
    client = _obj(args.client)
    args.value, args.value_size = _string(client, client.platform_version)


@slot("Client_ProcessIndex", abi.ClientProcessIndex)
def client_process_index(args: Any) -> None:
    args.process_index = _obj(args.client).process_index


@slot("Client_Devices", abi.ClientList)
def client_devices(args: Any) -> None:
    client = _obj(args.client)
    args.items, args.num_items = _handles(client, "devices", client.devices)


@slot("Client_AddressableDevices", abi.ClientList)
def client_addressable_devices(args: Any) -> None:
    client = _obj(args.client)
    args.items, args.num_items = _handles(client, "addressable", client.addressable)


@slot("Client_AddressableMemories", abi.ClientList)
def client_memories(args: Any) -> None:
    client = _obj(args.client)
    args.items, args.num_items = _handles(client, "memories", client.memories)


@slot("Client_LookupDevice", abi.ClientLookupDevice)
def client_lookup_device(args: Any) -> None:
    args.device = _obj(args.client).device(args.id).handle.address


@slot("Client_LookupAddressableDevice", abi.ClientLookupDevice)
def client_lookup_addressable_device(args: Any) -> None:
    client = _obj(args.client)
    for device in client.addressable:
        if device.local_hardware_id == args.id:
            args.device = device.handle.address
            return
    raise IpuError(f"No ipu device with local hardware id {args.id} in this process; it has "
                   f"{[d.local_hardware_id for d in client.addressable]}.")


@slot("Client_DefaultDeviceAssignment", abi.ClientDefaultDeviceAssignment)
def client_default_device_assignment(args: Any) -> None:
    client = _obj(args.client)
    needed = args.num_replicas * args.num_partitions
    if needed > len(client.devices):
        raise IpuError(
            f"A program for {args.num_replicas} replicas x {args.num_partitions} partitions needs "
            f"{needed} ipu devices, but this run has {len(client.devices)}: set "
            f"jax_ipu_device_count={needed} (or JAX_IPU_DEVICE_COUNT={needed})."
        )
    out = (ctypes.c_int * needed).from_address(args.default_assignment)
    for i, device in enumerate(client.devices[:needed]):
        out[i] = device.id


@slot("Client_Compile", abi.ClientCompile)
def client_compile(args: Any) -> None:
    client = _obj(args.client)
    program = abi.Program.from_address(args.program)
    fmt = ctypes.string_at(program.format, program.format_size).decode()
    if fmt != "mlir":
        raise NotImplementedError(f"jax_ipu compiles StableHLO ('mlir') programs, not {fmt!r}.")
    code = ctypes.string_at(program.code, program.code_size)
    options = ctypes.string_at(args.compile_options, args.compile_options_size)
    with cancel.watched():
        executable = client.compile(code, options)
    args.executable = _table.give(_table.new_executable(executable, executable.plan))


@slot("Client_BufferFromHostBuffer", abi.ClientBufferFromHostBuffer)
def client_buffer_from_host(args: Any) -> None:
    client = _obj(args.client)
    memory: IpuMemory = _obj(args.memory) if args.memory else _obj(args.device).memory
    kind = dtypes.BY_PJRT.get(args.type)
    if kind is None:
        raise IpuError(f"jax_ipu cannot hold arrays of PJRT element type {args.type}.")
    dtype = dtypes.numpy_dtype(kind.name)
    dims = tuple((ctypes.c_int64 * args.num_dims).from_address(args.dims)) if args.num_dims \
        else ()
    host = _host_view(args.data, dtype, dims, args.byte_strides, args.num_byte_strides)
    array = client.put(host, memory)
    args.buffer = _table.give(_table.new_buffer(array, memory.handle, args.type, dims,
                                                host.nbytes, memory.read_advance(host.nbytes)))
    args.done_with_host_buffer = _table.READY_EVENT


def _host_view(data: int, dtype: np.dtype, dims: tuple[int, ...], strides_addr: int,
               num_strides: int) -> np.ndarray:
    """A numpy view of host memory jaxlib lent us (row-major unless other strides are given)."""
    size = math.prod(dims)
    if size == 0:
        return np.zeros(dims, dtype)
    if num_strides:
        strides = tuple((ctypes.c_int64 * num_strides).from_address(strides_addr))
        if strides != dtypes.row_major_strides(dims, dtype.itemsize):
            span = sum((d - 1) * abs(s) for d, s in zip(dims, strides, strict=True)) + \
                dtype.itemsize
            flat = np.frombuffer(_table.memory(data, span), dtype=np.uint8)
            return np.lib.stride_tricks.as_strided(
                flat.view(dtype) if span % dtype.itemsize == 0 else flat, shape=dims,
                strides=strides)
    return np.frombuffer(_table.memory(data, size * dtype.itemsize), dtype=dtype).reshape(dims)


# ---- devices and their descriptions (a device is its own description) ----
@slot("Device_GetDescription", abi.DeviceGetDescription)
def device_get_description(args: Any) -> None:
    args.device_description = args.device


@slot("DeviceDescription_Id", abi.DescriptionInt)
def description_id(args: Any) -> None:
    args.value = _obj(args.device_description).id


@slot("DeviceDescription_ProcessIndex", abi.DescriptionInt)
def description_process_index(args: Any) -> None:
    args.value = _obj(args.device_description).process_index


@slot("DeviceDescription_Attributes", abi.DescriptionAttributes)
def description_attributes(args: Any) -> None:
    device: IpuDevice = _obj(args.device_description)
    args.attributes, args.num_attributes = _named_values(device, "attrs", device.attributes())


@slot("DeviceDescription_Kind", abi.DescriptionString)
def description_kind(args: Any) -> None:
    device = _obj(args.device_description)
    args.value, args.value_size = _string(device, device.kind)


@slot("DeviceDescription_DebugString", abi.DescriptionString)
@slot("DeviceDescription_ToString", abi.DescriptionString)
def description_to_string(args: Any) -> None:
    device = _obj(args.device_description)
    args.value, args.value_size = _string(device, repr(device))


@slot("Device_IsAddressable", abi.DeviceBool)
def device_is_addressable(args: Any) -> None:
    device = _obj(args.device)
    args.value = device.process_index == device.client.process_index


@slot("Device_LocalHardwareId", abi.DeviceInt)
def device_local_hardware_id(args: Any) -> None:
    args.value = _obj(args.device).local_hardware_id


@slot("Device_AddressableMemories", abi.DeviceList)
def device_memories(args: Any) -> None:
    device = _obj(args.device)
    args.items, args.num_items = _handles(device, "memories", list(device.memories.values()))


@slot("Device_DefaultMemory", abi.DevicePtr)
def device_default_memory(args: Any) -> None:
    args.value = _obj(args.device).memory.handle.address


@slot("Device_GetAttributes", abi.DeviceGetAttributes)
def device_get_attributes(args: Any) -> None:
    device: IpuDevice = _obj(args.device)
    args.attributes, args.num_attributes = _named_values(device, "attrs", device.attributes())
    args.device_attributes = 0
    args.attributes_deleter = _table.NOOP_DELETER


@slot("Device_MemoryStats", abi.DeviceMemoryStats)
def device_memory_stats(args: Any) -> None:
    """Tile memory (JAX's default memory kind) in the usual fields; Streaming Memory (kind
    pinned_host) in the reserved ones: bytes_reserved, peak_bytes_reserved and
    bytes_reservable_limit (jax's memory_stats() has no field per memory kind)."""
    device: IpuDevice = _obj(args.device)
    stats, streaming = device.stats, device.streaming_stats
    start = abi.DeviceMemoryStats.bytes_in_use.offset  # jaxlib leaves the outputs uninitialised
    ctypes.memset(ctypes.addressof(args) + start, 0, abi.DeviceMemoryStats.STRUCT_SIZE - start)
    args.bytes_in_use = stats.bytes_in_use
    args.peak_bytes_in_use, args.peak_bytes_in_use_is_set = stats.peak_bytes_in_use, True
    args.num_allocs, args.num_allocs_is_set = stats.num_allocs, True
    args.largest_alloc_size, args.largest_alloc_size_is_set = stats.largest_alloc_size, True
    args.bytes_limit, args.bytes_limit_is_set = stats.bytes_limit, True
    args.bytes_reserved, args.bytes_reserved_is_set = streaming.bytes_in_use, True
    args.peak_bytes_reserved = streaming.peak_bytes_in_use
    args.peak_bytes_reserved_is_set = True
    args.bytes_reservable_limit = streaming.bytes_limit
    args.bytes_reservable_limit_is_set = True


@slot("Device_ClearMemoryStats", abi.DeviceClearMemoryStats)
def device_clear_memory_stats(args: Any) -> None:
    _obj(args.device).reset_peak()  # every memory kind's peak


# ---- memories ----
@slot("Memory_Id", abi.MemoryInt)
def memory_id(args: Any) -> None:
    args.value = _obj(args.memory).id


@slot("Memory_DebugString", abi.MemoryString)
@slot("Memory_ToString", abi.MemoryString)
def memory_to_string(args: Any) -> None:
    memory = _obj(args.memory)
    args.value, args.value_size = _string(memory, repr(memory))


@slot("Memory_AddressableByDevices", abi.MemoryList)
def memory_devices(args: Any) -> None:
    memory = _obj(args.memory)
    args.items, args.num_items = _handles(memory, "devices", [memory.device])


# ---- executables (a loaded executable and its executable share one runtime object) ----
@slot("Executable_Name", abi.ExecutableString)
def executable_name(args: Any) -> None:
    exe = _obj(args.executable)
    args.value, args.value_size = _string(exe, exe.name)


@slot("Executable_SizeOfGeneratedCodeInBytes", abi.ExecutableCodeSize)
def executable_code_size(args: Any) -> None:
    args.size_in_bytes = _obj(args.executable).memory_analysis()["generated_code"]


@slot("Executable_GetCostAnalysis", abi.ExecutableCostAnalysis)
def executable_cost_analysis(args: Any) -> None:
    exe = _obj(args.executable)
    values = {k: float(v) for k, v in exe.cost_analysis().items()}
    args.properties, args.num_properties = _named_values(exe, "cost", values)


@slot("Executable_GetCompiledMemoryStats", abi.ExecutableCompiledMemoryStats)
def executable_memory_stats(args: Any) -> None:
    figures = _obj(args.executable).memory_analysis()
    start = abi.ExecutableCompiledMemoryStats.generated_code_size_in_bytes.offset
    ctypes.memset(ctypes.addressof(args) + start, 0,
                  abi.ExecutableCompiledMemoryStats.STRUCT_SIZE - start)
    args.generated_code_size_in_bytes = figures["generated_code"]
    args.argument_size_in_bytes = figures["argument"]
    args.output_size_in_bytes = figures["output"]
    args.alias_size_in_bytes = figures["alias"]
    args.temp_size_in_bytes = figures["temp"]
    args.host_argument_size_in_bytes = figures["host_argument"]
    args.host_output_size_in_bytes = figures["host_output"]
    args.host_temp_size_in_bytes = figures["host_temp"]
    args.peak_memory_in_bytes = figures["peak"]
    args.total_size_in_bytes = figures["total"]


def _byte_strings(owner: Any, key: Any, items: Sequence[bytes]) -> tuple[int, int]:
    """Addresses of an array of pointers to `items` and of an array of their sizes."""
    def make() -> Any:
        blobs = [ctypes.create_string_buffer(b, len(b) or 1) for b in items]
        ptrs = (ctypes.c_void_p * max(len(items), 1))(*[ctypes.addressof(b) for b in blobs])
        sizes = (ctypes.c_size_t * max(len(items), 1))(*[len(b) for b in items])
        return blobs, ptrs, sizes

    _, ptrs, sizes = _keep(owner, key, make)
    return ctypes.addressof(ptrs), ctypes.addressof(sizes)


def _memory_kinds(args: Any, which: str, kinds: tuple[str, ...]) -> None:
    exe: IpuExecutable = _obj(args.executable)
    args.num_outputs = len(kinds)
    args.memory_kinds, args.memory_kind_sizes = _byte_strings(
        exe, ("kinds", which), [k.encode() for k in kinds])


@slot("Executable_OutputMemoryKinds", abi.ExecutableMemoryKinds)
def executable_output_memory_kinds(args: Any) -> None:
    _memory_kinds(args, "output", _obj(args.executable).output_kinds)


@slot("Executable_ParameterMemoryKinds", abi.ExecutableMemoryKinds)
def executable_parameter_memory_kinds(args: Any) -> None:
    _memory_kinds(args, "parameter", _obj(args.executable).parameter_kinds)


@slot("Executable_OutputElementTypes", abi.ExecutableOutputElementTypes)
def executable_output_types(args: Any) -> None:
    exe = _obj(args.executable)
    types = exe.output_types
    array = _keep(exe, "types", lambda: (ctypes.c_int32 * max(len(types), 1))(*types))
    args.output_types, args.num_output_types = ctypes.addressof(array), len(types)


@slot("Executable_OutputDimensions", abi.ExecutableOutputDimensions)
def executable_output_dims(args: Any) -> None:
    exe = _obj(args.executable)
    dims = exe.output_dims

    def make() -> Any:
        flat = [d for shape in dims for d in shape]
        return ((ctypes.c_int64 * max(len(flat), 1))(*flat),
                (ctypes.c_size_t * max(len(dims), 1))(*[len(s) for s in dims]))

    flat, sizes = _keep(exe, "dims", make)
    args.num_outputs = len(dims)
    args.dims, args.dim_sizes = ctypes.addressof(flat), ctypes.addressof(sizes)


@slot("Executable_OptimizedProgram", abi.ExecutableOptimizedProgram)
def executable_optimized_program(args: Any) -> None:
    exe = _obj(args.executable)
    program = abi.Program.from_address(args.program)
    # jaxlib asks twice (size, then bytes) and reads the executable's layouts from it.
    kind, code = _keep(exe, "optimized", exe.optimized_program)
    program.format, program.format_size = _string(None, kind)
    if program.code:
        ctypes.memmove(program.code, code, min(len(code), program.code_size))
    program.code_size = len(code)


@slot("Executable_Fingerprint", abi.ExecutableFingerprint)
@slot("LoadedExecutable_Fingerprint", abi.ExecutableFingerprint)
def executable_fingerprint(args: Any) -> None:
    exe = _obj(args.executable)
    args.executable_fingerprint, args.executable_fingerprint_size = _string(exe, exe.fingerprint)


@slot("Executable_GetCompileOptions", abi.ExecutableSerialized)
def executable_compile_options(args: Any) -> None:
    exe = _obj(args.executable)
    args.serialized_bytes, args.serialized_bytes_size = _bytes_out(exe, "options", exe.options)
    args.serialized, args.deleter = 0, _table.NOOP_DELETER


def _shardings(args: Any, which: str) -> None:
    exe = _obj(args.executable)
    protos = exe.shardings(which)
    args.num_outputs = len(protos)
    args.shardings, args.sharding_sizes = _byte_strings(exe, ("shardings", which), protos)


@slot("Executable_Serialize", abi.ExecutableSerialize)
def executable_serialize(args: Any) -> None:
    exe = _obj(args.executable)
    data = exe.devices[0].client.serialize(exe)
    args.serialized_bytes = args.serialized_executable = _table.owned_bytes(data)
    args.serialized_bytes_size = len(data)
    args.serialized_executable_deleter = _table.FREE_DELETER


@slot("Executable_DeserializeAndLoad", abi.ExecutableDeserializeAndLoad)
def executable_deserialize_and_load(args: Any) -> None:
    client = _obj(args.client)
    data = ctypes.string_at(args.serialized_executable, args.serialized_executable_size)
    options = ctypes.string_at(args.overridden_serialized_compile_options,
                               args.overridden_serialized_compile_options_size) \
        if args.overridden_serialized_compile_options else None
    executable = client.deserialize(data, options)
    args.loaded_executable = _table.give(_table.new_executable(executable, executable.plan))


@slot("Shardings_OutputShardings", abi.ExecutableShardings)
def executable_output_shardings(args: Any) -> None:
    _shardings(args, "output")


@slot("Shardings_ParameterShardings", abi.ExecutableShardings)
def executable_parameter_shardings(args: Any) -> None:
    _shardings(args, "parameter")


@slot("LoadedExecutable_GetExecutable", abi.LoadedGetExecutable)
def loaded_get_executable(args: Any) -> None:
    args.executable = _table.give(_table.deref(args.loaded_executable))


@slot("LoadedExecutable_AddressableDevices", abi.LoadedList)
def loaded_devices(args: Any) -> None:
    exe = _obj(args.executable)
    args.items, args.num_items = _handles(exe, "devices", exe.addressable)


@slot("LoadedExecutable_AddressableDeviceLogicalIds", abi.LoadedList)
def loaded_logical_ids(args: Any) -> None:
    exe = _obj(args.executable)

    def make() -> Any:
        ids = (abi.LogicalDeviceIds * max(len(exe.addressable), 1))()
        for i, k in enumerate(exe.addressable_positions):
            ids[i].replica, ids[i].partition = divmod(k, exe.num_partitions)
        return ids

    ids = _keep(exe, "logical_ids", make)
    args.items, args.num_items = ctypes.addressof(ids), len(exe.addressable)


@slot("LoadedExecutable_GetDeviceAssignment", abi.ExecutableSerialized)
def loaded_device_assignment(args: Any) -> None:
    exe = _obj(args.executable)
    ids = np.array([d.id for d in exe.devices], dtype=np.int64).reshape(
        exe.num_replicas, exe.num_partitions)
    data = _internals.DeviceAssignment.create(ids).serialize()
    args.serialized_bytes, args.serialized_bytes_size = _bytes_out(exe, "assignment", data)
    args.serialized, args.deleter = 0, _table.NOOP_DELETER


# ---- buffers (their state is the C handle's; deletion, metadata and reads are served in C) ----
def _live_array(handle: Any) -> Any:
    if handle.deleted:
        raise ValueError("Array has been deleted (it was donated to a call, or deleted).")
    return handle.obj


@slot("Buffer_UnsafePointer", abi.BufferUnsafePointer)
def buffer_unsafe_pointer(args: Any) -> None:
    # The emulated tile memory is host memory: its address is that of the CPU array.
    args.buffer_pointer = _live_array(_table.deref(args.buffer)).unsafe_buffer_pointer()


def _copy(args: Any, dest: IpuMemory) -> None:
    handle = _table.deref(args.buffer)
    source: IpuMemory = handle.memory
    array = source.device.client.copy(_live_array(handle), source, dest)
    args.dst_buffer = _table.give(_table.new_buffer(
        array, dest.handle, handle.element_type, handle.dims, handle.nbytes,
        dest.read_advance(handle.nbytes)))


@slot("Buffer_CopyToDevice", abi.BufferCopyTo)
def buffer_copy_to_device(args: Any) -> None:
    _copy(args, _obj(args.dst).memory)


@slot("Buffer_CopyToMemory", abi.BufferCopyTo)
def buffer_copy_to_memory(args: Any) -> None:
    _copy(args, _obj(args.dst))


# ---- jax.profiler: the profiler extension's sessions (pjrt/csrc/profiler.c) ----
@slot("Profiler_Create", abi.ProfilerCreate)
def profiler_create(args: Any) -> None:
    # args.options: jax's ProfileOptions, whose levels say nothing the IPUs' trace can use
    # (jax 0.10 gives no way to set device_tracer_level).
    args.profiler = _table.give(_table.new_handle(tracing.TraceSession()))


@slot("Profiler_Start", abi.ProfilerOnly)
def profiler_start(args: Any) -> None:
    session = _obj(args.profiler)
    session.start()
    _table.trace_into(session.events, tracing.MAX_EVENTS)


@slot("Profiler_Stop", abi.ProfilerOnly)
def profiler_stop(args: Any) -> None:
    session = _obj(args.profiler)
    dropped = _table.trace_into(None, 0) if tracing.running() is session else 0
    session.stop(dropped)


@slot("Profiler_CollectData", abi.ProfilerCollectData)
def profiler_collect_data(args: Any) -> None:
    session = _obj(args.profiler)
    data = session.collect([d for client in live_clients() for d in client.addressable])
    if args.buffer:  # the second call of the header's two-call protocol: the caller's buffer
        if args.buffer_size_in_bytes < len(data):
            raise ValueError(f"the profiler's buffer holds {args.buffer_size_in_bytes} bytes; "
                             f"its data is {len(data)} bytes")
        ctypes.memmove(args.buffer, data, len(data))
    else:  # jaxlib reads the session's own copy at once; it lives as long as the session
        args.buffer = ctypes.addressof(_keep(session, ("xspace", data), lambda: (
            ctypes.create_string_buffer(data, len(data)))))
    args.buffer_size_in_bytes = len(data)


def _no_distributed_state() -> Any:
    return None


_distributed_state: Callable[[], Any] = _no_distributed_state


def install(distributed_state: Callable[[], Any]) -> Any:
    """Connect the C table to this module and return its 'pjrt_c_api' capsule.

    `distributed_state()` tells Client_Create this process's place in a jax.distributed run
    (a plugin.DistributedState, or None)."""
    global _distributed_state
    _distributed_state = distributed_state
    check_plan_type(ExecutePlan)
    sub_byte = [d.pjrt for d in dtypes.TABLE if 0 < d.bits < 8]
    _table.install(dispatch, _error_for, Waiter(status_of).wait_for, ExecutePlan, sub_byte,
                   _internals.array_is_ready)
    cancel.register()
    return _table.capsule()


def check_plan_type(plan_type: type) -> None:
    """Refuse to start when the plan type's fields are not those the C table reads (a field
    renamed or removed on one side only): ImportError naming the differences."""
    declared = {f.name for f in dataclasses.fields(plan_type)}
    read = set(_table.plan_fields())
    if declared != read:
        raise ImportError(
            f"jax_ipu's C table and {plan_type.__name__} disagree: C reads "
            f"{sorted(read - declared)} which the type lacks, and the type declares "
            f"{sorted(declared - read)} which C does not read. Rebuild the extension (pip "
            "install -e .) after changing either, and change both together.")
