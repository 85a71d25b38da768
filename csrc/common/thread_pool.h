// A persistent thread pool (the runtime kernels' and the engine's each hold one): workers wait for a job, claim task indices from an
// atomic counter, and the calling thread works too. One job runs at a time.
//
// `shared_pool()` is the runtime kernels' pool (the engine has its own: engine/split.h).
// Guarding: `run` and `resize` take `mutex_`, so jobs from several Python threads (the GIL is
// released around them) run one after another. A job's fields are written only while no
// worker is inside a job (`active_` == 0, after the job word was closed to newcomers), then
// published by a release store of the job word; completion is counted in tasks (`done_`), so
// the caller never waits for a worker that was descheduled before it claimed anything.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lexguide {

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
  void worker_loop(int index, uint64_t seen);
  void work();

  std::mutex mutex_;  // serialises run() and resize()
  std::vector<std::thread> workers_;
  // job state, written by run() before bumping generation_
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t n_tasks_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int64_t> done_{0};  // tasks finished in the current job
  std::atomic<int> active_{0};    // workers inside a job (between entering and leaving)
  // job counter << 16 | number of workers that join the job (index < that number): one
  // atomic word, so a worker reads the job and its participation together
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// The kernels' pool, created on first use with one thread per available core.
ThreadPool& shared_pool();
int default_threads();
// Most threads a pool holds (the job word keeps the worker count in 16 bits).
constexpr int kMaxThreads = 1024;

}  // namespace lexguide
