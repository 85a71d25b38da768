// Captures (Lark `capture`, `capture="n"`, `stop_capture="n"`): the bytes that marked rules and
// lexemes matched in an input, read on demand.
//
// Masks never need captures, so nothing is recorded while matching: the canonical Earley sets
// (earley.h) name an item's origin by set id, not by position, and cannot say where a rule
// began. read_captures() reads them from the consumed input instead, in two passes:
//
// 1. Lexeme trace: the input is replayed through the LexParser with the decisions it made
//    while matching (greedy and lazy ends, skips, empty lexemes; after each piece, from the
//    matcher's own state when given, which a spent max_tokens budget may have capped), listing
//    every grammar lexeme's byte span and the lexemes that may stand there (skips are not
//    listed).
// 2. Positional Earley: an ordinary Earley recognizer over that lexeme sequence (items keyed
//    by start position, nullable nonterminals per Aycock & Horspool 2002), then a backward pass
//    from the items of the last set (with `final`, from the accepting start item) that keeps
//    the completions and scanned lexemes taking part in a parse of the whole input. Each kept
//    completion of a captured nonterminal and each kept captured lexeme reports its span.
//
// A rule's span runs from its first lexeme's first byte to its last lexeme's last byte
// (skipped bytes around it are excluded); an empty completion sits at the start of the lexeme
// after it. A lexeme's value excludes its stop=/suffix= tail (the shortest prefix matching the
// body whose rest matches the tail), which its stop capture reports. An ambiguous input
// reports every parse's captures. Results are ordered by end, then by start descending (so a
// rule comes after the rules inside it), then lexemes before rules, then rules by their
// nesting in the grammar (a rule that derives another alone comes after it), then name.
//
// Cost: the trace is linear in the input; the recognizer is Earley's O(n^3) in the number of
// lexemes at worst (linear for the unambiguous left-recursive lists the front ends build),
// bounded by CaptureLimits (LimitError past them, never an unbounded run).
//
// Thread safety: a CaptureTable is immutable once built; read_captures() holds the
// LexParser's mutex during the trace and store_mutex() while splitting tails.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/lexparser.h"
#include "engine/limits.h"

namespace lexguide {

constexpr NodeId kNoRegex = 0xFFFFFFFFu;

// What a grammar lexeme reports: name ids (-1: none) and, for a stop=/suffix= lexeme, the
// regexes of its value (body) and tail (kNoRegex when there is no tail to split off).
struct LexemeCapture {
  int32_t name = -1;
  int32_t stop_name = -1;
  NodeId body = kNoRegex;
  NodeId tail = kNoRegex;
};

// The capture marks of one grammar and the grammar's dotted-rule tables, built once (on the
// first captures() call, so lowering a grammar does not pay for them).
class CaptureTable {
 public:
  // nonterminal_names: per nonterminal a name id or -1; lexemes: per grammar lexeme. Throws
  // std::invalid_argument when a size or a regex node does not fit the grammar.
  CaptureTable(LexParser& lp, std::vector<int32_t> nonterminal_names, std::vector<LexemeCapture> lexemes);

  int32_t name_of(int32_t nt) const { return nt_name_[size_t(nt)]; }
  const LexemeCapture& lexeme(int32_t lex) const { return lexemes_[size_t(lex)]; }

  // dotted rules as numbered by the grammar's EarleyParser
  int32_t symbol(int32_t dr) const { return dr_next_[size_t(dr)]; }  // NO_SYMBOL when complete
  int32_t lhs(int32_t dr) const { return dr_lhs_[size_t(dr)]; }
  bool at_start(int32_t dr) const { return dr == 0 || dr_next_[size_t(dr) - 1] == NO_SYMBOL; }
  const std::vector<int32_t>& rule_starts(int32_t nt) const { return starts_[size_t(nt)]; }
  const std::vector<int32_t>& rule_ends(int32_t nt) const { return ends_[size_t(nt)]; }
  bool nullable(int32_t nt) const { return nullable_[size_t(nt)]; }
  int32_t start_dr() const { return start_dr_; }
  int32_t accept_dr() const { return accept_dr_; }
  size_t n_nonterminals() const { return nt_name_.size(); }
  // nesting rank of a nonterminal: lower for rules a rule around them derives alone
  uint32_t rank(int32_t nt) const { return rank_[size_t(nt)]; }

 private:
  std::vector<int32_t> nt_name_;
  std::vector<LexemeCapture> lexemes_;
  std::vector<int32_t> dr_next_, dr_lhs_;
  std::vector<std::vector<int32_t>> starts_, ends_;
  std::vector<bool> nullable_;
  std::vector<uint32_t> rank_;
  int32_t start_dr_ = 0, accept_dr_ = 0;
};

// One piece of consumed input: the bytes of a token, or (special) the sorted local lexemes of
// a special token; `after`, the parse state the matcher reached after it, if known.
struct CapturePiece {
  bool special = false;
  uint32_t n_bytes = 0;          // bytes: the next n_bytes of the input
  std::vector<int32_t> lexemes;  // special
  std::optional<ParseState> after;
};

struct CaptureLimits {
  uint64_t max_items = kMaxCaptureItems;
  uint64_t max_steps = kMaxCaptureSteps;
};

// One capture: a name id and the byte span [start, end) of the input.
struct Capture {
  int32_t name;
  uint32_t start, end;
};

// The input is not what the grammar (or the pieces' states) allow; `byte` locates it.
struct CaptureError : std::runtime_error {
  uint64_t byte;
  CaptureError(const std::string& msg, uint64_t b) : std::runtime_error(msg), byte(b) {}
};

// The captures of `data` (the bytes of the byte pieces, concatenated) ordered as described
// above. `final`: the input is complete (the pending lexeme ends as at end of input and the
// whole must be a sentence). Throws CaptureError when the pieces are not a valid prefix (with
// `final`, not a sentence), LimitError past `limits`. Mutates only the LexParser's memos.
std::vector<Capture> read_captures(LexParser& lp, const CaptureTable& table, const std::string& data,
                                   const std::vector<CapturePiece>& pieces, bool final,
                                   const CaptureLimits& limits = {});

}  // namespace lexguide
