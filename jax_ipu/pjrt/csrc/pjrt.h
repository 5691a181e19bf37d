/* What the files of the ipu plugin's PJRT_Api table share: slots, handles, errors, events, plans.
 *
 * One file per PJRT object (error.c, event.c, handle.c, memory.c, buffer.c, executable.c,
 * execute.c), and table.c for the table and the module. Layouts are those of
 * xla/pjrt/c/pjrt_c_api.h at PJRT C API 0.112 (jaxlib 0.10.x). */
#ifndef JAX_IPU_PJRT_H
#define JAX_IPU_PJRT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if PY_VERSION_HEX < 0x030D0000 /* public from Python 3.13 on */
#define Py_IsFinalizing _Py_IsFinalizing
#endif

#include <time.h>

/* Seconds on the clock time.perf_counter reads on Linux. */
static inline double monotonic_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define API_MAJOR 0
#define API_MINOR 112

/* Slot names in table order; the index of a name is its slot index. */
#define SLOTS(X) \
  X(Error_Destroy) X(Error_Message) X(Error_GetCode) X(Plugin_Initialize) X(Plugin_Attributes) \
  X(Event_Destroy) X(Event_IsReady) X(Event_Error) X(Event_Await) X(Event_OnReady) \
  X(Client_Create) X(Client_Destroy) X(Client_PlatformName) X(Client_ProcessIndex) \
  X(Client_PlatformVersion) X(Client_Devices) X(Client_AddressableDevices) X(Client_LookupDevice) \
  X(Client_LookupAddressableDevice) X(Client_AddressableMemories) X(Client_Compile) \
  X(Client_DefaultDeviceAssignment) X(Client_BufferFromHostBuffer) X(DeviceDescription_Id) \
  X(DeviceDescription_ProcessIndex) X(DeviceDescription_Attributes) X(DeviceDescription_Kind) \
  X(DeviceDescription_DebugString) X(DeviceDescription_ToString) X(Device_GetDescription) \
  X(Device_IsAddressable) X(Device_LocalHardwareId) X(Device_AddressableMemories) \
  X(Device_DefaultMemory) X(Device_MemoryStats) X(Memory_Id) X(Memory_Kind) X(Memory_DebugString) \
  X(Memory_ToString) X(Memory_AddressableByDevices) X(Executable_Destroy) X(Executable_Name) \
  X(Executable_NumReplicas) X(Executable_NumPartitions) X(Executable_NumOutputs) \
  X(Executable_SizeOfGeneratedCodeInBytes) X(Executable_GetCostAnalysis) \
  X(Executable_OutputMemoryKinds) X(Executable_OptimizedProgram) X(Executable_Serialize) \
  X(LoadedExecutable_Destroy) X(LoadedExecutable_GetExecutable) \
  X(LoadedExecutable_AddressableDevices) X(LoadedExecutable_Delete) X(LoadedExecutable_IsDeleted) \
  X(LoadedExecutable_Execute) X(Executable_DeserializeAndLoad) X(LoadedExecutable_Fingerprint) \
  X(Buffer_Destroy) X(Buffer_ElementType) X(Buffer_Dimensions) X(Buffer_UnpaddedDimensions) \
  X(Buffer_DynamicDimensionIndices) X(Buffer_GetMemoryLayout) X(Buffer_OnDeviceSizeInBytes) \
  X(Buffer_Device) X(Buffer_Memory) X(Buffer_Delete) X(Buffer_IsDeleted) X(Buffer_CopyToDevice) \
  X(Buffer_ToHostBuffer) X(Buffer_IsOnCpu) X(Buffer_ReadyEvent) X(Buffer_UnsafePointer) \
  X(Buffer_IncreaseExternalReferenceCount) X(Buffer_DecreaseExternalReferenceCount) \
  X(Buffer_OpaqueDeviceMemoryDataPointer) X(CopyToDeviceStream_Destroy) \
  X(CopyToDeviceStream_AddChunk) X(CopyToDeviceStream_TotalBytes) \
  X(CopyToDeviceStream_GranuleSize) X(CopyToDeviceStream_CurrentBytes) \
  X(TopologyDescription_Create) X(TopologyDescription_Destroy) \
  X(TopologyDescription_PlatformName) X(TopologyDescription_PlatformVersion) \
  X(TopologyDescription_GetDeviceDescriptions) X(TopologyDescription_Serialize) \
  X(TopologyDescription_Attributes) X(Compile) X(Executable_OutputElementTypes) \
  X(Executable_OutputDimensions) X(Buffer_CopyToMemory) X(Client_CreateViewOfDeviceBuffer) \
  X(Executable_Fingerprint) X(Client_TopologyDescription) X(Executable_GetCompiledMemoryStats) \
  X(Memory_Kind_Id) X(ExecuteContext_Create) X(ExecuteContext_Destroy) X(Buffer_CopyRawToHost) \
  X(AsyncHostToDeviceTransferManager_Destroy) X(AsyncHostToDeviceTransferManager_TransferData) \
  X(Client_CreateBuffersForAsyncHostToDevice) X(AsyncHostToDeviceTransferManager_RetrieveBuffer) \
  X(AsyncHostToDeviceTransferManager_Device) X(AsyncHostToDeviceTransferManager_BufferCount) \
  X(AsyncHostToDeviceTransferManager_BufferSize) \
  X(AsyncHostToDeviceTransferManager_SetBufferError) \
  X(AsyncHostToDeviceTransferManager_AddMetadata) X(Client_DmaMap) X(Client_DmaUnmap) \
  X(Client_CreateUninitializedBuffer) X(Client_UpdateGlobalProcessInfo) \
  X(TopologyDescription_Deserialize) X(Client_CreateAliasBuffer) X(Client_FulfillAliasBuffer) \
  X(LoadedExecutable_GetDeviceAssignment) X(Client_CreateErrorBuffer) \
  X(AsyncHostToDeviceTransferManager_TransferLiteral) X(Buffer_CopyRawToHostFuture) \
  X(Device_PoisonExecution) X(Device_CreateAsyncTrackingEvent) X(AsyncTrackingEvent_Destroy) \
  X(Executable_GetCompileOptions) X(Buffer_DonateWithControlDependency) X(Event_Create) \
  X(Event_Set) X(Device_GetAttributes) X(Client_Load) \
  X(LoadedExecutable_AddressableDeviceLogicalIds) X(Buffer_Bitcast) X(Error_ForEachPayload) \
  X(TopologyDescription_Fingerprint) X(Executable_ParameterMemoryKinds) \
  X(Device_ClearMemoryStats) X(TopologyDescription_MakeCanonicalShapeForMemorySpace) \
  X(TopologyDescription_GetMemorySpaceKindIds)

/* Functions of the extensions chained from the table (after the slots, in Python's numbering):
   the table's own trampolines, then the profiler's (profiler.c forwards those itself). */
#define EXTENSION_FNS(X) X(Shardings_ParameterShardings) X(Shardings_OutputShardings)
#define PROFILER_FNS(X) X(Profiler_Create) X(Profiler_Start) X(Profiler_Stop) \
  X(Profiler_CollectData)

#define SLOT_ENUM(name) SLOT_##name,
enum { SLOTS(SLOT_ENUM) NUM_SLOTS };
enum { EXT_BEFORE_FIRST = NUM_SLOTS - 1, EXTENSION_FNS(SLOT_ENUM) PROFILER_FNS(SLOT_ENUM)
       NUM_HANDLERS };

/* The struct_size jaxlib last passed to each slot: an ABI self-check, read by the tests. */
extern size_t seen_size[NUM_HANDLERS];
#define SEEN(slot, args) (seen_size[slot] = *(const size_t *)(args))
extern const char *slot_names[NUM_HANDLERS];

/* The Python side, installed by jax_ipu.pjrt.slots (table.c). */
extern PyObject *dispatcher;  /* dispatch(slot, args_address) -> error address or 0 */
extern PyObject *error_maker; /* error_for(exception) -> error address */
extern PyObject *waiter;      /* wait_for(event capsule, waitable): resolve when it is ready */
extern PyObject *array_is_ready; /* jaxlib's own Array.is_ready(array), for outputs just made */

enum {
  CODE_OK = 0, CODE_CANCELLED = 1, CODE_INVALID_ARGUMENT = 3, CODE_RESOURCE_EXHAUSTED = 8,
  CODE_FAILED_PRECONDITION = 9, CODE_UNIMPLEMENTED = 12, CODE_INTERNAL = 13,
  CODE_UNAVAILABLE = 14
};

/* ---- errors (error.c) ---- */
/* jaxlib reads the first word of an error, event or memory as an optional function table: it
   must be NULL. */
typedef struct PJRT_Error { void *vtable; int code; char *msg; size_t len; } PJRT_Error;
PJRT_Error *new_error_n(int code, const char *msg, size_t n);
PJRT_Error *new_error(int code, const char *msg);
PJRT_Error *error_from_python(void);
PJRT_Error *finalizing_error(int slot);
/* Calls the Python handler of `slot` with `args` (the table's trampolines and profiler.c). */
PJRT_Error *forward(int slot, void *args);

/* ---- events (event.c): ready at once, or pending until the waiter thread resolves them ---- */
typedef struct PJRT_Event PJRT_Event;
extern PJRT_Event ready_event; /* the one always-ready event: never freed */
PJRT_Event *event_new(void);
PJRT_Event *event_ref(PJRT_Event *e);
void event_unref(PJRT_Event *e);
PJRT_Error *event_error(PJRT_Event *e);
void event_resolve(PJRT_Event *e, int code, const char *msg, size_t len);
int event_is_ready(PJRT_Event *e);
int event_succeeded(const PJRT_Event *e);
void event_wait(PJRT_Event *e);

/* ---- handles (handle.c): every PJRT object jaxlib holds is one of these Python objects ---- */
enum { STAT_IN_USE, STAT_PEAK, STAT_ALLOCS, STAT_LARGEST };

/* An int64 array the runtime owns (what an action adds to a model clock), with its data. */
typedef struct { PyObject *owner; const int64_t *cycles; size_t n; } Advance;
int advance_from(PyObject *array, Advance *out); /* takes a reference; -1 with an exception */

typedef struct Plan Plan;
typedef struct Handle {
  PyObject_HEAD
  void *vtable;   /* always NULL; jaxlib's pointer to the handle points here */
  PyObject *obj;  /* the runtime object; of a buffer, its CPU array (NULL once deleted) */
  int deleted;    /* a buffer or executable jax deleted (or a donated buffer) */
  /* of a buffer: the memory holding it; of a device: its default memory (owned references:
     memories outlive their buffers) */
  struct Handle *memory;
  /* buffers */
  int element_type;
  int64_t *dims;  /* ndims entries, then ndims entries of minor_to_major */
  size_t ndims;
  size_t nbytes;
  PJRT_Event *event;      /* NULL when ready at creation */
  Advance read;           /* what reading it back adds to its device's clock */
  int settled;            /* its event (or none) says when XLA:CPU computed it */
  int reordered;          /* its bytes are not in row-major order (a user's layout): the host
                             reads it through a copy, never in place */
  void *data;             /* the address of its bytes, once asked for */
  size_t external_refs;   /* the host reading it in place (NumPy views, DLPack) */
  PyObject *external;     /* its CPU array while external references exist */
  /* devices */
  PyObject *clock_array;  /* int64 model clock (the runtime device's) */
  int64_t *clock;
  size_t num_clock;
  PyObject *on_read;      /* on_read(nbytes, start_s, end_s, cycles) after a read, or NULL */
  /* memories */
  struct Handle *device;  /* its device (borrowed: a device and its memories live together) */
  PyObject *kind;         /* memory kind (bytes) */
  int kind_id;            /* the kind's PJRT id, below MAX_MEMORY_KINDS */
  PyObject *stats_array;  /* int64 counters (STAT_*) of its buffers' bytes, owned by the runtime */
  int64_t *stats;
  int64_t limit;          /* bytes it holds; negative: no limit */
  /* executables */
  Plan *plan;
  /* frees what the file that made it attached (a buffer's bytes, an executable's plan) */
  void (*finalize)(struct Handle *self);
} Handle;

#define TO_PJRT(h) ((void *)&((Handle *)(h))->vtable)
#define FROM_PJRT(p) ((Handle *)((char *)(p) - offsetof(Handle, vtable)))

extern PyTypeObject HandleType;
Handle *handle_alloc(PyObject *obj);
void enqueue_release(PyObject *obj);
void drain_queue(void);
int int64_array(PyObject *array, int64_t **data, size_t *n);
int int64_view(PyObject *array, const int64_t **data, size_t *n);
int64_t *dims_from(PyObject *seq, size_t *n);

/* ---- memories (memory.c): one per memory kind of a device, and the bytes their buffers hold */
#define MAX_MEMORY_KINDS 8
void memory_alloc(Handle *memory, size_t nbytes);
void memory_free(Handle *memory, size_t nbytes);
int memory_fits(Handle *memory, size_t nbytes, size_t freed);
PJRT_Error *memory_shortfall(Handle *memory, size_t nbytes, size_t freed, PyObject *what);

/* ---- buffers (buffer.c) ---- */
int buffer_init(void);
int buffer_install(PyObject *sub_byte_types);
Handle *buffer_new(PyObject *array, Handle *memory, int element_type, const int64_t *dims,
                   size_t ndims, size_t nbytes, PJRT_Event *event, const Advance *read);
void buffer_release(Handle *h);

/* ---- executables (executable.c): how one runs, read once from its ExecutePlan ---- */
/* The outputs of one execution that land in one memory of a device. */
typedef struct { Handle *memory; size_t nbytes, count; } OutputsIn;
struct Plan {
  PyObject *name;      /* str */
  size_t num_replicas, num_partitions;
  PyObject *run;       /* direct: run(*args) -> outputs; else XLA:CPU's execute_sharded */
  PyObject *assemble;  /* per-device arrays -> one multi-device array per argument, or NULL */
  PyObject *after;     /* profiler hook after(start_s, end_s), or NULL */
  PyObject *refusal;   /* str: why nothing may run this program, or NULL */
  int with_token;
  int direct;
  int may_fail;        /* a run can fail inside XLA:CPU (host callbacks, custom calls) */
  size_t num_devices, num_args, num_outputs, num_clock;
  unsigned char *donated;         /* per argument */
  int *out_types;
  int64_t **out_dims;
  size_t *out_ndims, *out_nbytes;
  Advance *out_read;              /* per output: what reading it back adds to a clock */
  unsigned char *out_reordered;   /* per output: laid out other than row-major */
  Handle **devices;               /* addressable devices, in execution order */
  Handle **out_memories;          /* output k of device d lands in [d * num_outputs + k] */
  OutputsIn *out_in;              /* [d * MAX_MEMORY_KINDS + kind id]: device d's outputs there */
  PyObject **clock_arrays;
  int64_t **clocks;               /* per device: model clock counters */
  int64_t *advance;               /* what one execution adds to each device's clock */
  PyObject *advance_array;
};
void plan_free(Plan *p);
int plan_install(PyObject *type);
PyObject *plan_fields(void);

/* ---- execute (execute.c) ---- */
int execute_init(void);

/* ---- the profiler extension (profiler.c): jax.profiler's sessions, and what a running one
   records. trace_sink is the list a running trace appends to (GIL held), NULL otherwise: the
   only check the hot paths make. */
extern PyObject *trace_sink;
void *profiler_extension(void *next); /* the PJRT_Profiler_Extension, chained before `next` */
void trace_run(PyObject *executable, double start, double end);
void trace_read(PyObject *device, size_t nbytes, double start, double end, int64_t cycles);
PyObject *py_trace_into(PyObject *self, PyObject *args);


/* ---- slots served in C, by file ---- */
PJRT_Error *c_Error_Destroy(void *args);
PJRT_Error *c_Error_Message(void *args);
PJRT_Error *c_Error_GetCode(void *args);
PJRT_Error *c_Error_ForEachPayload(void *args);
PJRT_Error *c_Event_Destroy(void *args);
PJRT_Error *c_Event_IsReady(void *args);
PJRT_Error *c_Event_Error(void *args);
PJRT_Error *c_Event_Await(void *args);
PJRT_Error *c_Event_OnReady(void *args);
PJRT_Error *c_Event_Create(void *args);
PJRT_Error *c_Event_Set(void *args);
PJRT_Error *c_release(void *args);
PJRT_Error *c_Memory_Kind(void *args);
PJRT_Error *c_Memory_Kind_Id(void *args);
PJRT_Error *c_Buffer_ElementType(void *args);
PJRT_Error *c_Buffer_Dimensions(void *args);
PJRT_Error *c_Buffer_DynamicDimensionIndices(void *args);
PJRT_Error *c_Buffer_Device(void *args);
PJRT_Error *c_Buffer_Memory(void *args);
PJRT_Error *c_Buffer_IsDeleted(void *args);
PJRT_Error *c_Buffer_Delete(void *args);
PJRT_Error *c_Buffer_IsOnCpu(void *args);
PJRT_Error *c_Buffer_OnDeviceSizeInBytes(void *args);
PJRT_Error *c_Buffer_ReadyEvent(void *args);
PJRT_Error *c_Buffer_GetMemoryLayout(void *args);
PJRT_Error *c_Buffer_ToHostBuffer(void *args);
PJRT_Error *c_Buffer_IncreaseExternalReferenceCount(void *args);
PJRT_Error *c_Buffer_DecreaseExternalReferenceCount(void *args);
PJRT_Error *c_Buffer_OpaqueDeviceMemoryDataPointer(void *args);
PJRT_Error *c_Executable_NumReplicas(void *args);
PJRT_Error *c_Executable_NumPartitions(void *args);
PJRT_Error *c_Executable_NumOutputs(void *args);
PJRT_Error *c_LoadedExecutable_Delete(void *args);
PJRT_Error *c_LoadedExecutable_IsDeleted(void *args);
PJRT_Error *c_LoadedExecutable_Execute(void *args);

/* ---- functions of the Python module, by file ---- */
PyObject *py_make_error(PyObject *self, PyObject *args);
PyObject *py_resolve(PyObject *self, PyObject *args);
PyObject *py_new_handle(PyObject *self, PyObject *obj);
PyObject *py_new_device(PyObject *self, PyObject *args);
PyObject *py_new_memory(PyObject *self, PyObject *args);
PyObject *py_give(PyObject *self, PyObject *h);
PyObject *py_deref(PyObject *self, PyObject *addr);
PyObject *py_drain(PyObject *self, PyObject *unused);
PyObject *py_new_buffer(PyObject *self, PyObject *args);
PyObject *py_new_executable(PyObject *self, PyObject *args);

#endif
