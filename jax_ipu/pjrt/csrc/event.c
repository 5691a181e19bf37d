/* PJRT events: ready at once (the static ready_event), or pending until the waiter thread sees
 * XLA:CPU finish and resolves them; served in C, never waiting with the GIL held. */
#include "pjrt.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef void (*OnReadyCallback)(PJRT_Error *error, void *user_arg);
typedef struct { size_t struct_size; void *ext; PJRT_Event *event; bool is_ready; } EventIsReadyArgs;
typedef struct {
  size_t struct_size; void *ext; PJRT_Event *event; OnReadyCallback callback; void *user_arg;
} EventOnReadyArgs;
typedef struct { size_t struct_size; void *ext; PJRT_Event *event; } EventArgs;
typedef struct {
  size_t struct_size; void *ext; PJRT_Event *event; int error_code; const char *error_message;
  size_t error_message_size;
} EventSetArgs;

typedef struct Callback { OnReadyCallback fn; void *arg; struct Callback *next; } Callback;
struct PJRT_Event {
  void *vtable;
  int is_static; /* the one always-ready event: never freed */
  int refs;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int ready;
  int code; /* error code once ready; 0 = success */
  char *msg;
  size_t len;
  Callback *callbacks; /* run once, when the event becomes ready */
};
PJRT_Event ready_event = {NULL, 1, 1, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
                          1, 0, NULL, 0, NULL};

PJRT_Event *event_new(void) {
  PJRT_Event *e = calloc(1, sizeof(PJRT_Event));
  e->refs = 1;
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  return e;
}
PJRT_Event *event_ref(PJRT_Event *e) {
  if (!e->is_static) __atomic_fetch_add(&e->refs, 1, __ATOMIC_RELAXED);
  return e;
}
void event_unref(PJRT_Event *e) {
  if (e == NULL || e->is_static) return;
  if (__atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e->msg);
  free(e);
}
/* The event's error as a new PJRT_Error (the receiver owns it), or NULL. Call once ready. */
PJRT_Error *event_error(PJRT_Event *e) {
  return e->code ? new_error_n(e->code, e->msg, e->len) : NULL;
}
/* Marks the event ready (with an error when code != 0) and runs its callbacks here. */
void event_resolve(PJRT_Event *e, int code, const char *msg, size_t len) {
  pthread_mutex_lock(&e->mu);
  if (e->ready) {
    pthread_mutex_unlock(&e->mu);
    return;
  }
  if (code) {
    e->msg = malloc(len + 1);
    memcpy(e->msg, msg, len);
    e->msg[len] = '\0';
    e->len = len;
    e->code = code;
  }
  e->ready = 1;
  Callback *cb = e->callbacks;
  e->callbacks = NULL;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  while (cb) {
    Callback *next = cb->next;
    cb->fn(event_error(e), cb->arg);
    free(cb);
    cb = next;
  }
}
int event_is_ready(PJRT_Event *e) {
  pthread_mutex_lock(&e->mu);
  int ready = e->ready;
  pthread_mutex_unlock(&e->mu);
  return ready;
}
/* Whether the event is ready without an error: NULL (a buffer ready at creation) is. */
int event_succeeded(const PJRT_Event *e) {
  if (e == NULL) return 1;
  PJRT_Event *m = (PJRT_Event *)e;
  pthread_mutex_lock(&m->mu);
  int ok = m->ready && m->code == 0;
  pthread_mutex_unlock(&m->mu);
  return ok;
}
static void wait_ready(PJRT_Event *e) {
  pthread_mutex_lock(&e->mu);
  while (!e->ready) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
}
/* Waits until the event is ready, never holding the GIL: the waiter thread needs it to see
   XLA:CPU finish. No Python runs meanwhile, so a Ctrl-C waits for the caller's next Python. */
void event_wait(PJRT_Event *e) {
  if (event_is_ready(e)) return;
  if (!Py_IsFinalizing() && PyGILState_Check()) {
    Py_BEGIN_ALLOW_THREADS
    wait_ready(e);
    Py_END_ALLOW_THREADS
  } else {
    wait_ready(e);
  }
}

PJRT_Error *c_Event_Destroy(void *args) {
  EventArgs *a = args;
  SEEN(SLOT_Event_Destroy, a);
  event_unref(a->event);
  return NULL;
}
PJRT_Error *c_Event_IsReady(void *args) {
  EventIsReadyArgs *a = args;
  SEEN(SLOT_Event_IsReady, a);
  a->is_ready = event_is_ready(a->event);
  return NULL;
}
PJRT_Error *c_Event_Error(void *args) {
  EventArgs *a = args;
  SEEN(SLOT_Event_Error, a);
  return event_is_ready(a->event) ? event_error(a->event) : NULL;
}
PJRT_Error *c_Event_Await(void *args) {
  EventArgs *a = args;
  SEEN(SLOT_Event_Await, a);
  event_wait(a->event);
  return event_error(a->event);
}
PJRT_Error *c_Event_OnReady(void *args) {
  EventOnReadyArgs *a = args;
  SEEN(SLOT_Event_OnReady, a);
  PJRT_Event *e = a->event;
  pthread_mutex_lock(&e->mu);
  if (!e->ready) {
    Callback *cb = malloc(sizeof(Callback));
    cb->fn = a->callback;
    cb->arg = a->user_arg;
    cb->next = e->callbacks;
    e->callbacks = cb;
    pthread_mutex_unlock(&e->mu);
    return NULL;
  }
  pthread_mutex_unlock(&e->mu);
  a->callback(event_error(e), a->user_arg);
  return NULL;
}
PJRT_Error *c_Event_Create(void *args) {
  EventArgs *a = args;
  SEEN(SLOT_Event_Create, a);
  a->event = event_new();
  return NULL;
}
PJRT_Error *c_Event_Set(void *args) {
  EventSetArgs *a = args;
  SEEN(SLOT_Event_Set, a);
  const char *msg = a->error_message ? a->error_message : "";
  event_resolve(a->event, a->error_code, msg, a->error_code ? a->error_message_size : 0);
  return NULL;
}

/* resolve(event_capsule, code, message): the waiter saw the execution end (code 0: success). */
PyObject *py_resolve(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *capsule;
  int code;
  const char *msg;
  Py_ssize_t len;
  if (!PyArg_ParseTuple(args, "Ois#", &capsule, &code, &msg, &len)) return NULL;
  PJRT_Event *e = PyCapsule_GetPointer(capsule, "jax_ipu.event");
  if (e == NULL) return NULL;
  if (PyCapsule_SetName(capsule, "jax_ipu.event.resolved") < 0) return NULL;
  /* Callbacks are jaxlib's: run them without the GIL, which they may want themselves. */
  Py_BEGIN_ALLOW_THREADS
  event_resolve(e, code, msg, (size_t)len);
  event_unref(e);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}
