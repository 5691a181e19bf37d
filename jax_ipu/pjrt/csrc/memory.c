/* PJRT memories: one per memory kind of a device (tile memory, Streaming Memory, host memory),
 * each with its kind and the counters of the bytes its buffers hold (int64 arrays the runtime's
 * memory owns and reads for memory_stats()), against the bytes the memory holds. */
#include "pjrt.h"

typedef struct {
  size_t struct_size; void *ext; void *memory; const char *kind; size_t kind_size;
} MemoryKindArgs;
typedef struct { size_t struct_size; void *ext; void *memory; int kind_id; } MemoryKindIdArgs;

void memory_free(Handle *memory, size_t nbytes) {
  memory->stats[STAT_IN_USE] -= (int64_t)nbytes;
}
void memory_alloc(Handle *memory, size_t nbytes) {
  int64_t *s = memory->stats, n = (int64_t)nbytes;
  s[STAT_IN_USE] += n;
  s[STAT_ALLOCS] += 1;
  if (s[STAT_IN_USE] > s[STAT_PEAK]) s[STAT_PEAK] = s[STAT_IN_USE];
  if (n > s[STAT_LARGEST]) s[STAT_LARGEST] = n;
}

/* Whether `nbytes` more fit in the memory once `freed` bytes of it go. */
int memory_fits(Handle *memory, size_t nbytes, size_t freed) {
  return memory->limit < 0 ||
         memory->stats[STAT_IN_USE] - (int64_t)freed + (int64_t)nbytes <= memory->limit;
}
/* RESOURCE_EXHAUSTED for what does not fit, saying why and what to do in the runtime memory's
   words (GIL held); `what` (str) names what would take the bytes. */
PJRT_Error *memory_shortfall(Handle *memory, size_t nbytes, size_t freed, PyObject *what) {
  PyObject *msg = PyObject_CallMethod(memory->obj, "shortfall", "nOn", (Py_ssize_t)nbytes, what,
                                      (Py_ssize_t)freed);
  const char *text = msg ? PyUnicode_AsUTF8(msg) : NULL;
  PJRT_Error *err = text ? new_error(CODE_RESOURCE_EXHAUSTED, text) : error_from_python();
  Py_XDECREF(msg);
  return err;
}

/* new_memory(memory, kind, kind_id, stats, limit): a memory's handle; `stats` are its int64
   counters (STAT_*), `limit` the bytes it holds (-1: no limit). new_device() gives it its
   device. */
PyObject *py_new_memory(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *obj, *kind, *stats;
  int kind_id;
  long long limit;
  if (!PyArg_ParseTuple(args, "OSiOL", &obj, &kind, &kind_id, &stats, &limit)) return NULL;
  if (kind_id < 0 || kind_id >= MAX_MEMORY_KINDS) {
    PyErr_Format(PyExc_ValueError, "memory kind id %d is not below %d", kind_id,
                 MAX_MEMORY_KINDS);
    return NULL;
  }
  int64_t *counters;
  size_t n;
  if (int64_array(stats, &counters, &n) < 0) return NULL;
  if (n < STAT_LARGEST + 1) {
    PyErr_SetString(PyExc_ValueError, "a memory's counters are too few");
    return NULL;
  }
  Handle *h = handle_alloc(obj);
  if (h == NULL) return NULL;
  Py_INCREF(kind);
  h->kind = kind;
  h->kind_id = kind_id;
  Py_INCREF(stats);
  h->stats_array = stats;
  h->stats = counters;
  h->limit = limit;
  return (PyObject *)h;
}

PJRT_Error *c_Memory_Kind(void *args) {
  MemoryKindArgs *a = args;
  PyObject *kind = FROM_PJRT(a->memory)->kind;
  a->kind = PyBytes_AS_STRING(kind);
  a->kind_size = (size_t)PyBytes_GET_SIZE(kind);
  return NULL;
}
PJRT_Error *c_Memory_Kind_Id(void *args) {
  MemoryKindIdArgs *a = args;
  a->kind_id = FROM_PJRT(a->memory)->kind_id;
  return NULL;
}
