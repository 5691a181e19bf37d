// The IPU Model's worker threads: a MultiVertex's compute(workerId) runs on all of its tile's
// workers at once, as on the chip, so a worker that waits for another's result sees it. On the
// chip the workers issue in turn, one instruction each, so every worker's first instructions
// (resetting the flag it will raise) land before any worker gets far; on a host with fewer
// cores than workers a thread may not have started when another finishes. So workers 1..n-1
// start first and worker 0, which in Poplar codelets is the one that gathers the others'
// results, starts once each of them has had a head start of CPU time (or has finished).
// A run that does not finish in time (a worker spinning on a result nobody writes) is stopped:
// a signal sent to the stuck thread jumps it out of the codelet, so the program gets an error
// instead of hanging, and no thread keeps writing into buffers the program has freed.
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <time.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <jax_ipu/workers.hpp>

namespace {

constexpr unsigned kMaxWorkers = 64;
// After the deadline, how long the stopped workers get to leave the codelet.
constexpr auto kStopGrace = std::chrono::seconds(5);
// CPU time each of workers 1..n-1 runs before worker 0 starts: thousands of instructions.
constexpr std::int64_t kHeadStartNs = 50'000;

std::int64_t CpuNs(pthread_t thread) {
  clockid_t clock;
  timespec now{};
  if (pthread_getcpuclockid(thread, &clock) != 0 || clock_gettime(clock, &now) != 0) return -1;
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

// One host thread serving one worker id.
struct Slot {
  unsigned index = 0;
  pthread_t thread{};
  sigjmp_buf escape;
  volatile sig_atomic_t armed = 0;  // inside the codelet: the stop signal may jump out
  volatile sig_atomic_t stop = 0;   // asked to stop
  bool done = true;
  bool lost = false;  // could not be stopped: never reused
  std::uint64_t seen = 0;
};

// The slot of the worker thread running (initial-exec: readable in a signal handler).
__attribute__((tls_model("initial-exec"))) thread_local Slot* t_slot = nullptr;

struct sigaction g_previous;
int g_signal = 0;

void OnStop(int sig, siginfo_t* info, void* context) {
  Slot* slot = t_slot;
  if (slot != nullptr && slot->stop) {
    if (slot->armed) siglongjmp(slot->escape, 1);
    return;  // ours, but the codelet had already returned
  }
  // Another user of this signal number: hand it on.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_IGN && g_previous.sa_handler != SIG_DFL &&
             g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(sig);
  }
}

class Pool {
 public:
  int Run(unsigned workers, JaxIpuWorkerTask task, void* vertex, JaxIpuWorkerReport* reports,
          std::int64_t timeout_ms, std::string* error) {
    std::lock_guard<std::mutex> one_run(run_mutex_);
    if (!InstallHandler(error) || !Start(workers, error)) return 1;
    std::unique_lock<std::mutex> lock(mutex_);
    task_ = task;
    vertex_ = vertex;
    reports_ = reports;
    active_ = workers;
    remaining_ = workers;
    for (unsigned w = 0; w < workers; ++w) {
      slots_[w]->done = false;
      slots_[w]->stop = 0;
      reports[w].state = JAX_IPU_WORKER_STOPPED;
      reports[w].message[0] = '\0';
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    std::vector<std::int64_t> started(workers);
    for (unsigned w = 1; w < workers; ++w) started[w] = CpuNs(slots_[w]->thread);
    zero_go_ = workers == 1;
    ++generation_;
    start_.notify_all();
    if (!zero_go_) {
      lock.unlock();
      HeadStart(workers, started, deadline);
      lock.lock();
      zero_go_ = true;
      start_.notify_all();
    }
    if (done_.wait_until(lock, deadline, [&] { return remaining_ == 0; })) return 0;
    for (unsigned w = 0; w < workers; ++w) {
      if (!slots_[w]->done) {
        slots_[w]->stop = 1;
        pthread_kill(slots_[w]->thread, g_signal);
      }
    }
    if (done_.wait_for(lock, kStopGrace, [&] { return remaining_ == 0; })) return 0;
    // A worker that could not be stopped (signals blocked, stuck in the kernel) keeps its
    // thread; later runs get new ones.
    for (unsigned w = 0; w < workers; ++w) {
      if (!slots_[w]->done) {
        slots_[w]->lost = true;
        slots_[w].release();
      }
    }
    *error = "a worker thread could not be stopped and was abandoned; restart the process to "
             "reclaim it";
    return 1;
  }

 private:
  // Until each of workers 1..n-1 has run kHeadStartNs of CPU time or finished.
  void HeadStart(unsigned workers, const std::vector<std::int64_t>& started,
                 std::chrono::steady_clock::time_point deadline) {
    for (unsigned w = 1; w < workers; ++w) {
      while (std::chrono::steady_clock::now() < deadline) {
        {
          std::lock_guard<std::mutex> lock(mutex_);
          if (slots_[w]->done) break;
        }
        const std::int64_t now = CpuNs(slots_[w]->thread);
        if (now < 0 || started[w] < 0 || now - started[w] >= kHeadStartNs) break;
        sched_yield();
      }
    }
  }

  bool InstallHandler(std::string* error) {
    if (g_signal != 0) return true;
    struct sigaction action {};
    action.sa_sigaction = OnStop;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    int sig = SIGRTMAX - 2;
    if (sigaction(sig, &action, &g_previous) != 0) {
      *error = "cannot install the worker stop signal handler: " + std::string(strerror(errno));
      return false;
    }
    g_signal = sig;
    return true;
  }

  bool Start(unsigned workers, std::string* error) {
    if (workers == 0 || workers > kMaxWorkers) {
      *error = "a MultiVertex needs 1 to " + std::to_string(kMaxWorkers) + " workers, not " +
               std::to_string(workers);
      return false;
    }
    if (slots_.size() < workers) slots_.resize(workers);
    for (unsigned w = 0; w < workers; ++w) {
      if (slots_[w]) continue;
      auto slot = std::make_unique<Slot>();
      slot->index = w;
      slot->seen = generation_;
      // Workers take no signals but the stop signal: the program's own handlers run elsewhere.
      sigset_t all, saved;
      sigfillset(&all);
      pthread_sigmask(SIG_BLOCK, &all, &saved);
      int rc = pthread_create(&slot->thread, nullptr, &Pool::Main, new Args{this, slot.get()});
      pthread_sigmask(SIG_SETMASK, &saved, nullptr);
      if (rc != 0) {
        *error = "cannot start a worker thread: " + std::string(strerror(rc));
        return false;
      }
      pthread_detach(slot->thread);
      slots_[w] = std::move(slot);
    }
    return true;
  }

  struct Args {
    Pool* pool;
    Slot* slot;
  };

  static void* Main(void* raw) {
    std::unique_ptr<Args> args(static_cast<Args*>(raw));
    sigset_t mine;
    sigemptyset(&mine);
    sigaddset(&mine, g_signal);
    pthread_sigmask(SIG_UNBLOCK, &mine, nullptr);
    t_slot = args->slot;
    args->pool->Serve(args->slot);
    return nullptr;
  }

  void Serve(Slot* slot) {
    for (;;) {
      JaxIpuWorkerTask task;
      void* vertex;
      JaxIpuWorkerReport* report;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        start_.wait(lock, [&] {
          return generation_ != slot->seen && slot->index < active_ &&
                 (slot->index != 0 || zero_go_);
        });
        slot->seen = generation_;
        task = task_;
        vertex = vertex_;
        report = &reports_[slot->index];
      }
      if (sigsetjmp(slot->escape, 1) == 0) {
        slot->armed = 1;
        task(vertex, slot->index, report);
        slot->armed = 0;
      } else {
        slot->armed = 0;
        report->state = JAX_IPU_WORKER_STOPPED;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (slot->lost) return;  // the run gave up on this thread: it leaves, touching nothing
      slot->done = true;
      if (--remaining_ == 0) done_.notify_all();
    }
  }

  std::mutex run_mutex_;
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  std::uint64_t generation_ = 0;
  unsigned active_ = 0;
  unsigned remaining_ = 0;
  bool zero_go_ = false;  // worker 0 may start
  JaxIpuWorkerTask task_ = nullptr;
  void* vertex_ = nullptr;
  JaxIpuWorkerReport* reports_ = nullptr;
  std::vector<std::unique_ptr<Slot>> slots_;
};

Pool& ThePool() {
  static Pool* pool = new Pool();  // never destroyed: its detached threads outlive exit handlers
  return *pool;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int jax_ipu_run_workers(
    unsigned workers, JaxIpuWorkerTask task, void* vertex, JaxIpuWorkerReport* reports,
    int64_t timeout_ms, char* message, unsigned message_size) {
  std::string error;
  int rc = ThePool().Run(workers, task, vertex, reports, timeout_ms, &error);
  if (rc != 0 && message_size > 0) std::snprintf(message, message_size, "%s", error.c_str());
  return rc;
}
