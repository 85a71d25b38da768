// Budget-aware masks: completions counted in tokens, and masks narrowed to the tokens after
// which a completion still fits in what is left; see mask.h and completion.h.
#include <algorithm>
#include <map>

#include "engine/mask.h"

namespace lexguide {

bool MaskEngine::replay(ParseState st, std::string& w, const std::vector<uint32_t>& junctions,
                        std::vector<ParseState>& states) {
  // at a junction the previous lexeme must end: if the next byte would extend it instead
  // (greedy lexing), a space or newline that ends it goes in between when the grammar takes one
  std::string out;
  out.reserve(w.size() + 8);
  states.assign(1, st);
  size_t j = 0;
  for (size_t i = 0; i < w.size(); i++) {
    unsigned char b = static_cast<unsigned char>(w[i]);
    while (j < junctions.size() && junctions[j] < i) j++;
    ParseState t = st;
    bool ok = step(t, b);
    LexerDFA& lx = lp_->lexer();
    bool extends = st.pending && st.lexer_state != DEAD && lx.next(st.lexer_state, b) != DEAD;
    if (j < junctions.size() && junctions[j] == i && extends) {
      for (unsigned char sep : {' ', '\n'}) {
        ParseState u = st, v;
        if (lx.next(st.lexer_state, sep) != DEAD || !step(u, sep) || !step(v = u, b)) continue;
        out.push_back(char(sep));
        states.push_back(u);
        t = v;
        ok = true;
        break;
      }
    }
    if (!ok) return false;
    st = t;
    out.push_back(char(b));
    states.push_back(st);
  }
  w.swap(out);
  return lp_->is_accepting(st);
}

bool MaskEngine::byte_search(ParseState st0, std::string& out) {
  // breadth first over bytes, at most kBudgetWindow deep and kCompletionSearchStates wide
  struct Node { ParseState st; uint32_t parent; uint8_t byte; };
  std::vector<Node> nodes{{st0, UINT32_MAX, 0}};
  std::unordered_map<uint64_t, bool> seen{{st0.key(), true}};
  size_t lo = 0, found = SIZE_MAX;
  for (uint32_t d = 1; d <= kBudgetWindow && found == SIZE_MAX && lo < nodes.size(); d++) {
    size_t hi = nodes.size();
    for (size_t i = lo; i < hi && found == SIZE_MAX && nodes.size() <= kCompletionSearchStates; i++)
      for (unsigned b = 0; b < 256; b++) {
        ParseState t = nodes[i].st;
        if (!step(t, b) || !seen.emplace(t.key(), true).second) continue;
        nodes.push_back({t, uint32_t(i), uint8_t(b)});
        if (lp_->is_accepting(t)) {
          found = nodes.size() - 1;
          break;
        }
      }
    lo = hi;
  }
  if (found == SIZE_MAX) return false;
  out.clear();
  for (size_t i = found; nodes[i].parent != UINT32_MAX; i = nodes[i].parent) out.push_back(char(nodes[i].byte));
  std::reverse(out.begin(), out.end());
  return true;
}

std::vector<uint32_t> MaskEngine::greedy_split(const std::string& w) const {
  const TokenTrie& trie = walker_->vocab().trie();
  std::vector<uint32_t> lengths;
  for (size_t i = 0; i < w.size();) {
    // the longest token that is a prefix of w[i:]
    size_t best = 0;
    uint32_t node = 0;
    for (size_t j = i; j < w.size(); j++) {
      uint32_t c = node + 1, end = node + trie.size(node), next = 0;
      for (; c < end; c += trie.size(c))
        if (trie.byte(c) == uint8_t(w[j])) { next = c; break; }
      if (!next) break;
      node = next;
      if (trie.tokens_begin(node) != trie.tokens_end(node)) best = j + 1 - i;
    }
    if (!best) best = 1;  // no token: count the byte as one (byte-complete vocabularies)
    lengths.push_back(uint32_t(best));
    i += best;
  }
  return lengths;
}

uint32_t MaskEngine::min_completion(ParseState st0) {
  std::lock_guard<std::recursive_mutex> g(lp_->mu());
  uint64_t key = st0.key();
  auto hit = completion_.find(key);
  if (hit != completion_.end()) return hit->second;
  if (lp_->is_accepting(st0)) return completion_[key] = 0;
  if (completion_.size() > kCompletionPriceEntries) completion_.clear();
  std::string w;
  std::vector<uint32_t> junctions;
  std::vector<ParseState> states;
  bool ok = search_->candidate(st0, w, junctions) && replay(st0, w, junctions, states);
  if (ok) {
    completions_structural++;
  } else {
    junctions.clear();
    ok = byte_search(st0, w) && replay(st0, w, junctions, states);
    if (!ok) {
      completions_none++;
      return completion_[key] = UINT32_MAX;
    }
    completions_byte_search++;
  }
  // every state after a whole token of the split gets the rest of the split (or less)
  std::vector<uint32_t> split = greedy_split(w);
  auto note = [&](ParseState s, uint32_t n) {
    if (n && lp_->is_accepting(s)) n = 0;
    auto [it, fresh] = completion_.emplace(s.key(), n);
    if (!fresh && n < it->second) it->second = n;
  };
  note(st0, uint32_t(split.size()));
  size_t off = 0;
  for (size_t k = 0; k + 1 < split.size(); k++) {
    off += split[k];
    note(states[off], uint32_t(split.size() - k - 1));
  }
  return completion_[key];
}

std::shared_ptr<const MaskEngine::BudgetLevels> MaskEngine::budget_levels(ParseState st,
                                                                           const std::vector<uint32_t>& full) {
  std::lock_guard<std::recursive_mutex> g(lp_->mu());
  auto hit = levels_.find(st.key());
  if (hit != levels_.end()) return hit->second;
  budget_levels_computed++;
  const Vocab& v = walker_->vocab();
  size_t n_words = full.size();
  // the allowed tokens by the tokens a completion takes after them (ids, or a bitmask)
  struct Tokens { std::vector<uint32_t> ids, words; };
  std::map<uint32_t, Tokens> by_cost;
  std::vector<uint32_t> handled(n_words, 0);
  for (uint32_t id : v.eos_ids()) {
    set_bit(handled.data(), id);
    if (has_bit(full.data(), id)) by_cost[0].ids.push_back(id);  // the grammar is complete here
  }
  // tokens that stay inside the current lexeme: one cost per end state (cached walk)
  if (st.lexer_state != DEAD && (st.pending || !lp_->lexer().accepts_lazy(st.lexer_state))) {
    for (const InsideGroup& grp : *walker_->inside_groups(st.lexer_state)) {
      uint32_t cost = min_completion(ParseState{st.set_id, grp.end, true});
      Tokens& acc = by_cost[cost];
      if (!grp.words.empty()) {
        if (acc.words.empty()) acc.words.assign(n_words, 0);
        for (size_t w = 0; w < n_words; w++) {
          acc.words[w] |= grp.words[w] & full[w];
          handled[w] |= grp.words[w];
        }
      }
      for (uint32_t id : grp.ids) {
        set_bit(handled.data(), id);
        if (has_bit(full.data(), id)) acc.ids.push_back(id);
      }
    }
  }
  // the others (tokens ending lexemes, special tokens): one by one
  for (size_t w = 0; w < n_words; w++)
    for (uint32_t bits = full[w] & ~handled[w]; bits; bits &= bits - 1) {
      uint32_t id = uint32_t(w * 32 + unsigned(__builtin_ctz(bits)));
      std::optional<ParseState> ns;
      if (v.is_special(id) || !token_lexemes_of(id).empty()) {
        ns = advance_token(st, id);
      } else {
        ParseState t = st;
        bool alive = true;
        for (unsigned char b : v.bytes(id))
          if (!(alive = step(t, b))) break;
        if (alive) ns = t;
      }
      by_cost[ns ? min_completion(*ns) : UINT32_MAX].ids.push_back(id);
    }
  auto levels = std::make_shared<BudgetLevels>();
  for (auto& [cost, acc] : by_cost) {
    bool any = !acc.ids.empty();
    for (size_t w = 0; w < acc.words.size() && !any; w++) any = acc.words[w] != 0;
    if (!any) continue;
    if (levels->cheapest == UINT32_MAX) {  // the cheapest level is never removed
      levels->cheapest = cost;
      continue;
    }
    BudgetLevel lv{cost, std::move(acc.ids), std::move(acc.words)};
    if (!lv.words.empty() || lv.ids.size() >= n_words) {  // one representation: a bitmask
      if (lv.words.empty()) lv.words.assign(n_words, 0);
      for (uint32_t id : lv.ids) set_bit(lv.words.data(), id);
      std::vector<uint32_t>().swap(lv.ids);
    }
    levels->bytes += 64 + 4 * (lv.ids.size() + lv.words.size());
    levels->above.push_back(std::move(lv));
  }
  if (levels_bytes_ + levels->bytes > kBudgetCacheBytes) {
    levels_.clear();
    levels_bytes_ = 0;
  }
  levels_bytes_ += levels->bytes;
  levels_.emplace(st.key(), levels);
  return levels;
}

bool MaskEngine::budget_mask(ParseState st, uint32_t left, std::vector<uint32_t>& out) {
  uint32_t c = min_completion(st);
  if (c == UINT32_MAX || uint64_t(left) >= uint64_t(c) + std::max(kBudgetMargin, c)) return false;
  // c counts this token, left the ones after it
  if ((uint64_t(left) + 1) * kBudgetHopeless < c) return false;  // nothing fits: the plain mask
  std::shared_ptr<const std::vector<uint32_t>> full = mask(st);
  std::shared_ptr<const BudgetLevels> levels = budget_levels(st, *full);
  if (left < levels->cheapest) return false;  // nothing fits: the plain mask (the output will be cut)
  auto first = std::upper_bound(levels->above.begin(), levels->above.end(), left,
                                [](uint32_t l, const BudgetLevel& lv) { return l < lv.cost; });
  if (first == levels->above.end()) return false;  // every allowed token fits
  out = *full;
  for (auto it = first; it != levels->above.end(); ++it) {
    for (uint32_t id : it->ids) out[id >> 5] &= ~(uint32_t(1) << (id & 31));
    for (size_t w = 0; w < it->words.size(); w++) out[w] &= ~it->words[w];
  }
  return true;
}

}  // namespace lexguide
