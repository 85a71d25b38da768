// The thread pool (csrc/common/thread_pool.cc) driven directly, built by
// tests/test_thread_pool_native.py with and without LEXGUIDE_POOL_HOOKS, and under TSan.
//
//   thread_pool_test MODE [ROUNDS]
//     stress      jobs of changing sizes at 2..4 threads: every task exactly once, in its own
//                 job, never after run() returned
//     callers     several threads submit jobs to one pool while another resizes it
//     errors      a task's exception reaches run(), the pool keeps working
//     delays      (hooks) stress with random stalls at every step of the protocol
//     late-join   (hooks) a worker stalled before joining while the job ends and the next is
//                 published must retry and join the new job, not the old one
//     late-leave  (hooks) a worker stalled inside a finished job: run() returns without it,
//                 and the next run() publishes only after it left
// Prints "ok MODE" and exits 0, or names the first violation and exits 1.
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/thread_pool.h"

using lexguide::ThreadPool;

namespace {

std::atomic<long> g_failures{0};

void fail(const std::string& what) {
  if (g_failures.fetch_add(1) < 5) std::fprintf(stderr, "violation: %s\n", what.c_str());
}

// One job: every task records its index once, checks that it belongs to the job being run
// and that run() has not returned yet; busy for `task_us` microseconds.
void checked_job(ThreadPool& pool, long job, int n_tasks, int n_threads, int task_us = 0) {
  std::unique_ptr<std::atomic<int>[]> hits(new std::atomic<int>[size_t(n_tasks)]);
  for (int i = 0; i < n_tasks; ++i) hits[size_t(i)].store(0);
  std::atomic<long> current{job};
  std::atomic<bool> returned{false};
  pool.run(n_tasks, n_threads, [&, job](int64_t i) {
    if (i < 0 || i >= n_tasks) return fail("task index out of range");
    if (returned.load()) fail("a task ran after run() returned");
    if (current.load() != job) fail("a task ran in another job");
    hits[size_t(i)].fetch_add(1);
    if (task_us) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(task_us);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
  });
  returned.store(true);
  for (int i = 0; i < n_tasks; ++i) {
    if (hits[size_t(i)].load() != 1) {
      fail("job " + std::to_string(job) + " task " + std::to_string(i) + " ran " +
           std::to_string(hits[size_t(i)].load()) + " times");
    }
  }
  current.store(-1);
}

int sizes(long j) {  // growing and shrinking jobs: a job with more tasks than the last
  static const int s[] = {1, 2, 3, 7, 2, 9, 4, 1, 16, 3, 5, 64, 2};
  return s[j % long(sizeof(s) / sizeof(s[0]))];
}

void stress(long rounds) {
  for (int threads = 2; threads <= 4; ++threads) {
    ThreadPool pool(threads);
    for (long j = 0; j < rounds; ++j) checked_job(pool, j, sizes(j), j % 5 == 0 ? 0 : threads);
  }
}

void callers(long rounds) {
  ThreadPool pool(3);
  std::atomic<bool> stop{false};
  std::thread resizer([&] {
    for (int k = 0; !stop.load(); ++k) {
      pool.resize(1 + k % 4);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::vector<std::thread> submitters;
  for (int c = 0; c < 3; ++c) {
    submitters.emplace_back([&, c] {
      for (long j = 0; j < rounds; ++j) checked_job(pool, j * 3 + c, sizes(j + c), 0);
    });
  }
  for (std::thread& t : submitters) t.join();
  stop.store(true);
  resizer.join();
}

void errors(long rounds) {
  ThreadPool pool(3);
  for (long j = 0; j < rounds; ++j) {
    bool caught = false;
    try {
      pool.run(8, 0, [](int64_t i) {
        if (i == 3) throw std::runtime_error("task 3");
      });
    } catch (const std::runtime_error& e) {
      caught = std::strcmp(e.what(), "task 3") == 0;
    }
    if (!caught) fail("the task's exception did not reach run()");
    checked_job(pool, j, sizes(j), 0);
  }
}

#ifdef LEXGUIDE_POOL_HOOKS
using lexguide::PoolPoint;

// random stalls at every point: nothing, a short spin, a yield, or a sleep
void random_delay(PoolPoint) {
  thread_local uint64_t s = 0x9E3779B97F4A7C15ull ^ uint64_t(gettid());
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  const unsigned r = unsigned(s % 100);
  if (r < 60) return;
  if (r < 85) {
    for (unsigned k = unsigned(s >> 20) % 300; k; --k) asm volatile("" ::: "memory");
  } else if (r < 97) {
    sched_yield();
  } else {
    usleep(unsigned(s >> 40) % 50);
  }
}

void delays(long rounds) {
  lexguide::pool_hook = random_delay;
  stress(rounds);
  callers(rounds / 4);
  lexguide::pool_hook = nullptr;
}

// A scripted scenario: the hook stalls one worker at `stall_at` in the first job it sees
// after `armed`, until the caller reaches `release_at` (RunPublished: after closing a job
// since the stall; RunClosed: the next close).
struct Script {
  PoolPoint stall_at, release_at;
  std::atomic<bool> armed{false}, stalled{false}, closed_after_stall{false}, released{false};
  std::atomic<long> job{0};     // jobs published so far (counted at the caller's RunPublished)
  std::atomic<long> closes{0};  // jobs closed so far (counted at the caller's RunClosed)
  long stall_job = -1;       // `job` when the worker stalled
  std::atomic<long> release_job{-1};  // `job` when the worker was released
  std::mutex log_mutex;
  std::vector<std::pair<PoolPoint, long>> worker_log;  // the stalled worker's later points
  std::thread::id worker;
};
Script* g_script = nullptr;

void scripted(PoolPoint p) {
  Script& s = *g_script;
  if (p == PoolPoint::RunPublished) s.job.fetch_add(1);
  if (p == PoolPoint::RunClosed) s.closes.fetch_add(1);
  if (p == PoolPoint::RunClosed || p == PoolPoint::RunPublished || p == PoolPoint::RunReturning) {
    if (s.stalled.load() && !s.released.load()) {
      if (p == PoolPoint::RunClosed) s.closed_after_stall.store(true);
      if (p == s.release_at &&
          (p != PoolPoint::RunPublished || s.closed_after_stall.load())) {
        if (p == PoolPoint::RunClosed) usleep(2000);  // the caller waits a while in run()
        s.release_job = s.job.load();
        s.released.store(true);
      }
    }
    return;
  }
  if (s.stalled.load() && std::this_thread::get_id() == s.worker) {
    std::lock_guard<std::mutex> lock(s.log_mutex);
    s.worker_log.emplace_back(p, s.job.load());
  }
  // the closes as of the worker's last look at a job: a later one is the close of its job
  thread_local long closes_at_look = 0;
  if (p == PoolPoint::WorkerSawJob) closes_at_look = s.closes.load();
  bool expected = true;
  if (p == s.stall_at && s.armed.compare_exchange_strong(expected, false)) {
    s.worker = std::this_thread::get_id();
    s.stall_job = s.job.load();
    s.stalled.store(true);
    // A worker stalled inside a job is released by the close of that job: in the caller's
    // RunClosed hook, or here when that hook ran before `stalled` was set (the caller then
    // waits for this worker). Both sides store, then load (sequentially consistent), so one
    // of them sees the other.
    for (int k = 0; k < 50000 && !s.released.load(); ++k) {
      if (s.release_at == PoolPoint::RunClosed && s.closes.load() != closes_at_look) {
        s.release_job = s.job.load();
        s.released.store(true);
        break;
      }
      usleep(100);
    }
    if (!s.released.load()) fail("the stalled worker was never released");
  }
}

// Runs 4-task jobs of 20 µs a task (long enough for the worker to take part) on a 2-thread
// pool under `s` until `done(s)` or 20,000 jobs; the hook stays installed until the pool is
// gone.
template <class Done>
void run_script(Script& s, Done done) {
  g_script = &s;
  lexguide::pool_hook = scripted;
  {
    ThreadPool pool(2);
    s.armed.store(true);
    for (long j = 0; j < 20000 && !done(s); ++j) checked_job(pool, j, 4, 2, 20);
  }
  lexguide::pool_hook = nullptr;
}

bool logged(Script& s, PoolPoint point) {
  std::lock_guard<std::mutex> lock(s.log_mutex);
  for (const auto& e : s.worker_log) {
    if (e.first == point) return true;
  }
  return false;
}

void late_join(long rounds) {
  for (long r = 0; r < rounds; ++r) {
    Script s;
    s.stall_at = PoolPoint::WorkerSawJob;
    s.release_at = PoolPoint::RunPublished;
    // the caller finishes the stalled job alone, then publishes the next ones
    run_script(s, [](Script& s) { return logged(s, PoolPoint::WorkerLeaving); });
    if (!s.released.load()) return fail("late-join: the scenario never ran");
    // after its release the worker must look again (its compare-and-swap saw a changed word)
    // before it joins, and join a job published after the one it stalled in
    std::lock_guard<std::mutex> lock(s.log_mutex);
    bool looked = false, joined = false;
    for (const auto& [p, job] : s.worker_log) {
      if (p == PoolPoint::WorkerSawJob) looked = true;
      if (p == PoolPoint::WorkerJoined) {
        joined = true;
        if (!looked) fail("late-join: the worker joined without a fresh look at the job");
        if (job <= s.stall_job) fail("late-join: the worker joined the job it stalled in");
        break;
      }
    }
    if (!joined) fail("late-join: the worker never joined a later job");
  }
}

void late_leave(long rounds) {
  for (long r = 0; r < rounds; ++r) {
    Script s;
    s.stall_at = PoolPoint::WorkerJoined;
    s.release_at = PoolPoint::RunClosed;
    // run() returns although a worker is inside its job (completion is counted in tasks);
    // the next run() closes the job, releases the worker (in the hook) and waits for it
    run_script(s, [](Script& s) { return logged(s, PoolPoint::WorkerLeaving); });
    if (!s.released.load()) return fail("late-leave: the scenario never ran");
    // the worker left its job before the next one was published, and claimed no task of a
    // later job on the way
    std::lock_guard<std::mutex> lock(s.log_mutex);
    bool left = false;
    for (const auto& [p, job] : s.worker_log) {
      if (p == PoolPoint::WorkerLeaving) {
        left = true;
        if (job != s.release_job.load()) fail("late-leave: a job was published while a worker was inside");
        break;
      }
      if (p == PoolPoint::WorkerClaimed && job != s.release_job.load()) {
        fail("late-leave: the stalled worker claimed a task of the next job");
      }
    }
    if (!left) fail("late-leave: the worker never left");
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: thread_pool_test MODE [ROUNDS]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const long rounds = argc > 2 ? std::atol(argv[2]) : 1000;
  if (mode == "stress") {
    stress(rounds);
  } else if (mode == "callers") {
    callers(rounds);
  } else if (mode == "errors") {
    errors(rounds);
#ifdef LEXGUIDE_POOL_HOOKS
  } else if (mode == "delays") {
    delays(rounds);
  } else if (mode == "late-join") {
    late_join(rounds);
  } else if (mode == "late-leave") {
    late_leave(rounds);
#endif
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  if (g_failures.load()) {
    std::fprintf(stderr, "%ld violations in %s\n", g_failures.load(), mode.c_str());
    return 1;
  }
  std::printf("ok %s\n", mode.c_str());
  return 0;
}
