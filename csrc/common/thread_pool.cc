#include "common/thread_pool.h"

#include <sched.h>

#include <algorithm>

namespace lexguide {

#ifdef LEXGUIDE_POOL_HOOKS
void (*pool_hook)(PoolPoint) = nullptr;
#define POOL_HOOK(point) \
  do {                                                   \
    if (pool_hook) pool_hook(PoolPoint::point);          \
  } while (0)
#else
#define POOL_HOOK(point) \
  do {                   \
  } while (0)
#endif

namespace {
// Spin this many polls for a new job before sleeping on the condition variable: decode runs
// ~150 small matvecs per token, and a sleeping worker takes tens of microseconds to wake.
constexpr int kSpinPolls = 5000;
// The caller polls this often for the last tasks before yielding its core to them.
constexpr int kWaitPolls = 2000;

// The job word's fields (thread_pool.h).
constexpr int kIdShift = 24;
constexpr int kInvitedShift = 12;
constexpr uint64_t kCountMask = 0xFFF;
inline uint64_t job_id(uint64_t w) { return w >> kIdShift; }
inline int invited(uint64_t w) { return int((w >> kInvitedShift) & kCountMask); }
inline int inside(uint64_t w) { return int(w & kCountMask); }
inline uint64_t job_word(uint64_t id, int n_invited) {
  return id << kIdShift | uint64_t(n_invited) << kInvitedShift;
}
static_assert(kMaxThreads - 1 <= int(kCountMask), "the job word counts workers in 12 bits");

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

ThreadPool::ThreadPool(int n_threads) {
  start_workers(n_threads > 1 ? std::min(n_threads, kMaxThreads) - 1 : 0);
}

ThreadPool::~ThreadPool() { stop_workers(); }

int ThreadPool::size() {
  std::lock_guard<std::mutex> lock(mutex_);
  return int(workers_.size()) + 1;
}

void ThreadPool::resize(int n_threads) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int want = n_threads > 1 ? std::min(n_threads, kMaxThreads) - 1 : 0;
  if (want == int(workers_.size())) return;
  stop_workers();
  start_workers(want);
}

void ThreadPool::start_workers(int n_workers) {
  stop_.store(false);
  // the job id as of now, read here rather than by the new thread: a job published before the
  // thread first runs must still be seen as new by it, and the current one (whose workers were
  // chosen among the old threads) as old
  const uint64_t seen_id = job_id(job_.load(std::memory_order_acquire));
  for (int i = 0; i < n_workers; ++i) {
    workers_.emplace_back([this, i, seen_id] { worker_loop(i, seen_id); });
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
    POOL_HOOK(WorkerClaimed);
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

void ThreadPool::worker_loop(int index, uint64_t seen_id) {
  for (;;) {
    uint64_t w = job_.load(std::memory_order_acquire);
    for (int spin = 0; job_id(w) == seen_id && spin < kSpinPolls && !stop_.load(); ++spin) {
      cpu_relax();
      w = job_.load(std::memory_order_acquire);
    }
    if (job_id(w) == seen_id) {
      std::unique_lock<std::mutex> lock(wake_mutex_);
      wake_.wait(lock, [&] {
        return stop_.load() || job_id(job_.load(std::memory_order_acquire)) != seen_id;
      });
      w = job_.load(std::memory_order_acquire);
    }
    if (stop_.load()) return;
    // join a job this worker is invited to, unless the word changes first: a failed exchange
    // reloads w, which is then a closed job (not joined) or a newer one (tried in turn)
    bool joined = false;
    while (index < invited(w)) {
      POOL_HOOK(WorkerSawJob);
      if (job_.compare_exchange_weak(w, w + 1, std::memory_order_acquire,
                                     std::memory_order_acquire)) {
        joined = true;
        break;
      }
    }
    seen_id = job_id(w);
    if (!joined) continue;
    POOL_HOOK(WorkerJoined);
    work();
    POOL_HOOK(WorkerLeaving);
    job_.fetch_sub(1, std::memory_order_release);
  }
}

void ThreadPool::run(int64_t n_tasks, int n_threads, const std::function<void(int64_t)>& task) {
  if (n_tasks <= 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const int pool = int(workers_.size()) + 1;
  int use = n_threads <= 0 || n_threads > pool ? pool : n_threads;
  if (int64_t(use) > n_tasks) use = int(n_tasks);
  if (use == 1) {
    for (int64_t i = 0; i < n_tasks; ++i) task(i);
    return;
  }
  // close the last job to newcomers, wait for the workers still inside it, write this one
  uint64_t w = job_.fetch_and(~(kCountMask << kInvitedShift), std::memory_order_acquire);
  POOL_HOOK(RunClosed);
  while (inside(w) != 0) {
    sched_yield();
    w = job_.load(std::memory_order_acquire);
  }
  task_ = &task;
  n_tasks_ = n_tasks;
  error_ = nullptr;
  next_.store(0, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> wl(wake_mutex_);
    job_.store(job_word(job_id(w) + 1, use - 1), std::memory_order_release);
  }
  wake_.notify_all();
  POOL_HOOK(RunPublished);
  work();
  for (int poll = 0; done_.load(std::memory_order_acquire) != n_tasks; ++poll) {
    if (poll < kWaitPolls) {
      cpu_relax();
    } else {
      sched_yield();
    }
  }
  POOL_HOOK(RunReturning);
  std::lock_guard<std::mutex> el(error_mutex_);
  if (error_) std::rethrow_exception(error_);
}

ThreadPool& shared_pool() {
  static ThreadPool pool(default_threads());
  return pool;
}

}  // namespace lexguide
