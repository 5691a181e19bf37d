/* PJRT buffers: handles over XLA:CPU arrays on a device, their metadata served in C, deleted (or
 * donated) in place; their bytes count against their device's memory. */
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

/* A buffer handle around `array` (a new reference is taken) in `memory`; counts its bytes. */
Handle *buffer_new(PyObject *array, Handle *memory, int element_type, const int64_t *dims,
                   size_t ndims, size_t nbytes, PJRT_Event *event) {
  Handle *h = handle_alloc(array);
  if (h == NULL) return NULL;
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
  a->flag = false; /* IPU tile memory, not host memory */
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

/* new_buffer(array, memory, element_type, dims, nbytes): a ready buffer in `memory` (a memory's
   handle). */
PyObject *py_new_buffer(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *array, *dims_seq;
  Handle *memory;
  int etype;
  Py_ssize_t nbytes;
  if (!PyArg_ParseTuple(args, "OO!iOn", &array, &HandleType, &memory, &etype, &dims_seq, &nbytes))
    return NULL;
  if (memory->stats == NULL) {
    PyErr_SetString(PyExc_TypeError, "new_buffer() takes a memory's handle");
    return NULL;
  }
  size_t n;
  int64_t *dims = dims_from(dims_seq, &n);
  if (dims == NULL) return NULL;
  Handle *h = buffer_new(array, memory, etype, dims, n, (size_t)nbytes, NULL);
  free(dims);
  return (PyObject *)h;
}
