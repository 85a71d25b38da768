// A persistent thread pool (the runtime kernels' and the engine's each hold one): workers wait for a job, claim task indices from an
// atomic counter, and the calling thread works too. One job runs at a time.
//
// `shared_pool()` is the runtime kernels' pool (the engine has its own: engine/split.h).
//
// The protocol lives in one atomic word, `job_` = id << 24 | invited << 12 | inside:
//   - run() publishes a job by storing a new id with `invited` = the number of workers asked
//     to join (worker index < invited) and `inside` = 0, after writing the job's fields;
//   - a worker joins by a compare-and-swap that adds 1 to `inside`; it fails if the word
//     changed since the worker read it (the job was closed, or replaced), so a worker only
//     ever joins the job whose fields it is about to read;
//   - a worker leaves by subtracting 1 from `inside`;
//   - the next run() closes the job by clearing `invited` (no worker can join afterwards) and
//     waits until `inside` is 0 before it rewrites the fields.
// Every step is a read-modify-write of the same word, so all of them fall in that word's one
// modification order: whether a worker got in before the close is decided there, on every
// CPU and under the C++ memory model, with no reliance on a store and a load to different
// words being seen in program order (the store-buffering pattern, which x86 itself breaks).
// Completion is counted in tasks (`done_`): the caller waits for every task to finish, never
// for a worker that joined late and claims nothing, and a task is called only for a claimed
// index below the job's task count, so a worker that is still inside a job after run()
// returned never touches the caller's task.
//
// Guarding: `run` and `resize` take `mutex_`, so jobs from several Python threads (the GIL is
// released around them) run one after another.
//
// Built with LEXGUIDE_POOL_HOOKS defined (the protocol test in tests/native/ does), the pool
// calls `pool_hook(point)` at each step of the protocol, so that a test can stall a thread at
// any of them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lexguide {

// Most threads a pool holds (the job word counts workers in 12 bits).
constexpr int kMaxThreads = 1024;

#ifdef LEXGUIDE_POOL_HOOKS
// The steps of the protocol at which a hook is called.
enum class PoolPoint {
  WorkerSawJob,    // a worker read a job word it may join, before its compare-and-swap
  WorkerJoined,    // a worker joined, before it claims a task
  WorkerClaimed,   // a worker claimed a task index, before comparing it with the task count
  WorkerLeaving,   // a worker finished its part, before it leaves
  RunClosed,       // run() closed the previous job, before it waits for workers inside it
  RunPublished,    // run() published the job, before it works on it
  RunReturning,    // run() saw every task done, before it returns
};
// Called at every point (from any thread) when set; set it while no job runs.
extern void (*pool_hook)(PoolPoint);
#endif

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs task(i) for i in 0 .. n_tasks-1 on up to n_threads threads (the caller included;
  // n_threads ≤ 0 means all of the pool's threads). Blocks until all are done. The first
  // exception thrown by a task is rethrown here after the others finish.
  void run(int64_t n_tasks, int n_threads, const std::function<void(int64_t)>& task);
  // Grows or shrinks the pool to n_threads threads (the caller counts as one).
  void resize(int n_threads);
  int size();

 private:
  void start_workers(int n_workers);
  void stop_workers();
  void worker_loop(int index, uint64_t seen_id);
  void work();

  std::mutex mutex_;  // serialises run() and resize()
  std::vector<std::thread> workers_;
  // the job's fields, written by run() while no worker is inside a job
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t n_tasks_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int64_t> done_{0};  // tasks finished in the current job
  std::atomic<uint64_t> job_{0};  // id << 24 | invited << 12 | inside (see above)
  std::atomic<bool> stop_{false};
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// The kernels' pool, created on first use with one thread per available core.
ThreadPool& shared_pool();
int default_threads();

}  // namespace lexguide
