// The per-generation matcher: one sequence's walk through a grammar, token by token.
//
// A Matcher keeps the history of parse states (one per consumed token, the initial state
// first), the consumed tokens, per history entry the number of tokens that hold bytes of the
// lexeme being read (for token budgets), and whether EOS was consumed. Rolling back pops
// entries; cloning copies the three vectors. Masks come from the grammar's MaskEngine (mask.h),
// narrowed here where the matcher knows more than the parse state:
//
//  * Token budgets (`max_tokens=N` on a lexeme): a token counts for the lexeme being read when
//    every one of its bytes extended it (else it starts the count at 1). Once a lexeme's count
//    reaches its budget, the state's lexer state drops that lexeme's extensions
//    (LexerDFA::without_extensions), so the next token must end it at its first byte; the
//    resulting state is an ordinary parse state and its mask is the memoised one. When one
//    token of a budget is left, the tokens that would stay inside the lexeme and leave no
//    lexeme able to end are removed (the "last-token mask", memoised per (state, count) in
//    MatcherTables). A token is consumed only if that mask allows it.
//  * `remaining` (tokens the caller can still generate): the budget-aware mask of
//    MaskEngine::budget_mask, when the grammar has no token budgets.
//  * After EOS: the empty mask.
//
// A rejected token leaves the matcher unchanged (TokenRejection). Not thread-safe per
// instance; matchers sharing one MatcherTables may run on different threads.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/limits.h"
#include "engine/mask.h"

namespace lexguide {

// A token the grammar does not take here; the matcher is unchanged. `reason` is empty for the
// plain case (the binding then gives the default message).
struct TokenRejection : std::runtime_error {
  int64_t token;
  TokenRejection(int64_t t, const std::string& reason) : std::runtime_error(reason), token(t) {}
};

// A request the matcher's state cannot satisfy (rolling back more than was consumed).
struct MatcherStateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What every matcher of one grammar on one tokenizer shares: the mask engine, the grammar's
// token budgets and the last-token masks of budgeted lexemes. Thread-safe (the memo is
// guarded by its own mutex; masks are immutable and shared by pointer).
class MatcherTables {
 public:
  explicit MatcherTables(std::shared_ptr<MaskEngine> engine);
  MaskEngine& engine() const { return *engine_; }
  const Vocab& vocab() const { return engine_->walker().vocab(); }
  bool has_budgets() const { return !budgets_.empty(); }
  bool has_token_lexemes() const { return has_token_lexemes_; }
  // The budget of a global lexeme of the grammar, -1 when it has none.
  int64_t budget(uint32_t global_lexeme) const;
  bool is_eos(uint32_t token) const;
  // The last-token mask of (st, count) when memoised, else nullptr; memoise one.
  std::shared_ptr<const std::vector<uint32_t>> last_token_mask(ParseState st, uint32_t count) const;
  void remember(ParseState st, uint32_t count, std::shared_ptr<const std::vector<uint32_t>> mask) const;
  // The all-zero mask (after EOS), shared.
  const std::shared_ptr<const std::vector<uint32_t>>& empty_mask() const { return empty_; }

 private:
  std::shared_ptr<MaskEngine> engine_;
  std::unordered_map<uint32_t, int64_t> budgets_;  // global lexeme -> max_tokens
  bool has_token_lexemes_ = false;
  std::shared_ptr<const std::vector<uint32_t>> empty_;
  struct Key {
    uint64_t state, count;
    bool operator==(const Key& o) const { return state == o.state && count == o.count; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      uint64_t h = (k.state ^ (k.count * 0x9E3779B97F4A7C15ull)) * 0xFF51AFD7ED558CCDull;
      return size_t(h ^ (h >> 31));
    }
  };
  // emptied when it passes as many masks as MaskEngine's memo keeps (kMaskCacheBytes)
  mutable std::mutex mu_;
  mutable std::unordered_map<Key, std::shared_ptr<const std::vector<uint32_t>>, KeyHash> last_token_;
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const MatcherTables> tables);
  Matcher(const Matcher&) = default;  // clone: independent history, shared tables

  // -- state --
  ParseState state() const { return history_.back(); }
  const std::vector<ParseState>& history() const { return history_; }
  const std::vector<uint32_t>& tokens() const { return tokens_; }  // EOS excluded
  // Per consumed token, the special-token lexemes it was read as (empty: its bytes were read).
  std::vector<std::vector<int32_t>> token_lexeme_scans() const;
  size_t n_consumed() const { return tokens_.size() + (eos_ ? 1 : 0); }
  bool eos_consumed() const { return eos_; }
  bool is_accepting() const;  // EOS consumed or the grammar is complete here
  bool is_stopped() const;    // EOS consumed or nothing but EOS can follow
  const MatcherTables& tables() const { return *tables_; }

  // -- advancing --
  // One token; throws TokenRejection (matcher unchanged) when the grammar does not take it.
  void consume(int64_t token);
  // Tokens in order; on a rejection the ones before it stay consumed (then it throws).
  void consume_tokens(const std::vector<int64_t>& tokens);
  // How many of `tokens` the grammar takes in sequence from here; the matcher is unchanged.
  size_t validate_tokens(const std::vector<int64_t>& tokens);
  // Undo the last n consumed tokens (EOS included); MatcherStateError past the start.
  void rollback(int64_t n);
  void reset();

  // -- masks --
  // The mask (n_words words): after EOS empty; with token budgets the state's mask less the
  // last-token removals; else with `remaining` (tokens the caller may still generate, this one
  // included) the budget-aware mask when it narrows; else the state's memoised mask.
  std::shared_ptr<const std::vector<uint32_t>> mask(std::optional<int64_t> remaining);
  // mask() into out (n_words words).
  void fill_mask(uint32_t* out, std::optional<int64_t> remaining);
  // mask() into out when it is not the state's plain mask (then true); false, nothing
  // written, when the plain mask of state() applies.
  bool fill_special(uint32_t* out, std::optional<int64_t> remaining);
  bool is_allowed(int64_t token);
  // Tokens of a completion from here (MaskEngine::min_completion; 0 after EOS), nullopt when
  // none is known.
  std::optional<uint32_t> min_completion();
  // The bytes the grammar forces next: while the state is not complete, expects no special
  // token and allows exactly one byte, that byte (at most kMaxForcedBytes).
  std::string forced_bytes();

 private:
  std::shared_ptr<const MatcherTables> tables_;
  std::vector<ParseState> history_;
  std::vector<uint32_t> tokens_;
  std::vector<uint32_t> counts_;  // per history entry: tokens of the lexeme being read
  bool eos_ = false;

  // consume() without throwing (the matcher changes only when the token is taken)
  enum class Verdict { Taken, Rejected, OutsideVocabulary, Stopped };
  Verdict try_consume(int64_t token);
  // The state after `token` and its lexeme's token count, spent budgets applied; nullopt
  // when the grammar rejects the token.
  std::optional<std::pair<ParseState, uint32_t>> next_budgeted(uint32_t token);
  // st where the lexemes whose budget `count` spent take no more bytes
  ParseState cap(ParseState st, uint32_t count) const;
  // The mask of st when the next token may be the last of a budgeted lexeme.
  std::shared_ptr<const std::vector<uint32_t>> last_token_mask(ParseState st, uint32_t count);
};

// One row of a batch fill: the plain mask of `state` under `engine`, into `out`.
struct MaskRow {
  MaskEngine* engine;
  ParseState state;
  uint32_t* out;
};

// Fill every row (its engine's n_words words). Masks already memoised are written at once;
// when two or more are new and n_threads >= 2 they are computed on up to n_threads threads of
// the engine's pool (a large root walk split among them, split.h). The first error is rethrown once every thread
// has stopped. Call without the GIL.
void fill_mask_rows(const std::vector<MaskRow>& rows, uint32_t n_threads);

// The masks of matchers (Matcher::mask(remaining[i])) into rows base + i * n_words; a null
// matcher's row is left alone. Masks other than a plain state mask (after EOS, budgets, a
// narrowing `remaining`) are written first, one by one, the rest by fill_mask_rows.
void fill_matcher_masks(const std::vector<Matcher*>& matchers,
                        const std::vector<std::optional<int64_t>>& remaining, uint32_t* base,
                        size_t n_words, uint32_t n_threads);

}  // namespace lexguide
