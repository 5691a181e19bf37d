/* LoadedExecutable_Execute: one path for one or many devices, driven by the executable's plan.
 *
 * Arguments are the CPU arrays behind the input buffers; XLA:CPU runs (asynchronously) and its
 * outputs become buffers in the memories the plan names, carrying one completion event; donated
 * inputs die; the devices' model clocks advance by the plan's cycles. */
#include "pjrt.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  size_t struct_size; void *ext; void *send_callbacks; void *recv_callbacks; size_t num_send_ops;
  size_t num_recv_ops; int launch_id; const int64_t *non_donatable_input_indices;
  size_t num_non_donatable_input_indices;
} ExecuteOptions;
typedef struct {
  size_t struct_size; void *ext; void *executable; ExecuteOptions *options;
  void *const *const *argument_lists; size_t num_devices; size_t num_args;
  void **const *output_lists; PJRT_Event **device_complete_events; void *execute_device;
} ExecuteArgs;

static PyObject *str_block, *str_disassemble, *str_consume_token, *str_copy,
    *str_with_tokens, *str_is_deleted;

int execute_init(void) {
  str_block = PyUnicode_InternFromString("block_until_ready");
  str_disassemble = PyUnicode_InternFromString("disassemble_into_single_device_arrays");
  str_consume_token = PyUnicode_InternFromString("consume_token");
  str_copy = PyUnicode_InternFromString("copy");
  str_with_tokens = PyUnicode_InternFromString("with_tokens");
  str_is_deleted = PyUnicode_InternFromString("is_deleted");
  return str_block && str_disassemble && str_consume_token && str_copy &&
         str_with_tokens && str_is_deleted ? 0 : -1;
}

/* Fails the call when any argument was deleted or donated, naming it, as jax's CPU client does. */
static PJRT_Error *check_arguments(Handle *exe, ExecuteArgs *a) {
  for (size_t d = 0; d < a->num_devices; d++) {
    for (size_t i = 0; i < a->num_args; i++) {
      Handle *b = FROM_PJRT(a->argument_lists[d][i]);
      if (!b->deleted) continue;
      char msg[512];
      snprintf(msg, sizeof msg,
               "Argument %zu of %s was deleted or donated to an earlier call (it is an Array "
               "that has been deleted); pass a live array, e.g. the result of that call.",
               i, PyUnicode_AsUTF8(exe->plan->name));
      return new_error(CODE_INVALID_ARGUMENT, msg);
    }
  }
  return NULL;
}

/* Refuses the call, before anything runs, when a memory of a device cannot hold the outputs
   that land in it once the inputs donated to the call are freed (RESOURCE_EXHAUSTED naming the
   sizes): each memory kind against its own capacity. */
static PJRT_Error *reserve_outputs(Plan *p, ExecuteArgs *a, const unsigned char *keep) {
  for (size_t d = 0; d < a->num_devices; d++) {
    for (size_t kind = 0; kind < MAX_MEMORY_KINDS; kind++) {
      const OutputsIn *in = &p->out_in[d * MAX_MEMORY_KINDS + kind];
      if (in->memory == NULL) continue;
      size_t freed = 0;
      for (size_t i = 0; i < a->num_args; i++) {
        Handle *b = FROM_PJRT(a->argument_lists[d][i]);
        if (p->donated[i] && !keep[i] && b->memory == in->memory) freed += b->nbytes;
      }
      if (memory_fits(in->memory, in->nbytes, freed)) continue;
      PyObject *what = in->count == 1
                           ? PyUnicode_FromFormat("the output of %U", p->name)
                           : PyUnicode_FromFormat("the %zu outputs of %U", in->count, p->name);
      PJRT_Error *err = what ? memory_shortfall(in->memory, in->nbytes, freed, what)
                             : error_from_python();
      Py_XDECREF(what);
      return err;
    }
  }
  return NULL;
}

/* Device d's CPU arrays, with copies where jax keeps a donated input. */
static PyObject *device_arguments(Plan *p, ExecuteArgs *a, size_t d, const unsigned char *keep) {
  PyObject *args = PyList_New((Py_ssize_t)a->num_args);
  if (args == NULL) return NULL;
  for (size_t i = 0; i < a->num_args; i++) {
    PyObject *array = FROM_PJRT(a->argument_lists[d][i])->obj;
    if (p->donated[i] && keep[i]) {
      /* XLA:CPU consumes aliased inputs; one jax must keep gets a private copy to consume */
      array = PyObject_CallMethodNoArgs(array, str_copy);
      if (array == NULL) {
        Py_DECREF(args);
        return NULL;
      }
    } else {
      Py_INCREF(array);
    }
    PyList_SET_ITEM(args, (Py_ssize_t)i, array);
  }
  return args;
}

/* The CPU arrays to run on: one device's list, or one multi-device array per argument. */
static PyObject *cpu_arguments(Plan *p, ExecuteArgs *a, const unsigned char *keep) {
  if (a->num_devices == 1) return device_arguments(p, a, 0, keep);
  PyObject *per_device = PyList_New((Py_ssize_t)a->num_devices);
  if (per_device == NULL) return NULL;
  for (size_t d = 0; d < a->num_devices; d++) {
    PyObject *args = device_arguments(p, a, d, keep);
    if (args == NULL) {
      Py_DECREF(per_device);
      return NULL;
    }
    PyList_SET_ITEM(per_device, (Py_ssize_t)d, args);
  }
  PyObject *joined = PyObject_CallOneArg(p->assemble, per_device);
  Py_DECREF(per_device);
  return joined;
}

/* Whether every argument is computed without an error (an argument that failed, or may yet
   fail, makes XLA:CPU's run fail after the call returned). */
static int arguments_succeeded(ExecuteArgs *a) {
  for (size_t d = 0; d < a->num_devices; d++)
    for (size_t i = 0; i < a->num_args; i++)
      if (!event_succeeded(FROM_PJRT(a->argument_lists[d][i])->event)) return 0;
  return 1;
}

enum { WAIT_ONLY, ASK_READY, ASK_READY_TRUSTED };

/* The event outputs carry: NULL when they are ready (XLA:CPU ran the program inline), an event
   resolved now when it failed at once, else a pending event handed to the waiter thread, which
   waits on `waitables` (a tuple: the token, or one device's outputs, any of which a later call
   may be handed by donation before the waiter gets to it). `waitable` is the first of them.
   `check`: WAIT_ONLY hands the run to the waiter; ASK_READY asks `waitable` whether it is ready,
   and then for the run's error; ASK_READY_TRUSTED skips that question (about 0.3 us), for a run
   that cannot fail once the call returned: XLA:CPU reports a failure of a run it finished
   inline from the call itself, and only a run with a custom call, or an argument that failed,
   fails later. */
static PJRT_Error *completion(PyObject *waitable, PyObject *waitables, int check,
                              PJRT_Event **out) {
  *out = NULL;
  if (check != WAIT_ONLY) {
    PyObject *ready = PyObject_CallOneArg(array_is_ready, waitable);
    if (ready == NULL) return error_from_python();
    int done = PyObject_IsTrue(ready);
    Py_DECREF(ready);
    if (done && check == ASK_READY_TRUSTED) return NULL;
    if (done) {
      PyObject *res = PyObject_CallMethodNoArgs(waitable, str_block); /* raises its error */
      if (res) {
        Py_DECREF(res);
        return NULL;
      }
      PJRT_Error *err = error_from_python();
      *out = event_new();
      event_resolve(*out, err->code, err->msg, err->len);
      free(err->msg);
      free(err);
      return NULL;
    }
  }
  PJRT_Event *e = event_new();
  PyObject *capsule = PyCapsule_New(event_ref(e), "jax_ipu.event", NULL);
  PyObject *res = capsule ? PyObject_CallFunctionObjArgs(waiter, capsule, waitables, NULL) : NULL;
  Py_XDECREF(capsule);
  if (res == NULL) {
    event_unref(e); /* the capsule's reference */
    event_unref(e);
    return error_from_python();
  }
  Py_DECREF(res);
  *out = e;
  return NULL;
}

/* After a failed run: donated arguments XLA:CPU consumed before failing are gone; mark them
   deleted so that jax says so if they are used again (the exception stays pending). */
static void release_consumed(Plan *p, ExecuteArgs *a, const unsigned char *keep) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  for (size_t i = 0; i < a->num_args; i++) {
    if (!p->donated[i] || keep[i]) continue;
    for (size_t d = 0; d < a->num_devices; d++) {
      Handle *b = FROM_PJRT(a->argument_lists[d][i]);
      if (b->deleted) continue;
      PyObject *gone = PyObject_CallMethodNoArgs(b->obj, str_is_deleted);
      if (gone && PyObject_IsTrue(gone)) buffer_release(b);
      Py_XDECREF(gone);
      PyErr_Clear();
    }
  }
  PyErr_Restore(type, value, tb);
}

/* Output k of device d: from a direct run's tuple, or from disassembled per-device lists. */
static PyObject *output_array(PyObject *outputs, size_t k, size_t d, int direct) {
  return direct ? PyTuple_GET_ITEM(outputs, (Py_ssize_t)k)
                : PyList_GET_ITEM(PyList_GET_ITEM(outputs, (Py_ssize_t)k), (Py_ssize_t)d);
}

PJRT_Error *c_LoadedExecutable_Execute(void *args) {
  ExecuteArgs *a = args;
  SEEN(SLOT_LoadedExecutable_Execute, a);
  if (Py_IsFinalizing() || dispatcher == NULL) return finalizing_error(SLOT_LoadedExecutable_Execute);
  Handle *exe = FROM_PJRT(a->executable);
  Plan *p = exe->plan;
  PyGILState_STATE gil = PyGILState_Ensure();
  drain_queue();
  PJRT_Error *err = NULL;
  PyObject *cpu_args = NULL, *results = NULL, *outputs = NULL, *token = NULL;
  PJRT_Event *event = NULL;
  unsigned char *keep = NULL;
  int check = ASK_READY;
  /* the profilers': Poplar-style reports (after) and a running jax.profiler trace */
  PyObject *traced = trace_sink;
  double start = p->after || traced ? monotonic_s() : 0.0;

  if (exe->deleted) {
    char msg[512];
    snprintf(msg, sizeof msg, "Executable %s has been deleted.", PyUnicode_AsUTF8(p->name));
    err = new_error(CODE_FAILED_PRECONDITION, msg);
    goto done;
  }
  if (p->refusal) {
    err = new_error(CODE_FAILED_PRECONDITION, PyUnicode_AsUTF8(p->refusal));
    goto done;
  }
  if (a->num_devices != p->num_devices || a->num_args != p->num_args) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s runs on %zu device(s) with %zu argument(s) each but was given "
             "%zu device(s) with %zu argument(s).", PyUnicode_AsUTF8(p->name), p->num_devices,
             p->num_args, a->num_devices, a->num_args);
    err = new_error(CODE_INVALID_ARGUMENT, msg);
    goto done;
  }
  if (a->execute_device && p->num_devices == 1 &&
      FROM_PJRT(a->execute_device) != p->devices[0]) {
    err = new_error(CODE_UNIMPLEMENTED, "jax_ipu runs a program on the devices it was compiled "
                    "for; recompile it for the other device.");
    goto done;
  }
  if ((err = check_arguments(exe, a)) != NULL) goto done;
  keep = calloc(a->num_args + 1, 1);
  if (a->options)
    for (size_t i = 0; i < a->options->num_non_donatable_input_indices; i++) {
      int64_t k = a->options->non_donatable_input_indices[i];
      if (k >= 0 && (size_t)k < a->num_args) keep[k] = 1;
    }
  for (size_t i = 0; i < a->num_args; i++) /* read in place by the host: donate a copy */
    for (size_t d = 0; d < a->num_devices && !keep[i]; d++)
      if (FROM_PJRT(a->argument_lists[d][i])->external_refs) keep[i] = 1;
  if ((err = reserve_outputs(p, a, keep)) != NULL) goto done;
  /* before the run, which may donate the arguments */
  check = !p->may_fail && arguments_succeeded(a) ? ASK_READY_TRUSTED : ASK_READY;
  if ((cpu_args = cpu_arguments(p, a, keep)) == NULL) goto python_error;

  if (p->direct) { /* one device: run(*args) -> the outputs, by jax's own dispatch */
    results = PyObject_Vectorcall(p->run, PySequence_Fast_ITEMS(cpu_args),
                                  (size_t)PyList_GET_SIZE(cpu_args), NULL);
  } else if (p->with_token) {
    PyObject *kwnames = PyTuple_Pack(1, str_with_tokens);
    PyObject *targs[3] = {NULL, cpu_args, Py_True};
    results = PyObject_Vectorcall(p->run, targs + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                  kwnames);
    Py_DECREF(kwnames);
  } else {
    PyObject *call_args[2] = {NULL, cpu_args};
    results = PyObject_Vectorcall(p->run, call_args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                  NULL);
  }
  if (results == NULL) {
    release_consumed(p, a, keep);
    goto python_error;
  }
  /* outputs: a tuple of arrays (direct), else a list per output of arrays per device */
  outputs = p->direct ? (Py_INCREF(results), results)
                      : PyObject_CallMethodNoArgs(results, str_disassemble);
  if (outputs == NULL) goto python_error;
  if (p->with_token) {
    token = PyObject_CallMethodNoArgs(results, str_consume_token);
    if (token == NULL) goto python_error;
    PyObject *waitables = PyTuple_Pack(1, token);
    err = waitables ? completion(token, waitables, WAIT_ONLY, &event) : error_from_python();
    Py_XDECREF(waitables);
  } else {
    PyObject *waitables = PyTuple_New((Py_ssize_t)p->num_outputs);
    for (size_t k = 0; waitables && k < p->num_outputs; k++) {
      PyObject *first_device = output_array(outputs, k, 0, p->direct);
      Py_INCREF(first_device);
      PyTuple_SET_ITEM(waitables, (Py_ssize_t)k, first_device);
    }
    err = waitables ? completion(output_array(outputs, 0, 0, p->direct), waitables, check, &event)
                    : error_from_python();
    Py_XDECREF(waitables);
  }
  if (err) goto done;

  for (size_t d = 0; d < a->num_devices; d++) {
    for (size_t k = 0; k < p->num_outputs; k++) {
      Handle *h = buffer_new(output_array(outputs, k, d, p->direct),
                             p->out_memories[d * p->num_outputs + k],
                             p->out_types[k], p->out_dims[k], p->out_ndims[k],
                             p->out_nbytes[k], event, &p->out_read[k]);
      if (h == NULL) { /* jaxlib ignores the outputs of a failed call: drop those made */
        for (size_t e = 0; e <= d; e++)
          for (size_t j = 0; j < (e < d ? p->num_outputs : k); j++)
            Py_DECREF((PyObject *)FROM_PJRT(a->output_lists[e][j]));
        goto python_error;
      }
      h->settled = 1; /* ready now (no event), or when its event says */
      h->reordered = p->out_reordered[k];
      a->output_lists[d][k] = TO_PJRT(h);
    }
    if (a->device_complete_events)
      a->device_complete_events[d] = event ? event_ref(event) : &ready_event;
    for (size_t c = 0; c < p->num_clock; c++) p->clocks[d][c] += p->advance[c];
  }
  for (size_t i = 0; i < a->num_args; i++) {
    if (!p->donated[i] || keep[i]) continue;
    for (size_t d = 0; d < a->num_devices; d++) buffer_release(FROM_PJRT(a->argument_lists[d][i]));
  }
  if (traced && traced == trace_sink) trace_run(exe->obj, start, monotonic_s());
  if (p->after) {
    PyObject *res = PyObject_CallFunction(p->after, "dd", start, monotonic_s());
    if (res == NULL) goto python_error;
    Py_DECREF(res);
  }
  goto done;
python_error:
  err = error_from_python();
done:
  event_unref(event);
  free(keep);
  Py_XDECREF(token);
  Py_XDECREF(outputs);
  Py_XDECREF(results);
  Py_XDECREF(cpu_args);
  PyGILState_Release(gil);
  return err;
}
