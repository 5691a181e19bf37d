"""The IFRT proxy messages, built at run time from the schema the installed jaxlib's client speaks.

jaxlib's libjax_common.so embeds the serialized FileDescriptorProto of every .proto it was built
with; reading them there gives message classes that cannot drift from the client's."""

from __future__ import annotations

import functools
import mmap
import os
import re
from typing import Any

import jaxlib

from jax_ipu.errors import IpuError
from jax_ipu.protowire import WireError, _varint

# The jaxlib whose client this server was written against and tested with.
BUILT_FOR_JAXLIB = "0.10.2"
# IFRT proxy protocol versions this server implements (16: executables know their devices;
# 21: execute results through their own request; 22: devices name their platform; 23:
# MakeArrayFromHostBuffer carries a layout). The client offers a range and gets the highest
# version both speak.
PROTOCOL_MIN, PROTOCOL_MAX = 16, 23
# The IFRT SerDes version a session speaks (what the client serializes programs and options in;
# jaxlib 0.10.2 writes HloProgram from version 3 on), and the version field of each object
# (dtype, shape, sharding, attribute map) inside it, which is still 0.
SESSION_SERDES = 3
OBJECT_VERSION = 0

SERVICE = "xla.ifrt.proxy.GrpcIfrtService"
_ROOT_FILES = ("xla/python/ifrt_proxy/common/grpc_ifrt_service.proto",
               "xla/python/pjrt_ifrt/xla_compiler.proto",
               "xla/python/pjrt_ifrt/xla_sharding.proto",
               "xla/python/pjrt_ifrt/pjrt_layout_serdes.proto",
               "xla/python/ifrt/sharding_serdes.proto")

# The messages and fields this server reads or writes, by name: a jaxlib whose schema lacks one
# is refused when the server starts, naming it.
USED_FIELDS: dict[str, str] = {
    "xla.ifrt.proxy.GrpcGetVersionRequest": "min_version max_version",
    "xla.ifrt.proxy.GrpcGetVersionResponse": "version",
    "xla.ifrt.proxy.IfrtProxyVersion": "protocol_version ifrt_serdes_version_number",
    "xla.ifrt.proxy.GrpcIfrtSessionMetadata": "version initialization_data",
    "xla.ifrt.proxy.GrpcHostBufferStoreMetadata": "session_id handle buffer_size",
    "xla.ifrt.proxy.GrpcHostBufferStoreRequest": "data",
    "xla.ifrt.proxy.GrpcHostBufferLookupRequest": "session_id handle",
    "xla.ifrt.proxy.GrpcHostBufferLookupResponse": "data",
    "xla.ifrt.proxy.GrpcHostBufferDeleteRequest": "session_id handle",
    "xla.ifrt.proxy.GrpcHostBufferReadFromDiskRequest": "metadata",
    "xla.ifrt.proxy.IfrtRequest": "request_metadata",
    "xla.ifrt.proxy.IfrtResponse": "response_metadata",
    "xla.ifrt.proxy.RequestMetadata": "op_id",
    "xla.ifrt.proxy.ResponseMetadata": "op_id status seq_num",
    "xla.ifrt.proxy.InitResponse": "session_id platform_name platform_version platform_id "
                                   "process_index runtime_type all_devices primary_device_ids "
                                   "addressable_device_ids memories client_attributes",
    "xla.ifrt.proxy.InitResponse.Device": "id local_device_id local_hardware_id platform_name "
                                          "device_kind default_memory_id memory_ids "
                                          "debug_string to_string attributes",
    "xla.ifrt.proxy.InitResponse.Memory": "id memory_space_kind kind_id device_ids "
                                          "debug_string to_string",
    "xla.ifrt.proxy.MakeArrayFromHostBufferRequest": "dtype shape sharding layout "
                                                     "host_buffer_handle byte_strides "
                                                     "array_handle",
    "xla.ifrt.proxy.AssembleArrayFromSingleDeviceArraysRequest":
        "shape sharding single_device_array_handles copy_semantics result_handle dtype",
    "xla.ifrt.proxy.DisassembleIntoSingleDeviceArraysRequest": "array_handle result_handles",
    "xla.ifrt.proxy.CopyArraysRequest": "array_handles device_ids memory_kind copy_semantics "
                                        "result_handles",
    "xla.ifrt.proxy.RemapArraysRequest": "plan array_handles copy_semantics result_handles",
    "xla.ifrt.proxy.RemapArraysResponse": "array_handles",
    "xla.ifrt.RemapPlanProto": "input_specs output_specs mappings",
    "xla.ifrt.RemapPlanProto.MappingProto": "in_array out_array from_start from_end from_step "
                                            "to_start to_end to_step",
    "xla.ifrt.ArraySpecProto": "dtype shape sharding",
    "xla.ifrt.proxy.CopyToHostBufferRequest": "array_handle byte_strides host_buffer_handle",
    "xla.ifrt.proxy.FullyReplicatedShardRequest": "array_handle result_handle",
    "xla.ifrt.proxy.CompileRequest": "program compile_options host_callbacks",
    "xla.ifrt.proxy.CompileResponse": "loaded_executable_handle "
                                      "name num_devices device_ids addressable_device_ids "
                                      "fingerprint_value ready_future_handle",
    "xla.ifrt.proxy.LoadedExecutableMetadataResponse":
        "parameter_shardings output_shardings parameter_layouts_list output_layouts_list "
        "output_memory_kinds donated_input_indices compiled_memory_stats "
        "size_of_generated_code_in_bytes",
    "xla.ifrt.proxy.LoadedExecutableExecuteRequest": "loaded_executable_handle args_handles "
                                                     "execute_options device_ids "
                                                     "result_array_handle result_status_handle",
    "xla.ifrt.proxy.LoadedExecutableExecuteResponse": "status_handle outputs",
    "xla.ifrt.proxy.GetDefaultLayoutRequest": "dtype dims device_id memory_kind",
    "xla.ifrt.proxy.GetDefaultLayoutResponse": "serialized_pjrt_layout",
    "xla.ifrt.Serialized": "type_name data",
    "xla.ifrt.DTypeProto": "kind version_number",
    "xla.ifrt.ShapeProto": "dims version_number",
    "xla.ifrt.SingleDeviceShardingProto": "device_id memory_kind version_number",
    "xla.ifrt.ConcreteEvenShardingProto": "devices memory_kind shape shard_shape "
                                          "is_fully_replicated version_number",
    "xla.ifrt.HloShardingProto": "devices memory_kind xla_op_sharding version_number",
    "xla.ifrt.AttributeMapProto": "attributes version_number",
    "xla.ifrt.XlaCompileOptionsProto": "compile_options",
    "xla.ifrt.ExecuteOptionsProto": "fill_status",
    "tensorflow.StatusProto": "code message",
}


class SchemaError(IpuError):
    """The installed jaxlib's IFRT proxy schema is not the one this server was written for."""


_NAME = re.compile(rb"\n([\x05-\x7f])((?:google|xla|tsl|jaxlib)/[a-z0-9_/]*\.proto)")
# FileDescriptorProto's fields and their wire types (10 and 11 may also come packed).
_WIRE_OF = {1: 2, 2: 2, 3: 2, 4: 2, 5: 2, 6: 2, 7: 2, 8: 2, 9: 2, 10: 0, 11: 0, 12: 2, 14: 0,
            15: 2}


def _descriptor_end(view: memoryview, start: int) -> int:
    """Where the serialized FileDescriptorProto starting at `start` ends: it runs while the bytes
    read as its fields, up to a second name (field 1) or anything else (a zero byte, say)."""
    pos, named = start, False
    while pos < len(view):
        try:
            key, after = _varint(view, pos)
            number, wire = key >> 3, key & 7
            if _WIRE_OF.get(number) != wire and not (number in (10, 11) and wire == 2):
                break
            if number == 1:
                if named:
                    break
                named = True
            value, after = _varint(view, after)
        except WireError:
            break
        end = after if wire == 0 else after + value
        if end > len(view):
            break
        pos = end
    return pos


def _embedded_files(path: str, wanted: tuple[str, ...]) -> dict[str, Any]:
    """The FileDescriptorProtos of `wanted` and everything they import, as embedded in the shared
    library at `path` (each starts with field 1, its .proto name)."""
    from google.protobuf import descriptor_pb2

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        starts: dict[str, list[int]] = {}
        for found in _NAME.finditer(data):
            if found.group(1)[0] == len(found.group(2)):
                starts.setdefault(found.group(2).decode(), []).append(found.start())
        view = memoryview(data)
        files: dict[str, Any] = {}
        try:
            todo = list(wanted)
            while todo:
                name = todo.pop()
                if name in files:
                    continue
                for start in starts.get(name, ()):
                    try:
                        proto = descriptor_pb2.FileDescriptorProto.FromString(
                            bytes(view[start:_descriptor_end(view, start)]))
                    except Exception:  # noqa: BLE001 - a string that only looks like one
                        continue
                    if proto.name == name and (proto.message_type or proto.enum_type):
                        files[name] = proto
                        todo.extend(proto.dependency)
                        break
        finally:
            view.release()
    return files


def libjax_common() -> str:
    return os.path.join(os.path.dirname(jaxlib.__file__), "libjax_common.so")


@functools.cache
def load(path: str | None = None) -> Schema:
    """The schema embedded in jaxlib (or in the library at `path`), checked against
    USED_FIELDS."""
    library = path or libjax_common()
    return Schema(_embedded_files(library, _ROOT_FILES), library)


class Schema:
    """Message classes of the IFRT proxy protocol, looked up by full name."""

    def __init__(self, files: dict[str, Any], origin: str) -> None:
        from google.protobuf import descriptor_pool

        self.origin = origin
        pool = descriptor_pool.DescriptorPool()
        added: set[str] = set()

        def add(name: str, chain: tuple[str, ...] = ()) -> None:
            if name in added:
                return
            if name not in files:
                raise SchemaError(
                    f"{origin} does not embed {name}" + (f" (imported by {chain[-1]})" if chain
                                                         else "")
                    + f": this jaxlib ({jaxlib.__version__}) lacks the IFRT proxy client this "
                    f"server was built for (jaxlib {BUILT_FOR_JAXLIB}).")
            for dep in files[name].dependency:
                add(dep, (*chain, name))
            pool.Add(files[name])
            added.add(name)

        for root in _ROOT_FILES:
            add(root)
        self.pool = pool
        self._classes: dict[str, type] = {}
        self.check()
        self.service = pool.FindServiceByName(SERVICE)

    def message(self, full_name: str) -> type:
        cls = self._classes.get(full_name)
        if cls is None:
            from google.protobuf import message_factory

            cls = message_factory.GetMessageClass(self.pool.FindMessageTypeByName(full_name))
            self._classes[full_name] = cls
        return cls

    def check(self) -> None:
        """Refuse a schema lacking a message or field the server uses, naming the first."""
        for full_name, names in USED_FIELDS.items():
            try:
                descriptor = self.pool.FindMessageTypeByName(full_name)
            except KeyError:
                raise SchemaError(self._mismatch(f"message {full_name}")) from None
            for field in names.split():
                if field not in descriptor.fields_by_name:
                    raise SchemaError(self._mismatch(f"field {full_name}.{field}"))

    def _mismatch(self, what: str) -> str:
        return (f"the IFRT proxy schema in {self.origin} lacks {what}: jaxlib "
                f"{jaxlib.__version__} speaks another protocol than the one this server was "
                f"built for (jaxlib {BUILT_FOR_JAXLIB}). Install jaxlib=={BUILT_FOR_JAXLIB} on "
                "the server (and the same jax and jaxlib on its clients).")


def check_jaxlib(version: str = jaxlib.__version__) -> None:
    """Refuse, naming both versions, a jaxlib other than the one the server was built for."""
    if version != BUILT_FOR_JAXLIB:
        raise SchemaError(
            f"jax-ipu's IFRT proxy server was built for jaxlib {BUILT_FOR_JAXLIB} (protocol "
            f"versions {PROTOCOL_MIN}-{PROTOCOL_MAX}) but jaxlib {version} is installed: "
            f"pip install 'jax=={BUILT_FOR_JAXLIB}' 'jaxlib=={BUILT_FOR_JAXLIB}'.")
