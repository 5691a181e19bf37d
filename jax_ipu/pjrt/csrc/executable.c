/* PJRT executables: the plan Execute runs by, read once from the runtime's executable, and the
 * questions about it that C answers (counts, deletion). */
#include "pjrt.h"

#include <stdlib.h>

typedef struct { size_t struct_size; void *ext; void *executable; size_t value; } ExeSizeArgs;
typedef struct { size_t struct_size; void *ext; void *executable; bool value; } ExeBoolArgs;

void plan_free(Plan *p) {
  if (p == NULL) return;
  Py_XDECREF(p->run); Py_XDECREF(p->assemble); Py_XDECREF(p->after); Py_XDECREF(p->refusal);
  Py_XDECREF(p->name); Py_XDECREF(p->advance_array);
  for (size_t d = 0; d < p->num_devices; d++) {
    if (p->devices) Py_XDECREF((PyObject *)p->devices[d]);
    if (p->clock_arrays) Py_XDECREF(p->clock_arrays[d]);
    for (size_t k = 0; k < p->num_outputs && p->out_memories; k++)
      Py_XDECREF((PyObject *)p->out_memories[d * p->num_outputs + k]);
  }
  for (size_t k = 0; k < p->num_outputs && p->out_dims; k++) free(p->out_dims[k]);
  free(p->donated); free(p->out_types); free(p->out_dims); free(p->out_ndims);
  free(p->out_nbytes); free(p->devices); free(p->out_memories); free(p->clock_arrays);
  free(p->clocks);
  free(p);
}

static int plan_attr(PyObject *plan, const char *name, PyObject **out, int optional) {
  PyObject *v = PyObject_GetAttrString(plan, name);
  if (v == NULL) return -1;
  if (optional && v == Py_None) {
    Py_DECREF(v);
    v = NULL;
  }
  *out = v;
  return 0;
}

static Plan *plan_from(PyObject *py) {
  Plan *p = calloc(1, sizeof(Plan));
  PyObject *donated = NULL, *types = NULL, *dims = NULL, *nbytes = NULL, *devices = NULL,
           *clocks = NULL, *token = NULL, *direct = NULL, *memories = NULL;
  if (plan_attr(py, "run", &p->run, 0) || plan_attr(py, "assemble", &p->assemble, 1) ||
      plan_attr(py, "after", &p->after, 1) || plan_attr(py, "refusal", &p->refusal, 1) ||
      plan_attr(py, "name", &p->name, 0) || plan_attr(py, "advance", &p->advance_array, 0) ||
      plan_attr(py, "donated", &donated, 0) || plan_attr(py, "output_types", &types, 0) ||
      plan_attr(py, "output_dims", &dims, 0) || plan_attr(py, "output_nbytes", &nbytes, 0) ||
      plan_attr(py, "device_handles", &devices, 0) || plan_attr(py, "clocks", &clocks, 0) ||
      plan_attr(py, "with_token", &token, 0) || plan_attr(py, "direct", &direct, 0) ||
      plan_attr(py, "output_memories", &memories, 0))
    goto fail;
  p->with_token = PyObject_IsTrue(token);
  p->direct = PyObject_IsTrue(direct);
  Py_ssize_t num_args = PyObject_Length(donated), num_out = PyObject_Length(types),
             num_dev = PyObject_Length(devices);
  PyObject *args_count = PyObject_GetAttrString(py, "num_args");
  if (args_count == NULL || num_out < 0 || num_dev < 0 || num_args < 0) {
    Py_XDECREF(args_count);
    goto fail;
  }
  p->num_args = PyLong_AsSize_t(args_count);
  Py_DECREF(args_count);
  p->num_outputs = (size_t)num_out;
  p->num_devices = (size_t)num_dev;
  if (p->num_devices == 0 || (p->num_devices > 1 && p->assemble == NULL) ||
      PyObject_Length(clocks) != num_dev) {
    PyErr_SetString(PyExc_ValueError, "a plan needs devices, their clocks, and assemble() for "
                    "several devices");
    goto fail;
  }
  if (int64_array(p->advance_array, &p->advance, &p->num_clock) < 0) goto fail;
  p->donated = calloc(p->num_args + 1, 1);
  for (Py_ssize_t i = 0; i < num_args; i++) {
    PyObject *item = PySequence_GetItem(donated, i);
    Py_ssize_t k = item ? PyLong_AsSsize_t(item) : -1;
    Py_XDECREF(item);
    if (PyErr_Occurred()) goto fail;
    if (k >= 0 && (size_t)k < p->num_args) p->donated[k] = 1;
  }
  p->out_types = calloc(p->num_outputs + 1, sizeof(int));
  p->out_dims = calloc(p->num_outputs + 1, sizeof(int64_t *));
  p->out_ndims = calloc(p->num_outputs + 1, sizeof(size_t));
  p->out_nbytes = calloc(p->num_outputs + 1, sizeof(size_t));
  for (size_t k = 0; k < p->num_outputs; k++) {
    PyObject *t = PySequence_GetItem(types, (Py_ssize_t)k);
    PyObject *s = PySequence_GetItem(dims, (Py_ssize_t)k);
    PyObject *b = PySequence_GetItem(nbytes, (Py_ssize_t)k);
    if (t && s && b) {
      p->out_types[k] = (int)PyLong_AsLong(t);
      p->out_nbytes[k] = PyLong_AsSize_t(b);
      p->out_dims[k] = dims_from(s, &p->out_ndims[k]);
    }
    Py_XDECREF(t);
    Py_XDECREF(s);
    Py_XDECREF(b);
    if (PyErr_Occurred()) goto fail;
  }
  p->devices = calloc(p->num_devices, sizeof(Handle *));
  p->out_memories = calloc(p->num_devices * p->num_outputs + 1, sizeof(Handle *));
  p->clock_arrays = calloc(p->num_devices, sizeof(PyObject *));
  p->clocks = calloc(p->num_devices, sizeof(int64_t *));
  for (size_t d = 0; d < p->num_devices; d++) {
    PyObject *h = PySequence_GetItem(devices, (Py_ssize_t)d);
    if (h == NULL) goto fail;
    if (!PyObject_TypeCheck(h, &HandleType)) {
      Py_DECREF(h);
      PyErr_SetString(PyExc_TypeError, "plan devices must be Handles");
      goto fail;
    }
    p->devices[d] = (Handle *)h;
    p->clock_arrays[d] = PySequence_GetItem(clocks, (Py_ssize_t)d);
    size_t n = 0;
    if (p->clock_arrays[d] == NULL || int64_array(p->clock_arrays[d], &p->clocks[d], &n) < 0)
      goto fail;
    if (n < p->num_clock) {
      PyErr_SetString(PyExc_ValueError, "a device clock is shorter than the plan's advance");
      goto fail;
    }
    PyObject *row = PySequence_GetItem(memories, (Py_ssize_t)d);
    for (size_t k = 0; row && k < p->num_outputs; k++) {
      PyObject *m = PySequence_GetItem(row, (Py_ssize_t)k);
      if (m && !PyObject_TypeCheck(m, &HandleType)) {
        Py_DECREF(m);
        PyErr_SetString(PyExc_TypeError, "plan output memories must be Handles");
        m = NULL;
      }
      if (m == NULL) break;
      p->out_memories[d * p->num_outputs + k] = (Handle *)m;
    }
    Py_XDECREF(row);
    if (PyErr_Occurred()) goto fail;
  }
  Py_DECREF(donated); Py_DECREF(types); Py_DECREF(dims); Py_DECREF(nbytes); Py_DECREF(devices);
  Py_DECREF(clocks); Py_DECREF(token); Py_DECREF(direct); Py_DECREF(memories);
  if (p->direct && (p->num_devices != 1 || p->with_token)) {
    PyErr_SetString(PyExc_ValueError, "a direct plan runs one device without tokens");
    plan_free(p);
    return NULL;
  }
  return p;
fail:
  Py_XDECREF(donated); Py_XDECREF(types); Py_XDECREF(dims); Py_XDECREF(nbytes);
  Py_XDECREF(devices); Py_XDECREF(clocks); Py_XDECREF(token); Py_XDECREF(direct);
  Py_XDECREF(memories);
  plan_free(p);
  return NULL;
}

/* new_executable(exe, plan): an executable handle; `plan` says how Execute runs it (read once):
   run, assemble, after, refusal, name, num_args, donated, output_types, output_dims,
   output_nbytes, device_handles, output_memories (per device, per output: the memory Handle it
   lands in), clocks (int64 arrays), advance (int64 array), with_token, direct. */
PyObject *py_new_executable(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *obj, *plan;
  if (!PyArg_ParseTuple(args, "OO", &obj, &plan)) return NULL;
  Plan *p = plan_from(plan);
  if (p == NULL) return NULL;
  Handle *h = handle_alloc(obj);
  if (h == NULL) {
    plan_free(p);
    return NULL;
  }
  h->plan = p;
  h->num_outputs = p->num_outputs;
  PyObject *r = PyObject_GetAttrString(obj, "num_replicas");
  PyObject *q = r ? PyObject_GetAttrString(obj, "num_partitions") : NULL;
  if (q == NULL) {
    Py_XDECREF(r);
    Py_DECREF(h);
    return NULL;
  }
  h->num_replicas = PyLong_AsSize_t(r);
  h->num_partitions = PyLong_AsSize_t(q);
  Py_DECREF(r);
  Py_DECREF(q);
  return (PyObject *)h;
}

#define EXE(a) FROM_PJRT((a)->executable)
PJRT_Error *c_Executable_NumReplicas(void *args) {
  ExeSizeArgs *a = args;
  a->value = EXE(a)->num_replicas;
  return NULL;
}
PJRT_Error *c_Executable_NumPartitions(void *args) {
  ExeSizeArgs *a = args;
  a->value = EXE(a)->num_partitions;
  return NULL;
}
PJRT_Error *c_Executable_NumOutputs(void *args) {
  ExeSizeArgs *a = args;
  a->value = EXE(a)->num_outputs;
  return NULL;
}
PJRT_Error *c_LoadedExecutable_Delete(void *args) {
  ExeSizeArgs *a = args;
  SEEN(SLOT_LoadedExecutable_Delete, a);
  EXE(a)->deleted = 1;
  return NULL;
}
PJRT_Error *c_LoadedExecutable_IsDeleted(void *args) {
  ExeBoolArgs *a = args;
  SEEN(SLOT_LoadedExecutable_IsDeleted, a);
  a->value = EXE(a)->deleted != 0;
  return NULL;
}
