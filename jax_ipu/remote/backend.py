"""The server's side of each IFRT operation, done with jax on this process's ipu devices.

Arrays are jax Arrays and executables jaxlib LoadedExecutables of the local IPU Model, so a remote
call runs exactly what a local one runs: the same compile, model, numerics and errors."""

from __future__ import annotations

import base64
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jaxlib.mlir import ir

from jax_ipu import _internals, dtypes
from jax_ipu.compiler import lowering, numerics, program
from jax_ipu.model.report import ProgramReport
from jax_ipu.remote import hostcalls
from jax_ipu.remote.client import REPORT_KEY
from jax_ipu.remote.ifrt import Placement, ProtocolError
from jax_ipu.runtime import codec
from jax_ipu.runtime.client import aval, find_device, find_executable

# What a jax_ipu.tile program calls: vertices built and registered as XLA FFI handlers in the
# process that traced them, which a server does not have.
TILE_MARKERS = (b"jax_ipu_vertex_", b"jax_ipu_cycle_count", b"jax_ipu.tile_")
NO_TILE_PROGRAMS = (
    "jax_ipu.tile programs cannot run on a remote IPU Model: their vertices are C++ built on the "
    "client and registered as XLA FFI handlers in its process, which the server cannot load. "
    "Run tile programs on a local IPU Model (unset JAX_IPU_REMOTE).")
NO_HOST_CALLBACKS = (
    "host callbacks (jax.debug.print, jax.debug.callback, jax.pure_callback, io_callback, "
    "jax_ipu.InfeedQueue/OutfeedQueue) run on a remote IPU Model only for a client with "
    "jax-ipu installed, which answers the server's calls itself: the IFRT proxy protocol "
    "carries them too, but jaxlib's client runs those only in Google's internal builds (the "
    "pip-installed one answers every call 'ExecuteLoadedHostCallback is unsupported'). Install "
    "jax-ipu on the client (JAX_IPU_REMOTE), run the program on a local IPU Model, or return "
    "the values from the jitted function")
NO_INSPECT_SHARDING = (
    "jax.debug.inspect_array_sharding and jax.debug.visualize_array_sharding inside a jitted "
    "function cannot run on a remote IPU Model: XLA calls their callback, a function of the "
    "client's process, while it compiles the program on the server. Read the sharding of a "
    "computed array instead (x.sharding, or jax.debug.visualize_array_sharding(x) outside jit)")
# Custom calls that name a function of the process that lowered the program (a pointer, or an
# index into its callbacks): compiled or run on a server they would name the server's memory
# (measured: InspectSharding, called by XLA's partitioner, crashed the server).
CLIENT_CALLS = {
    "InspectSharding": NO_INSPECT_SHARDING,
    "xla_python_cpu_callback": NO_HOST_CALLBACKS,
    "xla_ffi_python_cpu_callback": NO_HOST_CALLBACKS,
    "xla_python_gpu_callback": NO_HOST_CALLBACKS,
    "xla_ffi_partitioned_python_cpu_callback": NO_HOST_CALLBACKS,
}

SHARDINGS_KEPT = 256  # jax shardings the server keeps built, by placement and shape


class Backend:
    """The ipu devices of this process, by id."""

    def __init__(self) -> None:
        self.client = jax.devices("ipu")[0].client
        self.devices = {d.id: d for d in self.client.devices()}
        # Every put of a training loop names the same sharding: build each jax sharding once.
        self.sharding = functools.lru_cache(maxsize=SHARDINGS_KEPT)(self._make_sharding)

    def device(self, device_id: int) -> Any:
        try:
            return self.devices[device_id]
        except KeyError:
            raise ProtocolError(f"no ipu device {device_id} on this server") from None

    # ---- shardings ----
    def _make_sharding(self, placement: Placement, shape: tuple[int, ...]) -> Any:
        """The jax sharding of a placement, for an array of global `shape`."""
        devices = [self.device(i) for i in placement.devices]
        kind = placement.memory_kind
        if len(devices) == 1 and placement.op_sharding is None:
            return jax.sharding.SingleDeviceSharding(devices[0], memory_kind=kind)
        op = _internals.OpSharding()
        if placement.op_sharding is not None:
            try:
                op.ParseFromString(placement.op_sharding)
            except Exception:  # noqa: BLE001 - jaxlib raises its own parse errors
                raise ProtocolError("the HloSharding's xla.OpSharding does not parse") from None
        else:
            op = _even_split(op, placement, shape)
        return _internals.GSPMDSharding(devices, op, memory_kind=kind)

    # ---- arrays ----
    def put(self, data: bytes | memoryview, dtype: np.dtype, shape: tuple[int, ...],
            byte_strides: Sequence[int] | None, placement: Placement) -> Any:
        """An array on one device from the bytes of a host buffer."""
        host = host_view(data, dtype, shape, byte_strides)
        sharding = self.sharding(placement, shape)
        if len(placement.devices) == 1:
            # One device (jax's client sends even these as an HloSharding): jaxlib's put
            # itself, as jax.device_put ends, without its Python layers (0.1-0.2 ms a call,
            # paid for every batch a training loop puts). The client sent the dtype its jax
            # chose, which the server keeps (it runs with jax_enable_x64: server.serve).
            return _internals.batched_device_put(aval(shape, dtype), sharding, [host],
                                                 [self.device(placement.devices[0])], True)
        return jax.device_put(host, sharding)

    def assemble(self, shape: tuple[int, ...], dtype: np.dtype, placement: Placement,
                 shards: Sequence[Any]) -> Any:
        """One array over several devices from one single-device array per device."""
        sharding = self.sharding(placement, shape)
        if len(shards) != len(placement.devices):
            raise ProtocolError(f"{len(shards)} arrays for a sharding over "
                                f"{len(placement.devices)} devices")
        for i, (shard, device_id) in enumerate(zip(shards, placement.devices, strict=True)):
            if shard.dtype != dtype:
                raise ProtocolError(f"array {i} is {shard.dtype}, the assembled array {dtype}")
            if len(shard.devices()) != 1 or next(iter(shard.devices())).id != device_id:
                raise ProtocolError(f"array {i} is not on device {device_id}")
            expected = sharding.shard_shape(shape)
            if tuple(shard.shape) != tuple(expected):
                raise ProtocolError(f"array {i} has shape {list(shard.shape)}, a shard of "
                                    f"{list(shape)} here has {list(expected)}")
        return _internals.ArrayImpl(aval(shape, dtype), sharding, list(shards), committed=True,
                                    _skip_checks=True)

    def copy(self, array: Any, device_ids: Sequence[int], memory_kind: str | None,
             always: bool = False, donate: bool = False) -> Any:
        """`array` on other devices (in the same layout over them) or in another memory kind;
        new buffers even where it is already if `always`, and `array` deleted if `donate`."""
        sharding = array.sharding
        kind = memory_kind if memory_kind is not None else sharding.memory_kind
        if device_ids:
            devices = [self.device(i) for i in device_ids]
            if len(devices) != len(sharding.device_set):
                raise ProtocolError(f"a copy to {len(devices)} devices of an array on "
                                    f"{len(sharding.device_set)}")
            if len(devices) == 1:
                target = jax.sharding.SingleDeviceSharding(devices[0], memory_kind=kind)
            else:
                target = _internals.GSPMDSharding(
                    devices, _internals.hlo_sharding(sharding, array.ndim), memory_kind=kind)
                source = _internals.device_assignment(sharding)
                if set(source) == set(devices) and list(source) != devices:
                    # (a donated array is let go when the client destructs it: a shard that
                    # stays on its device may be the same buffer)
                    return self._reordered(array, target, always)
        else:
            target = sharding.with_memory_kind(kind)
        return jax.device_put(array, target, donate=donate, may_alias=False if always else None)

    @staticmethod
    def _reordered(array: Any, target: Any, always: bool) -> Any:
        """`array` over the same devices in another order (jax's device_put takes only a
        NamedSharding there): the shard of its i-th device moves to the target's i-th."""
        moved = [jax.device_put(shard, jax.sharding.SingleDeviceSharding(
                     new, memory_kind=target.memory_kind), may_alias=False if always else None)
                 for shard, new in zip(shards(array), _internals.device_assignment(target),
                                       strict=True)]
        return _internals.ArrayImpl(array.aval, target, moved, committed=True,
                                    _skip_checks=True)

    # ---- executables ----
    def compile(self, code: bytes, options: bytes, allowed: frozenset[int],
                host_calls: hostcalls.Channel | None = None) -> Executable:
        """The program compiled for the devices its options assign, all in `allowed`; its host
        callbacks call the client's through `host_calls` (refused without one)."""
        if any(marker in code for marker in TILE_MARKERS):
            raise NotImplementedError(NO_TILE_PROGRAMS)
        try:
            compile_options = _internals.CompileOptions.ParseFromString(options)
        except Exception:  # noqa: BLE001 - jaxlib's parse error
            raise ProtocolError("the compile options are not an xla.CompileOptionsProto"
                                ) from None
        assignment = numerics.device_assignment(compile_options)
        ids = [int(i) for i in assignment.flat]
        outside = sorted(set(ids) - allowed)
        if outside:
            raise PermissionError(
                f"the program runs on ipu devices {outside}, outside this session's partition "
                f"{sorted(allowed)}")
        devices = [self.device(i) for i in ids]
        signature = read_signature(code, calls_back=host_calls is not None)
        stand_ins: list[Any] = []
        if host_calls is not None and numerics.calls_host(code):
            code, stand_ins = _calling_back(code, host_calls)
        loaded = self.client.compile_and_load(code, _internals.DeviceList(tuple(devices)),
                                              compile_options)
        return Executable(loaded, devices, signature, stand_ins)


@dataclass(frozen=True)
class Signature:
    """The entry function's arrays: result (shape, dtype) pairs and donated arguments."""

    results: tuple[tuple[tuple[int, ...], np.dtype], ...]
    donated: tuple[int, ...]
    name: str


def read_signature(code: bytes, calls_back: bool = False) -> Signature:
    """What the server needs of a program beyond what jaxlib says: its results' global shapes
    (jaxlib gives one device's) and the arguments jax marked donated; NotImplementedError for a
    program that calls into the client's process (CLIENT_CALLS), but for the host callbacks
    the server calls back (lowering.HOST_CALLBACK_TARGETS) when `calls_back`."""
    with program.lent_context(len(code)) as context:
        module = program.parse(code, context)
        with module.context, ir.Location.unknown(module.context):
            main = next((op.operation for op in module.body.operations
                         if "sym_name" in op.operation.attributes
                         and ir.StringAttr(op.operation.attributes["sym_name"]).value == "main"),
                        None)
            if main is None:
                raise ProtocolError("the program has no main function")
            fn_type = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
            results = []
            for t in fn_type.results:
                tensor = program.tensor_type(t)
                if tensor.dtype == "token":
                    results.append(((0,), np.dtype(bool)))
                    continue
                if any(d < 0 for d in tensor.shape):
                    raise ProtocolError(f"result type {t} has no fixed array shape")
                results.append((tuple(tensor.shape), np.dtype(tensor.dtype)))
            donated = []
            if "arg_attrs" in main.attributes:
                for i, attrs in enumerate(ir.ArrayAttr(main.attributes["arg_attrs"])):
                    names = ir.DictAttr(attrs)
                    if "tf.aliasing_output" in names or "jax.buffer_donor" in names:
                        donated.append(i)
            name = (ir.StringAttr(module.operation.attributes["sym_name"]).value
                    if "sym_name" in module.operation.attributes else "main")
            _refuse_client_calls(module, lowering.HOST_CALLBACK_TARGETS if calls_back else ())
    return Signature(tuple(results), tuple(donated), name)


def _calling_back(code: bytes, host_calls: hostcalls.Channel) -> tuple[bytes, list[Any]]:
    """The program (as MLIR bytecode) with each host callback's key, the client's, made the key
    of a stand-in here that calls the client's callable through `host_calls`; the stand-ins,
    which the executable keeps alive (this process holds them weakly)."""
    keys: dict[int, tuple[int, Any]] = {}  # the client's key -> (this process's, stand-in)
    unkeyed: list[str] = []  # raised after the walk, which turns its callback's errors into others
    with program.lent_context(len(code)) as context:
        module = program.parse(code, context)
        with module.context, ir.Location.unknown(module.context):
            u64 = ir.IntegerType.get_unsigned(64)

            def visit(op: Any) -> Any:
                if (op.name == "stablehlo.custom_call" and "call_target_name" in op.attributes
                        and ir.StringAttr(op.attributes["call_target_name"]).value
                        in lowering.HOST_CALLBACK_TARGETS):
                    try:
                        config = ir.DictAttr(op.attributes["mhlo.backend_config"])
                        key = ir.IntegerAttr(config["index"]).value
                    except (KeyError, ValueError):
                        unkeyed.append(str(op.location))
                        return ir.WalkResult.INTERRUPT
                    if key not in keys:
                        stand_in = host_calls.function(key)
                        keys[key] = (lowering.file_callback(stand_in), stand_in)
                    op.attributes["mhlo.backend_config"] = ir.DictAttr.get(
                        {"index": ir.IntegerAttr.get(u64, keys[key][0])})
                return ir.WalkResult.ADVANCE

            module.operation.walk(visit)
            if unkeyed:
                raise ProtocolError(f"a host callback without its index, at {unkeyed[0]}")
            return module.operation.get_asm(binary=True), [f for _, f in keys.values()]


def _refuse_client_calls(module: ir.Module, called_back: Sequence[str]) -> None:
    """NotImplementedError for the first custom call (in any function or region) that names
    something of the client's process (CLIENT_CALLS), but for targets in `called_back`."""
    found: list[tuple[str, str]] = []

    def visit(op: Any) -> Any:
        if op.name == "stablehlo.custom_call" and "call_target_name" in op.attributes:
            target = ir.StringAttr(op.attributes["call_target_name"]).value
            if target in CLIENT_CALLS and target not in called_back:
                found.append((target, str(op.location)))
                return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if found:
        target, where = found[0]
        raise NotImplementedError(f"{CLIENT_CALLS[target]} (custom_call @{target} at {where})")


def shards(array: Any) -> list[Any]:
    """The single-device arrays of `array`, in the order of its sharding's devices (an IFRT
    array's shard i is on its sharding's device i)."""
    held = {shard.device: shard.data for shard in array.addressable_shards}
    return [held[device] for device in _internals.device_assignment(array.sharding)]


class Executable:
    """A loaded program and what the protocol asks of it."""

    def __init__(self, loaded: Any, devices: list[Any], signature: Signature,
                 stand_ins: Sequence[Any] = ()) -> None:
        self.loaded = loaded
        self.devices = devices
        self.signature = signature
        self.stand_ins = list(stand_ins)  # what its host callbacks call, held while it lives
        kinds = loaded.get_output_memory_kinds()
        self.output_kinds: list[str] = list(kinds[0]) if kinds else []
        if self.output_kinds and len(self.output_kinds) != len(signature.results):
            raise ProtocolError(f"the program gives {len(self.output_kinds)} results, its "
                                f"signature says {len(signature.results)}")
        self.output_shardings = self._output_shardings()
        # Each output's Array is made in C++ as execute_sharded's results are consumed, as jax's
        # own dispatch does: about half the CPU time of joining shards into ArrayImpls in Python.
        self._result_handlers = [
            _internals.array_result_handler(aval(shape, dtype), sharding, True, True)
            for (shape, dtype), sharding in zip(signature.results, self.output_shardings,
                                                strict=True)]

    @property
    def fingerprint(self) -> bytes:
        fingerprint = self.loaded.fingerprint
        return fingerprint if isinstance(fingerprint, bytes) else str(fingerprint).encode()

    def _output_shardings(self) -> list[Any]:
        if not self.signature.results:
            return []  # XLA still names one sharding, of the empty tuple, over several devices
        kinds = self.output_kinds or ["device"] * len(self.signature.results)
        if len(self.devices) == 1:
            return [jax.sharding.SingleDeviceSharding(self.devices[0], memory_kind=k)
                    for k in kinds]
        ops = self.loaded.get_output_shardings() or []
        return [_internals.GSPMDSharding(self.devices, op, memory_kind=k)
                for op, k in zip(ops, kinds, strict=True)]

    def execute(self, args: Sequence[Any], with_token: bool = False) -> tuple[list[Any], Any]:
        """The outputs, and with `with_token` what says when the call has finished on every
        device (jaxlib's ShardedToken; None without): a program with no outputs, or effects
        that outlive them, has nothing else to wait for."""
        results = self.loaded.execute_sharded(list(args), with_tokens=with_token)
        token = results.consume_token() if with_token else None
        return results.consume_with_handlers(self._result_handlers), token

    def cost_analysis(self) -> dict[str, Any]:
        """jax's cost_analysis() figures, cycle counts exact (attribute maps hold float32), and
        the model's report under REPORT_KEY."""
        values: dict[str, Any] = {}
        for key, value in self.loaded.cost_analysis().items():
            number = float(value)
            values[key] = int(number) if number.is_integer() and abs(number) < 2**62 else number
        report = find_executable(self.fingerprint.decode()).report
        values[REPORT_KEY] = base64.b64encode(codec.dumps(ProgramReport, report)).decode()
        return values


def device_attributes(device: Any) -> dict[str, Any]:
    return find_device(device.id).attributes()


def memory_kind_ids(device: Any) -> dict[str, int]:
    """Each memory kind of a device and its kind id, default first."""
    return {kind: m.kind_id for kind, m in find_device(device.id).memories.items()}


def memory_ids(device: Any) -> dict[str, int]:
    """Each memory kind of a device and its memory's id (unique on the server)."""
    return {kind: m.id for kind, m in find_device(device.id).memories.items()}


def host_view(data: bytes | memoryview, dtype: np.dtype, shape: tuple[int, ...],
              byte_strides: Sequence[int] | None) -> np.ndarray:
    """The array a host buffer holds: dense row-major, or with the client's byte strides."""
    count = math.prod(shape)
    dense = dtypes.row_major_strides(shape, dtype.itemsize)
    strides = dense
    if byte_strides is not None and count:
        if len(byte_strides) != len(shape):
            raise ProtocolError(f"byte strides {list(byte_strides)} do not fit {dtype.name}"
                                f"{list(shape)}")
        # A dimension of length 1 is never stepped along: its stride is whatever the client's
        # array had (a pmap shard of a record's field: 5 bytes for a float32), so it is not read.
        strides = tuple(s if n > 1 else d
                        for n, s, d in zip(shape, byte_strides, dense, strict=True))
    if strides == dense:  # jax's client sends dense strides with every array
        if len(data) != count * dtype.itemsize:
            raise ProtocolError(f"a host buffer of {len(data)} bytes for {dtype.name}"
                                f"{list(shape)} ({count * dtype.itemsize} bytes)")
        return np.frombuffer(data, dtype).reshape(shape)
    if any(s < 0 or s % dtype.itemsize for s in strides):
        raise ProtocolError(f"byte strides {list(strides)} do not fit {dtype.name}"
                            f"{list(shape)}")
    extent = sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) + dtype.itemsize
    if len(data) < extent:
        raise ProtocolError(f"a host buffer of {len(data)} bytes is too short for "
                            f"{dtype.name}{list(shape)} with byte strides {list(strides)}")
    base = np.frombuffer(data, np.uint8, count=extent)
    return np.lib.stride_tricks.as_strided(base.view(dtype), shape, strides, writeable=False)


def to_host(array: Any, byte_strides: Sequence[int] | None) -> memoryview:
    """An array's bytes for a host buffer: dense row-major, or laid out in `byte_strides`."""
    value = np.asarray(array)
    if byte_strides is None:
        return memoryview(np.ascontiguousarray(value).reshape(-1).view(np.uint8))
    strides = tuple(byte_strides)
    if len(strides) != value.ndim or any(s < 0 for s in strides):
        raise ProtocolError(f"byte strides {list(strides)} do not fit {value.dtype.name}"
                            f"{list(value.shape)}")
    extent = (0 if value.size == 0 else
              sum((n - 1) * s for n, s in zip(value.shape, strides, strict=True))
              + value.itemsize)
    out = np.zeros(extent, np.uint8)
    if extent:
        np.lib.stride_tricks.as_strided(out.view(value.dtype), value.shape, strides)[...] = value
    return memoryview(out)


def _even_split(op: Any, placement: Placement, shape: tuple[int, ...]) -> Any:
    """An IFRT even split as an OpSharding: tiles in row-major device order, replicated over
    what remains (the only map jax makes of one)."""
    count = len(placement.devices)
    if placement.even_split is None:  # fully replicated
        op.type = _internals.OpSharding.Type.REPLICATED
        return op
    whole, shard = placement.even_split
    if whole != shape or len(shard) != len(whole):
        raise ProtocolError(f"an even sharding of {list(whole)} for an array of {list(shape)}")
    tiles = []
    for n, s in zip(whole, shard, strict=True):
        if s == 0 or n % s:
            raise ProtocolError(f"shard shape {list(shard)} does not divide {list(whole)}")
        tiles.append(n // s)
    tiled = int(np.prod(tiles, dtype=np.int64))
    if tiled == 0 or count % tiled:
        raise ProtocolError(f"{tiled} shards of {list(whole)} over {count} devices")
    op.type = _internals.OpSharding.Type.OTHER
    op.tile_assignment_devices = list(range(count))
    if count // tiled > 1:
        op.tile_assignment_dimensions = [*tiles, count // tiled]
        op.replicate_on_last_tile_dim = True
    else:
        op.tile_assignment_dimensions = tiles
    return op
