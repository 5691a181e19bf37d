"""One client's session: its arrays, executables and futures by handle, and an answer to every
IfrtRequest, in order.

Every request gets exactly one IfrtResponse: its result, or a StatusProto with the error's code
(the local plugin's INVALID_ARGUMENT or RESOURCE_EXHAUSTED stay what they are). A request that
waits (for a value being computed, a host buffer on its way) waits in line: what it waits for
never depends on a later request of the session, since host callbacks are refused. A transport
that must not wait (the C++ one) is told which requests may, and answers those elsewhere."""

from __future__ import annotations

import collections
import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from jax_ipu import _internals
from jax_ipu.errors import IpuCompileError, IpuError, IpuOutOfMemoryError
from jax_ipu.protowire import Message, WireError
from jax_ipu.remote import backend as backend_mod
from jax_ipu.remote import hostcalls
from jax_ipu.remote.backend import NO_HOST_CALLBACKS, Backend, Executable
from jax_ipu.remote.hostbuffers import HostBufferError, HostBuffers
from jax_ipu.remote.ifrt import XLA_COMPILE_OPTIONS, XLA_PROGRAM, Codec, ProtocolError
from jax_ipu.remote.schema import Schema
from jax_ipu.remote.shareddir import SharedDir

logger = logging.getLogger(__name__)

# Hands a function that answers a request to a thread that may wait for it.
Defer = Callable[[Callable[[], Any]], None]

# Handles the server makes start here; the client's own stay below (the protocol's split).
SERVER_HANDLES = 1 << 63
# tensorflow.error.Code
CODES = {"OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4,
         "NOT_FOUND": 5, "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8,
         "FAILED_PRECONDITION": 9, "ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12,
         "INTERNAL": 13, "UNAVAILABLE": 14, "DATA_LOSS": 15, "UNAUTHENTICATED": 16}
# What jaxlib's client reports as its backend's attributes (jax reads them by name): programs
# are serialized with Shardy, as for every PJRT client (jax.export needs it); an executable
# cannot be serialized through the proxy, so jax's persistent cache leaves it alone.
CLIENT_ATTRIBUTES = {"serialize_with_sdy": True, "supports_executable_serialization": False}
# A session's computations in flight: with this many, its next execute waits on a worker thread
# for the oldest to finish. XLA:CPU lets 32 computations a device be in flight and makes the
# caller of the 33rd wait; that caller was the transport's one thread, so every other session
# waited too (measured: another partition's small call waited 13.8 s behind 600 queued calls).
RUNNING_PER_SESSION = 16


class Status(Exception):
    """An error answer: a tensorflow.error.Code name and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def status_of(exc: BaseException) -> Status:
    """The answer an exception becomes, keeping the code jaxlib or the plugin gave it."""
    if isinstance(exc, Status):
        return exc
    if isinstance(exc, HostBufferError):
        return Status(exc.code, str(exc))
    text = str(exc)
    code, separator, message = text.partition(": ")
    if separator and code in CODES and code != "OK":
        return Status(code, message)
    if isinstance(exc, IpuOutOfMemoryError):
        return Status("RESOURCE_EXHAUSTED", text)
    if isinstance(exc, PermissionError):
        return Status("PERMISSION_DENIED", text)
    if isinstance(exc, NotImplementedError):
        return Status("UNIMPLEMENTED", text)
    if isinstance(exc, (ProtocolError, IpuCompileError, ValueError, TypeError, WireError)):
        return Status("INVALID_ARGUMENT", text)
    if isinstance(exc, IpuError):
        return Status("FAILED_PRECONDITION", text)
    logger.error("remote IPU Model: internal error", exc_info=exc)
    return Status("INTERNAL", f"jax-ipu server internal error: {type(exc).__name__}: {text}")


class Session:
    """The state of one IfrtSession stream and its handlers, one per request type. Used by one
    request at a time (on the transport's thread, or on a worker for a request that may wait);
    its host buffers are shared with the HostBufferStore calls."""

    def __init__(self, schema: Schema, backend: Backend, session_id: int,
                 device_ids: Sequence[int], shared_dir: SharedDir | None = None,
                 host_calls: hostcalls.Channel | None = None) -> None:
        self.m = schema.message
        self.codec = Codec(schema)
        self.backend = backend
        self.session_id = session_id
        self.device_ids = tuple(device_ids)
        self.allowed = frozenset(device_ids)
        self.host_buffers = HostBuffers()
        self.shared_dir = shared_dir  # where a client on this host writes large host buffers
        self.host_calls = host_calls  # where its programs call the client's host callbacks
        self.arrays: dict[int, Any] = {}  # handle -> jax Array, or the Status it failed with
        self.executables: dict[int, Executable] = {}
        # check_future handles: None (done) or the Status the future failed with
        self.futures: dict[int, Status | None] = {}
        # execute status handles: the outputs to wait for, or the Status the call failed with;
        # and what says when the call finished on every device (its effects too: callbacks)
        self.results: dict[int, list[Any] | Status] = {}
        self.finished: dict[int, Any] = {}
        # an output of each computation in flight, oldest first (all of one call finish together)
        self.running: collections.deque[Any] = collections.deque()
        self._handles = itertools.count(SERVER_HANDLES)
        self._seq = itertools.count()
        self._draining: str | None = None
        self.Request = self.m("xla.ifrt.proxy.IfrtRequest")
        self.Response = self.m("xla.ifrt.proxy.IfrtResponse")

    # ---- the stream ----
    def handle(self, data: bytes, defer: Defer | None = None) -> bytes | None:
        """The answer to one serialized IfrtRequest. Given `defer`, a request that may wait
        (_may_wait) is not answered here: defer(work) gets a function that answers it, and this
        returns None."""
        request = self.Request()
        try:
            request.ParseFromString(data)
        except Exception:  # noqa: BLE001 - any protobuf decode failure
            return self._answer(_op_id_of(data), None, Status(
                "INVALID_ARGUMENT", "the request is not an xla.ifrt.proxy.IfrtRequest"))
        op_id = request.request_metadata.op_id
        which = request.WhichOneof("request")
        if which is None:
            return self._answer(op_id, None, Status("INVALID_ARGUMENT",
                                                    "the request names no operation"))
        while self.running and _finished(self.running[0]):
            self.running.popleft()  # held no longer than its computation runs
        if defer is not None and self._may_wait(which, getattr(request, which)):
            defer(lambda: self._run(op_id, which, request))
            return None
        return self._run(op_id, which, request)

    def _run(self, op_id: int, which: str, request: Any) -> bytes:
        handler = _HANDLERS.get(which)
        field = which[:-len("_request")] + "_response"
        try:
            if self._draining is not None and which not in _QUERIES:
                raise Status("UNAVAILABLE", self._draining)
            if which == "init_request":
                raise Status("FAILED_PRECONDITION", "the session is initialized already")
            if handler is None:
                raise Status("UNIMPLEMENTED", f"{which} is not served by the jax-ipu server")
            result = handler(self, getattr(request, which))
        except Exception as exc:  # noqa: BLE001 - every failure is an answer
            result = status_of(exc)
        return self._answer(op_id, field, result)

    def _may_wait(self, which: str, req: Any) -> bool:
        """Whether answering `req` may wait: for the compiler (or the model's reports), a value
        being computed, a host buffer still on its way, or the client's host callbacks. Anything
        else is answered at once (an execute only starts its computation; an unknown handle is
        an error answer)."""
        if which in _SLOW:
            return True
        if which == "loaded_executable_execute_request":
            # A program that calls the client's host callbacks waits for the client's poll
            exe = self.executables.get(req.loaded_executable_handle)
            return (len(self.running) >= RUNNING_PER_SESSION
                    or (exe is not None and bool(exe.stand_ins)))
        if which == "make_array_from_host_buffer_request":
            return self.host_buffers.peek(req.host_buffer_handle) is None
        if which == "make_arrays_from_host_buffer_shards_request":
            return any(self.host_buffers.peek(buffer.host_buffer_handle) is None
                       for spec in req.specs for buffer in spec.host_buffers)
        if which == "check_value_ready_request":
            return not self._ready(self.arrays.get(h) for h in req.value_handles)
        if which == "copy_to_host_buffer_request":
            return not self._ready([self.arrays.get(req.array_handle)])
        if which == "loaded_executable_fetch_execute_result_request":
            result = self.results.get(req.result_status_handle)
            return ((isinstance(result, list) and not self._ready(result))
                    or req.result_status_handle in self.finished)
        return False

    @staticmethod
    def _ready(arrays: Iterable[Any]) -> bool:
        """Whether every array is computed (an unknown or failed one is: its error answers)."""
        return all(array is None or isinstance(array, Status) or _finished(array)
                   for array in arrays)

    def init_response(self, op_id: int, platform_version: str) -> bytes:
        """The answer to the session's first request, InitRequest."""
        response = self.Response()
        response.response_metadata.op_id = op_id
        response.response_metadata.seq_num = next(self._seq)
        self._fill_init(response.init_response, platform_version)
        return response.SerializeToString()

    def _answer(self, op_id: int, field: str | None, result: Any) -> bytes:
        response = self.Response()
        response.response_metadata.op_id = op_id
        if isinstance(result, Status):
            response.response_metadata.status.code = CODES[result.code]
            response.response_metadata.status.message = result.message
        else:
            getattr(response, field).CopyFrom(result)
            response.response_metadata.seq_num = next(self._seq)
        return response.SerializeToString()

    def drain(self, reason: str) -> None:
        """Answer every request from now on with UNAVAILABLE and `reason` (the server is
        stopping): the client's next call raises that error, while its connection lasts."""
        self._draining = reason

    def close(self, reason: str) -> str:
        """Free everything the session holds (a wait for a host buffer ends with `reason`);
        what was freed, in words."""
        buffered = self.host_buffers.held
        self.host_buffers.close(reason)
        if self.host_calls is not None:  # a computation waiting on the client fails now
            self.host_calls.close(f"the client's session ended ({reason})")
        # one array may have several handles (a shard of itself)
        arrays = list({id(a): a for a in self.arrays.values()
                       if not isinstance(a, Status)}.values())
        executables = len(self.executables)
        self.arrays.clear()
        self.executables.clear()
        self.futures.clear()
        self.results.clear()
        self.finished.clear()
        self.running.clear()
        freed = 0
        for array in arrays:
            if not array.is_deleted():
                freed += array.nbytes
                array.delete()
        summary = (f"freed {len(arrays)} arrays ({freed} bytes), {executables} executables, "
                   f"{buffered} bytes of host buffers")
        if self.shared_dir is not None:
            unread = self.shared_dir.close()
            summary += (f"; {self.shared_dir.reads} host buffers read from the shared directory "
                        f"{self.shared_dir.path}, {unread} left unread there and removed")
        return summary

    # ---- handles ----
    def _new_handle(self) -> int:
        return next(self._handles)

    def array(self, handle: int, deleted: bool = False) -> Any:
        """The array of `handle`; one deleted (or donated) only if `deleted`."""
        found = self.arrays.get(handle)
        if found is None:
            raise Status("NOT_FOUND", f"unknown array handle {handle} in this session")
        if isinstance(found, Status):
            raise found
        if not deleted and found.is_deleted():
            raise Status("INVALID_ARGUMENT", f"array handle {handle} was deleted (by a delete "
                         "or by donation to a computation)")
        return found

    def _arrays(self, handles: Iterable[int]) -> list[Any]:
        return [self.array(h) for h in handles]

    def _fill(self, wanted: Sequence[int], make: Callable[[], list[Any]]) -> list[int]:
        """Run `make` for the arrays of a request naming result handles `wanted` (the server
        makes them when the list is empty); on failure, those handles hold the error."""
        for handle in wanted:
            if not 0 < handle < SERVER_HANDLES:
                raise Status("INVALID_ARGUMENT", f"array handle {handle} is not a client handle")
        taken = [h for h in wanted if h in self.arrays]
        if taken:
            raise Status("ALREADY_EXISTS", f"array handles {taken} are in use")
        try:
            made = make()
        except Exception as exc:  # noqa: BLE001
            status = status_of(exc)
            for handle in wanted:
                self.arrays[handle] = status
            raise status from None
        if wanted and len(wanted) != len(made):
            raise Status("INVALID_ARGUMENT",
                         f"{len(wanted)} result handles for {len(made)} arrays")
        handles = list(wanted) or [self._new_handle() for _ in made]
        for handle, array in zip(handles, made, strict=True):
            self.arrays[handle] = array
        return handles

    def _placement(self, sharding: Any, shape: tuple[int, ...]) -> Any:
        placement = self.codec.sharding(sharding)
        outside = sorted(set(placement.devices) - self.allowed)
        if outside:
            raise Status("PERMISSION_DENIED", f"devices {outside} are outside this session's "
                         f"partition {sorted(self.allowed)}")
        return placement

    def _executable(self, handle: int) -> Executable:
        found = self.executables.get(handle)
        if found is None:
            raise Status("NOT_FOUND", f"unknown loaded executable handle {handle}")
        return found

    def _future_handle(self, error: Status | None = None) -> int:
        """A check_future handle, done already (with `error`, if any)."""
        handle = self._new_handle()
        self.futures[handle] = error
        return handle

    # ---- init ----
    def _fill_init(self, out: Any, platform_version: str) -> None:
        out.session_id = self.session_id
        out.platform_name = "ipu"
        out.platform_version = platform_version
        out.process_index = 0
        out.runtime_type = "jax-ipu"
        for local, device_id in enumerate(self.device_ids):
            device = self.backend.device(device_id)
            memories = backend_mod.memory_kind_ids(device)
            ids = backend_mod.memory_ids(device)
            d = out.all_devices.add(
                id=device.id, local_device_id=local, local_hardware_id=device.local_hardware_id,
                platform_name="ipu", device_kind=device.device_kind,
                default_memory_id=ids[device.default_memory().kind],
                debug_string=repr(device), to_string=str(device))
            d.memory_ids.extend(ids[kind] for kind in memories)
            d.attributes.CopyFrom(self.codec.attributes(backend_mod.device_attributes(device)))
            out.primary_device_ids.append(device.id)
            out.addressable_device_ids.append(device.id)
            for memory in device.addressable_memories():
                out.memories.add(id=ids[memory.kind], memory_space_kind=memory.kind,
                                 kind_id=memories[memory.kind], device_ids=[device.id],
                                 debug_string=repr(memory), to_string=str(memory))
        out.client_attributes.CopyFrom(self.codec.attributes(CLIENT_ATTRIBUTES))

    # ---- futures and readiness ----
    def _check_future(self, req: Any) -> Any:
        if req.future_handle not in self.futures:
            raise Status("NOT_FOUND", f"unknown future handle {req.future_handle}")
        error = self.futures.pop(req.future_handle)
        if error is not None:
            raise error
        return self.m("xla.ifrt.proxy.CheckFutureResponse")()

    def _check_value_ready(self, req: Any) -> Any:
        for array in self._arrays(req.value_handles):
            array.block_until_ready()
        return self.m("xla.ifrt.proxy.CheckValueReadyResponse")()

    # ---- arrays from and to the host ----
    def _make_array_from_host_buffer(self, req: Any) -> Any:
        def make() -> list[Any]:
            data = self.host_buffers.take(req.host_buffer_handle)
            dtype, shape = self.codec.dtype(req.dtype), self.codec.shape(req.shape)
            if req.HasField("layout") and req.layout.serialized_layout.type_name:
                raise Status("UNIMPLEMENTED", "arrays with a custom layout are not served by "
                             "the jax-ipu server: use jax's default layout")
            strides = list(req.byte_strides.strides) if req.HasField("byte_strides") else None
            placement = self._placement(req.sharding, shape)
            return [self.backend.put(data, dtype, shape, strides, placement)]

        wanted = [req.array_handle] if req.HasField("array_handle") and req.array_handle else []
        handle, = self._fill(wanted, make)
        return self.m("xla.ifrt.proxy.MakeArrayFromHostBufferResponse")(array_handle=handle)

    def _make_arrays_from_host_buffer_shards(self, req: Any) -> Any:
        def make() -> list[Any]:
            made = []
            for spec in req.specs:
                dtype = self.codec.dtype(spec.array_spec.dtype)
                shape = self.codec.shape(spec.array_spec.shape)
                placement = self._placement(spec.array_spec.sharding, shape)
                if len(spec.addressable_shard_indices) != len(spec.host_buffers):
                    raise Status("INVALID_ARGUMENT", "one list of shard indices per host buffer")
                shards: list[Any] = [None] * len(placement.devices)
                for indices, buffer in zip(spec.addressable_shard_indices, spec.host_buffers,
                                           strict=True):
                    data = self.host_buffers.take(buffer.host_buffer_handle)
                    strides = (list(buffer.byte_strides.strides)
                               if buffer.HasField("byte_strides") else None)
                    for index in indices.indices:
                        if not 0 <= index < len(shards):
                            raise Status("INVALID_ARGUMENT", f"shard index {index} of "
                                         f"{len(shards)}")
                        device = placement.devices[index]
                        shards[index] = self.backend.put(
                            data, self.codec.dtype(buffer.dtype), self.codec.shape(buffer.shape),
                            strides, type(placement)((device,), placement.memory_kind, None,
                                                     None))
                if any(s is None for s in shards):
                    raise Status("INVALID_ARGUMENT", "a shard has no host buffer")
                made.append(self.backend.assemble(shape, dtype, placement, shards))
            return made

        handles = self._fill(list(req.array_handles), make)
        return self.m("xla.ifrt.proxy.MakeArraysFromHostBufferShardsResponse")(
            array_handles=handles)

    def _make_error_arrays(self, req: Any) -> Any:
        code = next((name for name, number in CODES.items() if number == req.error.code),
                    "UNKNOWN")
        error = Status(code if code != "OK" else "UNKNOWN", req.error.message)
        count = len(req.array_specs)
        wanted = list(req.array_handles) or [self._new_handle() for _ in range(count)]
        if len(wanted) != count:
            raise Status("INVALID_ARGUMENT", f"{len(wanted)} handles for {count} array specs")
        for handle in wanted:
            self.arrays.setdefault(handle, error)
        return self.m("xla.ifrt.proxy.MakeErrorArraysResponse")(array_handles=wanted)

    def _copy_to_host_buffer(self, req: Any) -> Any:
        array = self.array(req.array_handle)
        strides = list(req.byte_strides.strides) if req.HasField("byte_strides") else None
        self.host_buffers.store(req.host_buffer_handle, backend_mod.to_host(array, strides))
        return self.m("xla.ifrt.proxy.CopyToHostBufferResponse")()

    # ---- arrays over devices ----
    def _assemble_array_from_single_device_arrays(self, req: Any) -> Any:
        def make() -> list[Any]:
            shards = self._arrays(req.single_device_array_handles)
            shape = self.codec.shape(req.shape)
            dtype = (self.codec.dtype(req.dtype) if req.HasField("dtype") else
                     shards[0].dtype if shards else np.dtype(np.float32))
            placement = self._placement(req.sharding, shape)
            return [self.backend.assemble(shape, dtype, placement, shards)]

        wanted = [req.result_handle] if req.result_handle else []
        handle, = self._fill(wanted, make)
        return self.m("xla.ifrt.proxy.AssembleArrayFromSingleDeviceArraysResponse")(
            array_handle=handle)

    def _disassemble_into_single_device_arrays(self, req: Any) -> Any:
        def make() -> list[Any]:
            return [shard.data for shard in self.array(req.array_handle).addressable_shards]

        handles = self._fill(list(req.result_handles), make)
        return self.m("xla.ifrt.proxy.DisassembleIntoSingleDeviceArraysResponse")(
            array_handles=handles)

    def _fully_replicated_shard(self, req: Any) -> Any:
        def make() -> list[Any]:
            array = self.array(req.array_handle)
            if len(array.sharding.device_set) == 1:
                return [array]
            if not array.sharding.is_fully_replicated:
                raise Status("INVALID_ARGUMENT", "the array is not fully replicated")
            return [array.addressable_shards[0].data]

        wanted = [req.result_handle] if req.result_handle else []
        handle, = self._fill(wanted, make)
        return self.m("xla.ifrt.proxy.FullyReplicatedShardResponse")(array_handle=handle)

    def _remap_arrays(self, req: Any) -> Any:
        """Arrays made of the shards of others (jax moves an array to the same devices in
        another order so): output j's shards at `to` positions are input i's at `from`."""
        def make() -> list[Any]:
            plan = req.plan
            inputs = self._arrays(req.array_handles)
            if len(inputs) != len(plan.input_specs):
                raise Status("INVALID_ARGUMENT", f"{len(inputs)} arrays for a plan of "
                             f"{len(plan.input_specs)} inputs")
            held = [backend_mod.shards(a) for a in inputs]
            outputs = []
            for spec in plan.output_specs:
                shape = self.codec.shape(spec.shape)
                outputs.append((shape, self.codec.dtype(spec.dtype),
                                self._placement(spec.sharding, shape)))
            slots = _remapped(plan.mappings, held, [len(p.devices) for _, _, p in outputs])
            always, donate = self.codec.copying(req.copy_semantics)
            made = []
            for (shape, dtype, placement), shards in zip(outputs, slots, strict=True):
                if any(shard is None for shard in shards):
                    raise Status("INVALID_ARGUMENT", "the plan leaves shards of an output "
                                 "unmapped")
                if always:
                    shards = [self.backend.copy(shard, [], None, always=True)
                              for shard in shards]
                made.append(self.backend.assemble(shape, dtype, placement, shards))
            if donate:  # the outputs own the inputs' buffers now: the inputs read as deleted
                for handle in req.array_handles:
                    self.arrays[handle] = DONATED
            return made

        handles = self._fill(list(req.result_handles), make)
        return self.m("xla.ifrt.proxy.RemapArraysResponse")(array_handles=handles)

    def _copy_arrays(self, req: Any) -> Any:
        def make() -> list[Any]:
            outside = sorted(set(req.device_ids) - self.allowed)
            if outside:
                raise Status("PERMISSION_DENIED", f"devices {outside} are outside this "
                             f"session's partition {sorted(self.allowed)}")
            kind = (req.memory_kind or None) if req.HasField("memory_kind") else None
            always, donate = self.codec.copying(req.copy_semantics)
            return [self.backend.copy(a, list(req.device_ids), kind, always, donate)
                    for a in self._arrays(req.array_handles)]

        handles = self._fill(list(req.result_handles), make)
        return self.m("xla.ifrt.proxy.CopyArraysResponse")(array_handles=handles)

    def _delete_array(self, req: Any) -> Any:
        errors = []
        for handle in req.array_handle:
            try:
                self.array(handle, deleted=True).delete()
            except Status as status:
                errors.append(status)
        return self.m("xla.ifrt.proxy.DeleteArrayResponse")(
            deletion_future_handle=self._future_handle(errors[0] if errors else None))

    def _is_array_deleted(self, req: Any) -> Any:
        return self.m("xla.ifrt.proxy.IsArrayDeletedResponse")(
            deleted=self.array(req.array_handle, deleted=True).is_deleted())

    def _destruct_array(self, req: Any) -> Any:
        missing = [h for h in req.array_handle if self.arrays.pop(h, None) is None]
        if missing:
            raise Status("NOT_FOUND", f"unknown array handles {missing}")
        return self.m("xla.ifrt.proxy.DestructArrayResponse")()

    # ---- executables ----
    def _compile(self, req: Any) -> Any:
        if req.host_callbacks:
            raise Status("UNIMPLEMENTED", NO_HOST_CALLBACKS)
        if req.program.type_name != XLA_PROGRAM:
            raise Status("INVALID_ARGUMENT", f"program type {req.program.type_name!r}: the "
                         f"jax-ipu server compiles {XLA_PROGRAM}")
        if req.compile_options.type_name != XLA_COMPILE_OPTIONS:
            raise Status("INVALID_ARGUMENT", f"compile options of type "
                         f"{req.compile_options.type_name!r}: the jax-ipu server takes "
                         f"{XLA_COMPILE_OPTIONS}")
        options = self.codec.CompileOptions()
        try:
            options.ParseFromString(req.compile_options.data)
        except Exception:  # noqa: BLE001
            raise Status("INVALID_ARGUMENT", "the compile options are not an "
                         "XlaCompileOptionsProto") from None
        executable = self.backend.compile(req.program.data,
                                          options.compile_options.SerializeToString(),
                                          self.allowed, self.host_calls)
        handle = self._new_handle()
        self.executables[handle] = executable
        ids = [d.id for d in executable.devices]
        return self.m("xla.ifrt.proxy.CompileResponse")(
            loaded_executable_handle=handle, name=executable.signature.name,
            num_devices=len(ids), device_ids=ids, addressable_device_ids=ids,
            fingerprint_value=executable.fingerprint,
            ready_future_handle=self._future_handle())

    def _loaded_executable_metadata(self, req: Any) -> Any:
        exe = self._executable(req.loaded_executable_handle)
        out = self.m("xla.ifrt.proxy.LoadedExecutableMetadataResponse")()
        OpSharding, Layout = self.m("xla.OpSharding"), self.m("xla.LayoutProto")
        for target, shardings in ((out.parameter_shardings,
                                   exe.loaded.get_parameter_shardings()),
                                  (out.output_shardings, exe.loaded.get_output_shardings())):
            for op in shardings or []:
                target.shardings.add().CopyFrom(OpSharding.FromString(op.SerializeToString()))
        for name, layouts_of in (("parameter_layouts", exe.loaded.get_parameter_layouts),
                                 ("output_layouts", exe.loaded.get_output_layouts)):
            try:
                layouts = layouts_of()
            except Exception as exc:  # noqa: BLE001 - XLA has none for a token: the answer
                status = status_of(exc)
                error = getattr(out, f"{name}_error")
                error.code, error.message = CODES[status.code], status.message
                continue
            target = getattr(out, f"{name}_list")
            for layout in layouts:
                xla = _internals.xla_layout(layout)
                proto = Layout(minor_to_major=list(xla.minor_to_major()))
                for tile in xla.tiling():
                    proto.tiles.add(dimensions=list(tile))
                if xla.element_size_in_bits():
                    proto.element_size_in_bits = xla.element_size_in_bits()
                target.layouts.add().CopyFrom(proto)
        out.output_memory_kinds.memory_kind_lists.add(memory_kinds=exe.output_kinds)
        out.donated_input_indices.donated_input_indices.extend(exe.signature.donated)
        stats = exe.loaded.get_compiled_memory_stats()
        fields = out.compiled_memory_stats.DESCRIPTOR.fields_by_name
        for name in fields:
            value = getattr(stats, name, None)
            if isinstance(value, int) and name != "serialized_buffer_assignment":
                setattr(out.compiled_memory_stats, name, value)
        out.size_of_generated_code_in_bytes = exe.loaded.size_of_generated_code_in_bytes()
        return out

    def _loaded_executable_execute(self, req: Any) -> Any:
        options = req.execute_options
        out = self.m("xla.ifrt.proxy.LoadedExecutableExecuteResponse")()
        status_handle = 0
        if options.fill_status:
            status_handle = req.result_status_handle or self._new_handle()
        outputs: list[Any] = []

        def run() -> list[Any]:
            exe = self._executable(req.loaded_executable_handle)
            if req.device_ids and list(req.device_ids) != [d.id for d in exe.devices]:
                raise Status("INVALID_ARGUMENT", f"execute on devices {list(req.device_ids)}: "
                             f"the program was compiled for {[d.id for d in exe.devices]}")
            args = self._arrays(req.args_handles)
            while len(self.running) >= RUNNING_PER_SESSION:
                _wait(self.running.popleft())
            results, finished = exe.execute(args, with_token=bool(status_handle))
            outputs.extend(results)
            if finished is not None:
                self.finished[status_handle] = finished
            if outputs:
                self.running.append(outputs[0])
            return outputs

        try:
            handles = self._fill(list(req.result_array_handle), run)
        except Status as status:
            if status_handle:
                self.results[status_handle] = status
            raise
        if status_handle:
            out.status_handle = status_handle
            self.results[status_handle] = outputs
        if not req.result_array_handle:
            exe = self._executable(req.loaded_executable_handle)
            ids = [d.id for d in exe.devices]
            for handle, array, sharding in zip(handles, outputs, exe.output_shardings,
                                               strict=True):
                o = out.outputs.add(array_handle=handle)
                o.dtype.CopyFrom(self.codec.dtype_proto(array.dtype))
                o.shape.CopyFrom(self.codec.shape_proto(array.shape))
                o.sharding.CopyFrom(self._sharding_proto(sharding, array.ndim, ids))
        return out

    def _sharding_proto(self, sharding: Any, ndim: int, device_ids: list[int]) -> Any:
        """The IFRT sharding of an output of a program run on `device_ids` (in order)."""
        if len(device_ids) == 1:
            return self.codec.single_device_sharding(device_ids[0], sharding.memory_kind)
        hlo = _internals.hlo_sharding(sharding, ndim)
        return self.codec.hlo_sharding(device_ids, hlo.to_proto().SerializeToString(),
                                       sharding.memory_kind)

    def _loaded_executable_fetch_execute_result(self, req: Any) -> Any:
        result = self.results.pop(req.result_status_handle, None)
        if result is None:
            raise Status("NOT_FOUND", f"unknown result status handle {req.result_status_handle}")
        finished = self.finished.pop(req.result_status_handle, None)
        if isinstance(result, Status):
            raise result
        for array in result:  # the call's errors surface here
            array.block_until_ready()
        if finished is not None:  # and its effects' (a failed host callback, say)
            finished.block_until_ready()
        return self.m("xla.ifrt.proxy.LoadedExecutableFetchExecuteResultResponse")()

    def _loaded_executable_cost_analysis(self, req: Any) -> Any:
        exe = self._executable(req.loaded_executable_handle)
        out = self.m("xla.ifrt.proxy.LoadedExecutableCostAnalysisResponse")()
        try:
            out.attributes.CopyFrom(self.codec.attributes(exe.cost_analysis()))
        except Exception as exc:  # noqa: BLE001 - the answer carries the error
            status = status_of(exc)
            out.status.code, out.status.message = CODES[status.code], status.message
        return out

    def _loaded_executable_human_readable_program_text(self, req: Any) -> Any:
        exe = self._executable(req.loaded_executable_handle)
        out = self.m("xla.ifrt.proxy.LoadedExecutableHumanReadableProgramTextResponse")()
        try:
            out.human_readable_program_text = exe.loaded.get_hlo_text()
        except Exception as exc:  # noqa: BLE001
            status = status_of(exc)
            out.status.code, out.status.message = CODES[status.code], status.message
        return out

    def _loaded_executable_delete(self, req: Any) -> Any:
        return self.m("xla.ifrt.proxy.LoadedExecutableDeleteResponse")(
            future_handle=self._future_handle(Status(
                "UNIMPLEMENTED", "LoadedExecutable::Delete is no longer supported")))

    def _loaded_executable_is_deleted(self, req: Any) -> Any:
        self._executable(req.loaded_executable_handle)
        return self.m("xla.ifrt.proxy.LoadedExecutableIsDeletedResponse")(is_deleted=False)

    def _loaded_executable_destruct(self, req: Any) -> Any:
        found = self.executables.pop(req.loaded_executable_handle, None)
        if found is None:
            raise Status("NOT_FOUND",
                         f"unknown loaded executable handle {req.loaded_executable_handle}")
        return self.m("xla.ifrt.proxy.LoadedExecutableDestructResponse")()

    def _not_mpmd(self, req: Any) -> Any:
        raise Status("INVALID_ARGUMENT", "the jax-ipu server's executables are not MPMD")

    def _no_host_callback(self, req: Any) -> Any:
        raise Status("NOT_FOUND", "this session has no host callbacks: " + NO_HOST_CALLBACKS)

    # ---- defaults ----
    def _get_default_device_assignment(self, req: Any) -> Any:
        replicas, partitions = req.num_replicas, req.num_partitions
        if replicas < 1 or partitions < 1 or replicas * partitions > len(self.device_ids):
            raise Status("RESOURCE_EXHAUSTED", f"{replicas} replicas x {partitions} partitions "
                         f"need more devices than this session's {len(self.device_ids)}")
        out = self.m("xla.ifrt.proxy.GetDefaultDeviceAssignmentResponse")()
        assignment = out.device_assignment
        assignment.replica_count, assignment.computation_count = replicas, partitions
        for p in range(partitions):
            assignment.computation_devices.add(replica_device_ids=[
                self.device_ids[r * partitions + p] for r in range(replicas)])
        return out

    def _get_default_layout(self, req: Any) -> Any:
        if req.device_id not in self.allowed:
            raise Status("PERMISSION_DENIED", f"device {req.device_id} is outside this "
                         f"session's partition {sorted(self.allowed)}")
        dtype, dims = self.codec.dtype(req.dtype), self.codec.shape(self.codec.Shape(
            dims=list(req.dims)))
        layout = self.backend.client.get_default_layout(dtype, dims,
                                                        self.backend.device(req.device_id))
        return self.m("xla.ifrt.proxy.GetDefaultLayoutResponse")(
            serialized_pjrt_layout=_internals.xla_layout(layout).to_string().encode())


def _remapped(mappings: Iterable[Any], held: list[list[Any]], sizes: list[int]
              ) -> list[list[Any]]:
    """The shards of each output (`sizes` of them) that RemapPlanProto `mappings` take from
    the inputs' shards `held` (None where none is mapped); Status for a mapping that does not
    fit. A mapping's k-th `from` interval of shards goes to its k-th `to` interval."""
    slots: list[list[Any]] = [[None] * n for n in sizes]
    for m in mappings:
        if not (0 <= m.in_array < len(held) and 0 <= m.out_array < len(slots)):
            raise Status("INVALID_ARGUMENT", f"a mapping from array {m.in_array} to "
                         f"{m.out_array}: the plan has {len(held)} and {len(slots)}")
        intervals = (m.from_start, m.from_end, m.from_step, m.to_start, m.to_end, m.to_step)
        if len({len(field) for field in intervals}) != 1:
            raise Status("INVALID_ARGUMENT", "a mapping's intervals differ in number")
        source, target = held[m.in_array], slots[m.out_array]
        for a, b, step, c, d, to_step in zip(*intervals, strict=True):
            if step <= 0 or to_step <= 0:
                raise Status("INVALID_ARGUMENT", "a mapping's steps must be positive")
            froms, tos = range(a, b, step), range(c, d, to_step)
            if len(froms) != len(tos) or (froms and not (
                    0 <= froms[0] and froms[-1] < len(source)
                    and 0 <= tos[0] and tos[-1] < len(target))):
                raise Status("INVALID_ARGUMENT", f"a mapping of shards {froms} to {tos} does "
                             "not fit its arrays")
            for f, t in zip(froms, tos, strict=True):
                target[t] = source[f]
    return slots


class _Donated:
    """What a handle holds once its array was donated to a remap: deleted to the client, while
    its buffers live on in the remap's outputs (deleting the array would free them)."""

    nbytes = 0

    @staticmethod
    def is_deleted() -> bool:
        return True

    def delete(self) -> None:
        pass


DONATED = _Donated()


def _finished(array: Any) -> bool:
    """Whether the computation that makes `array` has finished; one that failed has (its error
    is answered where the array is used), and so has a deleted array's, as far as the session
    is concerned (a computation it was donated to waits for it)."""
    if array.is_deleted():  # asked first: jax's error for it costs about 30 us to build
        return True
    try:
        return bool(array.is_ready())
    except RuntimeError:
        return True


def _wait(array: Any) -> None:
    """Wait until the computation that makes `array` has finished (or failed)."""
    try:
        array.block_until_ready()
    except RuntimeError:
        pass


def _op_id_of(data: bytes) -> int:
    """The op_id of bytes that do not parse as an IfrtRequest, if their metadata (field 1, its
    op_id a fixed64 field 1) can be read; else 0."""
    try:
        metadata = Message(data).message(1)
        op_id = metadata.raw(1) if metadata is not None else b""
    except WireError:
        return 0
    return int.from_bytes(op_id, "little") if len(op_id) == 8 else 0


# Requests that may run long (the compiler, the model's reports): never on a transport's thread.
_SLOW = frozenset({"compile_request", "loaded_executable_cost_analysis_request",
                   "loaded_executable_human_readable_program_text_request"})

# Requests a draining session still answers: questions about the devices, whose error jaxlib's
# client does not handle (it aborts the process).
_QUERIES = frozenset({"get_default_layout_request", "get_default_device_assignment_request"})

_HANDLERS: dict[str, Callable[[Session, Any], Any]] = {
    "check_future_request": Session._check_future,
    "check_value_ready_request": Session._check_value_ready,
    "make_array_from_host_buffer_request": Session._make_array_from_host_buffer,
    "make_arrays_from_host_buffer_shards_request": Session._make_arrays_from_host_buffer_shards,
    "make_error_arrays_request": Session._make_error_arrays,
    "assemble_array_from_single_device_arrays_request":
        Session._assemble_array_from_single_device_arrays,
    "copy_to_host_buffer_request": Session._copy_to_host_buffer,
    "disassemble_into_single_device_arrays_request":
        Session._disassemble_into_single_device_arrays,
    "delete_array_request": Session._delete_array,
    "copy_arrays_request": Session._copy_arrays,
    "remap_arrays_request": Session._remap_arrays,
    "fully_replicated_shard_request": Session._fully_replicated_shard,
    "is_array_deleted_request": Session._is_array_deleted,
    "destruct_array_request": Session._destruct_array,
    "compile_request": Session._compile,
    "loaded_executable_metadata_request": Session._loaded_executable_metadata,
    "loaded_executable_execute_request": Session._loaded_executable_execute,
    "loaded_executable_fetch_execute_result_request":
        Session._loaded_executable_fetch_execute_result,
    "loaded_executable_cost_analysis_request": Session._loaded_executable_cost_analysis,
    "loaded_executable_human_readable_program_text_request":
        Session._loaded_executable_human_readable_program_text,
    "loaded_executable_delete_request": Session._loaded_executable_delete,
    "loaded_executable_is_deleted_request": Session._loaded_executable_is_deleted,
    "loaded_executable_destruct_request": Session._loaded_executable_destruct,
    "loaded_executable_mpmd_metadata_request": Session._not_mpmd,
    "loaded_executable_mpmd_cost_analysis_request": Session._not_mpmd,
    "loaded_host_callback_poll_request": Session._no_host_callback,
    "loaded_host_callback_return_request": Session._no_host_callback,
    "get_default_device_assignment_request": Session._get_default_device_assignment,
    "get_default_layout_request": Session._get_default_layout,
}
