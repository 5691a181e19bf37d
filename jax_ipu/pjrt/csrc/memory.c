/* PJRT memories: a device's memory kind, and the counters of the bytes its buffers hold (an int64
 * array the runtime device owns and reads for memory_stats()). */
#include "pjrt.h"

typedef struct {
  size_t struct_size; void *ext; void *memory; const char *kind; size_t kind_size;
} MemoryKindArgs;
typedef struct { size_t struct_size; void *ext; void *memory; int kind_id; } MemoryKindIdArgs;

void stats_free(Handle *device, size_t nbytes) {
  if (device && device->stats) device->stats[STAT_IN_USE] -= (int64_t)nbytes;
}
void stats_alloc(Handle *device, size_t nbytes) {
  if (device == NULL || device->stats == NULL) return;
  int64_t *s = device->stats, n = (int64_t)nbytes;
  s[STAT_IN_USE] += n;
  s[STAT_ALLOCS] += 1;
  if (s[STAT_IN_USE] > s[STAT_PEAK]) s[STAT_PEAK] = s[STAT_IN_USE];
  if (n > s[STAT_LARGEST]) s[STAT_LARGEST] = n;
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
  a->kind_id = 0; /* one memory kind per device */
  return NULL;
}
