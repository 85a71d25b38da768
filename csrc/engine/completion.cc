// Shortest completions from the grammar's structure; see completion.h.
#include "engine/completion.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <unordered_set>

#include "engine/limits.h"

namespace lexguide {

namespace {
constexpr uint64_t kNone = UINT64_MAX / 4;  // "no completion"; sums of two stay below overflow

uint64_t add(uint64_t a, uint64_t b) { return a >= kNone || b >= kNone ? kNone : std::min(kNone, a + b); }
}  // namespace

void CompletionSearch::prepare() {
  if (ready_) return;
  const EarleyParser& p = lp_.parser();
  const GrammarRules& g = p.rules();
  size_t n_lex = g.lexeme_class.size();
  lex_len_.assign(n_lex, kNone);
  lex_str_.assign(n_lex, std::string());
  {
    std::lock_guard<std::recursive_mutex> lock(store_mutex());
    RegexStore& rs = lp_.lexer().regex();
    for (size_t i = 0; i < n_lex && i < lp_.n_lexemes(); i++) {
      const LexemeSpec& spec = lp_.lexeme(int32_t(i));
      if (spec.token_set || spec.rx == NOTHING) continue;  // special tokens are not bytes
      std::string w;
      if (rs.shortest(spec.rx, kCompletionSearchStates, w) && w.size() <= kMaxCompletionBytes) {
        lex_len_[i] = w.size();
        lex_str_[i] = std::move(w);
      }
    }
  }
  // shortest derivations: lengths only fall, and a rule is taken only when it is strictly
  // shorter, so the chosen rules never form a cycle
  nt_len_.assign(size_t(g.n_nonterminals), kNone);
  nt_rule_.assign(size_t(g.n_nonterminals), -1);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < g.lhs.size(); r++) {
      uint64_t sum = 0;
      for (int32_t sym : g.rhs[r])
        if ((sum = add(sum, symbol_len(sym))) >= kNone) break;
      size_t a = size_t(g.lhs[r]);
      if (sum < nt_len_[a] && sum <= kMaxCompletionBytes) {
        nt_len_[a] = sum;
        nt_rule_[a] = int32_t(r);
        changed = true;
      }
    }
  }
  rest_.assign(p.n_dotted(), 0);
  for (size_t r = 0; r < g.lhs.size(); r++) {
    size_t first = size_t(p.rule_first_dr(r)), n = g.rhs[r].size();
    for (size_t dot = n; dot-- > 0;) rest_[first + dot] = add(symbol_len(g.rhs[r][dot]), rest_[first + dot + 1]);
  }
  ready_ = true;
}

uint64_t CompletionSearch::symbol_len(int32_t sym) const {
  if (sym >= 0) return nt_len_[size_t(sym)];
  size_t lex = size_t(-1 - sym);
  return lex < lex_len_.size() ? lex_len_[lex] : kNone;
}

const CompletionSearch::SetPrice& CompletionSearch::price(int32_t set_id) {
  auto hit = sets_.find(set_id);
  if (hit != sets_.end()) return hit->second;
  // origins are priced first (an explicit stack: chains of origins can be long); an origin met
  // again while its own origins are pending (no such cycle is expected) counts as unpriced
  std::vector<int32_t> stack{set_id};
  std::unordered_set<int32_t> visiting;
  std::vector<std::pair<int32_t, int32_t>> items;
  while (!stack.empty()) {
    int32_t k = stack.back();
    if (sets_.count(k)) {
      stack.pop_back();
      continue;
    }
    lp_.parser().incomplete_items(k, items);
    bool wait = false;
    if (visiting.insert(k).second)
      for (auto& [dr, o] : items)
        if (o >= 0 && o != k && !sets_.count(o) && !visiting.count(o)) {
          stack.push_back(o);
          wait = true;
        }
    if (wait) continue;
    compute(k, items);
    stack.pop_back();
  }
  return sets_.at(set_id);
}

void CompletionSearch::compute(int32_t k, const std::vector<std::pair<int32_t, int32_t>>& items) {
  const EarleyParser& p = lp_.parser();
  SetPrice sp;
  auto up_cost = [&](int32_t set, int32_t nt) -> uint64_t {
    const std::unordered_map<int32_t, Up>* ups = nullptr;
    if (set == k) {
      ups = &sp.up;
    } else {
      auto s = sets_.find(set);
      if (s == sets_.end()) return kNone;
      ups = &s->second.up;
    }
    auto u = ups->find(nt);
    return u == ups->end() ? kNone : u->second.cost;
  };
  // up(k, B): items from other sets (and the start item) give starting costs; predicted items
  // are edges lhs -> B of weight min|β|, relaxed in Dijkstra order
  struct Edge { int32_t to; uint64_t w; int32_t dr; };
  std::unordered_map<int32_t, std::vector<Edge>> edges;
  using Entry = std::pair<uint64_t, int32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  auto relax = [&](int32_t b, uint64_t c, int32_t dr, int32_t origin) {
    if (c >= kNone) return;
    auto it = sp.up.find(b);
    if (it != sp.up.end() && it->second.cost <= c) return;
    sp.up[b] = Up{c, dr, origin};
    queue.push({c, b});
  };
  for (auto& [dr, o] : items) {
    int32_t sym = p.dr_symbol(dr);
    if (sym < 0) continue;  // a lexeme (incomplete items always have a symbol)
    uint64_t base = rest_[size_t(dr) + 1];
    if (o == ROOT) relax(sym, base, dr, ROOT);
    else if (o == k) edges[p.dr_lhs(dr)].push_back(Edge{sym, base, dr});
    else relax(sym, add(base, up_cost(o, p.dr_lhs(dr))), dr, o);
  }
  while (!queue.empty()) {
    auto [c, a] = queue.top();
    queue.pop();
    if (sp.up[a].cost != c) continue;  // improved since it was queued
    auto e = edges.find(a);
    if (e == edges.end()) continue;
    for (const Edge& x : e->second) relax(x.to, add(c, x.w), x.dr, k);
  }
  sp.boundary = kNone;
  if (p.is_accepting(k)) {
    sp.boundary = 0;
  } else {
    for (auto& [dr, o] : items) {
      uint64_t c = add(rest_[size_t(dr)], o == ROOT ? 0 : up_cost(o, p.dr_lhs(dr)));
      if (c < sp.boundary) {
        sp.boundary = c;
        sp.dr = dr;
        sp.origin = o;
      }
    }
  }
  up_entries_ += sp.up.size() + 1;
  sets_.emplace(k, std::move(sp));
}

bool CompletionSearch::emit_rest(int32_t dr, std::string& out, std::vector<uint32_t>& junctions) const {
  const EarleyParser& p = lp_.parser();
  const GrammarRules& g = p.rules();
  std::vector<int32_t> todo;
  for (int32_t d = dr; p.dr_symbol(d) != NO_SYMBOL; d++) todo.push_back(p.dr_symbol(d));
  std::reverse(todo.begin(), todo.end());
  while (!todo.empty()) {
    int32_t sym = todo.back();
    todo.pop_back();
    if (sym < 0) {
      size_t lex = size_t(-1 - sym);
      if (lex >= lex_len_.size() || lex_len_[lex] >= kNone) return false;
      if (!out.empty() && (junctions.empty() || junctions.back() != out.size()))
        junctions.push_back(uint32_t(out.size()));
      out += lex_str_[lex];
    } else {
      int32_t r = nt_rule_[size_t(sym)];
      if (r < 0) return false;
      const std::vector<int32_t>& rhs = g.rhs[size_t(r)];
      todo.insert(todo.end(), rhs.rbegin(), rhs.rend());
    }
    if (out.size() > kMaxCompletionBytes || todo.size() > kMaxCompletionBytes) return false;
  }
  return true;
}

bool CompletionSearch::emit_boundary(int32_t set_id, std::string& out, std::vector<uint32_t>& junctions) {
  const SetPrice& sp = price(set_id);
  if (sp.boundary >= kNone) return false;
  if (sp.dr < 0) return true;  // accepting
  if (!emit_rest(sp.dr, out, junctions)) return false;
  const EarleyParser& p = lp_.parser();
  int32_t a = p.dr_lhs(sp.dr), o = sp.origin;
  // the minimising items form a tree (Dijkstra within a set, earlier sets across): the walk to
  // ROOT ends; the bound only guards against a broken invariant
  for (size_t steps = 0; o != ROOT; steps++) {
    if (steps > up_entries_) return false;  // each step is a distinct (set, nonterminal)
    auto s = sets_.find(o);
    if (s == sets_.end()) return false;
    auto u = s->second.up.find(a);
    if (u == s->second.up.end() || !emit_rest(u->second.dr + 1, out, junctions)) return false;
    a = p.dr_lhs(u->second.dr);
    o = u->second.origin;
  }
  return true;
}

bool CompletionSearch::candidate(ParseState st, std::string& out, std::vector<uint32_t>& junctions) {
  out.clear();
  junctions.clear();
  if (up_entries_ > kCompletionPriceEntries) {  // bounded memory: start the memo afresh
    sets_.clear();
    up_entries_ = 0;
  }
  prepare();
  if (st.lexer_state == DEAD) return !st.pending && emit_boundary(st.set_id, out, junctions);
  // finish the current lexeme: breadth first over the DFA, each accepting state priced
  LexerDFA& lx = lp_.lexer();
  struct Node { StateId s; uint32_t parent; uint8_t byte; };
  std::vector<Node> nodes{{st.lexer_state, UINT32_MAX, 0}};
  std::unordered_set<StateId> seen{st.lexer_state};
  const std::array<uint8_t, 256>& order = preferred_bytes();
  uint64_t best = kNone;
  size_t best_node = 0;
  int32_t best_set = DEAD_SET;
  size_t lo = 0;
  for (uint64_t d = 0; lo < nodes.size() && d < best; d++) {
    size_t hi = nodes.size();
    for (size_t i = lo; i < hi; i++) {
      StateId s = nodes[i].s;
      if (lx.accepts(s)) {
        int32_t ns = lp_.finish(st.set_id, s).first;
        if (ns != DEAD_SET) {
          uint64_t c = add(d, price(ns).boundary);
          if (c < best) {
            best = c;
            best_node = i;
            best_set = ns;
          }
        }
        if (lx.accepts_lazy(s) && (d > 0 || st.pending)) continue;  // the lexeme ends here
      }
      if (d + 1 >= best || nodes.size() >= kCompletionSearchStates) continue;
      for (uint8_t b : order) {
        StateId t = lx.next(s, b);
        if (t != DEAD && seen.insert(t).second) nodes.push_back({t, uint32_t(i), b});
      }
    }
    lo = hi;
  }
  if (best >= kNone) return false;
  for (size_t i = best_node; nodes[i].parent != UINT32_MAX; i = nodes[i].parent) out.push_back(char(nodes[i].byte));
  std::reverse(out.begin(), out.end());
  if (st.pending || !out.empty()) junctions.push_back(uint32_t(out.size()));  // the lexeme ends here
  return emit_boundary(best_set, out, junctions);
}

size_t CompletionSearch::memory_bytes() const {
  size_t n = up_entries_ * 48 + sets_.size() * 96 + rest_.size() * 8 + nt_len_.size() * 12;
  for (const std::string& s : lex_str_) n += s.size() + 32;
  return n;
}

}  // namespace lexguide
