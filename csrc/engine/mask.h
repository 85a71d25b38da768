// Token masks: vocabulary walks over the prefix tree, cached per lexer state, assembled per
// parse state.
//
// A walk from lexer state L over a range of trie nodes classifies every token without the
// parser: its bytes stay inside the current lexeme (allowed whatever the parser says), it
// dies, or it reaches a *boundary* where a lexeme ends — BEFORE a node's byte (the byte kills
// the DFA in an accepting state: greedy end) or AFTER it (a lazy lexeme matched). Walks depend
// only on lexer states, which every grammar shares (lexer.h), so they are cached per
// tokenizer and DFA (Walker) and reused by all grammars and requests. A mask for a parse state
// is then the walk's inside tokens plus, for each group of boundaries (same state, same kind)
// the parser accepts, the walk of the group's subtrees from the restart state (recursively),
// plus the special tokens the parser expects, plus EOS iff the grammar is complete. Full masks
// are memoised per parse state (MaskEngine).
//
// Thread safety: Walker and MaskEngine guard their caches with their own mutexes; cached
// results are immutable and shared by pointer, so a mask is assembled without holding them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/completion.h"
#include "engine/flat_map.h"
#include "engine/lexparser.h"
#include "engine/split.h"
#include "engine/trie.h"
#include "engine/vocab.h"

namespace lexguide {

enum class BoundaryKind : uint8_t { Before, After };

struct Boundary {
  uint32_t node;
  StateId state;  // accepting state whose lexeme ends
  BoundaryKind kind;
};

// The boundaries of one walk that end the same lexeme state the same way: one parser
// question (LexParser::finish) for all of them, and one walk of all their subtrees from the
// restart state it answers (Walker::group_walk).
struct BoundaryGroup {
  StateId state;
  BoundaryKind kind;
  uint32_t begin, end;  // its boundaries: Walk::boundaries[begin, end), in node order
  uint32_t nodes;       // trie nodes below its boundaries that a walk of the group reads
};

// Result of one walk: the tokens that stay inside the lexeme and the boundaries.
struct Walk {
  uint8_t trie_id = 0;          // the trie the boundaries' nodes belong to
  std::vector<uint32_t> ids;    // inside tokens, when few
  std::vector<uint32_t> words;  // inside tokens as a bitmask, when many (then ids is empty)
  // a sliced root walk: the plain tokens of this slice level are inside too, read from the
  // vocabulary's bitmask (Vocab::slice_words) rather than copied into each walk; -1: none
  int8_t slice = -1;
  // Boundaries grouped by (state, kind) in order of first occurrence, each group in node
  // order; apart from them, `starts`: the boundaries before the first node of a walked range
  // (no byte was read after the restart: a chain of empty lexemes, counted one by one).
  std::vector<Boundary> boundaries;
  std::vector<BoundaryGroup> groups;
  std::vector<Boundary> starts;
  uint64_t serial = 0;  // unique per walk of a Walker: names its groups' walks in the cache
  size_t memory_bytes() const {
    return 80 + ids.size() * 4 + words.size() * 4 + (boundaries.size() + starts.size()) * 12 + groups.size() * 20;
  }
};

// The tokens that stay inside the current lexeme from one lexer state, grouped by the state
// they end in (ids when few, else a bitmask).
struct InsideGroup {
  StateId end;
  std::vector<uint32_t> ids;
  std::vector<uint32_t> words;
};

// Mask buffers of one vocabulary's width, recycled: a mask dropped by its last holder (the
// Python array over it, an evicted cache entry) returns its buffer here, and the next mask is
// written into memory already mapped. A fresh buffer costs a page fault per 4 KiB on first
// write (eight at 262k tokens, about as much as assembling a mask), and the allocator hands
// back freshly mapped memory whenever a compile in between has shrunk its heap. Thread-safe.
//
// Bitmasks kept for long (the dense entries of every grammar's mask cache) are also shared by
// content: share() hands out the equal mask some holder still keeps, so the new one's buffer
// comes back at once (grammars on one vocabulary meet the same dense masks: inside strings,
// any value). The table holds weak references by a hash of the words; a mask lives as long as
// its last holder, whichever grammar made it.
class MaskBuffers : public std::enable_shared_from_this<MaskBuffers> {
 public:
  explicit MaskBuffers(uint32_t n_words) : n_words_(n_words) {}
  // A buffer of n_words words, contents unspecified; it comes back here when dropped.
  std::shared_ptr<std::vector<uint32_t>> take();
  // A buffer holding exactly the bits of `ids` (kept by the buffer): taken from the buffers
  // known to be zero, which it rejoins when dropped, its bits cleared again -- a mask of a few
  // tokens then writes a few words, not the whole bitmask, each time it is handed out.
  std::shared_ptr<std::vector<uint32_t>> take_bits(std::shared_ptr<const std::vector<uint32_t>> ids);
  size_t n_free() const;
  // A finished mask taken from here, to be kept and never written again: the mask with the
  // same words that a holder still keeps (then `mask` is dropped), else `mask`, registered.
  std::shared_ptr<std::vector<uint32_t>> share(std::shared_ptr<std::vector<uint32_t>> mask);

 private:
  uint32_t n_words_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<std::vector<uint32_t>>> free_;
  std::vector<std::unique_ptr<std::vector<uint32_t>>> zeroed_;  // all words zero
  void give_back(std::vector<uint32_t>* buffer);
  // a free buffer, from the zeroed ones first or the others first, else a new one (zero)
  std::unique_ptr<std::vector<uint32_t>> pop(bool zero_first, bool& zero);
  // share(): hash of the words -> mask (expired entries dropped whenever the table has doubled
  // since the last sweep)
  std::mutex shared_mu_;
  std::unordered_multimap<uint64_t, std::weak_ptr<std::vector<uint32_t>>> shared_;
  size_t sweep_at_ = 64;
};

class Walker {
 public:
  Walker(std::shared_ptr<const Vocab> vocab, std::shared_ptr<LexerDFA> lexer);
  // Walk of nodes [lo, hi) from lexer state s (the state before the byte of node lo's depth).
  std::shared_ptr<const Walk> walk(StateId s, uint32_t lo, uint32_t hi, int trie_id = 0);
  // Walk of the subtrees below the boundaries of group g of `parent` from restart state s:
  // each Before boundary's node with its subtree, each After boundary's subtree without the
  // node, every one read from s (the ranges start over, one after the other). Cached like
  // walk(), by the parent's serial.
  std::shared_ptr<const Walk> group_walk(const Walk& parent, uint32_t g, StateId s);
  // The largest slice level whose plain tokens all stay inside the lexeme from s, or -1.
  int slice_level(StateId s);
  // Every token that stays inside the lexeme from s (from the root) and the state it ends in.
  void inside_end_states(StateId s, std::vector<uint32_t>& ids, std::vector<StateId>& ends);
  // The same, grouped by end state; cached per lexer state (a quarter of kWalkCacheBytes).
  std::shared_ptr<const std::vector<InsideGroup>> inside_groups(StateId s);
  const Vocab& vocab() const { return *vocab_; }
  MaskBuffers& buffers() { return *buffers_; }
  size_t n_walks() const;
  std::atomic<uint64_t> nodes_walked{0};  // statistics: trie nodes visited by cached walks
  std::atomic<uint64_t> split_walks{0};   // statistics: root walks split among threads
  std::atomic<uint64_t> loop_walks{0};    // statistics: subtrees taken whole (a looping state)
  std::atomic<uint64_t> run_walks{0};     // statistics: subtrees taken whole (a run, e.g. a count)
  std::atomic<uint64_t> plain_walks{0};   // statistics: subtrees taken whole (plain, within reach)
  std::atomic<uint64_t> eternal_states{0};  // statistics: states given every slice by structure
  std::atomic<uint64_t> bounded_states{0};  // statistics: states given slices up to a length by structure
  size_t memory_bytes() const;

 private:
  std::shared_ptr<const Vocab> vocab_;
  std::shared_ptr<LexerDFA> lexer_;
  std::shared_ptr<MaskBuffers> buffers_;
  // The walk cache in shards by key, each under its own lock (the threads of fill_masks look
  // walks up all the time: one lock serialised them); a shard past its share of
  // kWalkCacheBytes is emptied. A shard's walks are one open-addressing table of (key, walk)
  // slots (linear probing, power-of-two capacity grown at 1/2 load, a slot without a walk
  // empty): a lookup reads one slot, where a node-based map missed the cache on its bucket
  // and its node.
  struct WalkKey {
    uint64_t a, b;  // lexer state << 32 | lo, hi << 8 | trie
    bool operator==(const WalkKey& o) const { return a == o.a && b == o.b; }
  };
  struct WalkKeyHash {
    size_t operator()(const WalkKey& k) const {
      uint64_t h = (k.a ^ (k.b * 0x9E3779B97F4A7C15ull)) * 0xFF51AFD7ED558CCDull;
      return size_t(h ^ (h >> 31));
    }
  };
  static constexpr size_t kWalkShards = 32;
  struct alignas(64) WalkShard {
    mutable std::mutex mu;
    std::vector<std::pair<WalkKey, std::shared_ptr<const Walk>>> slots;
    size_t n = 0, bytes = 0;
    // the slot of k: its walk's, or the empty one where it would go (slots not empty)
    std::pair<WalkKey, std::shared_ptr<const Walk>>& slot(const WalkKey& k, size_t h);
  };
  std::unique_ptr<WalkShard[]> shards_;
  // slice level per lexer state: kSliceUnknown until checked (written once per state; two
  // threads checking one state at once write the same level)
  static constexpr int8_t kSliceUnknown = -2;
  std::unique_ptr<std::atomic<int8_t>[]> slice_levels_;
  mutable std::mutex mu_;  // guards inside_, inside_bytes_, pieces_
  // Slice checks: per (lexer state, UTF-8 position) the depth up to which every plain byte
  // string is known to stay alive (low 16 bits) and a depth at which one is known to die (high
  // 16 bits, 0: none known). Proven facts that only tighten, kept across checks; updated with
  // compare-and-swap, so checks on several threads share them without a lock. Stored in chunks
  // allocated on first use (bounds_mu_ guards allocation only).
  static constexpr size_t kBoundsChunk = 4096;
  std::mutex bounds_mu_;
  std::vector<std::unique_ptr<std::atomic<uint32_t>[]>> bound_chunks_;
  std::unique_ptr<std::atomic<std::atomic<uint32_t>*>[]> bound_index_;
  std::atomic<uint32_t>& bounds_at(size_t at);
  static uint32_t safe_of(uint32_t v) { return v & 0xFFFFu; }
  static uint32_t fails_of(uint32_t v) { return v >> 16; }
  enum class Survival { Yes, No, OverBudget };
  struct SliceCheck {  // one check's pairs entered (key -> depth), successor stack, budget
    FlatMap64 entered;
    std::vector<uint64_t> next;
    uint32_t budget = 0;
  };
  // key = lexer state << 3 | UTF-8 position (the bounds' index)
  Survival survives(uint64_t key, uint32_t depth, SliceCheck& check);
  Survival survives_all(StateId s, uint32_t depth, uint32_t& budget);
  // How many bytes of any plain string keep s inside the lexeme (kInf: any number), by a
  // structural test of its lexemes' residuals (mask.cc), 0 when unsure; the memos are per
  // regex node, under store_mutex().
  uint32_t state_plain_bound(StateId s);
  uint32_t plain_bound(NodeId x, RegexStore& rs, int depth);
  bool eternal(NodeId x, RegexStore& rs, int depth);
  bool finite(NodeId x, RegexStore& rs, int depth);
  bool plain_search(NodeId x, RegexStore& rs, bool one_char);
  bool covers_plain(NodeId c, RegexStore& rs);  // every plain character is a word of c (memoised)
  FlatMap<uint8_t> eternal_, finite_, covers_;
  FlatMap<uint32_t> bound_;
  std::unordered_map<StateId, std::shared_ptr<const std::vector<InsideGroup>>> inside_;
  size_t inside_bytes_ = 0;
  struct Range {
    uint32_t lo, hi;
  };
  std::shared_ptr<Walk> compute(StateId s, uint32_t lo, uint32_t hi, int trie_id, uint32_t reach = 0);
  // The walk of each range in turn, every one from s (the state before the byte of its first
  // node's depth), into one result. reach (a whole-trie walk from s, or a piece of one): every
  // plain string of at most reach bytes keeps s inside its lexeme, so a subtree whose tokens
  // are all plain and no longer (TokenTrie::plain_len) is taken whole without stepping the
  // lexer; 0: none.
  std::shared_ptr<Walk> compute_ranges(StateId s, const Range* ranges, size_t n_ranges, int trie_id,
                                       uint32_t reach = 0);
  // Sorts w's boundaries into starts (at one of the ranges' first nodes, sorted) and groups;
  // gives w its serial.
  void group_boundaries(Walk& w, const uint32_t* range_starts, size_t n_starts);
  std::shared_ptr<const Walk> cached(const WalkKey& k);
  std::shared_ptr<const Walk> remember(const WalkKey& k, std::shared_ptr<const Walk> w);
  std::atomic<uint64_t> serials_{0};
  // A walk of a whole trie: in pieces shared with the crew of this thread's fill_masks call
  // when there is one and the trie is large (split.h), else compute().
  std::shared_ptr<Walk> compute_root(StateId s, int trie_id, uint32_t reach);
  std::shared_ptr<const std::vector<TriePiece>> pieces(int trie_id);  // split_trie, cached
  std::shared_ptr<const std::vector<TriePiece>> pieces_[1 + kSliceLevels];  // under mu_
};

// A mask being assembled: its token ids while they are few (a mask outside strings allows a
// handful of tokens: no bitmask is cleared, filled and scanned for them), a recycled bitmask
// once they are many or a walk's bitmask joins.
class MaskBuilder {
 public:
  MaskBuilder(MaskBuffers& buffers, uint32_t n_words) : buffers_(buffers), n_words_(n_words) {}
  void set(uint32_t id) {
    if (words_ != nullptr) {
      set_bit(words_, id);
      return;
    }
    ids_.push_back(id);
    if (ids_.size() > n_words_ / 8) dense();
  }
  void set(const uint32_t* begin, const uint32_t* end) {
    for (const uint32_t* q = begin; q != end; ++q) set(*q);
  }
  void or_words(const uint32_t* src) {  // n_words words
    if (words_ == nullptr) {  // the first bitmask is copied, not ORed into a cleared one
      dense(src);
      return;
    }
    for (uint32_t i = 0; i < n_words_; i++) words_[i] |= src[i];
  }
  // The bitmask (zeroed, or a copy of `from`; the ids so far set) from now on.
  uint32_t* dense(const uint32_t* from = nullptr);
  bool is_dense() const { return words_ != nullptr; }
  std::vector<uint32_t>& ids() { return ids_; }  // while not dense (unsorted, may repeat)
  std::shared_ptr<std::vector<uint32_t>>& buffer() { return buffer_; }  // once dense

 private:
  MaskBuffers& buffers_;
  uint32_t n_words_;
  std::vector<uint32_t> ids_;
  std::shared_ptr<std::vector<uint32_t>> buffer_;
  uint32_t* words_ = nullptr;
};

// One grammar on one vocabulary: masks per parse state.
class MaskEngine {
 public:
  MaskEngine(std::shared_ptr<LexParser> lp, std::shared_ptr<Walker> walker,
             std::vector<std::pair<int32_t, std::vector<uint32_t>>> token_lexeme_ids);

  // The mask of st (n_words uint32), shared and immutable; cached per parse state (a mask of
  // at most n_words / 16 tokens as their ids, expanded into a new vector on each read).
  std::shared_ptr<const std::vector<uint32_t>> mask(ParseState st);
  // The cached mask of st, or nullptr when it is not cached yet (nothing is computed).
  std::shared_ptr<const std::vector<uint32_t>> cached_mask(ParseState st);
  // mask(st) written into out (n_words words), without a vector of its own for a mask cached
  // as ids; fill_cached only when it is cached (else false, nothing written).
  void fill(ParseState st, uint32_t* out);
  bool fill_cached(ParseState st, uint32_t* out);
  // The mask of st narrowed to the tokens after which the grammar can still complete within
  // `left` more tokens (EOS as in mask()), into out; false when the plain mask applies: the
  // budget is loose (see kBudgetMargin), no completion is known, nothing would be removed, or
  // nothing fits (then the output will be cut; judged without the levels when the shortest
  // completion known exceeds kBudgetHopeless times `left`). Per-state token costs are memoised
  // as levels.
  bool budget_mask(ParseState st, uint32_t left, std::vector<uint32_t>& out);
  // Tokens of a completion from st (0 if complete): a shortest byte completion (completion.h,
  // else a bounded byte search) split greedily into the longest tokens, replayed to check it;
  // UINT32_MAX when none was found. An upper bound on the fewest tokens that complete; every
  // state on the way after one of its tokens is memoised with the rest of it, so the first
  // token always leads to a state one token closer. Memoised.
  uint32_t min_completion(ParseState st);
  // Lengths of the greedy longest-token split of w (a token per byte where none matches).
  std::vector<uint32_t> greedy_split(const std::string& w) const;
  // The token lexemes a token id belongs to (sorted local lexeme indices).
  std::vector<int32_t> token_lexemes_of(uint32_t token_id) const;
  // The state after a whole token, or nullopt if the grammar rejects it.
  std::optional<ParseState> advance_token(ParseState st, uint32_t token_id);
  LexParser& lexparser() { return *lp_; }
  Walker& walker() { return *walker_; }
  uint64_t hits = 0, misses = 0;
  uint64_t direct_nodes = 0, boundaries = 0;  // statistics (under the parser's lock)
  uint64_t completions_structural = 0, completions_byte_search = 0, completions_none = 0;
  uint64_t budget_levels_computed = 0;
  uint32_t direct_walk_nodes = kDirectWalkNodes;  // set before the first mask
  size_t n_cached() const;
  // how many masks the memo keeps (kMaskCacheBytes of full masks, at least 1024)
  size_t max_cached() const;

 private:
  std::shared_ptr<LexParser> lp_;
  std::shared_ptr<Walker> walker_;
  std::vector<std::pair<int32_t, std::vector<uint32_t>>> token_lexeme_ids_;  // sorted ids
  mutable std::mutex mu_;
  // A cached mask: its words, or (a mask of few tokens) their ids. Most first-use masks allow
  // a few tokens (structure, keys, numbers); kept as words, each would take fresh pages (32
  // KiB at 262k tokens: 8 page faults, ~10 us on a virtual machine), where a vector expanded
  // for the caller reuses the memory of the one it dropped.
  struct CachedMask {
    std::shared_ptr<const std::vector<uint32_t>> words, ids;  // one of the two
  };
  bool lookup(uint64_t key, CachedMask& c);  // a hit (counted) into c
  void write(const CachedMask& c, uint32_t* out) const;  // its n_words words into out
  std::shared_ptr<const std::vector<uint32_t>> expand(const CachedMask& c) const;
  // a mask not found in the cache: computed and cached
  std::shared_ptr<const std::vector<uint32_t>> compute_cached(ParseState st);
  std::unordered_map<uint64_t, CachedMask> cache_;
  std::vector<uint64_t> order_;  // insertion order, for eviction
  // under the parser lock: the min_completion memo, the structural search, budget levels
  std::unordered_map<uint64_t, uint32_t> completion_;
  std::unique_ptr<CompletionSearch> search_;
  struct BudgetLevel {
    uint32_t cost;
    std::vector<uint32_t> ids;    // the tokens of this cost, when few
    std::vector<uint32_t> words;  // ... as a bitmask, when many
  };
  struct BudgetLevels {
    uint32_t cheapest = UINT32_MAX;  // the cost of the cheapest allowed token
    std::vector<BudgetLevel> above;  // costs above it, ascending
    size_t bytes = 0;
  };
  std::unordered_map<uint64_t, std::shared_ptr<const BudgetLevels>> levels_;
  size_t levels_bytes_ = 0;
  size_t order_head_ = 0;

  void collect(int32_t set_id, StateId s, uint32_t lo, uint32_t hi, uint32_t chain, MaskBuilder& out, int trie_id);
  // w's tokens for a parse at set_id: its inside tokens, then its boundaries' (the parser
  // asked once per group); chain: empty lexemes ended so far at the first node of a range.
  void assemble(int32_t set_id, const Walk& w, uint32_t chain, MaskBuilder& out);
  // A subtree walked with the parser in the loop, uncached: cheaper than a cached walk for
  // the few nodes below a small group of boundaries.
  void walk_direct(ParseState st, uint32_t lo, uint32_t hi, MaskBuilder& out, const TokenTrie& trie);
  bool step(ParseState& st, unsigned b);
  bool byte_search(ParseState st, std::string& out);
  // Step w from st (fixing lexeme junctions, see completion.h; w becomes what was stepped),
  // each state into states (states[k]: after k bytes); whether it ends complete.
  bool replay(ParseState st, std::string& w, const std::vector<uint32_t>& junctions,
              std::vector<ParseState>& states);
  std::shared_ptr<const BudgetLevels> budget_levels(ParseState st, const std::vector<uint32_t>& full);
  void compute(ParseState st, MaskBuilder& out);
};

// Logits rows masked in place from packed bitmask rows: logit t of row rows[i] becomes
// neg_inf unless bit (t & 31) of word (t >> 5) of bitmask row i is set; columns past the
// bitmask are disallowed, bitmask bits past n_cols ignored. T is the storage of one logit
// (uint32_t for float32, uint16_t for float16 / bfloat16) and neg_inf its -inf bit pattern;
// row_stride is in elements. rows are checked by the caller. One pass over the rows, words
// all ones skipped, all zeros filled 32 at a time.
template <class T>
void mask_logits(T* logits, size_t n_cols, size_t row_stride, const uint32_t* bitmask, size_t n_words,
                 const int64_t* rows, size_t n_rows, T neg_inf);
extern template void mask_logits<uint32_t>(uint32_t*, size_t, size_t, const uint32_t*, size_t,
                                           const int64_t*, size_t, uint32_t);
extern template void mask_logits<uint16_t>(uint16_t*, size_t, size_t, const uint32_t*, size_t,
                                           const int64_t*, size_t, uint16_t);

}  // namespace lexguide
