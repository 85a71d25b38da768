// The lexer/parser pair of one grammar: the shared lexer DFA driven by the Earley parser.
//
// A parse state is (set_id, lexer_state, pending): the canonical Earley set (everything before
// the current lexeme), the DFA state of the lexeme being read, and whether bytes of it were
// read. Lexing follows llguidance
// (https://github.com/guidance-ai/llguidance/blob/main/docs/syntax.md): the parser tells the lexer
// which lexemes may come next; greedy lexemes end when the next byte extends none of them
// (maximal munch, no backtracking) and every lexeme accepting the bytes read so far is handed
// to the parser at once; lazy lexemes end at their first match; a class's skip regex
// (%ignore) may stand between lexemes while the parser expects a lexeme of that class, never
// before a nested grammar's first lexeme; after a skip only lexemes of the skipped classes.
//
// Thread safety: advance_*, the queries (allowed_bytes, is_accepting, ...) and accepts take the
// grammar's mutex (mu()); step_unlocked, finish, lexer_start and restarts expect it held.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "engine/earley.h"
#include "engine/flat_map.h"
#include "engine/lexer.h"

namespace lexguide {

struct ParseState {
  int32_t set_id;
  StateId lexer_state;
  bool pending;
  uint64_t key() const { return (uint64_t(uint32_t(set_id)) << 33) | (uint64_t(lexer_state) << 1) | pending; }
  bool operator==(const ParseState& o) const {
    return set_id == o.set_id && lexer_state == o.lexer_state && pending == o.pending;
  }
};

struct LexemeSpec {
  NodeId rx;         // NOTHING for token-set lexemes
  int32_t lexeme_class;
  bool lazy;
  int64_t max_tokens;  // -1: no budget
  bool token_set;
  bool eos;            // the token set is the tokenizer's EOS (stop="")
};

struct GrammarOptionsCore {
  bool allow_initial_skip = false;
  bool ignore_once = false;
};

// The current generation (lexer DFA + its regex store): the one the front ends build regexes in
// and new grammars are lowered into (made on first use).
std::shared_ptr<LexerDFA> current_generation();
// Whether the current generation is past a rotation mark: kRotateLexerStates lexer states,
// `rotate_nodes` regex nodes or kRotateGenerationBytes bytes.
bool generation_past_marks(size_t rotate_nodes);
// Make a new current generation whose store holds the first `keep` nodes of the current one's
// (same ids: the regexes the front ends keep between compiles); grammars lowered into the old
// one keep it alive. Returns it.
std::shared_ptr<LexerDFA> next_generation(size_t keep);

class LexParser {
 public:
  // lexemes' and skips' regexes are nodes of lexer's store
  LexParser(std::shared_ptr<LexerDFA> lexer, GrammarRules rules, std::vector<LexemeSpec> lexemes,
            std::vector<NodeId> skips, GrammarOptionsCore options);

  std::recursive_mutex& mu() { return mu_; }
  LexerDFA& lexer() { return *lexer_; }
  const std::shared_ptr<LexerDFA>& lexer_ptr() const { return lexer_; }
  EarleyParser& parser() { return parser_; }
  ParseState initial() const { return initial_; }
  size_t n_lexemes() const { return n_lexemes_; }

  // End the current lexeme at lexer state s: the new set and the lexer's restart state, or
  // DEAD_SET when no accepting lexeme is allowed. Memoised per (set, lexer state).
  std::pair<int32_t, StateId> finish(int32_t set_id, StateId s);
  std::pair<int32_t, StateId> finish_accepted(int32_t set_id, const std::vector<uint32_t>& accepting);
  StateId lexer_start(int32_t set_id, int mode, const std::vector<int32_t>& skipped_classes);

  // One byte from st, the caller holding mu(): the current lexeme goes on if it can, else it
  // ends (and lexemes matching the empty string after it, the chain restarts() lists) and the
  // byte starts the next one; a lazy lexeme ends as soon as it matches. False (st unchanged)
  // when the byte is not allowed. Allocates nothing: the mask walk calls it once per trie node.
  bool step_unlocked(ParseState& st, unsigned b);
  // step_unlocked under mu()
  std::optional<ParseState> advance_byte(ParseState st, unsigned b);
  std::optional<ParseState> advance_bytes(ParseState st, const uint8_t* data, size_t n);
  std::optional<ParseState> advance_token_lexeme(ParseState st, const std::vector<int32_t>& lexemes);
  std::vector<int32_t> expected_token_lexemes(ParseState st);
  void allowed_bytes(ParseState st, bool out[256]);
  bool is_accepting(ParseState st);
  bool can_continue(ParseState st);
  bool accepts(const uint8_t* data, size_t n);

  // local lexeme indices of a global lexeme, and whether a local index is a skip lexeme
  const std::vector<int32_t>& locals_of(uint32_t global) const;
  bool is_skip(int32_t local) const { return size_t(local) >= n_lexemes_; }
  const LexemeSpec& lexeme(int32_t local) const { return lexemes_[size_t(local)]; }  // local < n_lexemes
  const std::vector<uint32_t>& budgeted() const { return budgeted_; }  // global lexemes with budgets
  bool is_token_lexeme(int32_t local) const { return local < int32_t(n_lexemes_) && lexemes_[size_t(local)].token_set; }
  const std::vector<int32_t>& eos_lexemes() const { return eos_lexemes_; }
  uint64_t chain_limit_hits = 0;

  // The (set, lexer state) pairs a next byte may start from (see lexparser.cc).
  void restarts(int32_t set_id, StateId s, bool pending, std::vector<std::pair<int32_t, StateId>>& out);
  void token_sets(ParseState st, std::vector<int32_t>& out);

  static constexpr int INITIAL = 0, NORMAL = 1, AFTER_SKIP = 2;

 private:
  // step_unlocked's rare part: (set_id, s) accepts but cannot read b; end lexemes along the
  // chain until a state reads b (t: its successor), as restarts() bounds the chain
  bool step_chain(int32_t& set_id, StateId& s, unsigned b, StateId& t);

  std::recursive_mutex mu_;
  std::shared_ptr<LexerDFA> lexer_;
  EarleyParser parser_;
  std::vector<LexemeSpec> lexemes_;
  size_t n_lexemes_;
  GrammarOptionsCore options_;
  std::vector<int32_t> skip_index_;     // per class: local index of its skip lexeme, or -1
  std::vector<int32_t> class_of_skip_;  // per local index >= n_lexemes: its class
  std::vector<uint32_t> global_;        // local -> global lexeme
  std::unordered_map<uint32_t, std::vector<int32_t>> locals_;
  std::vector<uint32_t> budgeted_;
  std::vector<int32_t> eos_lexemes_;
  std::vector<bool> token_lexeme_;
  FlatMap<std::pair<int32_t, StateId>> finish_memo_;  // (set, lexer state) -> finish()
  // lexer_start's answers: for NORMAL mode with nothing skipped (the start after each lexeme),
  // by set id (MISSING until known); other modes by a key of (set, mode, skipped classes)
  std::vector<StateId> normal_starts_;
  KeyIndex<int32_t, StateId> start_memo_;
  std::vector<int32_t> start_key_;  // lexer_start()'s key scratch
  ParseState initial_{0, 0, false};
};

inline bool LexParser::step_unlocked(ParseState& st, unsigned b) {
  int32_t set_id = st.set_id;
  StateId s = st.lexer_state;
  if (!st.pending && s != DEAD && lexer_->accepts_lazy(s)) {
    std::tie(set_id, s) = finish(set_id, s);
    if (set_id == DEAD_SET) return false;
  }
  if (s == DEAD) return false;
  StateId t = lexer_->next(s, b);
  if (t == DEAD && (!lexer_->accepts(s) || !step_chain(set_id, s, b, t))) return false;
  if (lexer_->accepts_lazy(t)) {
    auto [ns, start] = finish(set_id, t);
    if (ns == DEAD_SET) return false;
    st = ParseState{ns, start, false};
  } else {
    st = ParseState{set_id, t, true};
  }
  return true;
}

}  // namespace lexguide
