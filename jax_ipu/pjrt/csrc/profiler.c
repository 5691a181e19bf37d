/* The PJRT profiler extension: jax.profiler's sessions see the IPU Model, and what a running
 * trace records on the hot paths.
 *
 * Layouts are those of xla/backends/profiler/plugin/profiler_c_api.h (PLUGIN_Profiler_Api) and
 * xla/pjrt/c/pjrt_c_api_profiler_extension.h at jaxlib 0.10.2. create, start, stop and
 * collect_data forward to Python (jax_ipu.pjrt.slots), which makes the XSpace; errors and destroy
 * are served here. While a trace runs, Execute and reads back append their events to one Python
 * list (trace_sink): no Python code runs for them, so they do not show in the host's trace. */
#include "pjrt.h"

#include <stdlib.h>
#include <string.h>

enum { EXTENSION_TYPE_PROFILER = 1 }; /* PJRT_Extension_Type_Profiler */

/* The profiler's errors are the table's PJRT_Error; its error functions take `priv` where the
   table's take `extension_start`. */
typedef struct { size_t struct_size; void *priv; PJRT_Error *error; } ErrorDestroyArgs;
typedef struct {
  size_t struct_size; void *priv; const PJRT_Error *error; const char *message; size_t message_size;
} ErrorMessageArgs;
typedef struct { size_t struct_size; void *priv; const PJRT_Error *error; int code; } ErrorCodeArgs;

/* jaxlib's PluginTracer leaves struct_size unset in these (stack bytes): it is never read. */
typedef struct {
  size_t struct_size; const char *options; size_t options_size; void *profiler;
} CreateArgs;
typedef struct { size_t struct_size; void *profiler; } ProfilerArgs; /* destroy, start, stop */
typedef struct {
  size_t struct_size; void *profiler; uint8_t *buffer; size_t buffer_size_in_bytes;
} CollectArgs;

typedef struct {
  size_t struct_size; void *priv;
  void (*error_destroy)(ErrorDestroyArgs *);
  void (*error_message)(ErrorMessageArgs *);
  PJRT_Error *(*error_get_code)(ErrorCodeArgs *);
  PJRT_Error *(*create)(CreateArgs *);
  PJRT_Error *(*destroy)(ProfilerArgs *);
  PJRT_Error *(*start)(ProfilerArgs *);
  PJRT_Error *(*stop)(ProfilerArgs *);
  PJRT_Error *(*collect_data)(CollectArgs *);
} ProfilerApi;
typedef struct {
  size_t struct_size; int type; void *next; ProfilerApi *profiler_api; int64_t traceme_context_id;
} ProfilerExtension;

/* jaxlib ignores a profiler whose PLUGIN_Profiler_Api.struct_size is not its own (80 bytes). */
_Static_assert(sizeof(ProfilerApi) == 80, "PLUGIN_Profiler_Api is 80 bytes at jaxlib 0.10");
_Static_assert(offsetof(ProfilerExtension, profiler_api) == 24, "PJRT_Profiler_Extension layout");
_Static_assert(sizeof(CreateArgs) == 32 && sizeof(CollectArgs) == 32 &&
               sizeof(ProfilerArgs) == 16, "PLUGIN_Profiler_*_Args layouts");

static void error_destroy(ErrorDestroyArgs *a) {
  if (a->error == NULL) return;
  free(a->error->msg);
  free(a->error);
}
static void error_message(ErrorMessageArgs *a) {
  a->message = a->error->msg;
  a->message_size = a->error->len;
}
static PJRT_Error *error_get_code(ErrorCodeArgs *a) { /* jaxlib aborts if this fails */
  a->code = a->error->code;
  return NULL;
}

/* Forwards to the slot's Python handler a copy of the caller's args that states their size
   (the handlers' layouts check it), and copies the outputs back. */
static PJRT_Error *forward_sized(int slot, void *args, size_t size) {
  size_t copy[8];
  memcpy(copy, args, size);
  copy[0] = size;
  PJRT_Error *err = forward(slot, copy);
  memcpy((char *)args + sizeof(size_t), (char *)copy + sizeof(size_t), size - sizeof(size_t));
  return err;
}

static PJRT_Error *create(CreateArgs *a) {
  a->profiler = NULL;
  return forward_sized(SLOT_Profiler_Create, a, sizeof *a);
}
static PJRT_Error *start(ProfilerArgs *a) {
  if (a->profiler == NULL)
    return new_error(CODE_FAILED_PRECONDITION, "jax_ipu: no profiler session to start (creating "
                     "it failed; its error was logged when the trace began)");
  return forward_sized(SLOT_Profiler_Start, a, sizeof *a);
}
static PJRT_Error *stop(ProfilerArgs *a) {
  if (a->profiler == NULL) return NULL;
  return forward_sized(SLOT_Profiler_Stop, a, sizeof *a);
}
/* jaxlib calls it once with no buffer and reads the one it is handed, which the session keeps
   until it is destroyed; a caller's buffer, as the header also allows, is filled. */
static PJRT_Error *collect_data(CollectArgs *a) {
  if (a->profiler == NULL) {
    a->buffer_size_in_bytes = 0;
    return NULL;
  }
  return forward_sized(SLOT_Profiler_CollectData, a, sizeof *a);
}
/* The session's Handle goes, now or (without the GIL) once a Python thread runs. */
static PJRT_Error *destroy(ProfilerArgs *a) {
  if (a->profiler) enqueue_release((PyObject *)FROM_PJRT(a->profiler));
  return NULL;
}

static ProfilerApi api = {
    sizeof(ProfilerApi), NULL, error_destroy, error_message, error_get_code, create, destroy,
    start, stop, collect_data};
static ProfilerExtension extension;
static PyObject *str_run, *str_transfer, *str_device_to_host;

void *profiler_extension(void *next) {
  str_run = PyUnicode_InternFromString("run");
  str_transfer = PyUnicode_InternFromString("transfer");
  str_device_to_host = PyUnicode_InternFromString("device_to_host");
  extension.struct_size = offsetof(ProfilerExtension, profiler_api) + sizeof(ProfilerApi *);
  extension.type = EXTENSION_TYPE_PROFILER;
  extension.next = next;
  extension.profiler_api = &api;
  return &extension;
}

/* ---- recording while a trace runs (GIL held) ---- */
PyObject *trace_sink;
static Py_ssize_t trace_limit;
static size_t trace_dropped;

/* Appends an event (a new reference, or NULL after a failure), or counts it as left out: a
   trace must never fail the call it watches. */
static void trace_append(PyObject *event) {
  if (event == NULL || PyList_GET_SIZE(trace_sink) >= trace_limit ||
      PyList_Append(trace_sink, event) < 0) {
    trace_dropped++;
    PyErr_Clear();
  }
  Py_XDECREF(event);
}

void trace_run(PyObject *executable, double start, double end) {
  trace_append(Py_BuildValue("(OOdd)", str_run, executable, start, end));
}

void trace_read(PyObject *device, size_t nbytes, double start, double end, int64_t cycles) {
  trace_append(Py_BuildValue("(OOOnddL)", str_transfer, str_device_to_host, device,
                             (Py_ssize_t)nbytes, start, end, (long long)cycles));
}

PyObject *py_trace_into(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *events;
  Py_ssize_t limit;
  if (!PyArg_ParseTuple(args, "On", &events, &limit)) return NULL;
  if (events != Py_None && !PyList_Check(events)) {
    PyErr_SetString(PyExc_TypeError, "trace_into takes a list or None");
    return NULL;
  }
  PyObject *old = trace_sink;
  size_t dropped = trace_dropped;
  Py_XINCREF(events == Py_None ? NULL : events);
  trace_sink = events == Py_None ? NULL : events;
  trace_limit = limit;
  trace_dropped = 0;
  Py_XDECREF(old);
  return PyLong_FromSize_t(dropped);
}
