// Captures read from the consumed input; see captures.h.
#include "engine/captures.h"

#include <algorithm>
#include <mutex>
#include <tuple>

#include "engine/flat_map.h"

namespace lexguide {

CaptureTable::CaptureTable(LexParser& lp, std::vector<int32_t> nonterminal_names, std::vector<LexemeCapture> lexemes)
    : nt_name_(std::move(nonterminal_names)), lexemes_(std::move(lexemes)) {
  std::lock_guard<std::recursive_mutex> g(lp.mu());
  const EarleyParser& p = lp.parser();
  const GrammarRules& rules = p.rules();
  const size_t n_nt = size_t(rules.n_nonterminals);
  if (nt_name_.size() != n_nt) throw std::invalid_argument("captures: one name per nonterminal");
  if (lexemes_.size() != lp.n_lexemes()) throw std::invalid_argument("captures: one entry per lexeme");
  {
    std::lock_guard<std::recursive_mutex> s(store_mutex());
    size_t n_nodes = lp.lexer().regex().n_nodes();
    for (const LexemeCapture& c : lexemes_)
      if ((c.body != kNoRegex && c.body >= n_nodes) || (c.tail != kNoRegex && c.tail >= n_nodes))
        throw std::invalid_argument("captures: a lexeme's regex is not a node of the grammar's store");
  }
  dr_next_.resize(p.n_dotted());
  dr_lhs_.resize(p.n_dotted());
  for (size_t dr = 0; dr < p.n_dotted(); dr++) {
    dr_next_[dr] = p.dr_symbol(int32_t(dr));
    dr_lhs_[dr] = p.dr_lhs(int32_t(dr));
  }
  starts_ = p.rules_of();
  ends_.resize(n_nt);
  for (size_t r = 0; r < rules.lhs.size(); r++)
    ends_[size_t(rules.lhs[r])].push_back(p.rule_first_dr(r) + int32_t(rules.rhs[r].size()));
  start_dr_ = starts_[size_t(rules.start)].front();  // the parser checked the start has a rule
  accept_dr_ = ends_[size_t(rules.start)].front();
  nullable_ = p.nullable();
  // rank: post-order over "A derives B alone" (A -> a B b, a and b nullable nonterminals), so a
  // rule spanning the same bytes as one inside it comes after it
  std::vector<std::vector<int32_t>> alone(n_nt);
  for (size_t r = 0; r < rules.lhs.size(); r++) {
    const std::vector<int32_t>& rhs = rules.rhs[r];
    for (size_t i = 0; i < rhs.size(); i++) {
      if (rhs[i] < 0) continue;
      auto nullable_nt = [&](int32_t x) { return x >= 0 && nullable_[size_t(x)]; };
      if (std::all_of(rhs.begin(), rhs.begin() + long(i), nullable_nt) &&
          std::all_of(rhs.begin() + long(i) + 1, rhs.end(), nullable_nt))
        alone[size_t(rules.lhs[r])].push_back(rhs[i]);
    }
  }
  rank_.assign(n_nt, UINT32_MAX);
  std::vector<char> entered(n_nt, 0);
  std::vector<std::pair<int32_t, size_t>> stack;  // (nonterminal, next edge)
  uint32_t next_rank = 0;
  for (size_t root = 0; root < n_nt; root++) {
    if (entered[root]) continue;
    entered[root] = 1;
    stack.emplace_back(int32_t(root), 0);
    while (!stack.empty()) {
      auto& [nt, edge] = stack.back();
      if (edge < alone[size_t(nt)].size()) {
        int32_t child = alone[size_t(nt)][edge++];
        if (!entered[size_t(child)]) {
          entered[size_t(child)] = 1;
          stack.emplace_back(child, 0);
        }
        continue;
      }
      rank_[size_t(nt)] = next_rank++;
      stack.pop_back();
    }
  }
}

namespace {

using Item = uint64_t;  // dr << 32 | origin (a lexeme position)
Item item(int32_t dr, uint32_t origin) { return (uint64_t(uint32_t(dr)) << 32) | origin; }
int32_t item_dr(Item it) { return int32_t(it >> 32); }
uint32_t item_origin(Item it) { return uint32_t(it); }

// The grammar lexemes of the input: span k is bytes [start[k], end[k]) and may be any of
// lexemes[lex_off[k] .. lex_off[k + 1]) (sorted).
struct Trace {
  std::vector<uint32_t> start, end, lex_off{0};
  std::vector<int32_t> lexemes;

  size_t size() const { return start.size(); }
  void add(uint32_t s, uint32_t e, const std::vector<int32_t>& lx) {
    start.push_back(s);
    end.push_back(e);
    lexemes.insert(lexemes.end(), lx.begin(), lx.end());
    lex_off.push_back(uint32_t(lexemes.size()));
  }
  bool has(size_t k, int32_t lex) const {
    return std::binary_search(lexemes.begin() + lex_off[k], lexemes.begin() + lex_off[k + 1], lex);
  }
};

// The (set, lexer state) pairs met while ending lexemes at one position (a repeat means the
// empty lexemes go round in a circle): a few, so a vector until it is not.
class Seen {
 public:
  bool insert(int32_t set_id, StateId s) {  // whether it is new
    uint64_t key = (uint64_t(uint32_t(set_id)) << 32) | s;
    if (small_.size() < 16) {
      if (std::find(small_.begin(), small_.end(), key) != small_.end()) return false;
      small_.push_back(key);
      return true;
    }
    if (std::find(small_.begin(), small_.end(), key) != small_.end()) return false;
    return big_.emplace(key, 1).second;
  }
  void clear() {
    small_.clear();
    if (big_.size()) big_ = FlatMap<uint8_t>();
  }

 private:
  std::vector<uint64_t> small_;
  FlatMap<uint8_t> big_;
};

// Pass 1: replays the pieces through the LexParser (the caller holds its mutex).
class Replay {
 public:
  Replay(LexParser& lp, Trace& out) : lp_(lp), lexer_(lp.lexer()), parser_(lp.parser()), out_(out) {}

  void run(const std::string& data, const std::vector<CapturePiece>& pieces, bool final) {
    ParseState st = lp_.initial();
    int32_t set_id = st.set_id;
    StateId ls = st.lexer_state;
    bool pending = st.pending;
    uint32_t pos = 0;
    Seen seen;
    auto fail = [](const char* what, uint64_t byte) -> void { throw CaptureError(what, byte); };
    auto not_prefix = [&] { fail("captures: the input is not a valid prefix of the grammar", pos); };
    auto not_continued = [&](uint32_t at) { fail("captures: the byte does not continue the grammar", at); };
    for (const CapturePiece& piece : pieces) {
      if (piece.special) {  // pending bytes end first
        if (pending || (ls != DEAD && lexer_.accepts_lazy(ls))) std::tie(set_id, ls) = finish(set_id, ls, pos);
        seen.clear();
        while (true) {
          if (set_id == DEAD_SET) not_prefix();
          int32_t next_set = parser_.scan(set_id, piece.lexemes);
          if (next_set != DEAD_SET) {
            const std::vector<int32_t>& expected = parser_.expected(set_id);
            real_.clear();
            std::set_intersection(piece.lexemes.begin(), piece.lexemes.end(), expected.begin(),
                                  expected.end(), std::back_inserter(real_));
            out_.add(pos, pos, real_);
            set_id = next_set;
            ls = lp_.lexer_start(next_set, LexParser::NORMAL, {});
            pending = false;
            start_ = pos;
            break;
          }
          if (ls == DEAD || !lexer_.accepts(ls) || !seen.insert(set_id, ls)) not_prefix();
          std::tie(set_id, ls) = finish(set_id, ls, pos);
        }
      } else {
        if (size_t(pos) + piece.n_bytes > data.size()) throw std::invalid_argument("captures: pieces past the data");
        for (uint32_t i = 0; i < piece.n_bytes; i++) {
          unsigned byte = uint8_t(data[pos]);
          if (!pending && ls != DEAD && lexer_.accepts_lazy(ls)) std::tie(set_id, ls) = finish(set_id, ls, pos);
          seen.clear();
          StateId next = DEAD;
          while (true) {
            if (set_id == DEAD_SET) not_continued(pos);
            next = ls != DEAD ? lexer_.next(ls, byte) : DEAD;
            if (next != DEAD) break;
            if (ls == DEAD || !lexer_.accepts(ls) || !seen.insert(set_id, ls)) not_continued(pos);
            std::tie(set_id, ls) = finish(set_id, ls, pos);
          }
          pos++;
          if (lexer_.accepts_lazy(next)) {
            std::tie(set_id, ls) = finish(set_id, next, pos);
            if (set_id == DEAD_SET) not_continued(pos - 1);
            pending = false;
          } else {
            ls = next;
            pending = true;
          }
        }
      }
      if (piece.after) {  // the matcher's own state (a spent budget may have capped it)
        set_id = piece.after->set_id;
        ls = piece.after->lexer_state;
        pending = piece.after->pending;
      }
    }
    if (!final) return;
    // as LexParser::is_accepting: the pending lexeme ends, then empty lexemes may
    seen.clear();
    for (bool must_finish = pending; must_finish || !parser_.is_accepting(set_id); must_finish = false) {
      if (ls == DEAD || !lexer_.accepts(ls) || !seen.insert(set_id, ls))
        fail("captures: the input is not a complete sentence of the grammar", pos);
      std::tie(set_id, ls) = finish(set_id, ls, pos);
      if (set_id == DEAD_SET) fail("captures: the input is not a complete sentence of the grammar", pos);
    }
  }

 private:
  LexParser& lp_;
  LexerDFA& lexer_;
  EarleyParser& parser_;
  Trace& out_;
  uint32_t start_ = 0;  // where the current lexeme began
  std::vector<int32_t> real_;

  // Ends the lexeme read up to lexer state s at byte `end`, listing it when the parser took a
  // grammar lexeme (a skip moves the parser nowhere and is not listed).
  std::pair<int32_t, StateId> finish(int32_t set_id, StateId s, uint32_t end) {
    if (set_id == DEAD_SET) return {DEAD_SET, DEAD};
    const std::vector<uint32_t>& accepting = lexer_.state(s).accepting;
    auto r = lp_.finish_accepted(set_id, accepting);
    if (r.first != DEAD_SET) {
      const std::vector<int32_t>& expected = parser_.expected(set_id);
      real_.clear();
      for (uint32_t g : accepting)
        for (int32_t loc : lp_.locals_of(g))
          if (!lp_.is_skip(loc) && std::binary_search(expected.begin(), expected.end(), loc)) real_.push_back(loc);
      std::sort(real_.begin(), real_.end());
      real_.erase(std::unique(real_.begin(), real_.end()), real_.end());
      if (!real_.empty()) out_.add(start_, end, real_);
    }
    start_ = end;
    return r;
  }
};

// Pass 2: the Earley sets over the trace's lexemes, one flat array: set k's entries are
// entries[off[k] .. off[k + 1]), (symbol after the dot, item) sorted, so the items waiting for
// a symbol are one range; its completions (nonterminal, origin) likewise in done.
class Chart {
 public:
  Chart(const CaptureTable& t, const Trace& trace, const CaptureLimits& limits)
      : t_(t), trace_(trace), limits_(limits) {}

  void build() {
    const size_t n = trace_.size();
    std::vector<int32_t> predicted(t_.n_nonterminals(), -1);  // the set that last predicted it
    std::vector<Item> kernel{item(t_.start_dr(), 0)};
    for (size_t k = 0; k <= n; k++) {
      FlatMap<uint8_t> here;
      std::vector<Item> items, todo;
      std::vector<std::pair<int32_t, int32_t>> done;
      auto add = [&](Item it) {
        step();
        if (!here.emplace(it, 1).second) return;
        if (entries_.size() + items.size() >= limits_.max_items)
          throw LimitError("max_capture_items", limits_.max_items,
                           "captures: the positional parse exceeded max_capture_items=" +
                               std::to_string(limits_.max_items) + " (a long or highly ambiguous input)");
        items.push_back(it);
        todo.push_back(it);
      };
      for (Item it : kernel) add(it);
      while (!todo.empty()) {
        Item it = todo.back();
        todo.pop_back();
        int32_t dr = item_dr(it);
        uint32_t origin = item_origin(it);
        int32_t sym = t_.symbol(dr);
        if (sym == NO_SYMBOL) {
          int32_t lhs = t_.lhs(dr);
          done.emplace_back(lhs, int32_t(origin));
          // (origin == k: the items here waiting for lhs moved on when they were predicted)
          if (origin < k)
            for (auto [b, e] = waiting(origin, lhs); b != e; ++b) add(item(item_dr(b->second) + 1, item_origin(b->second)));
        } else if (sym >= 0) {
          if (predicted[size_t(sym)] != int32_t(k)) {
            predicted[size_t(sym)] = int32_t(k);
            for (int32_t first : t_.rule_starts(sym)) add(item(first, uint32_t(k)));
          }
          if (t_.nullable(sym)) add(item(dr + 1, origin));  // Aycock & Horspool
        }
      }
      for (Item it : items) entries_.emplace_back(t_.symbol(item_dr(it)), it);
      std::sort(entries_.begin() + long(off_.back()), entries_.end());
      off_.push_back(entries_.size());
      std::sort(done.begin(), done.end());
      done.erase(std::unique(done.begin(), done.end()), done.end());
      done_.insert(done_.end(), done.begin(), done.end());
      done_off_.push_back(done_.size());
      if (k == n) break;
      kernel.clear();
      for (uint32_t i = trace_.lex_off[k]; i < trace_.lex_off[k + 1]; i++)
        for (auto [b, e] = waiting(k, -1 - trace_.lexemes[i]); b != e; ++b)
          kernel.push_back(item(item_dr(b->second) + 1, item_origin(b->second)));
      if (kernel.empty()) throw CaptureError("captures: the lexeme there does not continue the parse", trace_.start[k]);
    }
  }

  // Walks back from the roots; the used (position, lexeme) and (nonterminal, start, end).
  void used(bool final, uint64_t end_byte, std::vector<std::pair<uint32_t, int32_t>>& lexemes,
            std::vector<std::tuple<int32_t, uint32_t, uint32_t>>& completions) {
    const uint32_t n = uint32_t(trace_.size());
    build_index();
    std::vector<std::pair<size_t, uint32_t>> stack;  // (entry, its set)
    if (final) {
      int64_t root = find(n, item(t_.accept_dr(), 0));
      if (root < 0) throw CaptureError("captures: the input is not a complete sentence of the grammar", end_byte);
      stack.emplace_back(size_t(root), n);
    } else {
      for (size_t i = off_[n]; i < off_[n + 1]; i++) stack.emplace_back(i, n);
    }
    std::vector<bool> seen(entries_.size(), false);
    while (!stack.empty()) {
      auto [e, k] = stack.back();
      stack.pop_back();
      if (seen[e]) continue;
      seen[e] = true;
      step();
      int32_t dr = item_dr(entries_[e].second);
      uint32_t origin = item_origin(entries_[e].second);
      if (t_.symbol(dr) == NO_SYMBOL) completions.emplace_back(t_.lhs(dr), origin, k);
      if (t_.at_start(dr)) continue;
      int32_t prev = dr - 1, sym = t_.symbol(prev);
      if (sym < 0) {
        int32_t lex = -1 - sym;
        if (k > origin && trace_.has(k - 1, lex)) {
          int64_t p = find(k - 1, item(prev, origin));
          if (p >= 0) {
            lexemes.emplace_back(k - 1, lex);
            stack.emplace_back(size_t(p), k - 1);
          }
        }
        continue;
      }
      auto b = done_.begin() + long(done_off_[k]), end = done_.begin() + long(done_off_[k + 1]);
      for (auto it = std::lower_bound(b, end, std::make_pair(sym, int32_t(origin))); it != end && it->first == sym; ++it) {
        step();
        uint32_t m = uint32_t(it->second);  // origin <= m <= k by the range and the chart
        int64_t p = find(m, item(prev, origin));
        if (p < 0) continue;
        for (int32_t rule_end : t_.rule_ends(sym)) {
          int64_t c = find(k, item(rule_end, m));
          if (c >= 0) stack.emplace_back(size_t(c), k);
        }
        stack.emplace_back(size_t(p), m);
      }
    }
  }

 private:
  using Entry = std::pair<int32_t, Item>;
  const CaptureTable& t_;
  const Trace& trace_;
  CaptureLimits limits_;
  uint64_t steps_ = 0;
  std::vector<Entry> entries_;
  std::vector<size_t> off_{0};
  std::vector<std::pair<int32_t, int32_t>> done_;
  std::vector<size_t> done_off_{0};
  // (set, item) -> 1 + its entry: open addressing, a slot checked against entries_ and off_
  std::vector<uint32_t> index_;
  size_t index_mask_ = 0;

  static size_t slot_of(size_t k, Item it) {
    uint64_t h = (it ^ (uint64_t(k) * 0xD6E8FEB86659FD93ull)) * 0x9E3779B97F4A7C15ull;
    return size_t(h ^ (h >> 32));
  }
  void build_index() {
    size_t cap = 64;
    while (cap < 2 * entries_.size()) cap *= 2;
    index_.assign(cap, 0);
    index_mask_ = cap - 1;
    for (size_t k = 0; k + 1 < off_.size(); k++)
      for (size_t e = off_[k]; e < off_[k + 1]; e++) {
        size_t i = slot_of(k, entries_[e].second) & index_mask_;
        while (index_[i]) i = (i + 1) & index_mask_;
        index_[i] = uint32_t(e + 1);
      }
  }

  void step() {
    if (++steps_ > limits_.max_steps)
      throw LimitError("max_capture_steps", limits_.max_steps,
                       "captures: the positional parse exceeded max_capture_steps=" +
                           std::to_string(limits_.max_steps) + " (a long or highly ambiguous input)");
  }
  std::pair<std::vector<Entry>::const_iterator, std::vector<Entry>::const_iterator> waiting(size_t k, int32_t sym) const {
    auto b = entries_.begin() + long(off_[k]), e = entries_.begin() + long(off_[k + 1]);
    auto lo = std::lower_bound(b, e, Entry(sym, 0));
    auto hi = std::lower_bound(lo, e, Entry(sym + 1, 0));
    return {lo, hi};
  }
  int64_t find(size_t k, Item it) const {  // the entry of it in set k, or -1 (after build_index)
    for (size_t i = slot_of(k, it) & index_mask_; index_[i]; i = (i + 1) & index_mask_) {
      size_t e = index_[i] - 1;
      if (entries_[e].second == it && e >= off_[k] && e < off_[k + 1]) return int64_t(e);
    }
    return -1;
  }
};

// The length of the value of a stop=/suffix= lexeme's match [p, p + n): the shortest prefix
// matching the body whose rest matches the tail (all of it when none does). Under store_mutex().
size_t value_length(RegexStore& rs, const LexemeCapture& c, const uint8_t* p, size_t n) {
  if (c.tail == kNoRegex || c.body == kNoRegex) return n;
  NodeId body = c.body;
  for (size_t k = 0; k <= n && body != NOTHING; k++) {
    if (rs.nullable(body) && rs.matches(c.tail, p + k, n - k)) return k;
    if (k < n) body = rs.derivative(body, p[k]);
  }
  return n;
}

}  // namespace

std::vector<Capture> read_captures(LexParser& lp, const CaptureTable& table, const std::string& data,
                                   const std::vector<CapturePiece>& pieces, bool final,
                                   const CaptureLimits& limits) {
  if (data.size() >= UINT32_MAX) throw std::invalid_argument("captures: the input is 4 GiB or more");
  CaptureLimits bounded = limits;  // entries are indexed by uint32_t
  bounded.max_items = std::min<uint64_t>(limits.max_items, uint64_t(1) << 31);
  Trace trace;
  {
    std::lock_guard<std::recursive_mutex> g(lp.mu());
    Replay(lp, trace).run(data, pieces, final);
  }
  Chart chart(table, trace, bounded);
  chart.build();
  std::vector<std::pair<uint32_t, int32_t>> lexemes;
  std::vector<std::tuple<int32_t, uint32_t, uint32_t>> completions;
  chart.used(final, data.size(), lexemes, completions);
  std::sort(lexemes.begin(), lexemes.end());
  lexemes.erase(std::unique(lexemes.begin(), lexemes.end()), lexemes.end());
  std::sort(completions.begin(), completions.end());
  completions.erase(std::unique(completions.begin(), completions.end()), completions.end());

  struct Keyed {
    uint32_t end, start, rank;
    int32_t name;
  };
  std::vector<Keyed> out;
  {
    std::lock_guard<std::recursive_mutex> g(store_mutex());
    RegexStore& rs = lp.lexer().regex();
    const auto* bytes = reinterpret_cast<const uint8_t*>(data.data());
    for (auto [k, lex] : lexemes) {
      const LexemeCapture& c = table.lexeme(lex);
      if (c.name < 0 && c.stop_name < 0) continue;
      uint32_t lo = trace.start[k], hi = trace.end[k];
      uint32_t value = lo + uint32_t(value_length(rs, c, bytes + lo, hi - lo));
      if (c.name >= 0) out.push_back({value, lo, 0, c.name});
      if (c.stop_name >= 0) out.push_back({hi, value, 0, c.stop_name});
    }
  }
  const size_t n = trace.size();
  for (auto [nt, j, k] : completions) {
    int32_t name = table.name_of(nt);
    if (name < 0) continue;
    uint32_t lo, hi;
    if (k > j) {
      lo = trace.start[j];
      hi = trace.end[k - 1];
    } else {  // an empty completion: at the boundary before lexeme j
      lo = hi = j < n ? trace.start[j] : (n ? trace.end[n - 1] : 0);
    }
    out.push_back({hi, lo, 1 + table.rank(nt), name});
  }
  std::sort(out.begin(), out.end(), [](const Keyed& a, const Keyed& b) {
    return std::make_tuple(a.end, b.start, a.rank, a.name) < std::make_tuple(b.end, a.start, b.rank, b.name);
  });
  std::vector<Capture> result;
  result.reserve(out.size());
  for (const Keyed& c : out) result.push_back({c.name, c.start, c.end});
  return result;
}

}  // namespace lexguide
