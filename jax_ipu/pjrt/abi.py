"""ctypes layouts of the PJRT C API structs handled in Python, at the API version jaxlib speaks.

Written from xla/pjrt/c/pjrt_c_api.h at PJRT C API 0.112 (jaxlib 0.10.x). Every struct knows its
STRUCT_SIZE (end of its last field), which the dispatcher compares with the caller's struct_size."""

from __future__ import annotations

import ctypes

_TYPES = {
    "size": ctypes.c_size_t,
    "ptr": ctypes.c_void_p,
    "i32": ctypes.c_int32,
    "i64": ctypes.c_int64,
    "bool": ctypes.c_bool,
    "enum": ctypes.c_int32,  # C enums are 4 bytes on every ABI jaxlib ships for
    "float": ctypes.c_float,
}
_HEAD = "struct_size:size extension_start:ptr "


def _struct(name: str, spec: str, head: bool = True) -> type[ctypes.Structure]:
    fields = []
    for item in ((_HEAD if head else "") + spec).split():
        field, kind = item.split(":")
        fields.append((field, _TYPES[kind]))
    cls = type(name, (ctypes.Structure,), {"_fields_": fields})
    last = getattr(cls, fields[-1][0])
    cls.STRUCT_SIZE = last.offset + last.size
    return cls


def _with(name: str, fields: list[tuple[str, object]]) -> type[ctypes.Structure]:
    cls = type(name, (ctypes.Structure,), {"_fields_": fields})
    last = getattr(cls, fields[-1][0])
    cls.STRUCT_SIZE = last.offset + last.size
    return cls


class _NamedValueUnion(ctypes.Union):
    _fields_ = [
        ("string_value", ctypes.c_void_p),
        ("int64_value", ctypes.c_int64),
        ("int64_array_value", ctypes.c_void_p),
        ("float_value", ctypes.c_float),
        ("bool_value", ctypes.c_bool),
    ]


NamedValue = _with(
    "PJRT_NamedValue",
    [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("name", ctypes.c_void_p),
        ("name_size", ctypes.c_size_t),
        ("type", ctypes.c_int32),
        ("value", _NamedValueUnion),
        ("value_size", ctypes.c_size_t),
    ],
)
NAMED_STRING, NAMED_INT64, NAMED_INT64_LIST, NAMED_FLOAT, NAMED_BOOL = range(5)

Program = _struct("PJRT_Program", "code:ptr code_size:size format:ptr format_size:size")

PluginInitialize = _struct("PJRT_Plugin_Initialize_Args", "")
PluginAttributes = _struct("PJRT_Plugin_Attributes_Args", "attributes:ptr num_attributes:size")

ClientCreate = _struct(
    "PJRT_Client_Create_Args",
    "create_options:ptr num_options:size kv_get_callback:ptr kv_get_user_arg:ptr "
    "kv_put_callback:ptr kv_put_user_arg:ptr client:ptr kv_try_get_callback:ptr "
    "kv_try_get_user_arg:ptr",
)
ClientString = _struct("PJRT_Client_String_Args", "client:ptr value:ptr value_size:size")
ClientProcessIndex = _struct("PJRT_Client_ProcessIndex_Args", "client:ptr process_index:i32")
ClientList = _struct("PJRT_Client_List_Args", "client:ptr items:ptr num_items:size")
ClientLookupDevice = _struct("PJRT_Client_LookupDevice_Args", "client:ptr id:i32 device:ptr")
ClientCompile = _struct(
    "PJRT_Client_Compile_Args",
    "client:ptr program:ptr compile_options:ptr compile_options_size:size executable:ptr",
)
ClientDefaultDeviceAssignment = _struct(
    "PJRT_Client_DefaultDeviceAssignment_Args",
    "client:ptr num_replicas:i32 num_partitions:i32 default_assignment_size:size "
    "default_assignment:ptr",
)
ClientBufferFromHostBuffer = _struct(
    "PJRT_Client_BufferFromHostBuffer_Args",
    "client:ptr data:ptr type:enum dims:ptr num_dims:size byte_strides:ptr num_byte_strides:size "
    "host_buffer_semantics:enum device:ptr memory:ptr device_layout:ptr "
    "done_with_host_buffer:ptr buffer:ptr",
)

DescriptionInt = _struct("PJRT_DeviceDescription_Int_Args", "device_description:ptr value:i32")
DescriptionString = _struct(
    "PJRT_DeviceDescription_String_Args", "device_description:ptr value:ptr value_size:size"
)
DescriptionAttributes = _struct(
    "PJRT_DeviceDescription_Attributes_Args",
    "device_description:ptr num_attributes:size attributes:ptr",
)
DeviceGetDescription = _struct(
    "PJRT_Device_GetDescription_Args", "device:ptr device_description:ptr"
)
DeviceBool = _struct("PJRT_Device_IsAddressable_Args", "device:ptr value:bool")
DeviceInt = _struct("PJRT_Device_LocalHardwareId_Args", "device:ptr value:i32")
DeviceList = _struct("PJRT_Device_AddressableMemories_Args", "device:ptr items:ptr num_items:size")
DevicePtr = _struct("PJRT_Device_DefaultMemory_Args", "device:ptr value:ptr")
DeviceMemoryStats = _struct(
    "PJRT_Device_MemoryStats_Args",
    "device:ptr bytes_in_use:i64 peak_bytes_in_use:i64 peak_bytes_in_use_is_set:bool "
    "num_allocs:i64 num_allocs_is_set:bool largest_alloc_size:i64 largest_alloc_size_is_set:bool "
    "bytes_limit:i64 bytes_limit_is_set:bool bytes_reserved:i64 bytes_reserved_is_set:bool "
    "peak_bytes_reserved:i64 peak_bytes_reserved_is_set:bool bytes_reservable_limit:i64 "
    "bytes_reservable_limit_is_set:bool largest_free_block_bytes:i64 "
    "largest_free_block_bytes_is_set:bool pool_bytes:i64 pool_bytes_is_set:bool "
    "peak_pool_bytes:i64 peak_pool_bytes_is_set:bool",
)
DeviceGetAttributes = _struct(
    "PJRT_Device_GetAttributes_Args",
    "device:ptr attributes:ptr num_attributes:size device_attributes:ptr attributes_deleter:ptr",
)
DeviceClearMemoryStats = _struct("PJRT_Device_ClearMemoryStats_Args", "device:ptr")

MemoryInt = _struct("PJRT_Memory_Id_Args", "memory:ptr value:i32")
MemoryString = _struct("PJRT_Memory_String_Args", "memory:ptr value:ptr value_size:size")
MemoryList = _struct(
    "PJRT_Memory_AddressableByDevices_Args", "memory:ptr items:ptr num_items:size"
)

ExecutableString = _struct("PJRT_Executable_Name_Args", "executable:ptr value:ptr value_size:size")
ExecutableSize = _struct("PJRT_Executable_NumOutputs_Args", "executable:ptr value:size")
ExecutableCodeSize = _struct(
    "PJRT_Executable_SizeOfGeneratedCodeInBytes_Args", "executable:ptr size_in_bytes:i64"
)
ExecutableCostAnalysis = _struct(
    "PJRT_Executable_GetCostAnalysis_Args", "executable:ptr num_properties:size properties:ptr"
)
ExecutableMemoryKinds = _struct(
    "PJRT_Executable_OutputMemoryKinds_Args",
    "executable:ptr num_outputs:size memory_kinds:ptr memory_kind_sizes:ptr",
)
ExecutableOptimizedProgram = _struct(
    "PJRT_Executable_OptimizedProgram_Args", "executable:ptr program:ptr"
)
ExecutableOutputElementTypes = _struct(
    "PJRT_Executable_OutputElementTypes_Args",
    "executable:ptr output_types:ptr num_output_types:size",
)
ExecutableOutputDimensions = _struct(
    "PJRT_Executable_OutputDimensions_Args",
    "executable:ptr num_outputs:size dims:ptr dim_sizes:ptr",
)
ExecutableFingerprint = _struct(
    "PJRT_Executable_Fingerprint_Args",
    "executable:ptr executable_fingerprint:ptr executable_fingerprint_size:size",
)
ExecutableCompiledMemoryStats = _struct(
    "PJRT_Executable_GetCompiledMemoryStats_Args",
    "executable:ptr generated_code_size_in_bytes:i64 argument_size_in_bytes:i64 "
    "output_size_in_bytes:i64 alias_size_in_bytes:i64 temp_size_in_bytes:i64 "
    "host_generated_code_size_in_bytes:i64 host_argument_size_in_bytes:i64 "
    "host_output_size_in_bytes:i64 host_alias_size_in_bytes:i64 host_temp_size_in_bytes:i64 "
    "peak_memory_in_bytes:i64 total_size_in_bytes:i64 total_allocation_bytes:i64 "
    "indefinite_allocations:i64 peak_unpadded_heap_bytes:i64",
)
ExecutableSerialized = _struct(
    "PJRT_Executable_GetCompileOptions_Args",
    "executable:ptr serialized_bytes:ptr serialized_bytes_size:size serialized:ptr deleter:ptr",
)

ExecutableSerialize = _struct(
    "PJRT_Executable_Serialize_Args",
    "executable:ptr serialized_bytes:ptr serialized_bytes_size:size serialized_executable:ptr "
    "serialized_executable_deleter:ptr",
)
ExecutableDeserializeAndLoad = _struct(
    "PJRT_Executable_DeserializeAndLoad_Args",
    "client:ptr serialized_executable:ptr serialized_executable_size:size "
    "loaded_executable:ptr overridden_serialized_compile_options:ptr "
    "overridden_serialized_compile_options_size:size load_options:ptr",
)

LoadedGetExecutable = _struct(
    "PJRT_LoadedExecutable_GetExecutable_Args", "loaded_executable:ptr executable:ptr"
)
LoadedList = _struct(
    "PJRT_LoadedExecutable_AddressableDevices_Args", "executable:ptr items:ptr num_items:size"
)
LoadedBool = _struct("PJRT_LoadedExecutable_IsDeleted_Args", "executable:ptr value:bool")
LoadedDelete = _struct("PJRT_LoadedExecutable_Delete_Args", "executable:ptr")
LogicalDeviceIds = _struct("PJRT_LogicalDeviceIds", "replica:i32 partition:i32", head=False)

BufferOnly = _struct("PJRT_Buffer_Delete_Args", "buffer:ptr")
BufferToHost = _struct(
    "PJRT_Buffer_ToHostBuffer_Args",
    "src:ptr host_layout:ptr dst:ptr dst_size:size event:ptr",
)
BufferCopyTo = _struct("PJRT_Buffer_CopyToDevice_Args", "buffer:ptr dst:ptr dst_buffer:ptr")
BufferUnsafePointer = _struct("PJRT_Buffer_UnsafePointer_Args", "buffer:ptr buffer_pointer:size")
BufferLayoutStrides = _struct(
    "PJRT_Buffer_MemoryLayout_Strides", "byte_strides:ptr num_byte_strides:size"
)
BufferLayoutTiled = _struct(
    "PJRT_Buffer_MemoryLayout_Tiled",
    "minor_to_major:ptr minor_to_major_size:size tile_dims:ptr tile_dim_sizes:ptr num_tiles:size",
)


class _LayoutUnion(ctypes.Union):
    _fields_ = [("tiled", BufferLayoutTiled), ("strides", BufferLayoutStrides)]


BufferMemoryLayout = _with(
    "PJRT_Buffer_MemoryLayout",
    [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("layout", _LayoutUnion),
        ("type", ctypes.c_int32),
    ],
)

ExecutableShardings = _struct(
    "PJRT_Shardings_PJRT_Executable_OutputShardings_Args",
    "executable:ptr num_outputs:size shardings:ptr sharding_sizes:ptr",
)

# The profiler extension's args (xla/backends/profiler/plugin/profiler_c_api.h), which have no
# extension_start; profiler.c hands Python a copy whose struct_size is set (jaxlib's is not).
ProfilerCreate = _struct("PLUGIN_Profiler_Create_Args",
                         "struct_size:size options:ptr options_size:size profiler:ptr", head=False)
ProfilerOnly = _struct("PLUGIN_Profiler_Start_Args", "struct_size:size profiler:ptr", head=False)
ProfilerCollectData = _struct(
    "PLUGIN_Profiler_CollectData_Args",
    "struct_size:size profiler:ptr buffer:ptr buffer_size_in_bytes:size", head=False)

# Args of slots the C table serves; the ABI self-test checks them against jaxlib's sizes.
LoadedExecute = _struct(
    "PJRT_LoadedExecutable_Execute_Args",
    "executable:ptr options:ptr argument_lists:ptr num_devices:size num_args:size "
    "output_lists:ptr device_complete_events:ptr execute_device:ptr",
)
BufferElementType = _struct("PJRT_Buffer_ElementType_Args", "buffer:ptr type:enum")
EventOnly = _struct("PJRT_Event_Await_Args", "event:ptr")
EventIsReady = _struct("PJRT_Event_IsReady_Args", "event:ptr is_ready:bool")
EventOnReady = _struct("PJRT_Event_OnReady_Args", "event:ptr callback:ptr user_arg:ptr")
EventSet = _struct("PJRT_Event_Set_Args",
                   "event:ptr error_code:enum error_message:ptr error_message_size:size")
BufferDimensions = _struct("PJRT_Buffer_Dimensions_Args", "buffer:ptr dims:ptr num_dims:size")
BufferGetMemoryLayout = _with(
    "PJRT_Buffer_GetMemoryLayout_Args",
    [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("buffer", ctypes.c_void_p),
        ("layout", BufferMemoryLayout),
    ],
)

# PJRT_Error_Code values (absl status codes).
CODE = {
    "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "NOT_FOUND": 5, "ALREADY_EXISTS": 6,
    "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12,
    "INTERNAL": 13, "UNAVAILABLE": 14,
}
