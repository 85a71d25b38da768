// The per-generation matcher and the batch mask fill; see matcher.h.
#include "engine/matcher.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>

#include "engine/split.h"

namespace lexguide {

// -- MatcherTables ----------------------------------------------------------------------------
MatcherTables::MatcherTables(std::shared_ptr<MaskEngine> engine) : engine_(std::move(engine)) {
  LexParser& lp = engine_->lexparser();
  for (uint32_t g : lp.budgeted()) budgets_[g] = lp.lexer().budget(g);
  for (size_t l = 0; l < lp.n_lexemes(); l++)
    if (lp.is_token_lexeme(int32_t(l))) has_token_lexemes_ = true;
  empty_ = std::make_shared<const std::vector<uint32_t>>(vocab().n_words(), 0u);
}

int64_t MatcherTables::budget(uint32_t global_lexeme) const {
  auto it = budgets_.find(global_lexeme);
  return it == budgets_.end() ? -1 : it->second;
}

bool MatcherTables::is_eos(uint32_t token) const {
  const auto& eos = vocab().eos_ids();
  return std::find(eos.begin(), eos.end(), token) != eos.end();
}

std::shared_ptr<const std::vector<uint32_t>> MatcherTables::last_token_mask(ParseState st, uint32_t count) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = last_token_.find(Key{st.key(), count});
  return it == last_token_.end() ? nullptr : it->second;
}

void MatcherTables::remember(ParseState st, uint32_t count, std::shared_ptr<const std::vector<uint32_t>> mask) const {
  const size_t max_masks = engine_->max_cached();
  std::lock_guard<std::mutex> g(mu_);
  if (last_token_.size() >= max_masks) last_token_.clear();
  last_token_.emplace(Key{st.key(), count}, std::move(mask));
}

// -- Matcher: state ---------------------------------------------------------------------------
Matcher::Matcher(std::shared_ptr<const MatcherTables> tables) : tables_(std::move(tables)) {
  history_.push_back(tables_->engine().lexparser().initial());
  counts_.push_back(0);
}

bool Matcher::is_accepting() const { return eos_ || tables_->engine().lexparser().is_accepting(state()); }

std::vector<std::vector<int32_t>> Matcher::token_lexeme_scans() const {
  MaskEngine& engine = tables_->engine();
  std::vector<std::vector<int32_t>> out(tokens_.size());
  if (!tables_->has_token_lexemes()) return out;
  for (size_t i = 0; i < tokens_.size(); i++) {
    std::vector<int32_t> lexemes = engine.token_lexemes_of(tokens_[i]);
    // as MaskEngine::advance_token decided when the token was consumed
    if (!lexemes.empty() && engine.lexparser().advance_token_lexeme(history_[i], lexemes)) out[i] = std::move(lexemes);
  }
  return out;
}

bool Matcher::is_stopped() const { return eos_ || !tables_->engine().lexparser().can_continue(state()); }

// -- Matcher: advancing -----------------------------------------------------------------------
ParseState Matcher::cap(ParseState st, uint32_t count) const {
  if (!st.pending || st.lexer_state == DEAD) return st;
  LexerDFA& lx = tables_->engine().lexparser().lexer();
  std::vector<uint32_t> spent;
  for (auto& entry : lx.state(st.lexer_state).entries) {
    int64_t b = tables_->budget(entry.first);
    if (b >= 0 && b <= int64_t(count)) spent.push_back(entry.first);
  }
  if (spent.empty()) return st;
  return ParseState{st.set_id, lx.without_extensions(st.lexer_state, spent), true};
}

std::optional<std::pair<ParseState, uint32_t>> Matcher::next_budgeted(uint32_t token) {
  MaskEngine& engine = tables_->engine();
  const Vocab& v = tables_->vocab();
  ParseState st = state();
  const uint32_t count = counts_.back();
  std::string_view data = v.bytes(token);
  if (data.empty() || v.is_special(token) || !engine.token_lexemes_of(token).empty()) {
    auto r = engine.advance_token(st, token);
    if (!r) return std::nullopt;
    uint32_t c = r->pending && *r == st ? count : 0;  // a special token inside a lexeme
    return std::make_pair(cap(*r, c), c);
  }
  LexParser& lp = engine.lexparser();
  LexerDFA& lx = lp.lexer();
  std::lock_guard<std::recursive_mutex> g(lp.mu());
  bool same_lexeme = true;  // every byte so far extended the lexeme that was being read
  for (char ch : data) {
    unsigned b = static_cast<unsigned char>(ch);
    if (same_lexeme && !(st.pending && st.lexer_state != DEAD && lx.next(st.lexer_state, b) != DEAD))
      same_lexeme = false;
    if (!lp.step_unlocked(st, b)) return std::nullopt;
  }
  if (!st.pending) return std::make_pair(st, uint32_t(0));
  uint32_t c = same_lexeme ? count + 1 : 1;
  return std::make_pair(cap(st, c), c);
}

Matcher::Verdict Matcher::try_consume(int64_t token) {
  const Vocab& v = tables_->vocab();
  if (token < 0 || token >= int64_t(v.n_tokens())) return Verdict::OutsideVocabulary;
  if (eos_) return Verdict::Stopped;
  const uint32_t t = uint32_t(token);
  std::optional<std::pair<ParseState, uint32_t>> next;
  if (tables_->has_budgets()) {
    if (!is_allowed(token)) return Verdict::Rejected;  // the mask holds the budget's look-ahead
    next = next_budgeted(t);
  } else if (auto r = tables_->engine().advance_token(state(), t)) {
    next = std::make_pair(*r, uint32_t(0));
  }
  if (!next) {
    if (tables_->is_eos(t) && tables_->engine().lexparser().is_accepting(state())) {
      eos_ = true;
      return Verdict::Taken;
    }
    return Verdict::Rejected;
  }
  history_.push_back(next->first);
  tokens_.push_back(t);
  counts_.push_back(next->second);
  return Verdict::Taken;
}

void Matcher::consume(int64_t token) {
  switch (try_consume(token)) {
    case Verdict::Taken: return;
    case Verdict::Rejected: throw TokenRejection(token, "");
    case Verdict::OutsideVocabulary:
      throw TokenRejection(token, "token id " + std::to_string(token) + " outside vocabulary");
    case Verdict::Stopped: throw TokenRejection(token, "the matcher has stopped (EOS was consumed)");
  }
}

void Matcher::consume_tokens(const std::vector<int64_t>& tokens) {
  for (int64_t t : tokens) consume(t);
}

size_t Matcher::validate_tokens(const std::vector<int64_t>& tokens) {
  size_t n = 0;
  try {
    for (int64_t t : tokens) {
      if (try_consume(t) != Verdict::Taken) break;
      n++;
    }
  } catch (...) {  // a core limit: leave the matcher as it was
    rollback(int64_t(n));
    throw;
  }
  rollback(int64_t(n));
  return n;
}

void Matcher::rollback(int64_t n) {
  if (n < 0 || uint64_t(n) > n_consumed())
    throw MatcherStateError("cannot roll back " + std::to_string(n) + " tokens; " +
                            std::to_string(n_consumed()) + " consumed");
  if (n && eos_) {
    eos_ = false;
    n--;
  }
  size_t keep = tokens_.size() - size_t(n);
  history_.resize(keep + 1);
  counts_.resize(keep + 1);
  tokens_.resize(keep);
}

void Matcher::reset() {
  history_.resize(1);
  counts_.resize(1);
  tokens_.clear();
  eos_ = false;
}

// -- Matcher: masks ---------------------------------------------------------------------------
std::shared_ptr<const std::vector<uint32_t>> Matcher::last_token_mask(ParseState st, uint32_t count) {
  MaskEngine& engine = tables_->engine();
  auto mask = engine.mask(st);
  const StateId s = st.lexer_state;
  if (s == DEAD) return mask;
  if (!st.pending) count = 0;
  LexerDFA& lx = engine.lexparser().lexer();
  bool last = false;  // the next token is the last one of a budgeted lexeme alive here
  for (auto& entry : lx.state(s).entries) last = last || tables_->budget(entry.first) == int64_t(count) + 1;
  if (!last) return mask;
  if (auto hit = tables_->last_token_mask(st, count)) return hit;
  std::vector<uint32_t> ids;
  std::vector<StateId> ends;
  engine.walker().inside_end_states(s, ids, ends);
  // the end states from which no lexeme can end once the budget is spent
  std::unordered_map<StateId, bool> dead_end;
  for (StateId e : ends)
    if (!dead_end.count(e)) dead_end[e] = cap(ParseState{st.set_id, e, true}, count + 1).lexer_state == DEAD;
  std::shared_ptr<const std::vector<uint32_t>> out = mask;
  std::vector<uint32_t> narrowed;
  for (size_t i = 0; i < ids.size(); i++) {
    if (!dead_end[ends[i]]) continue;
    if (narrowed.empty()) narrowed = *mask;
    narrowed[ids[i] >> 5] &= ~(uint32_t(1) << (ids[i] & 31));
  }
  if (!narrowed.empty()) out = std::make_shared<const std::vector<uint32_t>>(std::move(narrowed));
  tables_->remember(st, count, out);
  return out;
}

// The budget-aware mask of st for `remaining` tokens (this one included), or nullptr when the
// plain mask applies.
static std::shared_ptr<const std::vector<uint32_t>> narrowed_budget(MaskEngine& engine, ParseState st,
                                                                    int64_t remaining) {
  // left = remaining - 1 tokens after this one, clamped to [0, UINT32_MAX] (no overflow)
  uint32_t left = remaining <= 1 ? 0 : uint32_t(std::min<int64_t>(remaining - 1, int64_t(UINT32_MAX)));
  std::vector<uint32_t> m;
  if (!engine.budget_mask(st, left, m)) return nullptr;
  return std::make_shared<const std::vector<uint32_t>>(std::move(m));
}

std::shared_ptr<const std::vector<uint32_t>> Matcher::mask(std::optional<int64_t> remaining) {
  if (eos_) return tables_->empty_mask();
  if (tables_->has_budgets()) return last_token_mask(state(), counts_.back());
  if (remaining)
    if (auto m = narrowed_budget(tables_->engine(), state(), *remaining)) return m;
  return tables_->engine().mask(state());
}

bool Matcher::fill_special(uint32_t* out, std::optional<int64_t> remaining) {
  std::shared_ptr<const std::vector<uint32_t>> m;
  if (eos_) m = tables_->empty_mask();
  else if (tables_->has_budgets()) m = last_token_mask(state(), counts_.back());
  else if (remaining) m = narrowed_budget(tables_->engine(), state(), *remaining);
  if (!m) return false;
  std::memcpy(out, m->data(), m->size() * 4);
  return true;
}

void Matcher::fill_mask(uint32_t* out, std::optional<int64_t> remaining) {
  if (!fill_special(out, remaining)) tables_->engine().fill(state(), out);
}

bool Matcher::is_allowed(int64_t token) {
  if (token < 0 || token >= int64_t(tables_->vocab().n_tokens())) return false;
  return has_bit(mask(std::nullopt)->data(), uint32_t(token));
}

std::optional<uint32_t> Matcher::min_completion() {
  if (eos_) return 0u;
  uint32_t r = tables_->engine().min_completion(state());
  return r == UINT32_MAX ? std::nullopt : std::optional<uint32_t>(r);
}

std::string Matcher::forced_bytes() {
  std::string out;
  if (eos_) return out;
  LexParser& lp = tables_->engine().lexparser();
  std::lock_guard<std::recursive_mutex> g(lp.mu());
  ParseState st = state();
  bool allowed[256];
  while (out.size() < kMaxForcedBytes) {
    if (lp.is_accepting(st)) break;
    if (tables_->has_token_lexemes() && !lp.expected_token_lexemes(st).empty()) break;
    lp.allowed_bytes(st, allowed);
    int only = -1, n = 0;
    for (int b = 0; b < 256 && n < 2; b++)
      if (allowed[b]) {
        only = b;
        n++;
      }
    if (n != 1) break;
    if (!lp.step_unlocked(st, unsigned(only))) break;
    out.push_back(char(only));
  }
  return out;
}

// -- batch fills ------------------------------------------------------------------------------
void fill_mask_rows(const std::vector<MaskRow>& rows, uint32_t n_threads) {
  // cached masks are written at once; threads only when two or more masks are to be computed
  // (handing work to a thread costs more than writing a cached mask)
  std::vector<size_t> todo;
  for (size_t i = 0; i < rows.size(); i++)
    if (!rows[i].engine->fill_cached(rows[i].state, rows[i].out)) todo.push_back(i);
  size_t n = todo.size();
  uint32_t k = n >= 2 && n_threads >= 2 ? std::min<uint32_t>(n_threads, uint32_t(n)) : 1;
  // the masks one per thread at a time on the engine's pool; a large root walk is split
  // into pieces that the crew's idle threads share (split.h); the first error is raised once
  // all have stopped
  Crew crew(k, n, n_threads);
  std::atomic<size_t> next{0};
  std::mutex error_mu;
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  auto work = [&]() {
    Crew::Member member(&crew);
    for (size_t j; (j = next.fetch_add(1)) < n; crew.task_done()) {
      if (failed.load()) continue;  // after an error the rest are only counted
      if (k > 1) crew.help();
      size_t i = todo[j];
      try {
        rows[i].engine->fill(rows[i].state, rows[i].out);
      } catch (...) {
        std::lock_guard<std::mutex> g(error_mu);
        if (!error) error = std::current_exception();
        failed.store(true);
      }
    }
    if (k > 1) crew.help_until_done();
  };
  if (k > 1) {
    std::lock_guard<std::mutex> busy(engine_pool_busy());
    engine_pool().run(k, int(k), [&](int64_t) { work(); });
  } else {
    work();
  }
  if (error) std::rethrow_exception(error);
}

void fill_matcher_masks(const std::vector<Matcher*>& matchers,
                        const std::vector<std::optional<int64_t>>& remaining, uint32_t* base,
                        size_t n_words, uint32_t n_threads) {
  std::vector<MaskRow> rows;
  rows.reserve(matchers.size());
  for (size_t i = 0; i < matchers.size(); i++) {
    Matcher* m = matchers[i];
    if (!m) continue;
    uint32_t* out = base + i * n_words;
    if (!m->fill_special(out, i < remaining.size() ? remaining[i] : std::nullopt))
      rows.push_back(MaskRow{&m->tables().engine(), m->state(), out});
  }
  fill_mask_rows(rows, n_threads);
}

}  // namespace lexguide
