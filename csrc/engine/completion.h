// Shortest completions of parse states, read off the grammar's structure.
//
// A completion of a parse state is a byte string after which the grammar is complete. The
// budget-aware masks (MaskEngine::budget_mask) need one, short, for every state they judge, so
// a byte-by-byte breadth-first search (which explores every state within the distance found,
// and explodes inside recursive or wide grammars) is the fallback, not the method:
//
//  1. The lexeme being read is finished by a breadth-first search over the lexer DFA from its
//     state; each accepting DFA state it meets is ended (LexParser::finish) and the Earley set
//     it ends in is priced by step 2. The search stops once its depth reaches the best price.
//  2. A set at a lexeme boundary is priced from its items with each nonterminal's shortest
//     derivation and each lexeme's shortest match (min|β|, Knuth's generalisation of Dijkstra
//     to grammars, here a plain fixpoint): for set j and nonterminal B,
//         up(j, B) = min over items (A -> α • B β, i) in j of  min|β| + (i is ROOT ? 0 : up(i, A))
//     is the fewest bytes that finish the parse once a B started at j is complete; predicted
//     items (i = j) make it a shortest-path problem over j's nonterminals (Dijkstra), and
//     origins are earlier sets, so up is memoised per set. The set's price is the minimum of
//     min|rest of the item| + up(origin, lhs) over its incomplete items (0 when accepting).
//
// Step 2 ignores how consecutive lexemes meet (greedy lexing may join two of them, a skip may be
// required between them), so the string built from the minimising choices is a candidate: the
// caller replays it byte by byte — putting a space or a newline at a junction where the next
// lexeme would otherwise extend the previous one (`int` `a` -> `int a`) — and falls back to the
// bounded byte search when it does not complete. Everything here runs under the grammar's lock (LexParser::mu()).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/lexparser.h"

namespace lexguide {

class CompletionSearch {
 public:
  explicit CompletionSearch(LexParser& lp) : lp_(lp) {}

  // A candidate completion of st into out (not checked, see above), and the offsets in it
  // where one lexeme's string ends and the next one's begins; false when the structure
  // offers none of at most kMaxCompletionBytes bytes.
  bool candidate(ParseState st, std::string& out, std::vector<uint32_t>& junctions);
  size_t memory_bytes() const;

 private:
  struct Up {
    uint64_t cost;
    int32_t dr;      // the item (dr, origin) the minimum goes through; its symbol is B
    int32_t origin;  // ROOT, or the set whose up() continues (this set for predicted items)
  };
  struct SetPrice {
    uint64_t boundary = 0;  // price of the set at a lexeme boundary
    int32_t dr = -1, origin = ROOT;
    std::unordered_map<int32_t, Up> up;  // nonterminal -> up(set, nonterminal)
  };

  LexParser& lp_;
  bool ready_ = false;
  std::vector<uint64_t> lex_len_;        // per local lexeme: its shortest match's length
  std::vector<std::string> lex_str_;     // ... and that match
  std::vector<uint64_t> nt_len_;         // per nonterminal: its shortest derivation's length
  std::vector<int32_t> nt_rule_;         // ... through this rule
  std::vector<uint64_t> rest_;           // per dotted rule: min length of the symbols after the dot
  std::unordered_map<int32_t, SetPrice> sets_;
  size_t up_entries_ = 0;

  void prepare();
  uint64_t symbol_len(int32_t sym) const;
  const SetPrice& price(int32_t set_id);
  void compute(int32_t set_id, const std::vector<std::pair<int32_t, int32_t>>& items);
  bool emit_rest(int32_t dr, std::string& out, std::vector<uint32_t>& junctions) const;
  bool emit_boundary(int32_t set_id, std::string& out, std::vector<uint32_t>& junctions);
};

}  // namespace lexguide
