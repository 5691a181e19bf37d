/* PJRT buffers: handles over XLA:CPU arrays in a device's memory (kind), their metadata and reads
 * served in C, deleted (or donated) in place; their bytes count against that memory. */
#include "pjrt.h"

#include <stdlib.h>
#include <string.h>

typedef struct { size_t struct_size; void *ext; void *buffer; int type; } BufElementTypeArgs;
typedef struct {
  size_t struct_size; void *ext; void *buffer; const int64_t *dims; size_t num_dims;
} BufDimsArgs;
typedef struct { size_t struct_size; void *ext; void *buffer; void *out; } BufPtrArgs;
typedef struct { size_t struct_size; void *ext; void *buffer; bool flag; } BufFlagArgs;
typedef struct { size_t struct_size; void *ext; void *buffer; size_t size; } BufSizeArgs;
typedef struct {
  size_t struct_size; void *ext; const int64_t *minor_to_major; size_t minor_to_major_size;
  const int64_t *tile_dims; const size_t *tile_dim_sizes; size_t num_tiles;
} MemoryLayoutTiled;
typedef struct {
  size_t struct_size; void *ext; MemoryLayoutTiled tiled; int type;
} MemoryLayout;
typedef struct { size_t struct_size; void *ext; void *buffer; MemoryLayout layout; } BufLayoutArgs;
typedef struct {
  size_t struct_size; void *ext; void *src; MemoryLayout *host_layout; void *dst; size_t dst_size;
  PJRT_Event *event;
} BufToHostArgs;

static PyObject *str_block, *str_pointer, *str_to_numpy;
/* Element types jaxlib reads in place (bit t): not the sub-byte ones, which the host reads in
   another packing than XLA:CPU's one byte per element. Set by the plugin at install. */
static uint64_t in_place_types;

int buffer_install(PyObject *sub_byte_types) {
  PyObject *fast = PySequence_Fast(sub_byte_types, "sub-byte types must be a sequence");
  if (fast == NULL) return -1;
  uint64_t mask = ~(uint64_t)0;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
    long t = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
    if (t >= 0 && t < 64) mask &= ~((uint64_t)1 << t);
  }
  Py_DECREF(fast);
  if (PyErr_Occurred()) return -1;
  in_place_types = mask;
  return 0;
}

int buffer_init(void) {
  str_block = PyUnicode_InternFromString("block_until_ready");
  str_pointer = PyUnicode_InternFromString("unsafe_buffer_pointer");
  str_to_numpy = PyUnicode_InternFromString("_single_device_array_to_np_array_did_copy");
  return str_block && str_pointer && str_to_numpy ? 0 : -1;
}

/* What a buffer holds besides a handle's own: its bytes in its memory's count, its event, its
   dims, its read cost and its external holder. */
static void buffer_finalize(Handle *h) {
  if (!h->deleted) memory_free(h->memory, h->nbytes);
  event_unref(h->event);
  free(h->dims);
  Py_XDECREF(h->read.owner);
  Py_XDECREF(h->external);
}

/* A buffer handle around `array` (a new reference is taken) in `memory`; counts its bytes.
   `read` is what reading it back adds to its device's clock. */
Handle *buffer_new(PyObject *array, Handle *memory, int element_type, const int64_t *dims,
                   size_t ndims, size_t nbytes, PJRT_Event *event, const Advance *read) {
  Handle *h = handle_alloc(array);
  if (h == NULL) return NULL;
  h->read = *read;
  Py_INCREF(read->owner);
  h->element_type = element_type;
  h->ndims = ndims;
  h->dims = malloc(sizeof(int64_t) * (2 * ndims + 1));
  for (size_t i = 0; i < ndims; i++) {
    h->dims[i] = dims[i];
    h->dims[ndims + i] = (int64_t)(ndims - 1 - i); /* row-major: minor_to_major = n-1 .. 0 */
  }
  h->nbytes = nbytes;
  Py_INCREF((PyObject *)memory);
  h->memory = memory;
  h->event = event ? event_ref(event) : NULL;
  memory_alloc(memory, nbytes);
  h->finalize = buffer_finalize;
  return h;
}

/* Frees a buffer's array (delete, donation); the handle stays, marked deleted. GIL held. */
void buffer_release(Handle *h) {
  if (h->deleted) return;
  h->deleted = 1;
  memory_free(h->memory, h->nbytes);
  Py_CLEAR(h->obj);
}

#define BUF(a) FROM_PJRT((a)->buffer)
PJRT_Error *c_Buffer_ElementType(void *args) {
  BufElementTypeArgs *a = args;
  SEEN(SLOT_Buffer_ElementType, a);
  a->type = BUF(a)->element_type;
  return NULL;
}
PJRT_Error *c_Buffer_Dimensions(void *args) {
  BufDimsArgs *a = args;
  SEEN(SLOT_Buffer_Dimensions, a);
  a->dims = BUF(a)->dims;
  a->num_dims = BUF(a)->ndims;
  return NULL;
}
PJRT_Error *c_Buffer_DynamicDimensionIndices(void *args) {
  BufDimsArgs *a = args;
  SEEN(SLOT_Buffer_DynamicDimensionIndices, a);
  a->dims = NULL; /* static shapes only */
  a->num_dims = 0;
  return NULL;
}
PJRT_Error *c_Buffer_Device(void *args) {
  BufPtrArgs *a = args;
  SEEN(SLOT_Buffer_Device, a);
  a->out = TO_PJRT(BUF(a)->memory->device);
  return NULL;
}
PJRT_Error *c_Buffer_Memory(void *args) {
  BufPtrArgs *a = args;
  SEEN(SLOT_Buffer_Memory, a);
  a->out = TO_PJRT(BUF(a)->memory);
  return NULL;
}
PJRT_Error *c_Buffer_IsDeleted(void *args) {
  BufFlagArgs *a = args;
  SEEN(SLOT_Buffer_IsDeleted, a);
  a->flag = BUF(a)->deleted != 0;
  return NULL;
}
PJRT_Error *c_Buffer_Delete(void *args) {
  BufPtrArgs *a = args;
  SEEN(SLOT_Buffer_Delete, a);
  if (Py_IsFinalizing()) return NULL; /* everything goes with the process */
  PyGILState_STATE gil = PyGILState_Ensure();
  buffer_release(BUF(a));
  PyGILState_Release(gil);
  return NULL;
}
PJRT_Error *c_Buffer_IsOnCpu(void *args) {
  BufFlagArgs *a = args;
  SEEN(SLOT_Buffer_IsOnCpu, a);
  /* Every memory of the IPU Model (tile memory, Streaming Memory, host memory) is host memory
     underneath: jaxlib reads it in place (zero-copy NumPy views), as it reads cpu arrays, and
     the read is charged as its kind's (OpaqueDeviceMemoryDataPointer); sub-byte types go
     through ToHostBuffer, which unpacks, and so do buffers in a user's layout (jaxlib would
     read their bytes as row-major), which XLA:CPU reorders. */
  Handle *h = BUF(a);
  int t = h->element_type;
  a->flag = !h->reordered && t >= 0 && t < 64 && (in_place_types >> t) & 1;
  return NULL;
}
PJRT_Error *c_Buffer_OnDeviceSizeInBytes(void *args) {
  BufSizeArgs *a = args;
  SEEN(SLOT_Buffer_OnDeviceSizeInBytes, a);
  a->size = BUF(a)->nbytes;
  return NULL;
}
PJRT_Error *c_Buffer_ReadyEvent(void *args) {
  BufPtrArgs *a = args;
  SEEN(SLOT_Buffer_ReadyEvent, a);
  Handle *h = BUF(a);
  a->out = h->event ? event_ref(h->event) : &ready_event;
  return NULL;
}
PJRT_Error *c_Buffer_GetMemoryLayout(void *args) {
  BufLayoutArgs *a = args;
  SEEN(SLOT_Buffer_GetMemoryLayout, a);
  Handle *h = BUF(a);
  MemoryLayout *l = &a->layout;
  memset(l, 0, sizeof *l);
  l->struct_size = offsetof(MemoryLayout, type) + sizeof(int); /* tiled, no tiles */
  l->tiled.struct_size = sizeof l->tiled;
  l->tiled.minor_to_major = h->dims + h->ndims;
  l->tiled.minor_to_major_size = h->ndims;
  l->type = 0;
  return NULL;
}

/* Whether a host layout asks for the row-major order the buffers have. */
static int row_major(const MemoryLayout *l, size_t ndims) {
  if (l->type != 0 || l->tiled.minor_to_major_size != ndims) return 0;
  for (size_t i = 0; i < ndims; i++)
    if (l->tiled.minor_to_major[i] != (int64_t)(ndims - 1 - i)) return 0;
  return 1;
}

/* The CPU array behind a buffer, kept alive by its external references once jax deleted it. */
static PyObject *buffer_array(Handle *h, PJRT_Error **err) {
  PyObject *array = h->external ? h->external : h->obj;
  if (array == NULL)
    *err = new_error(CODE_INVALID_ARGUMENT,
                     "Array has been deleted (it was donated to a call, or deleted).");
  return array;
}

/* The address of a buffer's bytes in XLA:CPU's memory, once they are computed (GIL held), for
   the host to read in place. Only jaxlib's C++ runs here, no Python, so a Ctrl-C meanwhile waits
   for the caller's next Python instruction. */
static PJRT_Error *buffer_address(Handle *h, void **data) {
  PJRT_Error *err = NULL;
  PyObject *array = buffer_array(h, &err);
  if (array == NULL) return err;
  if (h->data == NULL) {
    Py_INCREF(array);
    /* an output's event said it is computed; another buffer's array may still be filling */
    PyObject *ready = h->settled ? (Py_INCREF(Py_None), Py_None)
                                 : PyObject_CallMethodNoArgs(array, str_block);
    PyObject *address = ready ? PyObject_CallMethodNoArgs(array, str_pointer) : NULL;
    h->data = address ? PyLong_AsVoidPtr(address) : NULL;
    Py_XDECREF(ready);
    Py_XDECREF(address);
    Py_DECREF(array);
    if (PyErr_Occurred()) return error_from_python();
  }
  *data = h->data;
  return NULL;
}

/* Copies a buffer's values to `dst` in the host's layout: row-major whatever the buffer's own,
   one byte per element of the sub-byte types that XLA:CPU packs (GIL held; jaxlib's C++ and
   Python's buffer copy only, as above). */
static PJRT_Error *buffer_copy(Handle *h, void *dst) {
  PJRT_Error *err = NULL;
  PyObject *array = buffer_array(h, &err);
  if (array == NULL) return err;
  Py_INCREF(array);
  PyObject *pair = PyObject_CallMethodNoArgs(array, str_to_numpy); /* (values, did_copy) */
  Py_DECREF(array);
  Py_buffer view;
  if (pair == NULL || !PyTuple_Check(pair) ||
      PyObject_GetBuffer(PyTuple_GET_ITEM(pair, 0), &view, PyBUF_STRIDES) < 0) {
    Py_XDECREF(pair);
    return error_from_python();
  }
  if ((size_t)view.len == h->nbytes) {
    /* a view in the array's own order (a user's layout) is gathered into row-major */
    if (PyBuffer_ToContiguous(dst, &view, view.len, 'C') < 0) err = error_from_python();
  } else {
    char msg[256];
    snprintf(msg, sizeof msg, "jax_ipu: a buffer of %zu bytes read back as %zd bytes",
             h->nbytes, view.len);
    err = new_error(CODE_INTERNAL, msg);
  }
  PyBuffer_Release(&view);
  Py_DECREF(pair);
  return err;
}

/* Charges one read of the buffer by the host to its device's clock (what its memory kind's
   reads cost), and tells the profilers of a read that crossed the host link (GIL held). `start`
   is when the read began. */
static PJRT_Error *buffer_charge_read(Handle *h, double start) {
  Handle *device = h->memory->device;
  int64_t cycles = 0;
  for (size_t c = 0; c < h->read.n && c < device->num_clock; c++) {
    device->clock[c] += h->read.cycles[c];
    cycles += h->read.cycles[c];
  }
  if (cycles == 0) return NULL; /* host memory: nothing moved */
  if (trace_sink) trace_read(device->obj, h->nbytes, start, monotonic_s(), cycles);
  if (device->on_read == NULL) return NULL;
  PyObject *res = PyObject_CallFunction(device->on_read, "nddL", (Py_ssize_t)h->nbytes, start,
                                        monotonic_s(), (long long)cycles);
  Py_XDECREF(res);
  if (res == NULL && PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
    /* the values are the caller's already: hand the Ctrl-C back to its next instruction */
    PyErr_Clear();
    PyErr_SetInterrupt();
  } else if (res == NULL) {
    return error_from_python();
  }
  return NULL;
}

/* Device -> host in C: waits for the execution that makes the buffer (without the GIL), then
   copies its bytes. A Ctrl-C during the wait reaches Python as KeyboardInterrupt once the read
   returns, and the array stays readable, as on cpu. */
PJRT_Error *c_Buffer_ToHostBuffer(void *args) {
  BufToHostArgs *a = args;
  SEEN(SLOT_Buffer_ToHostBuffer, a);
  Handle *h = FROM_PJRT(a->src);
  if (a->host_layout && !row_major(a->host_layout, h->ndims))
    return new_error(CODE_UNIMPLEMENTED, "jax_ipu copies to the host in row-major layout only.");
  if (a->dst == NULL) {
    a->dst_size = h->nbytes;
    return NULL;
  }
  if (a->dst_size < h->nbytes) {
    char msg[256];
    snprintf(msg, sizeof msg, "host buffer of %zu bytes is too small for %zu bytes",
             a->dst_size, h->nbytes);
    return new_error(CODE_INVALID_ARGUMENT, msg);
  }
  if (Py_IsFinalizing() || dispatcher == NULL) return finalizing_error(SLOT_Buffer_ToHostBuffer);
  if (h->event) {
    event_wait(h->event);
    PJRT_Error *failed = event_error(h->event);
    if (failed) return failed;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  double start = monotonic_s();
  PJRT_Error *err = h->nbytes ? buffer_copy(h, a->dst) : NULL;
  if (err == NULL) err = buffer_charge_read(h, start);
  PyGILState_Release(gil);
  a->event = &ready_event;
  return err;
}

/* External references: the host reading the buffer in place (NumPy through the buffer
   protocol, DLPack). While one exists the CPU array stays alive, even if jax deletes the buffer,
   and a call it is donated to gets a copy instead, as on cpu. */
PJRT_Error *c_Buffer_IncreaseExternalReferenceCount(void *args) {
  BufPtrArgs *a = args;
  SEEN(SLOT_Buffer_IncreaseExternalReferenceCount, a);
  if (Py_IsFinalizing()) return finalizing_error(SLOT_Buffer_IncreaseExternalReferenceCount);
  Handle *h = BUF(a);
  PyGILState_STATE gil = PyGILState_Ensure();
  PJRT_Error *err = NULL;
  if (h->external_refs == 0) {
    if (h->obj == NULL) {
      err = new_error(CODE_INVALID_ARGUMENT,
                      "Array has been deleted (it was donated to a call, or deleted).");
    } else {
      Py_INCREF(h->obj);
      h->external = h->obj;
    }
  }
  if (err == NULL) h->external_refs++;
  PyGILState_Release(gil);
  return err;
}
PJRT_Error *c_Buffer_DecreaseExternalReferenceCount(void *args) {
  BufPtrArgs *a = args;
  SEEN(SLOT_Buffer_DecreaseExternalReferenceCount, a);
  if (Py_IsFinalizing()) return NULL; /* everything goes with the process */
  Handle *h = BUF(a);
  PyGILState_STATE gil = PyGILState_Ensure();
  if (h->external_refs && --h->external_refs == 0) Py_CLEAR(h->external);
  PyGILState_Release(gil);
  return NULL;
}
/* The address of the bytes, for an external reference: one read by the host, charged as one. */
PJRT_Error *c_Buffer_OpaqueDeviceMemoryDataPointer(void *args) {
  BufPtrArgs *a = args;
  SEEN(SLOT_Buffer_OpaqueDeviceMemoryDataPointer, a);
  if (Py_IsFinalizing()) return finalizing_error(SLOT_Buffer_OpaqueDeviceMemoryDataPointer);
  Handle *h = BUF(a);
  if (h->event) {
    event_wait(h->event);
    PJRT_Error *failed = event_error(h->event);
    if (failed) return failed;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  double start = monotonic_s();
  PJRT_Error *err = buffer_address(h, &a->out);
  if (err == NULL) err = buffer_charge_read(h, start);
  PyGILState_Release(gil);
  return err;
}

/* new_buffer(array, memory, element_type, dims, nbytes, read_advance): a ready buffer in
   `memory` (a memory's handle); reading it back adds `read_advance` (int64) to its device's
   clock. */
PyObject *py_new_buffer(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *array, *dims_seq, *read_advance;
  Handle *memory;
  int etype;
  Py_ssize_t nbytes;
  if (!PyArg_ParseTuple(args, "OO!iOnO", &array, &HandleType, &memory, &etype, &dims_seq, &nbytes,
                        &read_advance))
    return NULL;
  if (memory->stats == NULL) {
    PyErr_SetString(PyExc_TypeError, "new_buffer() takes a memory's handle");
    return NULL;
  }
  Advance read;
  if (advance_from(read_advance, &read) < 0) return NULL;
  size_t n;
  int64_t *dims = dims_from(dims_seq, &n);
  Handle *h = dims ? buffer_new(array, memory, etype, dims, n, (size_t)nbytes, NULL, &read)
                   : NULL;
  Py_DECREF(read.owner);
  free(dims);
  return (PyObject *)h;
}
