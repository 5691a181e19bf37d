/* Handles: the Python objects behind every PJRT pointer jaxlib holds (client, device, memory,
 * buffer, executable), and their release, queued when a destroy arrives without the GIL. */
#include "pjrt.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct { size_t struct_size; void *ext; void *obj; } ObjArgs; /* every *_Destroy */

static void handle_dealloc(Handle *self) {
  if (self->finalize) self->finalize(self);
  Py_XDECREF((PyObject *)self->memory);
  Py_XDECREF(self->obj);
  Py_XDECREF(self->kind);
  Py_XDECREF(self->stats_array);
  Py_XDECREF(self->clock_array);
  Py_XDECREF(self->on_read);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *handle_get_obj(Handle *self, void *closure) {
  (void)closure;
  PyObject *obj = self->obj ? self->obj : Py_None;
  Py_INCREF(obj);
  return obj;
}
static PyObject *handle_get_deleted(Handle *self, void *closure) {
  (void)closure;
  return PyBool_FromLong(self->deleted);
}
static PyObject *handle_get_address(Handle *self, void *closure) {
  (void)closure;
  return PyLong_FromVoidPtr(TO_PJRT(self));
}
static PyObject *handle_get_device(Handle *self, void *closure) {
  (void)closure;
  PyObject *dev = self->memory && self->memory->device ? self->memory->device->obj : Py_None;
  Py_INCREF(dev);
  return dev;
}
static PyObject *handle_get_memory(Handle *self, void *closure) {
  (void)closure;
  PyObject *memory = self->memory ? self->memory->obj : Py_None;
  Py_INCREF(memory);
  return memory;
}
static PyObject *handle_get_nbytes(Handle *self, void *closure) {
  (void)closure;
  return PyLong_FromSize_t(self->nbytes);
}
static PyObject *handle_get_dims(Handle *self, void *closure) {
  (void)closure;
  PyObject *t = PyTuple_New((Py_ssize_t)self->ndims);
  for (size_t i = 0; t && i < self->ndims; i++)
    PyTuple_SET_ITEM(t, (Py_ssize_t)i, PyLong_FromLongLong(self->dims[i]));
  return t;
}
static PyObject *handle_get_element_type(Handle *self, void *closure) {
  (void)closure;
  return PyLong_FromLong(self->element_type);
}
static PyGetSetDef handle_getset[] = {
    {"obj", (getter)handle_get_obj, NULL, "the runtime object (a buffer's CPU array)", NULL},
    {"deleted", (getter)handle_get_deleted, NULL, "whether jax deleted (or donated) it", NULL},
    {"address", (getter)handle_get_address, NULL, "the pointer jaxlib sees", NULL},
    {"device", (getter)handle_get_device, NULL, "a buffer's runtime device", NULL},
    {"memory", (getter)handle_get_memory, NULL, "a buffer's runtime memory", NULL},
    {"nbytes", (getter)handle_get_nbytes, NULL, "a buffer's size in bytes", NULL},
    {"dims", (getter)handle_get_dims, NULL, "a buffer's dimensions", NULL},
    {"element_type", (getter)handle_get_element_type, NULL, "a buffer's PJRT type", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject HandleType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "jax_ipu.pjrt._table.Handle",
    .tp_basicsize = sizeof(Handle),
    .tp_dealloc = (destructor)handle_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A PJRT object: a runtime object plus the state C serves without Python.",
    .tp_getset = handle_getset,
};

Handle *handle_alloc(PyObject *obj) {
  Handle *h = PyObject_New(Handle, &HandleType);
  if (h == NULL) return NULL;
  memset((char *)h + offsetof(Handle, vtable), 0, sizeof(Handle) - offsetof(Handle, vtable));
  Py_XINCREF(obj);
  h->obj = obj;
  return h;
}

/* Destroys that arrive without the GIL are queued and released under the GIL later. Two arrays
   take turns, each keeping its storage: a drain swaps the filled one for the spare, so that a
   call's destroys cost no malloc and free (whose churn made glibc consolidate its heap). */
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static PyObject **queue, **spare;
static size_t queue_len, queue_cap, spare_cap;
static volatile size_t queue_pending;

static int drain_pending(void *unused);

/* Drops jaxlib's reference to a handle: now when this thread holds the GIL, else queued and
   released by the next thread that takes it (Python runs the drain soon as a pending call). */
void enqueue_release(PyObject *obj) {
  if (obj == NULL) return;
  if (!Py_IsFinalizing() && PyGILState_Check()) {
    Py_DECREF(obj);
    return;
  }
  pthread_mutex_lock(&queue_lock);
  if (queue_len == queue_cap) {
    size_t cap = queue_cap ? queue_cap * 2 : 256;
    PyObject **grown = realloc(queue, cap * sizeof(PyObject *));
    if (grown == NULL) { /* out of memory: leaking one handle beats crashing */
      pthread_mutex_unlock(&queue_lock);
      return;
    }
    queue = grown;
    queue_cap = cap;
  }
  int first = queue_len == 0;
  queue[queue_len++] = obj;
  queue_pending = queue_len;
  pthread_mutex_unlock(&queue_lock);
  if (first && !Py_IsFinalizing()) Py_AddPendingCall(drain_pending, NULL);
}

/* Called with the GIL held. A release may run Python that lets another thread drain meanwhile:
   each drain owns the array it took until it hands it back as the spare. */
void drain_queue(void) {
  while (queue_pending) {
    pthread_mutex_lock(&queue_lock);
    PyObject **items = queue;
    size_t n = queue_len, cap = queue_cap;
    queue = spare;
    queue_cap = spare_cap;
    spare = NULL;
    spare_cap = 0;
    queue_len = 0;
    queue_pending = 0;
    pthread_mutex_unlock(&queue_lock);
    for (size_t i = 0; i < n; i++) Py_DECREF(items[i]);
    pthread_mutex_lock(&queue_lock);
    if (spare == NULL) {
      spare = items;
      spare_cap = cap;
      items = NULL;
    }
    pthread_mutex_unlock(&queue_lock);
    free(items); /* another drain handed back its array first */
  }
}

/* Run by Python as a pending call, soon after a destroy was queued. */
static int drain_pending(void *unused) {
  (void)unused;
  drain_queue();
  return 0;
}

PJRT_Error *c_release(void *args) {
  ObjArgs *a = args;
  /* shared by every *_Destroy slot, so its size is not recorded */
  if (a->obj) enqueue_release((PyObject *)FROM_PJRT(a->obj));
  return NULL;
}

/* ---- the runtime's values, read into handles ---- */
static int int64_buffer(PyObject *array, int flags, int64_t **data, size_t *n) {
  Py_buffer view;
  if (PyObject_GetBuffer(array, &view, flags | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
  int ok = view.itemsize == 8 && view.format && (view.format[0] == 'q' || view.format[0] == 'l');
  *data = view.buf; /* the owner keeps the memory: the runtime's arrays are never resized */
  if (n) *n = (size_t)(view.len / 8);
  PyBuffer_Release(&view);
  if (!ok) {
    PyErr_SetString(PyExc_TypeError, "expected a C-contiguous int64 array");
    return -1;
  }
  return 0;
}
/* The data of a writable int64 array the runtime owns (counters, clocks). */
int int64_array(PyObject *array, int64_t **data, size_t *n) {
  return int64_buffer(array, PyBUF_WRITABLE, data, n);
}
/* The data of an int64 array C only reads. */
int int64_view(PyObject *array, const int64_t **data, size_t *n) {
  return int64_buffer(array, 0, (int64_t **)data, n);
}
int advance_from(PyObject *array, Advance *out) {
  if (int64_view(array, &out->cycles, &out->n) < 0) return -1;
  Py_INCREF(array);
  out->owner = array;
  return 0;
}

int64_t *dims_from(PyObject *seq, size_t *n) {
  PyObject *fast = PySequence_Fast(seq, "dims must be a sequence");
  if (fast == NULL) return NULL;
  *n = (size_t)PySequence_Fast_GET_SIZE(fast);
  int64_t *dims = malloc(sizeof(int64_t) * (*n + 1));
  for (size_t i = 0; i < *n; i++)
    dims[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, (Py_ssize_t)i));
  Py_DECREF(fast);
  if (PyErr_Occurred()) {
    free(dims);
    return NULL;
  }
  return dims;
}

/* new_handle(obj): a handle for an object C reads nothing of (a client). */
PyObject *py_new_handle(PyObject *self, PyObject *obj) {
  (void)self;
  return (PyObject *)handle_alloc(obj);
}

/* new_device(device, memories, clock, on_read): a device's handle, with its memories' handles
   (the first is its default memory), its model clock (int64) and the hook reads call (None:
   none). */
PyObject *py_new_device(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *obj, *memories, *clock, *on_read;
  if (!PyArg_ParseTuple(args, "OOOO", &obj, &memories, &clock, &on_read)) return NULL;
  PyObject *fast = PySequence_Fast(memories, "new_device() takes a sequence of memory handles");
  if (fast == NULL) return NULL;
  Py_ssize_t n_memories = PySequence_Fast_GET_SIZE(fast);
  for (Py_ssize_t i = 0; i < n_memories; i++) {
    PyObject *m = PySequence_Fast_GET_ITEM(fast, i);
    if (!PyObject_TypeCheck(m, &HandleType) || ((Handle *)m)->stats == NULL) {
      Py_DECREF(fast);
      PyErr_SetString(PyExc_TypeError, "new_device() takes memory handles");
      return NULL;
    }
  }
  int64_t *data;
  size_t n;
  Handle *h = n_memories > 0 && int64_array(clock, &data, &n) == 0 ? handle_alloc(obj) : NULL;
  if (h == NULL) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_ValueError, "new_device() needs at least one memory");
    Py_DECREF(fast);
    return NULL;
  }
  for (Py_ssize_t i = 0; i < n_memories; i++)
    ((Handle *)PySequence_Fast_GET_ITEM(fast, i))->device = h;
  h->memory = (Handle *)PySequence_Fast_GET_ITEM(fast, 0);
  Py_INCREF((PyObject *)h->memory);
  Py_DECREF(fast);
  Py_INCREF(clock);
  h->clock_array = clock;
  h->clock = data;
  h->num_clock = n;
  if (on_read != Py_None) {
    Py_INCREF(on_read);
    h->on_read = on_read;
  }
  return (PyObject *)h;
}

/* Hands a handle to jaxlib: jaxlib now owns one reference, dropped by the *_Destroy slot. */
PyObject *py_give(PyObject *self, PyObject *h) {
  (void)self;
  if (!PyObject_TypeCheck(h, &HandleType)) {
    PyErr_SetString(PyExc_TypeError, "give() takes a Handle");
    return NULL;
  }
  Py_INCREF(h);
  return PyLong_FromVoidPtr(TO_PJRT(h));
}

PyObject *py_deref(PyObject *self, PyObject *addr) {
  (void)self;
  void *p = PyLong_AsVoidPtr(addr);
  if (p == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "null PJRT handle");
    return NULL;
  }
  PyObject *h = (PyObject *)FROM_PJRT(p);
  Py_INCREF(h);
  return h;
}

PyObject *py_drain(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  drain_queue();
  Py_RETURN_NONE;
}
