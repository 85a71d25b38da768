// Root walks shared among threads; see split.h.
#include "engine/split.h"

#include <algorithm>
#include <thread>

namespace lexguide {

std::vector<TriePiece> split_trie(const TokenTrie& trie, uint32_t target) {
  std::vector<TriePiece> pieces;
  target = std::max<uint32_t>(target, 1);
  struct Frame {
    uint32_t p, end;
    std::vector<uint8_t> path;
  };
  std::vector<Frame> stack;
  stack.push_back({1, trie.n_nodes(), {}});
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.p >= f.end) {
      stack.pop_back();
      continue;
    }
    uint32_t p = f.p;
    if (trie.size(p) > target) {  // the node alone, then its children split in turn
      pieces.push_back({p, p + 1, f.path});
      f.p = p + trie.size(p);
      if (trie.size(p) > 1) {
        std::vector<uint8_t> path = f.path;  // f may move when the stack grows
        path.push_back(trie.byte(p));
        stack.push_back({p + 1, p + trie.size(p), std::move(path)});
      }
      continue;
    }
    uint32_t q = p, nodes = 0;  // siblings while they fit
    while (q < f.end && trie.size(q) <= target - nodes) {
      nodes += trie.size(q);
      q += trie.size(q);
    }
    pieces.push_back({p, q, f.path});
    f.p = q;
  }
  return pieces;
}

namespace {
thread_local Crew* t_current = nullptr;

// polls of a wait before each yield of the core (a piece takes ~10-100 microseconds)
constexpr int kPollsPerYield = 256;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

inline void backoff(int& polls) {
  if (++polls % kPollsPerYield == 0) {
    std::this_thread::yield();
  } else {
    cpu_relax();
  }
}
}  // namespace

namespace {
std::atomic<int> g_engine_threads{0};  // set_engine_threads' size; 0: default_threads()
}  // namespace

ThreadPool& engine_pool() {
  static ThreadPool pool([] {
    int n = g_engine_threads.load();
    return n >= 1 ? n : default_threads();
  }());
  return pool;
}

std::mutex& engine_pool_busy() {
  static std::mutex mu;
  return mu;
}

void set_engine_threads(int n) {
  n = std::clamp(n, 1, kMaxThreads);
  std::lock_guard<std::mutex> busy(engine_pool_busy());  // no job runs on it meanwhile
  g_engine_threads.store(n);
  engine_pool().resize(n);
}

int engine_threads() { return engine_pool().size(); }

Crew::Crew(unsigned n_threads, size_t n_tasks, unsigned allowed)
    : n_threads_(std::max(1u, n_threads)), allowed_(std::max(1u, allowed)), pending_(n_tasks) {}

Crew* Crew::current() { return t_current; }

Crew::Member::Member(Crew* crew) : previous_(t_current) { t_current = crew; }

Crew::Member::~Member() { t_current = previous_; }

Crew::Job* Crew::claim(size_t& index) {
  if (n_open_.load(std::memory_order_acquire) == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  for (Job* job : jobs_) {
    size_t i = job->next.fetch_add(1, std::memory_order_relaxed);
    if (i < job->n) {
      index = i;
      return job;
    }
  }
  return nullptr;
}

void Crew::run_piece(Job& job, size_t index) {
  try {
    (*job.fn)(index);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!job.error) job.error = std::current_exception();
  }
  job.finished.fetch_add(1, std::memory_order_acq_rel);
}

void Crew::share(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  Job job;
  job.fn = &fn;
  job.n = n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(&job);
    n_open_.fetch_add(1, std::memory_order_release);
  }
  for (size_t i; (i = job.next.fetch_add(1, std::memory_order_relaxed)) < n;) run_piece(job, i);
  {
    // no piece is left to claim: close the job (a member holding a claimed piece keeps
    // `job` alive by not having counted it finished yet)
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.erase(std::find(jobs_.begin(), jobs_.end(), &job));
    n_open_.fetch_sub(1, std::memory_order_release);
  }
  for (int polls = 0; job.finished.load(std::memory_order_acquire) != n;) backoff(polls);
  if (job.error) std::rethrow_exception(job.error);
}

void Crew::help() {
  size_t i;
  while (Job* job = claim(i)) run_piece(*job, i);
}

void Crew::task_done() { pending_.fetch_sub(1, std::memory_order_acq_rel); }

void Crew::help_until_done() {
  for (int polls = 0; pending_.load(std::memory_order_acquire) != 0;) {
    size_t i;
    if (Job* job = claim(i)) {
      run_piece(*job, i);
      polls = 0;
    } else {
      backoff(polls);
    }
  }
}

}  // namespace lexguide
