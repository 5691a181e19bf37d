/* PJRT memories: one per memory kind of a device (tile memory, Streaming Memory, host memory),
 * each with the counters of the bytes its buffers hold (an int64 array the runtime memory owns
 * and reads for memory_stats()). */
#include "pjrt.h"

typedef struct {
  size_t struct_size; void *ext; void *memory; const char *kind; size_t kind_size;
} MemoryKindArgs;
typedef struct { size_t struct_size; void *ext; void *memory; int kind_id; } MemoryKindIdArgs;

void stats_free(Handle *memory, size_t nbytes) {
  if (memory && memory->stats) memory->stats[STAT_IN_USE] -= (int64_t)nbytes;
}
void stats_alloc(Handle *memory, size_t nbytes) {
  if (memory == NULL || memory->stats == NULL) return;
  int64_t *s = memory->stats, n = (int64_t)nbytes;
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
  a->kind_id = FROM_PJRT(a->memory)->kind_id;
  return NULL;
}
