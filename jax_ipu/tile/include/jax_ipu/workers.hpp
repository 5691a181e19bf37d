// jax-ipu's interface between vertex libraries and the IPU Model's worker threads
// (jax_ipu/tile/native/workers.cc): a MultiVertex's compute(workerId) runs on every worker of
// its tile at once, as on the chip. Written for jax_ipu.tile.
#ifndef JAX_IPU_WORKERS_HPP
#define JAX_IPU_WORKERS_HPP

#include <cstdint>

extern "C" {

// What one worker's compute(workerId) did.
enum JaxIpuWorkerState : int {
  JAX_IPU_WORKER_TRUE = 0,     // returned true
  JAX_IPU_WORKER_FALSE = 1,    // returned false (a vertex assertion)
  JAX_IPU_WORKER_THREW = 2,    // threw a C++ exception (its text in message)
  JAX_IPU_WORKER_STOPPED = 3,  // did not finish in time and was stopped
};

struct JaxIpuWorkerReport {
  int state;
  char message[256];
};

// Runs task(vertex, w, &reports[w]) for w in [0, workers) on as many host threads at once.
using JaxIpuWorkerTask = void (*)(void* vertex, unsigned worker, JaxIpuWorkerReport* report);

// Returns when every worker has finished, or after timeout_ms, when the workers still running
// are stopped (their state JAX_IPU_WORKER_STOPPED). 0 when all were run (see the reports),
// else a failure of the runtime itself, described in `message`. One run at a time per process.
int jax_ipu_run_workers(unsigned workers, JaxIpuWorkerTask task, void* vertex,
                        JaxIpuWorkerReport* reports, int64_t timeout_ms, char* message,
                        unsigned message_size);

}  // extern "C"

#endif  // JAX_IPU_WORKERS_HPP
