// Canonical Earley sets; see earley.h.
#include "engine/earley.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <unordered_set>

#include "engine/limits.h"

namespace lexguide {

std::vector<uint32_t> productive_rules(int32_t n_nonterminals, const std::vector<bool>& lexeme_ok,
                                       const std::vector<int32_t>& lhs_of,
                                       const std::vector<std::vector<int32_t>>& rhs_of) {
  if (n_nonterminals < 0) throw std::invalid_argument("negative nonterminal count");
  if (lhs_of.size() != rhs_of.size()) throw std::invalid_argument("one left side per rule");
  const size_t n_rules = lhs_of.size();
  const size_t n_nt = size_t(n_nonterminals), n_lex = lexeme_ok.size();
  std::vector<char> ok(n_nt, 0);
  std::vector<uint32_t> missing(n_rules, 0);
  // waiting[nt]: the rules with an occurrence of nt on the right (once per occurrence), as a
  // linked list over occurrence records so the whole index is two flat arrays
  std::vector<int64_t> head(n_nt, -1);
  std::vector<std::pair<uint32_t, int64_t>> occ;  // (rule, next occurrence of the same nt)
  std::vector<int32_t> todo;
  auto complete = [&](int32_t nt) {
    todo.push_back(nt);
    while (!todo.empty()) {
      int32_t x = todo.back();
      todo.pop_back();
      if (ok[size_t(x)]) continue;
      ok[size_t(x)] = 1;
      for (int64_t o = head[size_t(x)]; o >= 0; o = occ[size_t(o)].second) {
        uint32_t r = occ[size_t(o)].first;
        if (--missing[r] == 0) todo.push_back(lhs_of[r]);
      }
      head[size_t(x)] = -1;
    }
  };
  // rules are visited in order and a completed rule's left side propagates at once, so a
  // grammar built bottom-up (children's rules first) needs almost no waiting
  for (size_t i = 0; i < n_rules; ++i) {
    const int32_t lhs = lhs_of[i];
    const std::vector<int32_t>& rhs = rhs_of[i];
    if (lhs < 0 || size_t(lhs) >= n_nt) throw std::invalid_argument("rule left side out of range");
    uint32_t n = 0;
    for (int32_t x : rhs) {
      if (x < 0) {
        size_t lx = size_t(-1 - int64_t(x));
        if (lx >= n_lex) throw std::invalid_argument("lexeme out of range");
        if (!lexeme_ok[lx]) ++n;  // never productive: the rule waits for ever
      } else {
        if (size_t(x) >= n_nt) throw std::invalid_argument("nonterminal out of range");
        if (!ok[size_t(x)]) {
          ++n;
          occ.emplace_back(uint32_t(i), head[size_t(x)]);
          head[size_t(x)] = int64_t(occ.size() - 1);
        }
      }
    }
    missing[i] = n;
    if (n == 0 && !ok[size_t(lhs)]) complete(lhs);
  }
  std::vector<uint32_t> out;
  for (size_t i = 0; i < n_rules; ++i)
    if (missing[i] == 0 && ok[size_t(lhs_of[i])]) out.push_back(uint32_t(i));
  return out;
}

EarleyParser::EarleyParser(GrammarRules g) : g_(std::move(g)) {
  size_t n_rules = g_.lhs.size();
  if (g_.rhs.size() != n_rules) throw std::invalid_argument("grammar: lhs and rhs differ in length");
  rules_of_.resize(size_t(g_.n_nonterminals));
  predicts_.resize(size_t(g_.n_nonterminals));
  nt_items_.resize(size_t(g_.n_nonterminals));
  items_ready_.assign(size_t(g_.n_nonterminals), 0);
  for (size_t r = 0; r < n_rules; r++) {
    int32_t lhs = g_.lhs[r];
    if (lhs < 0 || lhs >= g_.n_nonterminals) throw std::invalid_argument("grammar: bad left-hand side");
    rule_first_dr_.push_back(int32_t(dr_next_.size()));
    for (size_t dot = 0; dot <= g_.rhs[r].size(); dot++) {
      int32_t sym = dot < g_.rhs[r].size() ? g_.rhs[r][dot] : NO_SYMBOL;
      if (sym != NO_SYMBOL) {
        if (sym >= g_.n_nonterminals) throw std::invalid_argument("grammar: bad nonterminal in a rule");
        if (sym < 0 && size_t(-1 - sym) >= g_.lexeme_class.size())
          throw std::invalid_argument("grammar: bad lexeme in a rule");
      }
      dr_next_.push_back(sym);
      dr_lhs_.push_back(lhs);
    }
    rules_of_[size_t(lhs)].push_back(rule_first_dr_.back());
  }
  nullable_.assign(size_t(g_.n_nonterminals), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n_rules; r++) {
      if (nullable_[size_t(g_.lhs[r])]) continue;
      bool all = true;
      for (int32_t s : g_.rhs[r])
        if (s < 0 || !nullable_[size_t(s)]) { all = false; break; }
      if (all) { nullable_[size_t(g_.lhs[r])] = true; changed = true; }
    }
  }
  if (g_.start < 0 || g_.start >= g_.n_nonterminals || rules_of_[size_t(g_.start)].empty())
    throw std::invalid_argument("grammar: the start symbol has no rule");
  start_dr_ = rules_of_[size_t(g_.start)][0];
  initial_ = intern({item(start_dr_, ROOT)});
}

void EarleyParser::waiting_for(int32_t set_id, int32_t sym, std::vector<Item>& out) const {
  const Set& s = *sets_[size_t(set_id)];
  auto it = std::lower_bound(s.waiting.begin(), s.waiting.end(), std::make_pair(sym, Item(0)));
  for (; it != s.waiting.end() && it->first == sym; ++it) out.push_back(it->second);
  if (s.predictions) {
    auto p = s.predictions->waiting.find(sym);
    if (p != s.predictions->waiting.end())
      for (int32_t dr : p->second) out.push_back(item(dr, set_id));
  }
}

void EarleyParser::incomplete_items(int32_t set_id, std::vector<std::pair<int32_t, int32_t>>& out) const {
  out.clear();
  const Set& s = *sets_[size_t(set_id)];
  for (auto& [sym, it] : s.waiting) out.emplace_back(item_dr(it), item_origin(it));
  if (s.predictions)
    for (auto& [sym, drs] : s.predictions->waiting)
      for (int32_t dr : drs) out.emplace_back(dr, set_id);
}

int32_t EarleyParser::scan(int32_t set_id, const std::vector<int32_t>& lexemes) {
  const bool single = lexemes.size() == 1;
  const uint64_t single_key = single ? (uint64_t(uint32_t(set_id)) << 32) | uint32_t(lexemes[0]) : 0;
  if (single) {
    if (const int32_t* hit = single_scans_.find(single_key)) return *hit;
  } else {
    scan_key_.assign(1, set_id);
    scan_key_.insert(scan_key_.end(), lexemes.begin(), lexemes.end());
    if (const int32_t* hit = multi_scans_.find(scan_key_)) return *hit;
  }
  std::vector<Item>& waiting = scan_waiting_;
  std::vector<Item> kernel;
  for (int32_t lex : lexemes) {
    waiting.clear();
    waiting_for(set_id, -1 - lex, waiting);
    for (Item it : waiting) kernel.push_back(item(item_dr(it) + 1, item_origin(it)));
  }
  int32_t result = kernel.empty() ? DEAD_SET : intern(std::move(kernel));
  if (single) single_scans_.emplace(single_key, result);
  else multi_scans_.emplace(scan_key_, result);  // (scan_key_ as built above: intern() leaves it)
  return result;
}

int32_t EarleyParser::intern(std::vector<Item> kernel) {
  std::sort(kernel.begin(), kernel.end());
  kernel.erase(std::unique(kernel.begin(), kernel.end()), kernel.end());
  if (const int32_t* known = by_kernel_.find(kernel)) return *known;
  if (sets_.size() >= kMaxParserSets)
    throw LimitError("max_parser_states", kMaxParserSets,
                     "grammar parser exceeded max_parser_states=" + std::to_string(kMaxParserSets) +
                         " (deeply nested or highly ambiguous input)");
  std::unique_ptr<Set> set = closure(kernel);
  // lexeme classes of the lexeme whose scan produced this set
  std::vector<int32_t>& classes = classes_;
  classes.clear();
  for (Item k : kernel) {
    int32_t dr = item_dr(k);
    if (dr <= 0) continue;
    int32_t sym = dr_next_[size_t(dr - 1)];
    if (sym != NO_SYMBOL && sym < 0 && dr_lhs_[size_t(dr - 1)] == dr_lhs_[size_t(dr)])
      classes.push_back(g_.lexeme_class[size_t(-1 - sym)]);
  }
  std::sort(classes.begin(), classes.end());
  classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
  set->last_classes = classes;
  // completed items have no future: closures with the same waiting items are one state
  std::vector<Item>& all = signature_;  // (the items are unique already: closure's seen set)
  all.clear();
  for (auto& [sym, it] : set->waiting) all.push_back(it);
  std::sort(all.begin(), all.end());
  all.push_back((uint64_t(set->pred_id) << 1) | uint64_t(set->accepting));
  for (int32_t c : classes) all.push_back(~uint64_t(uint32_t(c)));
  auto [sid, fresh] = by_signature_.emplace(all, int32_t(sets_.size()));
  if (fresh) sets_.push_back(std::move(set));
  const int32_t id = *sid;
  by_kernel_.emplace(kernel, id);
  return id;
}

void EarleyParser::ItemSet::reset() {
  n_ = 0;
  if (++stamp_ == 0) {  // the stamps wrapped: forget every old one
    std::fill(stamps_.begin(), stamps_.end(), 0);
    stamp_ = 1;
  }
}

bool EarleyParser::ItemSet::insert(Item it) {
  if (2 * (n_ + 1) > keys_.size()) grow();
  uint64_t h = it * 0x9E3779B97F4A7C15ull;
  for (size_t i = size_t(h ^ (h >> 29)) & mask_;; i = (i + 1) & mask_) {
    if (stamps_[i] != stamp_) {
      stamps_[i] = stamp_;
      keys_[i] = it;
      n_++;
      return true;
    }
    if (keys_[i] == it) return false;
  }
}

void EarleyParser::ItemSet::grow() {
  std::vector<Item> live;
  live.reserve(n_);
  for (size_t i = 0; i < keys_.size(); i++)
    if (stamps_[i] == stamp_) live.push_back(keys_[i]);
  size_t cap = keys_.empty() ? 64 : 2 * keys_.size();
  keys_.assign(cap, 0);
  stamps_.assign(cap, 0);
  mask_ = cap - 1;
  stamp_ = 1;
  n_ = 0;
  for (Item it : live) insert(it);
}

std::unique_ptr<EarleyParser::Set> EarleyParser::closure(const std::vector<Item>& kernel) {
  auto set = std::make_unique<Set>();
  ItemSet& seen = seen_;
  seen.reset();
  std::vector<int32_t>& predicted = predicted_;  // sorted
  predicted.clear();
  std::vector<Item>& todo = todo_;
  std::vector<Item>& waiting = waiting_;
  todo.assign(kernel.rbegin(), kernel.rend());
  while (!todo.empty()) {
    Item it = todo.back();
    todo.pop_back();
    if (!seen.insert(it)) continue;
    if (seen.size() > kMaxItemsPerSet)
      throw LimitError("max_items_per_set", kMaxItemsPerSet,
                       "resource limit max_items_per_set=" + std::to_string(kMaxItemsPerSet) + " exceeded");
    int32_t dr = item_dr(it), origin = item_origin(it);
    int32_t sym = dr_next_[size_t(dr)];
    if (sym == NO_SYMBOL) {
      if (origin >= 0) {
        waiting.clear();
        waiting_for(origin, dr_lhs_[size_t(dr)], waiting);
        for (Item w : waiting) todo.push_back(item(item_dr(w) + 1, item_origin(w)));
      } else if (origin == ROOT) {
        set->accepting = true;
      }
      continue;
    }
    set->waiting.emplace_back(sym, it);
    if (sym >= 0) {
      if (!std::binary_search(predicted.begin(), predicted.end(), sym)) {
        const std::vector<int32_t>& more = predicted_by(sym);
        merged_.clear();
        std::set_union(predicted.begin(), predicted.end(), more.begin(), more.end(),
                       std::back_inserter(merged_));
        predicted.swap(merged_);
      }
      if (nullable_[size_t(sym)]) todo.push_back(item(dr + 1, origin));
    }
  }
  set->pred_id = predictions_for(predicted);
  set->predictions = pred_blocks_[set->pred_id].get();
  set->n_items = uint32_t(seen.size()) + set->predictions->n_items;
  if (set->n_items > kMaxItemsPerSet)
    throw LimitError("max_items_per_set", kMaxItemsPerSet,
                     "resource limit max_items_per_set=" + std::to_string(kMaxItemsPerSet) + " exceeded");
  std::vector<int32_t> expected = set->predictions->expected;
  std::sort(set->waiting.begin(), set->waiting.end());  // (items are unique: seen)
  for (auto& [sym, it] : set->waiting)
    if (sym < 0) expected.push_back(-1 - sym);
  std::sort(expected.begin(), expected.end());
  expected.erase(std::unique(expected.begin(), expected.end()), expected.end());
  set->expected = std::move(expected);
  return set;
}

const std::vector<int32_t>& EarleyParser::predicted_by(int32_t nt) {
  std::vector<int32_t>& known = predicts_[size_t(nt)];
  if (!known.empty()) return known;
  std::vector<int32_t> found{nt}, todo{nt};
  std::unordered_set<int32_t> in{nt};
  while (!todo.empty()) {
    int32_t x = todo.back();
    todo.pop_back();
    for (auto& [sym, dr] : items_of(x)) {
      int32_t s = dr_next_[size_t(dr)];
      if (s != NO_SYMBOL && s >= 0 && in.insert(s).second) {
        found.push_back(s);
        todo.push_back(s);
      }
    }
  }
  std::sort(found.begin(), found.end());
  known = std::move(found);
  return known;
}

const std::vector<std::pair<int32_t, int32_t>>& EarleyParser::items_of(int32_t nt) {
  std::vector<std::pair<int32_t, int32_t>>& out = nt_items_[size_t(nt)];
  if (items_ready_[size_t(nt)]) return out;
  items_ready_[size_t(nt)] = 1;
  for (int32_t dr : rules_of_[size_t(nt)]) {
    while (true) {
      int32_t sym = dr_next_[size_t(dr)];
      if (sym == NO_SYMBOL) break;
      out.emplace_back(sym, dr);
      if (sym < 0 || !nullable_[size_t(sym)]) break;
      dr++;
    }
  }
  return out;
}

uint32_t EarleyParser::predictions_for(const std::vector<int32_t>& nts) {
  if (const uint32_t* known = pred_ids_.find(nts)) return *known;
  auto p = std::make_unique<Predictions>();
  for (int32_t nt : nts)
    for (auto& [sym, dr] : items_of(nt)) {
      p->waiting[sym].push_back(dr);
      p->n_items++;
    }
  for (auto& [sym, drs] : p->waiting)
    if (sym < 0) p->expected.push_back(-1 - sym);
  std::sort(p->expected.begin(), p->expected.end());
  uint32_t id = uint32_t(pred_blocks_.size());
  pred_blocks_.push_back(std::move(p));
  pred_ids_.emplace(nts, id);
  return id;
}

}  // namespace lexguide
