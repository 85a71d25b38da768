// The lexer/parser pair; see lexparser.h.
#include "engine/lexparser.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace lexguide {

constexpr NodeId kNoSkip = 0xFFFFFFFFu;

namespace {
std::shared_ptr<LexerDFA>& current_slot() {  // under store_mutex()
  static std::shared_ptr<LexerDFA> current;
  if (!current) current = std::make_shared<LexerDFA>(kMaxLexerStates);
  return current;
}
}  // namespace

std::shared_ptr<LexerDFA> current_generation() {
  std::lock_guard<std::recursive_mutex> g(store_mutex());
  return current_slot();
}

bool generation_past_marks(size_t rotate_nodes) {
  std::lock_guard<std::recursive_mutex> g(store_mutex());
  const LexerDFA& cur = *current_slot();
  return cur.n_states() > kRotateLexerStates || cur.regex().n_nodes() > rotate_nodes ||
         cur.memory_bytes() + cur.regex().memory_bytes() > kRotateGenerationBytes;
}

std::shared_ptr<LexerDFA> next_generation(size_t keep) {
  std::lock_guard<std::recursive_mutex> g(store_mutex());
  std::shared_ptr<LexerDFA>& cur = current_slot();
  cur = std::make_shared<LexerDFA>(RegexStore(cur->regex(), keep), kMaxLexerStates);
  return cur;
}

LexParser::LexParser(std::shared_ptr<LexerDFA> lexer, GrammarRules rules, std::vector<LexemeSpec> lexemes,
                     std::vector<NodeId> skips, GrammarOptionsCore options)
    : lexer_(std::move(lexer)),
      parser_(std::move(rules)),
      lexemes_(std::move(lexemes)),
      n_lexemes_(lexemes_.size()),
      options_(options) {
  std::vector<std::pair<NodeId, bool>> rxs;
  std::vector<int64_t> budgets;
  for (auto& lx : lexemes_) {
    rxs.emplace_back(lx.rx, lx.lazy);
    budgets.push_back(lx.max_tokens);
    token_lexeme_.push_back(lx.token_set);
  }
  skip_index_.assign(skips.size(), -1);
  for (size_t cls = 0; cls < skips.size(); cls++)
    if (skips[cls] != kNoSkip) {
      skip_index_[cls] = int32_t(rxs.size());
      class_of_skip_.push_back(int32_t(cls));
      rxs.emplace_back(skips[cls], false);
      budgets.push_back(-1);
    }
  for (size_t i = 0; i < rxs.size(); i++) {
    uint32_t g = lexer_->lexeme_id(rxs[i].first, rxs[i].second, budgets[i]);
    global_.push_back(g);
    locals_[g].push_back(int32_t(i));
    if (budgets[i] >= 0 && std::find(budgeted_.begin(), budgeted_.end(), g) == budgeted_.end())
      budgeted_.push_back(g);
  }
  for (size_t i = 0; i < n_lexemes_; i++)
    if (lexemes_[i].token_set && lexemes_[i].eos) eos_lexemes_.push_back(int32_t(i));
  int32_t init = parser_.initial();
  initial_ = ParseState{init, lexer_start(init, INITIAL, {}), false};
}

const std::vector<int32_t>& LexParser::locals_of(uint32_t global) const {
  static const std::vector<int32_t> none;
  auto it = locals_.find(global);
  return it == locals_.end() ? none : it->second;
}

StateId LexParser::lexer_start(int32_t set_id, int mode, const std::vector<int32_t>& skipped) {
  const bool by_set = mode == NORMAL && skipped.empty() && set_id >= 0;
  if (by_set) {
    if (size_t(set_id) < normal_starts_.size() && normal_starts_[size_t(set_id)] != MISSING)
      return normal_starts_[size_t(set_id)];
  } else {
    start_key_.assign({set_id, mode});
    start_key_.insert(start_key_.end(), skipped.begin(), skipped.end());
    if (const StateId* known = start_memo_.find(start_key_)) return *known;
  }
  std::vector<int32_t> expected;
  for (int32_t lex : parser_.expected(set_id)) {
    if (token_lexeme_[size_t(lex)]) continue;
    if (!skipped.empty() &&
        !std::binary_search(skipped.begin(), skipped.end(), lexemes_[size_t(lex)].lexeme_class))
      continue;
    expected.push_back(lex);
  }
  std::vector<uint32_t> allowed;
  for (int32_t lex : expected) allowed.push_back(global_[size_t(lex)]);
  bool skip_ok = (mode != INITIAL || options_.allow_initial_skip) && !(mode == AFTER_SKIP && options_.ignore_once);
  if (skip_ok) {
    const std::vector<int32_t>& last = parser_.last_classes(set_id);
    for (int32_t lex : expected) {
      int32_t cls = lexemes_[size_t(lex)].lexeme_class;
      if (size_t(cls) >= skip_index_.size()) continue;
      int32_t s = skip_index_[size_t(cls)];
      if (s >= 0 && (cls == 0 || std::binary_search(last.begin(), last.end(), cls)))
        allowed.push_back(global_[size_t(s)]);
    }
  }
  StateId st = lexer_->start(std::move(allowed));
  if (by_set) {
    if (size_t(set_id) >= normal_starts_.size()) normal_starts_.resize(size_t(set_id) + 1, MISSING);
    normal_starts_[size_t(set_id)] = st;
  } else {
    start_memo_.emplace(start_key_, st);  // (start_key_ as built above: nothing between uses it)
  }
  return st;
}

std::pair<int32_t, StateId> LexParser::finish_accepted(int32_t set_id, const std::vector<uint32_t>& accepting) {
  std::vector<int32_t> real;
  std::vector<int32_t> skipped;
  size_t n_accepted = 0;
  for (uint32_t g : accepting)
    for (int32_t loc : locals_of(g)) {
      n_accepted++;
      if (is_skip(loc)) skipped.push_back(class_of_skip_[size_t(loc) - n_lexemes_]);
      else real.push_back(loc);
    }
  std::sort(real.begin(), real.end());
  real.erase(std::unique(real.begin(), real.end()), real.end());
  int32_t new_set = real.empty() ? DEAD_SET : parser_.scan(set_id, real);
  if (new_set != DEAD_SET) return {new_set, lexer_start(new_set, NORMAL, {})};
  if (!skipped.empty()) {  // the skip regex matched: the parser does not move
    std::sort(skipped.begin(), skipped.end());
    skipped.erase(std::unique(skipped.begin(), skipped.end()), skipped.end());
    return {set_id, lexer_start(set_id, AFTER_SKIP, skipped)};
  }
  return {DEAD_SET, DEAD};
}

std::pair<int32_t, StateId> LexParser::finish(int32_t set_id, StateId s) {
  uint64_t key = (uint64_t(uint32_t(set_id)) << 32) | s;
  if (const auto* hit = finish_memo_.find(key)) return *hit;
  auto r = finish_accepted(set_id, lexer_->state(s).accepting);
  finish_memo_.emplace(key, r);
  return r;
}

void LexParser::restarts(int32_t set_id, StateId s, bool pending, std::vector<std::pair<int32_t, StateId>>& out) {
  out.clear();
  if (!pending && s != DEAD && lexer_->accepts_lazy(s)) {
    std::tie(set_id, s) = finish(set_id, s);
    if (set_id == DEAD_SET) return;
  }
  while (true) {
    out.emplace_back(set_id, s);
    if (s == DEAD || !lexer_->accepts(s)) return;
    for (size_t i = 0; i + 1 < out.size(); i++)
      if (out[i].first == set_id && out[i].second == s) {
        out.pop_back();
        return;
      }
    if (out.size() > kMaxEmptyLexemes) {
      chain_limit_hits++;
      return;
    }
    std::tie(set_id, s) = finish(set_id, s);
    if (set_id == DEAD_SET) return;
  }
}

bool LexParser::step_chain(int32_t& set_id, StateId& s, unsigned b, StateId& t) {
  std::pair<int32_t, StateId> seen[kMaxEmptyLexemes];  // the chain so far (no allocation)
  uint32_t n = 0;
  while (true) {  // (set_id, s) accepts and does not read b
    for (uint32_t i = 0; i < n; i++)
      if (seen[i].first == set_id && seen[i].second == s) return false;  // a cycle: all tried
    if (n == kMaxEmptyLexemes) {
      chain_limit_hits++;
      return false;
    }
    seen[n++] = {set_id, s};
    std::tie(set_id, s) = finish(set_id, s);
    if (set_id == DEAD_SET || s == DEAD) return false;
    if ((t = lexer_->next(s, b)) != DEAD) return true;
    if (!lexer_->accepts(s)) return false;
  }
}

std::optional<ParseState> LexParser::advance_byte(ParseState st, unsigned b) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  if (!step_unlocked(st, b)) return std::nullopt;
  return st;
}

std::optional<ParseState> LexParser::advance_bytes(ParseState st, const uint8_t* data, size_t n) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  for (size_t i = 0; i < n; i++)
    if (!step_unlocked(st, data[i])) return std::nullopt;
  return st;
}

void LexParser::token_sets(ParseState st, std::vector<int32_t>& out) {
  out.clear();
  int32_t set_id = st.set_id;
  StateId s = st.lexer_state;
  if (st.pending) {
    std::tie(set_id, s) = finish(set_id, s);
    if (set_id == DEAD_SET) return;
  }
  std::vector<std::pair<int32_t, StateId>> rs;
  restarts(set_id, s, false, rs);
  for (auto& p : rs) out.push_back(p.first);
}

std::vector<int32_t> LexParser::expected_token_lexemes(ParseState st) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  std::vector<int32_t> sets, out;
  token_sets(st, sets);
  for (int32_t sid : sets)
    for (int32_t lex : parser_.expected(sid))
      if (token_lexeme_[size_t(lex)]) out.push_back(lex);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::optional<ParseState> LexParser::advance_token_lexeme(ParseState st, const std::vector<int32_t>& lexemes) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  std::vector<int32_t> sets;
  token_sets(st, sets);
  for (int32_t sid : sets) {
    int32_t ns = parser_.scan(sid, lexemes);
    if (ns != DEAD_SET) return ParseState{ns, lexer_start(ns, NORMAL, {}), false};
  }
  return std::nullopt;
}

void LexParser::allowed_bytes(ParseState st, bool out[256]) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  std::fill(out, out + 256, false);
  std::vector<std::pair<int32_t, StateId>> rs;
  restarts(st.set_id, st.lexer_state, st.pending, rs);
  for (auto& [sid, ls] : rs) {
    if (ls == DEAD) continue;
    const ClassRow* row = lexer_->row(ls);
    for (unsigned b = 0; b < 256; b++)
      if (row->at(b) != DEAD) out[b] = true;
  }
}

bool LexParser::is_accepting(ParseState st) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  std::vector<std::pair<int32_t, StateId>> rs;
  restarts(st.set_id, st.lexer_state, true, rs);
  bool pending = st.pending;
  for (auto& p : rs) {
    if (!pending && parser_.is_accepting(p.first)) return true;
    pending = false;
  }
  return false;
}

bool LexParser::can_continue(ParseState st) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  auto has_token_lexeme = [&](int32_t sid) {
    for (int32_t lex : parser_.expected(sid))
      if (token_lexeme_[size_t(lex)]) return true;
    return false;
  };
  if (st.lexer_state != DEAD && lexer_->can_extend(st.lexer_state)) return true;
  if (st.pending) {
    auto [sid, s] = finish(st.set_id, st.lexer_state);
    if (sid == DEAD_SET) return false;
    return lexer_->can_extend(s) || has_token_lexeme(sid);
  }
  return has_token_lexeme(st.set_id);
}

bool LexParser::accepts(const uint8_t* data, size_t n) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  auto st = advance_bytes(initial_, data, n);
  if (!st) return false;
  if (is_accepting(*st)) return true;
  if (!eos_lexemes_.empty()) {
    auto t = advance_token_lexeme(*st, eos_lexemes_);
    return t && is_accepting(*t);
  }
  return false;
}

}  // namespace lexguide
