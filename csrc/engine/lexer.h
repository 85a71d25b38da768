// A lazily built multi-lexeme byte DFA, shared by every grammar of the process.
//
// Lexemes are *global*: a distinct (regex node, lazy, max_tokens) triple; grammars map their
// lexemes onto them, so "inside a JSON string" is one DFA state for every grammar and the
// per-state vocabulary walks (mask.h) are shared by all grammars and requests of a tokenizer.
// A state is the sorted vector of (global lexeme, derivative) pairs still alive; state 0 is
// DEAD. Transitions are stored per byte class: each state points to a ClassRow, its byte ->
// class map (the 256 labels of the byte partition of its entries, one copy per partition,
// shared by every state with that partition) followed by one cell per class. A state whose
// partition is not known yet points to a shared row whose every byte maps to one MISSING cell;
// its first missing transition computes the partition, gives the state its own row (from a
// slab of the DFA) and fills the byte's class (one derivative for all its bytes). Successors
// whose language is empty become DEAD, so no mask admits a lexeme that can never end. Lazy
// lexemes end at their first match: a lazy lexeme whose derivative is nullable is not carried
// into successors.
//
// Each DFA owns the regex store its lexemes and derivatives live in: the two are one
// generation (the front ends build their regexes in the current one; next_generation() in
// lexparser.h starts a new one from a prefix of its store, and an old one is freed with the
// last grammar using it).
//
// Thread safety: rows are read without a lock. A state's row pointer changes once (from the
// shared unknown row to its own, or to the shared dead row when nothing in it steps; published
// with release); cells are atomics written once, MISSING until then; rows and label maps are
// never moved or freed before the DFA. Everything that builds (states, rows, the regex store)
// takes store_mutex(). State descriptors are immutable once their id is published.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/byte_buckets.h"
#include "engine/flat_map.h"
#include "engine/limits.h"
#include "engine/regex.h"

namespace lexguide {

using StateId = uint32_t;
constexpr StateId DEAD = 0;
constexpr uint32_t MISSING = 0xFFFFFFFFu;

// A state's run (LexerDFA::run_buckets): the byte buckets usable for strings of each length.
// For strings of k bytes the buckets are set[j] for the first j with k <= len[j]; past the last
// point (or at a zero set) none. len kRunForever: any length.
constexpr int kRunPoints = 4;
constexpr uint16_t kRunForever = 0xFFFF;
struct LexerRun {
  uint16_t len[kRunPoints] = {};
  uint32_t set[kRunPoints] = {};
};

// A state's transitions by byte class: label maps a byte to its class, whose cell holds the
// successor (MISSING until computed). The cells follow the struct in memory, one per class.
struct ClassRow {
  const uint8_t* label;
  std::atomic<uint32_t>* cells() { return reinterpret_cast<std::atomic<uint32_t>*>(this + 1); }
  const std::atomic<uint32_t>* cells() const {
    return reinterpret_cast<const std::atomic<uint32_t>*>(this + 1);
  }
  uint32_t at(unsigned b) const { return cells()[label[b]].load(std::memory_order_acquire); }
};

struct LexerState {
  std::vector<std::pair<uint32_t, NodeId>> entries;  // (global lexeme, derivative), sorted
  std::vector<uint32_t> accepting;                   // global lexemes whose derivative is nullable
  bool lazy_accept = false;                          // a lazy lexeme matches here: it ends now
  // the run, computed on first use (written once under store_mutex, then has_run published)
  mutable std::atomic<bool> has_run{false};
  mutable LexerRun run;
  // how many bytes of any plain string the lexemes survive by their structure (Walker's
  // slice test; a property of the regexes, so shared by every vocabulary's walker):
  // kPlainBoundUnknown until computed
  static constexpr uint32_t kPlainBoundUnknown = 0xFFFFFFFEu;
  mutable std::atomic<uint32_t> plain_bound{kPlainBoundUnknown};
};

class LexerDFA {
 public:
  explicit LexerDFA(uint32_t max_states = kMaxLexerStates);
  // a DFA over a given store (a prefix of an older generation's: next_generation())
  LexerDFA(RegexStore rx, uint32_t max_states);
  ~LexerDFA();
  LexerDFA(const LexerDFA&) = delete;
  LexerDFA& operator=(const LexerDFA&) = delete;
  static uint64_t n_alive();  // DFAs (generations) not yet freed

  uint32_t lexeme_id(NodeId rx, bool lazy, int64_t max_tokens);  // registered on first use
  StateId start(std::vector<uint32_t> lexemes);                   // exactly these lexemes begin

  // Successor on one byte (computes that transition's byte class when missing, never the
  // whole row).
  StateId next(StateId s, unsigned b) {
    uint32_t t = row_of(s)->at(b);
    return t != MISSING ? t : next_slow(s, b);
  }
  // The row of s with every class computed (on first use).
  const ClassRow* row(StateId s) {
    if (!has_row_[s].load(std::memory_order_acquire)) compute_row(s);
    return row_of(s);
  }
  const LexerState& state(StateId s) const { return *states_[s]; }
  bool accepts(StateId s) const { return flags_[s] & kAccepts; }
  bool accepts_lazy(StateId s) const { return flags_[s] & kLazyAccept; }
  // Whether s holds a lazy lexeme (its successors hold residuals of its lexemes only, so a
  // state without one never reaches a lazy end).
  bool holds_lazy(StateId s) const { return flags_[s] & kHoldsLazy; }
  // The row of s as it is now (cells MISSING until computed; the shared unknown row until s
  // has its own): for walks that step many times from one state. next_from(s, row, b) is
  // next(s, b) given row == row_of(s); after computing a transition it sets row to row_of(s)
  // again (s may have its own row now), so the caller's copy leaves the unknown row.
  const ClassRow* row_of(StateId s) const { return rows_[s].load(std::memory_order_acquire); }
  StateId next_from(StateId s, const ClassRow*& row, unsigned b) {
    uint32_t t = row->at(b);
    if (t != MISSING) return t;
    t = next_slow(s, b);
    row = row_of(s);
    return t;
  }
  bool can_extend(StateId s);
  // The byte buckets (byte_buckets.h) all of whose bytes lead from s back to s: a token whose
  // bytes all lie in them stays in s. Computes s's row on first use; 0 for DEAD.
  uint32_t loop_buckets(StateId s);
  // The byte buckets usable for strings of `len` bytes from s: every string of at most len
  // bytes that lie in them keeps the DFA alive and ends no lazy lexeme, so a token whose bytes
  // after s all lie in them stays inside the lexeme. The run of s follows one successor per
  // byte: the one most bytes lead to among the buckets whose bytes all lead to it, narrowed at
  // each step to the buckets of the step before (a counted repetition such as [0-9a-f]{12}
  // steps from count to count on the class's buckets; a loop is a run of any length). Runs
  // are cut after kRunSteps bytes or a cycle longer than one state (fewer buckets for long
  // strings, never a wrong one). Computed on first use (the transitions along the run);
  // 0 for DEAD.
  uint32_t run_buckets(StateId s, uint32_t len);
  StateId without_extensions(StateId s, const std::vector<uint32_t>& lexemes);
  uint32_t n_states() const { return n_states_.load(std::memory_order_acquire); }
  uint32_t max_states() const { return max_states_; }
  uint32_t n_lexemes() const { return uint32_t(lexeme_rx_.size()); }
  int64_t budget(uint32_t lexeme) const { return lexeme_budget_[lexeme]; }
  bool lexeme_lazy(uint32_t lexeme) const { return lexeme_lazy_[lexeme]; }
  // This generation's regex store (hold store_mutex() while using it).
  RegexStore& regex() { return rx_; }
  const RegexStore& regex() const { return rx_; }
  // Heap bytes of the states, rows, label maps and tables (regex store excluded); under
  // store_mutex().
  size_t memory_bytes() const;
  // Numbers the generations of the process: 1, 2, ... in order of creation.
  uint64_t serial() const { return serial_; }

 private:
  RegexStore rx_;
  uint64_t serial_;
  uint32_t max_states_;
  size_t entry_bytes_ = 0;  // bytes of the states' entry and accepting vectors
  std::vector<NodeId> lexeme_rx_;
  std::vector<bool> lexeme_lazy_;
  std::vector<int64_t> lexeme_budget_;
  bool any_lazy_ = false;
  std::unordered_map<uint64_t, uint32_t> lexeme_ids_;  // key: rx, lazy, budget (hashed below)
  std::unique_ptr<std::unique_ptr<LexerState>[]> states_;
  // per state: its row (unknown_row_ until the state's partition is known, dead_row_ when no
  // entry steps); rows and label maps live in slabs_, freed with the DFA
  std::unique_ptr<std::atomic<ClassRow*>[]> rows_;
  ClassRow* unknown_row_ = nullptr;  // every byte -> one MISSING cell, never written
  ClassRow* dead_row_ = nullptr;     // every byte -> DEAD
  std::vector<const uint8_t*> labels_;  // per partition id: its label map once a row uses it
  std::vector<std::unique_ptr<char[]>> slabs_;
  char* slab_next_ = nullptr;
  size_t slab_left_ = 0, slab_bytes_ = 0;
  std::unique_ptr<std::atomic<bool>[]> has_row_;
  // per state, written once before the state's id is published: accepting / lazy lexeme ends /
  // a lazy lexeme held
  static constexpr uint8_t kAccepts = 1, kLazyAccept = 2, kHoldsLazy = 4;
  std::unique_ptr<uint8_t[]> flags_;
  static constexpr uint32_t kLoopsUnknown = 0x80000000u;  // above every bucket bit
  std::unique_ptr<std::atomic<uint32_t>[]> loops_;        // loop_buckets, once known
  std::atomic<uint32_t> n_states_{0};
  struct EntriesHash {
    size_t operator()(const std::vector<std::pair<uint32_t, NodeId>>& e) const {
      SeqHash h(e.size());
      for (auto& [lex, x] : e) h.add(uint64_t(lex) << 32 | x);
      return size_t(h.value());
    }
  };
  // The states by their entries: open addressing over one array of (upper hash bits << 32 |
  // state + 1), 0 empty, at most half full; a probe compares the hash bits, then the state's
  // own entries (a node-based map kept a second copy of every state's entries, and a lookup,
  // one per new transition, missed the cache on its bucket, node and key)
  std::vector<uint64_t> id_slots_;
  size_t n_ids_ = 0;
  StateId find_state(const std::vector<std::pair<uint32_t, NodeId>>& entries, uint64_t h) const;  // MISSING: none
  void index_state(StateId s, uint64_t h);
  std::vector<std::pair<uint32_t, NodeId>> scratch_;  // successor()'s buffer (under store_mutex)
  KeyIndex<uint32_t, StateId> start_cache_;  // by the sorted lexemes
  // per state, under store_mutex(), 0 until known: whether it can still match (kLive or
  // kDeadEnd)
  static constexpr uint8_t kLive = 1, kDeadEnd = 2;
  std::unique_ptr<uint8_t[]> live_;

  void* slab_alloc(size_t bytes);  // 8-aligned, under store_mutex()
  ClassRow* new_row(const uint8_t* label, uint32_t n_classes, uint32_t fill);
  // s's own row (made for its partition and published when s has the unknown row); stepping
  // is not empty
  ClassRow* own_row(StateId s, const std::vector<std::pair<uint32_t, NodeId>>& stepping);
  StateId intern(std::vector<std::pair<uint32_t, NodeId>> entries);
  bool is_live(StateId t);
  // the entries of s that take more bytes (lazy lexemes that matched end): s's own, or buf
  const std::vector<std::pair<uint32_t, NodeId>>& stepping_entries(
      StateId s, std::vector<std::pair<uint32_t, NodeId>>& buf) const;
  StateId successor(const std::vector<std::pair<uint32_t, NodeId>>& entries, unsigned b);
  StateId next_slow(StateId s, unsigned b);
  uint32_t partition_of(const std::vector<std::pair<uint32_t, NodeId>>& entries);  // non-empty
  void compute_row(StateId s);
  void compute_run(StateId s);
  std::pair<StateId, uint32_t> run_step(StateId s, uint32_t among);
};

}  // namespace lexguide
