/* The PJRT_Api table of the ipu plugin and the Python module `_table` that owns it.
 *
 * Every slot not served in C (errors, events, buffers' metadata, Execute: see their files) is a
 * trampoline forwarding to one Python dispatcher, where the logic lives. The table and every
 * byte jaxlib reads belong to this module. */
#include "pjrt.h"

#include <stdlib.h>
#include <string.h>

typedef struct { size_t struct_size; void *ext; int major; int minor; } ApiVersion;
typedef struct {
  size_t struct_size; void *extension_start; ApiVersion version; void *slots[NUM_SLOTS];
} Api;

/* PJRT_Shardings_Extension: lets jax read the output shardings XLA's partitioner chose. */
enum { EXTENSION_TYPE_SHARDINGS = 19 };
typedef struct { size_t struct_size; int type; void *next; } ExtensionBase;
typedef struct {
  ExtensionBase base; void *parameter_shardings; void *output_shardings;
} ShardingsExtension;

#define SLOT_NAME(name) "PJRT_" #name,
const char *slot_names[NUM_HANDLERS] = {SLOTS(SLOT_NAME) EXTENSION_FNS(SLOT_NAME)
                                         PROFILER_FNS(SLOT_NAME)};
size_t seen_size[NUM_HANDLERS];

static Api api;
static ShardingsExtension shardings_extension;
PyObject *dispatcher;
PyObject *error_maker;
PyObject *waiter;
PyObject *array_is_ready;

static void noop_deleter(void *unused) { (void)unused; } /* plugin-owned data outlives the call */
static void free_deleter(void *data) { free(data); }      /* bytes handed over by owned_bytes() */

PJRT_Error *forward(int slot, void *args) {
  SEEN(slot, args);
  if (Py_IsFinalizing() || dispatcher == NULL) return finalizing_error(slot);
  PyGILState_STATE gil = PyGILState_Ensure();
  drain_queue();
  PJRT_Error *err = NULL;
  PyObject *res = PyObject_CallFunction(dispatcher, "in", slot, (Py_ssize_t)(intptr_t)args);
  if (res == NULL) {
    err = error_from_python();
  } else {
    err = (PJRT_Error *)PyLong_AsVoidPtr(res);
    if (err == NULL && PyErr_Occurred()) err = error_from_python();
    Py_DECREF(res);
  }
  PyGILState_Release(gil);
  return err;
}

#define TRAMPOLINE(name) \
  static PJRT_Error *tramp_##name(void *args) { return forward(SLOT_##name, args); }
SLOTS(TRAMPOLINE)
EXTENSION_FNS(TRAMPOLINE)

static PJRT_Error *c_Client_UpdateGlobalProcessInfo(void *a) {
  SEEN(SLOT_Client_UpdateGlobalProcessInfo, a);
  /* jax's coordination service pushes process states from its own thread, up to and through
     interpreter shutdown, and aborts on an error. A lost peer surfaces in jax's own heartbeat
     errors and in the next collective's failure, so there is nothing to do here. */
  return NULL;
}

/* ---- the module's functions ---- */
/* memory(address, size, writable=False): a memoryview of host memory jaxlib lent this call. */
static PyObject *py_memory(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *addr;
  Py_ssize_t size;
  int writable = 0;
  if (!PyArg_ParseTuple(args, "On|p", &addr, &size, &writable)) return NULL;
  void *p = PyLong_AsVoidPtr(addr);
  if (p == NULL && PyErr_Occurred()) return NULL;
  return PyMemoryView_FromMemory(p, size, writable ? PyBUF_WRITE : PyBUF_READ);
}

/* owned_bytes(data): the address of a malloc'd copy of `data`, which jaxlib frees through
   FREE_DELETER (for outputs jaxlib owns, such as a serialized executable). */
static PyObject *py_owned_bytes(PyObject *self, PyObject *data) {
  (void)self;
  char *src;
  Py_ssize_t n;
  if (PyBytes_AsStringAndSize(data, &src, &n) < 0) return NULL;
  void *copy = malloc(n ? (size_t)n : 1);
  if (copy == NULL) return PyErr_NoMemory();
  memcpy(copy, src, (size_t)n);
  return PyLong_FromVoidPtr(copy);
}

static PyObject *py_install(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *d, *e, *w, *plan, *sub_byte, *r;
  if (!PyArg_ParseTuple(args, "OOOOOO", &d, &e, &w, &plan, &sub_byte, &r)) return NULL;
  if (plan_install(plan) < 0 || buffer_install(sub_byte) < 0) return NULL;
  Py_INCREF(d);
  Py_INCREF(e);
  Py_INCREF(w);
  Py_INCREF(r);
  Py_XSETREF(array_is_ready, r);
  Py_XSETREF(dispatcher, d);
  Py_XSETREF(error_maker, e);
  Py_XSETREF(waiter, w);
  Py_RETURN_NONE;
}

static PyObject *py_capsule(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyCapsule_New(&api, "pjrt_c_api", NULL);
}

static PyObject *py_seen_sizes(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  PyObject *d = PyDict_New();
  for (int i = 0; i < NUM_HANDLERS; i++) {
    if (!seen_size[i]) continue;
    PyObject *v = PyLong_FromSize_t(seen_size[i]);
    PyDict_SetItemString(d, slot_names[i], v);
    Py_DECREF(v);
  }
  return d;
}

static PyObject *py_plan_fields(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return plan_fields();
}

static PyObject *py_slot_names(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  PyObject *t = PyTuple_New(NUM_HANDLERS);
  for (int i = 0; i < NUM_HANDLERS; i++)
    PyTuple_SET_ITEM(t, i, PyUnicode_FromString(slot_names[i]));
  return t;
}

static PyMethodDef methods[] = {
    {"capsule", py_capsule, METH_NOARGS, "The PJRT_Api table as a 'pjrt_c_api' capsule."},
    {"install", py_install, METH_VARARGS,
     "install(dispatch, error_for, wait_for, plan_type, sub_byte_types, array_is_ready): "
     "connect the Python side."},
    {"plan_fields", py_plan_fields, METH_NOARGS,
     "The fields of an executable's plan that C reads, by name."},
    {"seen_struct_sizes", py_seen_sizes, METH_NOARGS, "struct_size jaxlib passed, by slot."},
    {"slot_names", py_slot_names, METH_NOARGS, "Slot names in table order."},
    {"new_handle", py_new_handle, METH_O, "new_handle(obj): a Handle around a client."},
    {"new_memory", py_new_memory, METH_VARARGS,
     "new_memory(memory, kind, kind_id, stats, limit): a memory's Handle, with its byte "
     "counters (limit -1: none)."},
    {"new_device", py_new_device, METH_VARARGS,
     "new_device(device, memories, clock, on_read): a device's Handle (memories[0] its "
     "default)."},
    {"new_buffer", py_new_buffer, METH_VARARGS,
     "new_buffer(array, memory, element_type, dims, nbytes, read_advance): a ready buffer."},
    {"new_executable", py_new_executable, METH_VARARGS,
     "new_executable(exe, plan): an executable Handle that Execute runs by its plan."},
    {"give", py_give, METH_O, "Address of a handle, with one reference owned by jaxlib."},
    {"deref", py_deref, METH_O, "The Handle at an address jaxlib passed."},
    {"make_error", py_make_error, METH_VARARGS, "make_error(code, message) -> PJRT_Error*."},
    {"owned_bytes", py_owned_bytes, METH_O, "A malloc'd copy of bytes, freed by FREE_DELETER."},
    {"memory", py_memory, METH_VARARGS, "memory(address, size, writable=False): a memoryview."},
    {"resolve", py_resolve, METH_VARARGS,
     "resolve(event, code, message): an execution finished (code 0) or failed."},
    {"drain", py_drain, METH_NOARGS, "Release handles whose destroy arrived without the GIL."},
    {"trace_into", py_trace_into, METH_VARARGS,
     "trace_into(events, limit): runs and reads append to the list `events` (at most `limit` "
     "entries) until trace_into(None, 0), which returns how many were left out."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_table", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

#define FILL(name) api.slots[SLOT_##name] = (void *)tramp_##name;
#define SERVE(name) api.slots[SLOT_##name] = (void *)c_##name;

PyMODINIT_FUNC PyInit__table(void) {
  if (PyType_Ready(&HandleType) < 0) return NULL;
  PyObject *m = PyModule_Create(&module);
  if (m == NULL) return NULL;
  if (execute_init() < 0 || buffer_init() < 0) {
    Py_DECREF(m);
    return NULL;
  }
  api.struct_size = sizeof api;
  shardings_extension.base.struct_size = sizeof shardings_extension;
  shardings_extension.base.type = EXTENSION_TYPE_SHARDINGS;
  shardings_extension.base.next = profiler_extension(NULL);
  shardings_extension.parameter_shardings = (void *)tramp_Shardings_ParameterShardings;
  shardings_extension.output_shardings = (void *)tramp_Shardings_OutputShardings;
  api.extension_start = &shardings_extension;
  api.version.struct_size = sizeof api.version;
  api.version.major = API_MAJOR;
  api.version.minor = API_MINOR;
  SLOTS(FILL)
  SERVE(Error_Destroy) SERVE(Error_Message) SERVE(Error_GetCode) SERVE(Error_ForEachPayload)
  SERVE(Event_Destroy) SERVE(Event_IsReady) SERVE(Event_Error) SERVE(Event_Await)
  SERVE(Event_OnReady) SERVE(Event_Create) SERVE(Event_Set)
  SERVE(Buffer_ElementType) SERVE(Buffer_Dimensions) SERVE(Buffer_DynamicDimensionIndices)
  SERVE(Buffer_Device) SERVE(Buffer_Memory) SERVE(Buffer_IsDeleted) SERVE(Buffer_IsOnCpu)
  SERVE(Buffer_OnDeviceSizeInBytes) SERVE(Buffer_ReadyEvent) SERVE(Buffer_GetMemoryLayout)
  SERVE(Buffer_Delete) SERVE(Buffer_ToHostBuffer) SERVE(Buffer_IncreaseExternalReferenceCount)
  SERVE(Buffer_DecreaseExternalReferenceCount) SERVE(Buffer_OpaqueDeviceMemoryDataPointer)
  SERVE(LoadedExecutable_Execute) SERVE(LoadedExecutable_Delete) SERVE(LoadedExecutable_IsDeleted)
  SERVE(Executable_NumReplicas) SERVE(Executable_NumPartitions) SERVE(Executable_NumOutputs)
  SERVE(Memory_Kind) SERVE(Memory_Kind_Id) SERVE(Client_UpdateGlobalProcessInfo)
  api.slots[SLOT_Buffer_UnpaddedDimensions] = (void *)c_Buffer_Dimensions;
  api.slots[SLOT_Buffer_Destroy] = (void *)c_release;
  api.slots[SLOT_Client_Destroy] = (void *)c_release;
  api.slots[SLOT_Executable_Destroy] = (void *)c_release;
  api.slots[SLOT_LoadedExecutable_Destroy] = (void *)c_release;
  api.slots[SLOT_TopologyDescription_Destroy] = (void *)c_release;
  PyModule_AddIntConstant(m, "API_MAJOR", API_MAJOR);
  PyModule_AddIntConstant(m, "API_MINOR", API_MINOR);
  PyModule_AddIntConstant(m, "NUM_SLOTS", NUM_SLOTS);
  PyModule_AddIntConstant(m, "STATS_FIELDS", STAT_LARGEST + 1);
  PyModule_AddObject(m, "READY_EVENT", PyLong_FromVoidPtr(&ready_event));
  PyModule_AddObject(m, "NOOP_DELETER", PyLong_FromVoidPtr((void *)noop_deleter));
  PyModule_AddObject(m, "FREE_DELETER", PyLong_FromVoidPtr((void *)free_deleter));
  Py_INCREF(&HandleType);
  PyModule_AddObject(m, "Handle", (PyObject *)&HandleType);
  return m;
}
