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
  for (size_t k = 0; k < p->num_outputs && p->out_read; k++) Py_XDECREF(p->out_read[k].owner);
  free(p->out_read);
  free(p->out_reordered);
  free(p->donated); free(p->out_types); free(p->out_dims); free(p->out_ndims);
  free(p->out_nbytes); free(p->devices); free(p->out_memories); free(p->out_in);
  free(p->clock_arrays); free(p->clocks);
  free(p);
}

/* The fields of runtime/plan.py's ExecutePlan, the one type C reads: by these names, once, when
   an executable is loaded. The plugin checks this list against the type when it starts. */
#define PLAN_FIELDS(X) \
  X(name) X(num_replicas) X(num_partitions) X(num_args) X(donated) X(output_types) \
  X(output_dims) X(output_nbytes) X(output_read_advance) X(output_reordered) X(devices) \
  X(output_memories) X(clocks) X(advance) X(run) X(direct) X(with_token) X(may_fail) X(assemble) \
  X(after) X(refusal)
#define FIELD_ENUM(name) F_##name,
enum { PLAN_FIELDS(FIELD_ENUM) NUM_PLAN_FIELDS };
#define FIELD_NAME(name) #name,
static const char *plan_field_names[NUM_PLAN_FIELDS] = {PLAN_FIELDS(FIELD_NAME)};

static PyObject *plan_type; /* ExecutePlan, installed by the plugin */

int plan_install(PyObject *type) {
  if (!PyType_Check(type)) {
    PyErr_SetString(PyExc_TypeError, "the plan type must be a class");
    return -1;
  }
  Py_INCREF(type);
  Py_XSETREF(plan_type, type);
  return 0;
}

PyObject *plan_fields(void) {
  PyObject *t = PyTuple_New(NUM_PLAN_FIELDS);
  for (int i = 0; t && i < NUM_PLAN_FIELDS; i++)
    PyTuple_SET_ITEM(t, i, PyUnicode_FromString(plan_field_names[i]));
  return t;
}

/* An optional field: NULL for None. */
static PyObject *optional(PyObject *v) {
  if (v != Py_None) return v;
  Py_DECREF(v);
  return NULL;
}

/* Device d's row of the plan's output memories: one memory handle of that device per output. */
static int plan_memories(Plan *p, size_t d, PyObject *memories) {
  PyObject *row = PySequence_GetItem(memories, (Py_ssize_t)d);
  if (row == NULL) return -1;
  if (PyObject_Length(row) != (Py_ssize_t)p->num_outputs) {
    Py_DECREF(row);
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_ValueError, "a plan needs one output memory per output");
    return -1;
  }
  for (size_t k = 0; k < p->num_outputs; k++) {
    PyObject *m = PySequence_GetItem(row, (Py_ssize_t)k);
    if (m == NULL) break;
    if (!PyObject_TypeCheck(m, &HandleType) || ((Handle *)m)->stats == NULL ||
        ((Handle *)m)->device != p->devices[d]) {
      Py_DECREF(m);
      PyErr_SetString(PyExc_TypeError, "plan output memories must be memory handles of the "
                      "device they are listed for");
      break;
    }
    p->out_memories[d * p->num_outputs + k] = (Handle *)m;
    OutputsIn *in = &p->out_in[d * MAX_MEMORY_KINDS + ((Handle *)m)->kind_id];
    in->memory = (Handle *)m;
    in->nbytes += p->out_nbytes[k];
    in->count += 1;
  }
  Py_DECREF(row);
  return PyErr_Occurred() ? -1 : 0;
}

static Plan *plan_from(PyObject *py) {
  if (plan_type == NULL || !PyObject_TypeCheck(py, (PyTypeObject *)plan_type)) {
    PyErr_SetString(PyExc_TypeError, "an executable's plan must be an ExecutePlan");
    return NULL;
  }
  PyObject *v[NUM_PLAN_FIELDS] = {NULL};
  Plan *p = calloc(1, sizeof(Plan));
  for (int i = 0; i < NUM_PLAN_FIELDS; i++)
    if ((v[i] = PyObject_GetAttrString(py, plan_field_names[i])) == NULL) goto fail;
  p->name = v[F_name];
  p->run = v[F_run];
  p->assemble = optional(v[F_assemble]);
  p->after = optional(v[F_after]);
  p->refusal = optional(v[F_refusal]);
  p->advance_array = v[F_advance];
  v[F_name] = v[F_run] = v[F_assemble] = v[F_after] = v[F_refusal] = v[F_advance] = NULL;
  p->with_token = PyObject_IsTrue(v[F_with_token]);
  p->direct = PyObject_IsTrue(v[F_direct]);
  p->may_fail = PyObject_IsTrue(v[F_may_fail]);
  p->num_replicas = PyLong_AsSize_t(v[F_num_replicas]);
  p->num_partitions = PyLong_AsSize_t(v[F_num_partitions]);
  p->num_args = PyLong_AsSize_t(v[F_num_args]);
  Py_ssize_t num_donated = PyObject_Length(v[F_donated]),
             num_out = PyObject_Length(v[F_output_types]),
             num_dev = PyObject_Length(v[F_devices]);
  if (PyErr_Occurred() || num_donated < 0 || num_out < 0 || num_dev < 0) goto fail;
  p->num_outputs = (size_t)num_out;
  p->num_devices = (size_t)num_dev;
  if (p->num_devices == 0 || (p->num_devices > 1 && p->assemble == NULL) ||
      PyObject_Length(v[F_clocks]) != num_dev ||
      PyObject_Length(v[F_output_memories]) != num_dev ||
      PyObject_Length(v[F_output_dims]) != num_out ||
      PyObject_Length(v[F_output_nbytes]) != num_out ||
      PyObject_Length(v[F_output_reordered]) != num_out ||
      PyObject_Length(v[F_output_read_advance]) != num_out) {
    PyErr_SetString(PyExc_ValueError, "a plan needs devices, their clocks and output memories, "
                    "dims and bytes of every output, and assemble() for several devices");
    goto fail;
  }
  if (p->direct && (p->num_devices != 1 || p->with_token)) {
    PyErr_SetString(PyExc_ValueError, "a direct plan runs one device without tokens");
    goto fail;
  }
  if (int64_array(p->advance_array, &p->advance, &p->num_clock) < 0) goto fail;
  p->donated = calloc(p->num_args + 1, 1);
  for (Py_ssize_t i = 0; i < num_donated; i++) {
    PyObject *item = PySequence_GetItem(v[F_donated], i);
    Py_ssize_t k = item ? PyLong_AsSsize_t(item) : -1;
    Py_XDECREF(item);
    if (PyErr_Occurred()) goto fail;
    if (k >= 0 && (size_t)k < p->num_args) p->donated[k] = 1;
  }
  p->out_types = calloc(p->num_outputs + 1, sizeof(int));
  p->out_dims = calloc(p->num_outputs + 1, sizeof(int64_t *));
  p->out_ndims = calloc(p->num_outputs + 1, sizeof(size_t));
  p->out_nbytes = calloc(p->num_outputs + 1, sizeof(size_t));
  p->out_read = calloc(p->num_outputs + 1, sizeof(Advance));
  p->out_reordered = calloc(p->num_outputs + 1, 1);
  for (size_t k = 0; k < p->num_outputs; k++) {
    PyObject *read = PySequence_GetItem(v[F_output_read_advance], (Py_ssize_t)k);
    int bad = read == NULL || advance_from(read, &p->out_read[k]) < 0;
    Py_XDECREF(read);
    if (bad) goto fail;
    PyObject *t = PySequence_GetItem(v[F_output_types], (Py_ssize_t)k);
    PyObject *s = PySequence_GetItem(v[F_output_dims], (Py_ssize_t)k);
    PyObject *b = PySequence_GetItem(v[F_output_nbytes], (Py_ssize_t)k);
    PyObject *r = PySequence_GetItem(v[F_output_reordered], (Py_ssize_t)k);
    if (t && s && b && r) {
      p->out_reordered[k] = PyObject_IsTrue(r) == 1;
      p->out_types[k] = (int)PyLong_AsLong(t);
      p->out_nbytes[k] = PyLong_AsSize_t(b);
      p->out_dims[k] = dims_from(s, &p->out_ndims[k]);
    }
    Py_XDECREF(t);
    Py_XDECREF(s);
    Py_XDECREF(b);
    Py_XDECREF(r);
    if (PyErr_Occurred()) goto fail;
  }
  p->devices = calloc(p->num_devices, sizeof(Handle *));
  p->out_memories = calloc(p->num_devices * p->num_outputs + 1, sizeof(Handle *));
  p->out_in = calloc(p->num_devices * MAX_MEMORY_KINDS, sizeof(OutputsIn));
  p->clock_arrays = calloc(p->num_devices, sizeof(PyObject *));
  p->clocks = calloc(p->num_devices, sizeof(int64_t *));
  for (size_t d = 0; d < p->num_devices; d++) {
    PyObject *h = PySequence_GetItem(v[F_devices], (Py_ssize_t)d);
    if (h == NULL) goto fail;
    if (!PyObject_TypeCheck(h, &HandleType)) {
      Py_DECREF(h);
      PyErr_SetString(PyExc_TypeError, "plan devices must be Handles");
      goto fail;
    }
    p->devices[d] = (Handle *)h;
    p->clock_arrays[d] = PySequence_GetItem(v[F_clocks], (Py_ssize_t)d);
    size_t n = 0;
    if (p->clock_arrays[d] == NULL || int64_array(p->clock_arrays[d], &p->clocks[d], &n) < 0)
      goto fail;
    if (n < p->num_clock) {
      PyErr_SetString(PyExc_ValueError, "a device clock is shorter than the plan's advance");
      goto fail;
    }
    if (plan_memories(p, d, v[F_output_memories]) < 0) goto fail;
  }
  for (int i = 0; i < NUM_PLAN_FIELDS; i++) Py_XDECREF(v[i]);
  return p;
fail:
  for (int i = 0; i < NUM_PLAN_FIELDS; i++) Py_XDECREF(v[i]);
  plan_free(p);
  return NULL;
}

static void executable_finalize(Handle *h) { plan_free(h->plan); }

/* new_executable(exe, plan): an executable handle around `exe` (its runtime object), which
   Execute runs by `plan`, an ExecutePlan read once, here. */
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
  h->finalize = executable_finalize;
  return (PyObject *)h;
}

#define EXE(a) FROM_PJRT((a)->executable)
PJRT_Error *c_Executable_NumReplicas(void *args) {
  ExeSizeArgs *a = args;
  a->value = EXE(a)->plan->num_replicas;
  return NULL;
}
PJRT_Error *c_Executable_NumPartitions(void *args) {
  ExeSizeArgs *a = args;
  a->value = EXE(a)->plan->num_partitions;
  return NULL;
}
PJRT_Error *c_Executable_NumOutputs(void *args) {
  ExeSizeArgs *a = args;
  a->value = EXE(a)->plan->num_outputs;
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
