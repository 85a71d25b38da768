// Root walks shared among threads: a walk of the whole prefix tree splits into pieces that
// the threads of one fill_masks call run side by side.
//
// Why: a batch's masks are spread over threads one mask each, and a round's slowest mask is
// a cold root walk from a new lexer state, often half of the round's work; without splitting
// it the other threads sit idle at the end of every round.
//
// A piece is a run of consecutive sibling subtrees (or one node on its own) below the node a
// byte path leads to from the root. Its walk starts from the lexer state after that path;
// a path that dies or ends a lazy lexeme makes the piece empty, because the serial walk skips
// that subtree too, and the boundary it records there belongs to the piece holding the node
// itself. Concatenated in order, the pieces' walks are the serial walk: the same inside ids
// in the same order and the same boundaries (merge_walks).
//
// Crew: the threads of one call. A member computing a large root walk shares its pieces
// (share()); members between masks, or done with theirs, run shared pieces (help(),
// help_until_done()). A piece never waits for anything but the lexer's store lock, and a
// member waiting for its pieces holds no lock a piece takes, so nothing can deadlock. The
// first exception a piece throws is rethrown by share() once every piece has finished.
// Waits poll (then yield) rather than sleep: a call lasts milliseconds, and waking a
// sleeping thread costs tens of microseconds, as much as a piece.
//
// engine_pool(): the engine's persistent threads (one per core unless set_engine_threads()
// chose a size: the core reads no environment), which fill_masks' crews run on; apart from the kernels' pool, so that masks and a forward
// pass never wait for each other. Whoever runs a job on it holds engine_pool_busy(): a
// fill_masks call with several new masks waits for it; one with a single new mask takes it
// for that mask's root walk only if it is free (the walk runs holding its grammar's lock,
// which a running job may need), and otherwise walks alone.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/trie.h"
#include "common/thread_pool.h"

namespace lexguide {

ThreadPool& engine_pool();
std::mutex& engine_pool_busy();
// Resizes engine_pool() to n threads (clamped to 1..kMaxThreads; the caller counts as one),
// waiting for a job running on it; before its first use, sets the size it starts with.
void set_engine_threads(int n);
int engine_threads();

struct TriePiece {
  uint32_t lo, hi;            // nodes [lo, hi), all at depth >= depth(lo)
  std::vector<uint8_t> path;  // the bytes from the root to the parent of lo
};

// Pieces covering nodes [1, n_nodes) in node order, each a run of sibling subtrees of at most
// `target` nodes in all, or a single node whose subtree is larger (its children are split
// in turn). Iterative (no recursion over the tree's depth).
std::vector<TriePiece> split_trie(const TokenTrie& trie, uint32_t target);

class Crew {
 public:
  // n_threads members; n_tasks: the call's own tasks (masks) that task_done() counts down;
  // allowed: the threads the call may use (a one-member crew of a call that allowed more,
  // i.e. one new mask in the batch, runs a large root walk's pieces on the engine's pool)
  Crew(unsigned n_threads, size_t n_tasks, unsigned allowed);
  unsigned size() const { return n_threads_; }
  unsigned allowed() const { return allowed_; }
  // Runs fn(i) for every i in [0, n), on this thread and on idle members; returns when all
  // have run, rethrowing the first exception one threw.
  void share(size_t n, const std::function<void(size_t)>& fn);
  // Runs pieces others have shared until none is waiting to be claimed (never blocks).
  void help();
  // One of the call's tasks has finished (wakes the members waiting for the end).
  void task_done();
  // Runs shared pieces until every task of the call has finished.
  void help_until_done();

  // The crew this thread works for (nullptr outside fill_masks): Walker::walk splits root
  // walks only inside one.
  static Crew* current();
  class Member {  // makes `crew` this thread's current crew for the scope
   public:
    explicit Member(Crew* crew);
    ~Member();
    Member(const Member&) = delete;
    Member& operator=(const Member&) = delete;

   private:
    Crew* previous_;
  };

 private:
  struct Job {
    const std::function<void(size_t)>* fn;
    size_t n;
    std::atomic<size_t> next{0};
    std::atomic<size_t> finished{0};
    std::exception_ptr error;  // under mu_
  };
  // Claims a piece of a shared job: the job, or nullptr, and the piece's index.
  Job* claim(size_t& index);
  void run_piece(Job& job, size_t index);

  unsigned n_threads_;
  unsigned allowed_;
  std::mutex mu_;            // guards jobs_ and the jobs' errors
  std::vector<Job*> jobs_;   // shared jobs with pieces left to claim
  std::atomic<int> n_open_{0};  // jobs_.size(), read without the lock
  std::atomic<size_t> pending_;  // the call's tasks not yet finished
};

}  // namespace lexguide
