// Earley parser over lexemes with canonical, interned parser states (one grammar).
//
// A parser state is one Earley set, identified by an int. Items are (dotted rule, origin),
// origin the id of the set the item started in, SELF for items predicted in the set itself,
// ROOT for the start item. A set is interned by its kernel (the items produced by scanning);
// the closure (prediction + completion, nullable nonterminals per Aycock & Horspool,
// "Practical Earley Parsing", 2002) is a function of the kernel, and two closures whose
// incomplete items (and acceptance) agree are the same state, since completed items play no
// further part. A set id therefore determines the whole remaining parse, so masks and scans
// are memoised per id across steps and matchers. Predicted items depend only on the set of
// predicted nonterminals and are one shared block per such set.
//
// Symbols: a nonterminal is its index >= 0; lexeme i is -1 - i.
// Thread safety: none; the owner (LexParser) serialises access.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/flat_map.h"

namespace lexguide {

constexpr int32_t SELF = -1;
constexpr int32_t ROOT = -2;
constexpr int32_t DEAD_SET = -1;
constexpr int32_t NO_SYMBOL = INT32_MIN;

struct GrammarRules {
  int32_t n_nonterminals = 0;
  int32_t start = 0;                             // the start nonterminal (top rule: start -> ...)
  std::vector<int32_t> lhs;                      // per rule
  std::vector<std::vector<int32_t>> rhs;         // per rule
  std::vector<int32_t> lexeme_class;             // per grammar lexeme
};

// The rules whose symbols can all derive some input (a worklist fixpoint over the rules),
// in ascending index order: a nonterminal is productive once one of its rules has only
// productive symbols on its right, lexeme i is productive when lexeme_ok[i]. Throws
// std::invalid_argument for a symbol out of range.
std::vector<uint32_t> productive_rules(int32_t n_nonterminals, const std::vector<bool>& lexeme_ok,
                                       const std::vector<int32_t>& lhs,
                                       const std::vector<std::vector<int32_t>>& rhs);

class EarleyParser {
 public:
  explicit EarleyParser(GrammarRules g);

  int32_t initial() const { return initial_; }
  int32_t scan(int32_t set_id, const std::vector<int32_t>& lexemes);  // sorted lexeme indices
  const std::vector<int32_t>& expected(int32_t set_id) const { return sets_[set_id]->expected; }
  const std::vector<int32_t>& last_classes(int32_t set_id) const { return sets_[set_id]->last_classes; }
  bool is_accepting(int32_t set_id) const { return sets_[set_id]->accepting; }
  uint32_t n_sets() const { return uint32_t(sets_.size()); }

  // For the completion search (completion.h): the grammar, dotted rules (a rule's dotted rules
  // are consecutive, from its first; the symbol after the dot, NO_SYMBOL at the end) and the
  // incomplete items of a set as (dotted rule, origin), predicted items with the set's own id.
  const GrammarRules& rules() const { return g_; }
  int32_t rule_first_dr(size_t rule) const { return rule_first_dr_[rule]; }
  size_t n_dotted() const { return dr_next_.size(); }
  int32_t dr_symbol(int32_t dr) const { return dr_next_[size_t(dr)]; }
  int32_t dr_lhs(int32_t dr) const { return dr_lhs_[size_t(dr)]; }
  // per nonterminal: the first dotted rules of its rules (in rule order), whether it derives ""
  const std::vector<std::vector<int32_t>>& rules_of() const { return rules_of_; }
  const std::vector<bool>& nullable() const { return nullable_; }
  void incomplete_items(int32_t set_id, std::vector<std::pair<int32_t, int32_t>>& out) const;

 private:
  using Item = uint64_t;  // dr << 32 | uint32(origin)
  struct Predictions {
    std::unordered_map<int32_t, std::vector<int32_t>> waiting;  // symbol -> dotted rules
    uint32_t n_items = 0;
    std::vector<int32_t> expected;
  };
  struct Set {
    // (symbol after the dot, item) of the set's own incomplete items, sorted, origin never
    // SELF: one flat array (a map of vectors was three allocations per symbol, for sets that
    // are often discarded as duplicates of a known one)
    std::vector<std::pair<int32_t, Item>> waiting;
    const Predictions* predictions = nullptr;
    uint32_t pred_id = 0;
    std::vector<int32_t> expected;
    std::vector<int32_t> last_classes;
    bool accepting = false;
    uint32_t n_items = 0;
  };

  GrammarRules g_;
  std::vector<int32_t> dr_next_, dr_lhs_, rule_first_dr_;
  std::vector<std::vector<int32_t>> rules_of_;
  std::vector<bool> nullable_;
  int32_t start_dr_ = 0, initial_ = 0;
  std::vector<std::unique_ptr<Set>> sets_;
  KeyIndex<Item, int32_t> by_kernel_, by_signature_;
  // scans: of one lexeme (the usual case) by set id << 32 | lexeme, of more by (set id,
  // lexemes...) in scan_key_
  FlatMap<int32_t> single_scans_;
  KeyIndex<int32_t, int32_t> multi_scans_;
  std::vector<int32_t> scan_key_;
  // per nonterminal, filled on first use: the nonterminals it predicts (sorted, itself included,
  // so empty means not yet computed) and its (symbol, dotted rule) items (items_ready_ marks them)
  std::vector<std::vector<int32_t>> predicts_;
  std::vector<std::vector<std::pair<int32_t, int32_t>>> nt_items_;
  std::vector<char> items_ready_;
  std::vector<std::unique_ptr<Predictions>> pred_blocks_;
  KeyIndex<int32_t, uint32_t> pred_ids_;

  // The items a closure has met: open addressing over reused arrays, emptied in O(1) by a new
  // stamp (a closure meets tens to thousands of items; a node-based set was a malloc each).
  class ItemSet {
   public:
    void reset();
    bool insert(Item it);  // whether it is new
    size_t size() const { return n_; }

   private:
    std::vector<Item> keys_;
    std::vector<uint32_t> stamps_;
    uint32_t stamp_ = 0;
    size_t n_ = 0, mask_ = 0;
    void grow();
  };
  // closure()'s scratch, reused across calls (the parser is used by one thread at a time)
  ItemSet seen_;
  std::vector<int32_t> predicted_, merged_;
  std::vector<Item> todo_, waiting_;
  // intern()'s scratch: the kernel's lexeme classes, the closure's signature; scan()'s items
  std::vector<int32_t> classes_;
  std::vector<Item> signature_, scan_waiting_;

  static Item item(int32_t dr, int32_t origin) { return (uint64_t(uint32_t(dr)) << 32) | uint32_t(origin); }
  static int32_t item_dr(Item it) { return int32_t(it >> 32); }
  static int32_t item_origin(Item it) { return int32_t(uint32_t(it)); }

  void waiting_for(int32_t set_id, int32_t sym, std::vector<Item>& out) const;
  int32_t intern(std::vector<Item> kernel);
  std::unique_ptr<Set> closure(const std::vector<Item>& kernel);
  const std::vector<int32_t>& predicted_by(int32_t nt);
  const std::vector<std::pair<int32_t, int32_t>>& items_of(int32_t nt);
  uint32_t predictions_for(const std::vector<int32_t>& nts);
};

}  // namespace lexguide
