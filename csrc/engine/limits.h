// Named limits of the engine core, documented once (docs/engine.md, "Limits").
// Exceeding one throws LimitError naming it; the binding turns it into lexguide.LimitExceeded.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace lexguide {

// regex store: nodes of one generation's hash-consed store; the product of the bounds of
// nested counted repetitions (x{1000}{1000} = 10**6 is refused; one counter x{10**6} over a
// counter-free x is not: its derivatives count down, one state per count reached). Both can
// be changed at run time (RegexLimits in regex.h, lexguide.regex.nodes.LIMITS).
constexpr uint32_t kMaxRegexNodes = 4'000'000;
constexpr uint32_t kMaxRepeat = 100'000;
// lexer DFA: states of one shared DFA
constexpr uint32_t kMaxLexerStates = 150'000;
// generations (a lexer DFA with its regex store, shared by the grammars lowered into it): a
// compile starting with no other running starts a new generation once the current one has
// this many lexer states, regex nodes or bytes; an old generation is freed with the last
// grammar using it
constexpr uint32_t kRotateLexerStates = 50'000;
constexpr uint32_t kRotateRegexNodes = 400'000;
constexpr size_t kRotateGenerationBytes = size_t(128) << 20;
// nodes explored when deciding whether a boolean (&, ~) regex matches anything; past it the
// language is assumed non-empty (a bound, never a wrong "empty")
constexpr uint32_t kNonEmptyBudget = 5'000;
// Earley parser: canonical sets of one grammar, items in one set
constexpr uint32_t kMaxParserSets = 200'000;
constexpr uint32_t kMaxItemsPerSet = 200'000;
// captures (captures.h): Earley items of the positional parse of one input (all positions;
// about 24 bytes each) and its steps (items added or met again, completions followed back;
// tens of nanoseconds each)
constexpr uint64_t kMaxCaptureItems = 4'000'000;
constexpr uint64_t kMaxCaptureSteps = 50'000'000;
// lexemes matching the empty string that may end one after another at one position
constexpr uint32_t kMaxEmptyLexemes = 64;
// bytes one Matcher::forced_bytes() call returns at most (a grammar may force an unbounded run;
// the rest is forced after them)
constexpr size_t kMaxForcedBytes = 512;
// memory of the per-tokenizer walk cache and of one grammar's mask memo (bytes); past it the
// cache is emptied and refilled on demand
constexpr size_t kWalkCacheBytes = size_t(512) << 20;
constexpr size_t kMaskCacheBytes = size_t(256) << 20;
// a group of lexeme boundaries (same state, same kind: mask.h) whose subtrees hold at most this
// many trie nodes in all is walked with the parser in the loop instead of through the walk cache
// (the default of MaskEngine's direct_walk_nodes; tests set it to 0 to take the cached path on
// small vocabularies)
constexpr uint32_t kDirectWalkNodes = 1024;
// root walks of tries with at least this many nodes are split into about kSplitWalkPieces
// pieces (of at least half that many nodes) shared by fill_masks' threads (split.h)
constexpr uint32_t kSplitWalkNodes = 4096;
constexpr uint32_t kSplitWalkPieces = 16;
// (lexer state, UTF-8 position) pairs expanded when checking one state against the slices
// (results are memoised across states, so this bounds the new work of one check); past it
// the state uses no slice (always correct, only slower)
constexpr uint32_t kSliceBudget = 4096;
// slice checks look at most this many plain bytes ahead; a longer slice length is not used
constexpr uint32_t kSliceMaxDepth = 512;
// token budgets (budget.cc): a mask is narrowed to the tokens after which a completion still
// fits once fewer than (shortest completion + max(kBudgetMargin, shortest completion)) tokens
// are left (one token can raise the shortest completion: by up to 50 tokens on the cases of
// bench/mask.py --budget; a larger jump from a loose budget can still cut). Completions are
// read off the grammar (completion.h) up to kMaxCompletionBytes; when that fails, a byte-level
// search of at most kBudgetWindow bytes and
// kCompletionSearchStates parse states (also the bound of the lexer-state searches). The
// completion memo keeps at most kCompletionPriceEntries per-set prices and the narrowed masks'
// per-state cost levels at most kBudgetCacheBytes; past those they start afresh.
constexpr uint32_t kBudgetMargin = 128;
// when the shortest completion known takes more than kBudgetHopeless times the tokens left
// (this one included), no completion is taken to fit (the split is an upper bound, rarely off
// by a factor of 2): the plain mask, without judging every allowed token (which costs one
// completion per successor state)
constexpr uint32_t kBudgetHopeless = 2;
constexpr uint32_t kBudgetWindow = 64;
constexpr uint32_t kCompletionSearchStates = 20'000;
constexpr size_t kMaxCompletionBytes = 1 << 16;
constexpr size_t kCompletionPriceEntries = 1 << 22;
constexpr size_t kBudgetCacheBytes = size_t(64) << 20;
// lexer runs (LexerDFA::run_buckets): bytes a run is followed for (tokens are rarely longer)
constexpr uint32_t kRunSteps = 64;
// vocabulary
constexpr uint32_t kMaxVocab = 1u << 24;
constexpr uint32_t kMaxTokenBytes = 4096;

struct LimitError : std::runtime_error {
  std::string limit;
  uint64_t value;
  LimitError(std::string name, uint64_t v, const std::string& msg)
      : std::runtime_error(msg), limit(std::move(name)), value(v) {}
};

}  // namespace lexguide
