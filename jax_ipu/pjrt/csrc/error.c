/* PJRT errors: made in C or from the pending Python exception; their slots never fail (jaxlib
 * segfaults when Error_Message, Error_GetCode or Error_ForEachPayload return an error). */
#include "pjrt.h"

#include <stdlib.h>
#include <string.h>

typedef struct { size_t struct_size; void *ext; PJRT_Error *error; } ErrorDestroyArgs;
typedef struct {
  size_t struct_size; void *ext; const PJRT_Error *error; const char *message; size_t message_size;
} ErrorMessageArgs;
typedef struct { size_t struct_size; void *ext; const PJRT_Error *error; int code; } ErrorCodeArgs;

PJRT_Error *new_error_n(int code, const char *msg, size_t n) {
  PJRT_Error *e = malloc(sizeof(PJRT_Error));
  e->vtable = NULL;
  e->code = code;
  e->msg = malloc(n + 1);
  memcpy(e->msg, msg, n);
  e->msg[n] = '\0';
  e->len = n;
  return e;
}
PJRT_Error *new_error(int code, const char *msg) {
  return new_error_n(code, msg, strlen(msg));
}

/* The pending Python exception as a PJRT error (GIL held). Ctrl-C is handed back to Python: the
   error says so, and the interrupt is raised again at the caller's next Python instruction, so
   an `except Exception` around the jax call cannot swallow it. */
PJRT_Error *error_from_python(void) {
  if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
    PyErr_Clear();
    PyErr_SetInterrupt();
    return new_error(CODE_CANCELLED, "KeyboardInterrupt: interrupted while jax_ipu was working");
  }
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  PJRT_Error *err = NULL;
  if (error_maker && value) {
    PyObject *res = PyObject_CallOneArg(error_maker, value);
    if (res) {
      err = (PJRT_Error *)PyLong_AsVoidPtr(res);
      Py_DECREF(res);
    }
    /* a Ctrl-C while the error was being made is the caller's all the same */
    if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) PyErr_SetInterrupt();
    PyErr_Clear();
  }
  if (err == NULL) {
    PyObject *text = value ? PyObject_Str(value) : NULL;
    const char *msg = text ? PyUnicode_AsUTF8(text) : NULL;
    err = new_error(CODE_INTERNAL, msg ? msg : "jax_ipu: internal error in the plugin");
    Py_XDECREF(text);
    PyErr_Clear();
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return err;
}

PJRT_Error *finalizing_error(int slot) {
  char msg[256];
  snprintf(msg, sizeof msg, "jax_ipu: %s called while the Python interpreter is shutting down",
           slot_names[slot]);
  return new_error(CODE_UNAVAILABLE, msg);
}

PJRT_Error *c_Error_Destroy(void *args) {
  ErrorDestroyArgs *a = args;
  SEEN(SLOT_Error_Destroy, a);
  if (a->error) {
    free(a->error->msg);
    free(a->error);
  }
  return NULL;
}
PJRT_Error *c_Error_Message(void *args) {
  ErrorMessageArgs *a = args;
  SEEN(SLOT_Error_Message, a);
  a->message = a->error->msg;
  a->message_size = a->error->len;
  return NULL;
}
PJRT_Error *c_Error_GetCode(void *args) {
  ErrorCodeArgs *a = args;
  SEEN(SLOT_Error_GetCode, a);
  a->code = a->error->code;
  return NULL;
}
PJRT_Error *c_Error_ForEachPayload(void *a) {
  SEEN(SLOT_Error_ForEachPayload, a);
  (void)a; /* errors carry no payloads */
  return NULL;
}

/* make_error(code, message) -> the address of a new PJRT_Error. */
PyObject *py_make_error(PyObject *self, PyObject *args) {
  (void)self;
  int code;
  const char *msg;
  if (!PyArg_ParseTuple(args, "is", &code, &msg)) return NULL;
  return PyLong_FromVoidPtr(new_error(code, msg));
}
