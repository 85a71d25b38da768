#include "common/thread_pool.h"

#include <sched.h>

#include <exception>

namespace lexguide {

namespace {
// Spin this many polls for a new job before sleeping on the condition variable: decode runs
// ~150 small matvecs per token, and a sleeping worker takes tens of microseconds to wake.
constexpr int kSpinPolls = 5000;
// The caller polls this often for the last tasks before yielding its core to them.
constexpr int kWaitPolls = 2000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

int default_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned n = std::thread::hardware_concurrency();
  return n ? int(n) : 1;
}

ThreadPool::ThreadPool(int n_threads) { start_workers(n_threads > 1 ? n_threads - 1 : 0); }

ThreadPool::~ThreadPool() { stop_workers(); }

int ThreadPool::size() {
  std::lock_guard<std::mutex> lock(mutex_);
  return int(workers_.size()) + 1;
}

void ThreadPool::resize(int n_threads) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int want = n_threads > 1 ? (n_threads < kMaxThreads ? n_threads : kMaxThreads) - 1 : 0;
  if (want == int(workers_.size())) return;
  stop_workers();
  start_workers(want);
}

void ThreadPool::start_workers(int n_workers) {
  stop_.store(false);
  // the job word as of now, read here rather than by the new thread: a job submitted before
  // the thread first runs must still be seen as new by it
  const uint64_t seen = generation_.load(std::memory_order_acquire);
  for (int i = 0; i < n_workers; ++i) {
    workers_.emplace_back([this, i, seen] { worker_loop(i, seen); });
  }
}

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::work() {
  for (;;) {
    const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n_tasks_) break;
    try {
      (*task_)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::worker_loop(int index, uint64_t seen) {
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinPolls && !stop_.load(); ++spin) {
      cpu_relax();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(wake_mutex_);
      wake_.wait(lock, [&] {
        return stop_.load() || generation_.load(std::memory_order_acquire) != seen;
      });
      gen = generation_.load(std::memory_order_acquire);
    }
    if (stop_.load()) return;
    seen = gen;
    if (index >= int(gen & 0xFFFF)) continue;  // not asked to join (or the job is closed)
    active_.fetch_add(1, std::memory_order_acq_rel);
    if (generation_.load(std::memory_order_acquire) == gen) work();  // still this job's fields
    active_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(int64_t n_tasks, int n_threads, const std::function<void(int64_t)>& task) {
  if (n_tasks <= 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const int pool = int(workers_.size()) + 1;
  int use = n_threads <= 0 || n_threads > pool ? pool : n_threads;
  if (int64_t(use) > n_tasks) use = int(n_tasks);
  error_ = nullptr;
  if (use == 1) {
    for (int64_t i = 0; i < n_tasks; ++i) task(i);
    return;
  }
  // close the job word to newcomers, wait for stragglers of the last job, then write the job
  const uint64_t job = (generation_.load(std::memory_order_relaxed) >> 16) + 1;
  generation_.store(job << 16, std::memory_order_release);
  while (active_.load(std::memory_order_acquire) != 0) sched_yield();
  task_ = &task;
  n_tasks_ = n_tasks;
  next_.store(0, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> wl(wake_mutex_);
    generation_.store(job << 16 | uint64_t(use - 1), std::memory_order_release);
  }
  wake_.notify_all();
  work();
  for (int poll = 0; done_.load(std::memory_order_acquire) != n_tasks; ++poll) {
    if (poll < kWaitPolls) {
      cpu_relax();
    } else {
      sched_yield();
    }
  }
  std::lock_guard<std::mutex> el(error_mutex_);
  if (error_) std::rethrow_exception(error_);
}

ThreadPool& shared_pool() {
  static ThreadPool pool(default_threads());
  return pool;
}

}  // namespace lexguide
