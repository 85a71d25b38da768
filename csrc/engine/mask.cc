// Vocabulary walks and mask assembly; see mask.h.
#include "engine/mask.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace lexguide {

namespace {
// walks look for a looping subtree (Walker::compute) at nodes with at least this many nodes
// in their subtree; smaller ones cost no more to visit
constexpr uint32_t kLoopWalkNodes = 4;
// ... and for a counted run at nodes with at least this many (a state's first run derives its
// ASCII classes along the chain: not worth it for a few nodes)
constexpr uint32_t kRunWalkNodes = 16;
// Walker::eternal: regex nesting it follows, (residual, UTF-8 position) pairs a repetition's
// search may enter; past either the answer is "unsure" (the slice search then decides)
constexpr int kEternalDepth = 64;
constexpr size_t kEternalPairs = 64;
// free mask buffers a vocabulary's MaskBuffers keeps (2 MiB at 262k tokens); the masks alive
// at once are the callers' (a row or two per sequence) and the cache's dense entries
constexpr size_t kMaskBuffersKept = 64;

// A walk's growing lists and per-depth stacks, one set per thread, reused from walk to walk.
struct WalkScratch {
  bool busy = false;
  std::vector<StateId> stack;
  std::vector<const ClassRow*> rows;
  std::vector<uint32_t> ids;
  std::vector<Boundary> boundaries;
};
}  // namespace

// -- MaskBuffers, MaskBuilder -----------------------------------------------------------------
std::unique_ptr<std::vector<uint32_t>> MaskBuffers::pop(bool zero_first, bool& zero) {
  std::unique_ptr<std::vector<uint32_t>> b;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto& first = zero_first ? zeroed_ : free_;
    auto& pool = !first.empty() ? first : zero_first ? free_ : zeroed_;
    if (!pool.empty()) {
      b = std::move(pool.back());
      pool.pop_back();
      zero = &pool == &zeroed_;
    }
  }
  if (!b) {
    b = std::make_unique<std::vector<uint32_t>>(n_words_);
    zero = true;
  }
  return b;
}

std::shared_ptr<std::vector<uint32_t>> MaskBuffers::take() {
  bool zero = false;
  std::unique_ptr<std::vector<uint32_t>> b = pop(false, zero);
  std::shared_ptr<MaskBuffers> self = shared_from_this();  // (the pool outlives its buffers)
  return std::shared_ptr<std::vector<uint32_t>>(b.release(), [self](std::vector<uint32_t>* v) { self->give_back(v); });
}

void MaskBuffers::give_back(std::vector<uint32_t>* buffer) {
  std::unique_ptr<std::vector<uint32_t>> b(buffer);
  std::lock_guard<std::mutex> g(mu_);
  if (free_.size() < kMaskBuffersKept) free_.push_back(std::move(b));
}

std::shared_ptr<std::vector<uint32_t>> MaskBuffers::take_bits(std::shared_ptr<const std::vector<uint32_t>> ids) {
  bool zero = false;
  std::unique_ptr<std::vector<uint32_t>> b = pop(true, zero);
  if (!zero) std::memset(b->data(), 0, size_t(n_words_) * 4);
  for (uint32_t id : *ids) set_bit(b->data(), id);
  std::shared_ptr<MaskBuffers> self = shared_from_this();
  return std::shared_ptr<std::vector<uint32_t>>(b.release(), [self, ids](std::vector<uint32_t>* v) {
    std::unique_ptr<std::vector<uint32_t>> back(v);
    for (uint32_t id : *ids) v->data()[id >> 5] = 0;  // (its only bits: zero again)
    std::lock_guard<std::mutex> g(self->mu_);
    if (self->zeroed_.size() < kMaskBuffersKept) self->zeroed_.push_back(std::move(back));
  });
}

size_t MaskBuffers::n_free() const {
  std::lock_guard<std::mutex> g(mu_);
  return free_.size() + zeroed_.size();
}

namespace {
// A hash of n words (four independent lanes, so it runs at the speed of loads).
uint64_t hash_words(const uint32_t* w, size_t n) {
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t lane[4] = {1, 2, 3, 4};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 4; k++) {
      uint64_t x;
      std::memcpy(&x, w + i + 2 * k, 8);
      lane[k] = (lane[k] ^ x) * kMul;
    }
  uint64_t h = n;
  for (; i < n; i++) h = (h ^ w[i]) * kMul;
  for (int k = 0; k < 4; k++) h = (h ^ (lane[k] >> 29) ^ lane[k]) * kMul;
  return h ^ (h >> 32);
}
}  // namespace

std::shared_ptr<std::vector<uint32_t>> MaskBuffers::share(std::shared_ptr<std::vector<uint32_t>> mask) {
  const uint64_t h = hash_words(mask->data(), n_words_);
  std::lock_guard<std::mutex> g(shared_mu_);
  auto [lo, hi] = shared_.equal_range(h);
  for (auto it = lo; it != hi; ++it)
    if (auto kept = it->second.lock(); kept && std::memcmp(kept->data(), mask->data(), size_t(n_words_) * 4) == 0)
      return kept;  // (mask's buffer returns to the pool as it is dropped)
  if (shared_.size() >= sweep_at_) {
    for (auto it = shared_.begin(); it != shared_.end();) it = it->second.expired() ? shared_.erase(it) : std::next(it);
    sweep_at_ = std::max<size_t>(64, 2 * shared_.size());
  }
  shared_.emplace(h, mask);
  return mask;
}

uint32_t* MaskBuilder::dense(const uint32_t* from) {
  if (words_ != nullptr) return words_;
  buffer_ = buffers_.take();
  words_ = buffer_->data();
  if (from != nullptr) std::memcpy(words_, from, size_t(n_words_) * 4);
  else std::memset(words_, 0, size_t(n_words_) * 4);
  for (uint32_t id : ids_) set_bit(words_, id);
  ids_.clear();
  return words_;
}

// -- Walker -----------------------------------------------------------------------------------
Walker::Walker(std::shared_ptr<const Vocab> vocab, std::shared_ptr<LexerDFA> lexer)
    : vocab_(std::move(vocab)),
      lexer_(std::move(lexer)),
      buffers_(std::make_shared<MaskBuffers>(vocab_->n_words())),
      shards_(new WalkShard[kWalkShards]) {
  slice_levels_.reset(new std::atomic<int8_t>[lexer_->max_states()]);
  for (uint32_t i = 0; i < lexer_->max_states(); i++) slice_levels_[i].store(kSliceUnknown, std::memory_order_relaxed);
  size_t n = (size_t(lexer_->max_states()) * 8 + kBoundsChunk - 1) / kBoundsChunk;
  bound_index_.reset(new std::atomic<std::atomic<uint32_t>*>[n]);
  for (size_t i = 0; i < n; i++) bound_index_[i].store(nullptr, std::memory_order_relaxed);
}

std::atomic<uint32_t>& Walker::bounds_at(size_t at) {
  size_t c = at / kBoundsChunk;
  std::atomic<uint32_t>* chunk = bound_index_[c].load(std::memory_order_acquire);
  if (chunk == nullptr) {
    std::lock_guard<std::mutex> g(bounds_mu_);
    chunk = bound_index_[c].load(std::memory_order_acquire);
    if (chunk == nullptr) {
      auto fresh = std::unique_ptr<std::atomic<uint32_t>[]>(new std::atomic<uint32_t>[kBoundsChunk]);
      for (size_t i = 0; i < kBoundsChunk; i++) fresh[i].store(0, std::memory_order_relaxed);
      chunk = fresh.get();
      bound_chunks_.push_back(std::move(fresh));
      bound_index_[c].store(chunk, std::memory_order_release);
    }
  }
  return chunk[at % kBoundsChunk];
}

std::pair<Walker::WalkKey, std::shared_ptr<const Walk>>& Walker::WalkShard::slot(const WalkKey& k, size_t h) {
  const size_t mask = slots.size() - 1;
  for (size_t i = (h / kWalkShards) & mask;; i = (i + 1) & mask)  // (h % kWalkShards chose the shard)
    if (!slots[i].second || slots[i].first == k) return slots[i];
}

std::shared_ptr<const Walk> Walker::cached(const WalkKey& k) {
  const size_t h = WalkKeyHash()(k);
  WalkShard& shard = shards_[h % kWalkShards];
  std::lock_guard<std::mutex> g(shard.mu);
  return shard.slots.empty() ? nullptr : shard.slot(k, h).second;
}

std::shared_ptr<const Walk> Walker::remember(const WalkKey& k, std::shared_ptr<const Walk> w) {
  const size_t h = WalkKeyHash()(k);
  WalkShard& shard = shards_[h % kWalkShards];
  std::lock_guard<std::mutex> g(shard.mu);
  if (shard.bytes + w->memory_bytes() > kWalkCacheBytes / kWalkShards) {
    shard.slots.clear();
    shard.slots.shrink_to_fit();
    shard.n = shard.bytes = 0;
  }
  if (2 * (shard.n + 1) > shard.slots.size()) {  // grow (from empty: 16 slots)
    std::vector<std::pair<WalkKey, std::shared_ptr<const Walk>>> old(std::max<size_t>(16, 2 * shard.slots.size()));
    old.swap(shard.slots);
    for (auto& e : old)
      if (e.second) shard.slot(e.first, WalkKeyHash()(e.first)) = std::move(e);
  }
  auto& e = shard.slot(k, h);
  if (!e.second) {
    e.first = k;
    e.second = std::move(w);
    shard.n++;
    shard.bytes += e.second->memory_bytes();
  }
  return e.second;
}

std::shared_ptr<const Walk> Walker::walk(StateId s, uint32_t lo, uint32_t hi, int trie_id) {
  WalkKey k{uint64_t(s) << 32 | lo, uint64_t(hi) << 8 | uint8_t(trie_id)};
  if (auto w = cached(k)) return w;
  std::shared_ptr<Walk> fresh;
  const bool root = lo == 1 && hi == vocab_->trie(trie_id).n_nodes();
  int level = trie_id == 0 && root ? slice_level(s) : -1;
  // the plain reach of a whole-trie walk: the structural bound slice_level found (none when it
  // did not ask, e.g. a state that dies on a plain byte)
  uint32_t reach = 0;
  if (root) {
    const uint32_t bound = lexer_->state(s).plain_bound.load(std::memory_order_acquire);
    if (bound != LexerState::kPlainBoundUnknown) reach = std::min(bound, kMaxTokenBytes);
  }
  if (level >= 0) {  // the plain tokens at once (by reference), a walk of the others
    fresh = compute_root(s, 1 + level, reach);
    fresh->slice = int8_t(level);
  } else if (root) {
    fresh = compute_root(s, trie_id, reach);
  } else {
    fresh = compute(s, lo, hi, trie_id);
  }
  group_boundaries(*fresh, &lo, 1);  // (a sliced walk's range starts at node 1 of its own trie too)
  return remember(k, std::move(fresh));
}

std::shared_ptr<const Walk> Walker::group_walk(const Walk& parent, uint32_t g, StateId s) {
  // (trie byte 0xFF: no trie has that id, so no key of walk() is one of these)
  WalkKey k{uint64_t(s) << 32 | g, parent.serial << 8 | 0xFF};
  if (auto w = cached(k)) return w;
  const BoundaryGroup& grp = parent.groups[g];
  const TokenTrie& trie = vocab_->trie(parent.trie_id);
  std::vector<Range> ranges;
  std::vector<uint32_t> starts;
  ranges.reserve(grp.end - grp.begin);
  for (uint32_t i = grp.begin; i < grp.end; i++) {
    const uint32_t node = parent.boundaries[i].node, end = node + trie.size(node);
    const uint32_t lo = grp.kind == BoundaryKind::Before ? node : node + 1;
    if (lo >= end) continue;
    ranges.push_back({lo, end});
    starts.push_back(lo);
  }
  std::shared_ptr<Walk> fresh = compute_ranges(s, ranges.data(), ranges.size(), parent.trie_id);
  group_boundaries(*fresh, starts.data(), starts.size());
  return remember(k, std::move(fresh));
}

void Walker::group_boundaries(Walk& w, const uint32_t* range_starts, size_t n_starts) {
  w.serial = serials_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (w.boundaries.empty()) return;
  const TokenTrie& trie = vocab_->trie(w.trie_id);
  // group index per boundary (kNoGroup: a start), groups in order of first occurrence (a run
  // of one state, the common case, finds its group at once; a handful of groups by a scan,
  // more by an index); then a counting sort, unless the groups already come one after the
  // other (then only the starts are taken out). The lists are this thread's scratch.
  constexpr uint32_t kNoGroup = 0xFFFFFFFFu;
  constexpr size_t kScanGroups = 8;
  thread_local std::vector<uint32_t> group_of;
  thread_local std::vector<Boundary> sorted;
  std::unique_ptr<FlatMap64> index;  // once there are more than kScanGroups groups
  group_of.resize(w.boundaries.size());
  uint64_t last_key = ~uint64_t(0);
  uint32_t last_group = 0;
  size_t n_grouped = 0;
  bool in_order = true;  // every group's boundaries one after the other
  for (size_t i = 0; i < w.boundaries.size(); i++) {
    const Boundary& bd = w.boundaries[i];
    if (bd.kind == BoundaryKind::Before && std::binary_search(range_starts, range_starts + n_starts, bd.node)) {
      w.starts.push_back(bd);
      group_of[i] = kNoGroup;
      continue;
    }
    const uint64_t key = uint64_t(bd.state) << 1 | uint64_t(bd.kind);
    if (key != last_key) {
      if (!index && w.groups.size() >= kScanGroups) {
        index = std::make_unique<FlatMap64>();
        for (uint32_t j = 0; j < w.groups.size(); j++)
          index->emplace(uint64_t(w.groups[j].state) << 1 | uint64_t(w.groups[j].kind), j);
      }
      uint32_t g = uint32_t(w.groups.size());
      if (index) {
        g = *index->emplace(key, g).first;
      } else {
        for (uint32_t j = 0; j < w.groups.size(); j++)
          if (w.groups[j].state == bd.state && w.groups[j].kind == bd.kind) g = j;
      }
      if (g == w.groups.size()) w.groups.push_back(BoundaryGroup{bd.state, bd.kind, 0, 0, 0});
      else in_order = false;  // a group met again after another one
      last_key = key;
      last_group = g;
    }
    BoundaryGroup& grp = w.groups[last_group];
    grp.end++;
    grp.nodes += trie.size(bd.node) - (bd.kind == BoundaryKind::After ? 1 : 0);
    group_of[i] = last_group;
    n_grouped++;
  }
  uint32_t at = 0;
  for (BoundaryGroup& grp : w.groups) {
    grp.begin = at;
    at += grp.end;
    grp.end = in_order ? at : grp.begin;
  }
  if (in_order) {  // (stable: the groups' boundaries are in place once the starts are out)
    if (n_grouped != w.boundaries.size()) {
      size_t k = 0;
      for (size_t i = 0; i < w.boundaries.size(); i++)
        if (group_of[i] != kNoGroup) w.boundaries[k++] = w.boundaries[i];
      w.boundaries.resize(n_grouped);
    }
    return;
  }
  sorted.resize(n_grouped);
  for (size_t i = 0; i < w.boundaries.size(); i++)
    if (group_of[i] != kNoGroup) sorted[w.groups[group_of[i]].end++] = w.boundaries[i];
  w.boundaries.assign(sorted.begin(), sorted.end());
}

namespace {
// The plain bytes (those a JSON string holds unescaped) that may follow UTF-8 position u, with
// the position after each: utf8_plain_next as lists, built once.
struct PlainMoves {
  std::vector<std::pair<uint8_t, uint8_t>> from[8];
  PlainMoves() {
    for (int u = 0; u < 8; u++)
      for (unsigned b = 0x20; b < 256; b++) {
        int u2 = utf8_plain_next(u, b);
        if (u2 >= 0) from[u].emplace_back(uint8_t(b), uint8_t(u2));
      }
  }
};
const PlainMoves& plain_moves() {
  static const PlainMoves moves;
  return moves;
}
}  // namespace

// Whether every plain byte string of at most `depth` bytes from (s, u) stays inside the lexeme
// (no DEAD, no lazy lexeme ending): a bounded reachability check, depth first. A pair already
// entered in this check with at least the depth asked is not entered again -- on the stack
// (a string body loops to its own state) or finished -- so every pair is explored once with
// the largest depth it is reached with, and a dying string, if any, is found. Facts kept
// across checks: a dying string's length at once (it is concrete); the safe depths of the
// check's pairs only when the whole check succeeds (a finished pair may have relied on one
// still on the stack). Recursion depth <= kSliceMaxDepth.
Walker::Survival Walker::survives(uint64_t key, uint32_t depth, SliceCheck& check) {
  if (depth == 0) return Survival::Yes;
  std::atomic<uint32_t>& bound = bounds_at(size_t(key));
  auto note_fail = [&](uint32_t f) {  // a plain string of f bytes dies from here
    uint32_t v = bound.load(std::memory_order_relaxed);
    while ((fails_of(v) == 0 || f < fails_of(v)) &&
           !bound.compare_exchange_weak(v, (f << 16) | safe_of(v), std::memory_order_relaxed)) {
    }
  };
  {
    uint32_t v = bound.load(std::memory_order_relaxed);
    if (safe_of(v) >= depth) return Survival::Yes;
    if (fails_of(v) != 0 && fails_of(v) <= depth) return Survival::No;
  }
  auto [seen, fresh] = check.entered.emplace(key, depth);
  if (!fresh) {
    if (*seen >= depth) return Survival::Yes;
    *seen = depth;
  }
  if (check.budget == 0) return Survival::OverBudget;
  check.budget--;
  LexerDFA& lx = *lexer_;
  const ClassRow* row = lx.row(StateId(key >> 3));
  // the distinct successors (most plain bytes share a few: one per byte class)
  size_t base = check.next.size();
  uint64_t last = ~uint64_t(0);
  for (auto [b, u2] : plain_moves().from[key & 7]) {
    StateId t = row->at(b);
    if (t == DEAD || lx.accepts_lazy(t)) {
      note_fail(1);
      check.next.resize(base);
      return Survival::No;
    }
    uint64_t k = (uint64_t(t) << 3) | u2;
    if (k != last) check.next.push_back(last = k);
  }
  std::sort(check.next.begin() + std::ptrdiff_t(base), check.next.end());
  check.next.erase(std::unique(check.next.begin() + std::ptrdiff_t(base), check.next.end()),
                   check.next.end());
  size_t end = check.next.size();
  Survival result = Survival::Yes;
  for (size_t i = base; i < end && result == Survival::Yes; i++) {
    uint64_t k = check.next[i];
    result = survives(k, depth - 1, check);
    if (result == Survival::No)  // that string dies one byte later from here
      note_fail(fails_of(bounds_at(size_t(k)).load(std::memory_order_relaxed)) + 1);
  }
  check.next.resize(base);
  return result;
}

Walker::Survival Walker::survives_all(StateId s, uint32_t depth, uint32_t& budget) {
  SliceCheck check;
  check.budget = budget;
  Survival r = survives(uint64_t(s) << 3, depth, check);
  budget = check.budget;
  if (r != Survival::Yes) return r;
  check.entered.for_each([&](uint64_t key, uint32_t d) {  // proven: publish the safe depths
    std::atomic<uint32_t>& bound = bounds_at(size_t(key));
    uint32_t v = bound.load(std::memory_order_relaxed);
    while (safe_of(v) < d &&
           !bound.compare_exchange_weak(v, (v & 0xFFFF0000u) | d, std::memory_order_relaxed)) {
    }
  });
  return r;
}

// -- Plain strings that cannot end a lexeme --------------------------------------------------
// A sound, partial test by a regex's structure (false when unsure): every plain byte string w
// leaves x a residual D_w(x) that is non-empty and infinite. Such a lexeme survives plain
// strings of any length, so a lexer state holding it (and no lazy lexeme) takes every slice
// without a search over its successors (a key position whose "other keys" lexeme is all
// quoted strings except the declared names made that search build hundreds of states).
//   x* and x{lo,}: a bounded search over the residuals (plain bytes, the UTF-8 automaton):
//     none empty means any plain w extends to a word, and words repeat, so infinitely.
//   h t: h is, and t is non-empty (exactly known without boolean operators).
//   x | y: either is.  ~y: y is finite.  x & ~y1 & ~y2 ...: x is and every y is finite.
bool Walker::eternal(NodeId x, RegexStore& rs, int depth) {
  if (depth > kEternalDepth) return false;
  if (const uint8_t* known = eternal_.find(x)) return *known;
  // a copy: the searches below derive, which adds nodes and may move the store's arrays
  const std::vector<uint32_t> a(rs.children(x), rs.children(x) + rs.n_children(x));
  const uint32_t n = uint32_t(a.size());
  bool r = false;
  switch (rs.kind(x)) {
    case K_STAR: r = plain_search(x, rs, false); break;
    case K_REPEAT: r = a[2] == kInf && plain_search(x, rs, false); break;
    case K_CONCAT: r = !rs.has_boolean(a[1]) && a[1] != NOTHING && eternal(a[0], rs, depth + 1); break;
    case K_ALT:
      for (uint32_t i = 0; i < n && !r; i++) r = eternal(a[i], rs, depth + 1);
      break;
    case K_NOT: r = finite(a[0], rs, depth + 1); break;
    case K_AND:
      for (uint32_t i = 0; i < n && !r; i++) {
        if (rs.kind(a[i]) == K_NOT || !eternal(a[i], rs, depth + 1)) continue;
        r = true;
        for (uint32_t j = 0; j < n && r; j++)
          if (j != i) r = rs.kind(a[j]) == K_NOT && finite(rs.children(a[j])[0], rs, depth + 1);
      }
      break;
    default: break;
  }
  eternal_.emplace(x, r);
  return r;
}

// Whether x's language is finite, by structure (false when unsure).
bool Walker::finite(NodeId x, RegexStore& rs, int depth) {
  if (depth > kEternalDepth) return false;
  if (const uint8_t* known = finite_.find(x)) return *known;
  const uint32_t* a = rs.children(x);  // (no node is added below: the pointer stays valid)
  uint32_t n = rs.n_children(x);
  bool r = false;
  switch (rs.kind(x)) {
    case K_NOTHING: case K_EPS: case K_BYTES: r = true; break;
    case K_CONCAT: case K_ALT:
      r = true;
      for (uint32_t i = 0; i < n && r; i++) r = finite(a[i], rs, depth + 1);
      break;
    case K_AND:  // one finite operand bounds the intersection
      for (uint32_t i = 0; i < n && !r; i++) r = finite(a[i], rs, depth + 1);
      break;
    case K_REPEAT: r = a[2] != kInf && finite(a[0], rs, depth + 1); break;
    default: break;  // STAR, NOT
  }
  finite_.emplace(x, r);
  return r;
}

// A search over (residual of x, UTF-8 position) pairs along plain bytes, at most kEternalPairs
// of them; false as soon as a residual is empty or has boolean operators (its emptiness not
// known exactly). one_char: stop at each character's end, where the residual must be nullable
// (every plain character is a word of x); else go on (no plain string empties x).
bool Walker::plain_search(NodeId x, RegexStore& rs, bool one_char) {
  std::vector<uint64_t> seen{uint64_t(x) << 3}, todo{uint64_t(x) << 3};
  while (!todo.empty()) {
    uint64_t key = todo.back();
    todo.pop_back();
    for (auto [b, u2] : plain_moves().from[key & 7]) {
      NodeId d = rs.derivative(NodeId(key >> 3), b);
      if (one_char && u2 == 0) {
        if (!rs.nullable(d)) return false;  // a character that is no word of x
        continue;
      }
      if (d == NOTHING || rs.has_boolean(d)) return false;
      uint64_t k = (uint64_t(d) << 3) | u2;
      if (std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
      if (seen.size() >= kEternalPairs) return false;
      seen.push_back(k);
      todo.push_back(k);
    }
  }
  return true;
}

// How many bytes of any plain string x survives for sure, at a character boundary (0 when
// unsure; kInf when eternal): c{lo,hi} with every plain character a word of c survives hi
// characters (a string of at most hi bytes has at most hi characters, and a character begun
// can be finished); h t what h survives when t is non-empty; x | y the larger.
uint32_t Walker::plain_bound(NodeId x, RegexStore& rs, int depth) {
  if (depth > kEternalDepth) return 0;
  if (eternal(x, rs, depth)) return kInf;
  if (const uint32_t* known = bound_.find(x)) return *known;
  const std::vector<uint32_t> a(rs.children(x), rs.children(x) + rs.n_children(x));  // (as in eternal)
  uint32_t n = uint32_t(a.size()), r = 0;
  switch (rs.kind(x)) {
    case K_REPEAT: r = covers_plain(a[0], rs) ? a[2] : 0; break;
    case K_CONCAT: r = !rs.has_boolean(a[1]) && a[1] != NOTHING ? plain_bound(a[0], rs, depth + 1) : 0; break;
    case K_ALT:
      for (uint32_t i = 0; i < n; i++) r = std::max(r, plain_bound(a[i], rs, depth + 1));
      break;
    default: break;
  }
  bound_.emplace(x, r);
  return r;
}

bool Walker::covers_plain(NodeId c, RegexStore& rs) {
  if (const uint8_t* known = covers_.find(c)) return *known;
  bool ok = plain_search(c, rs, true);
  covers_.emplace(c, ok);
  return ok;
}

uint32_t Walker::state_plain_bound(StateId s) {
  LexerDFA& lx = *lexer_;
  const LexerState& st = lx.state(s);
  // once per lexer state for all walkers (without the store's lock: a new TokenizerInfo's
  // walks from known states took it for every state, serialising fill_masks' threads)
  uint32_t known = st.plain_bound.load(std::memory_order_acquire);
  if (known != LexerState::kPlainBoundUnknown) return known;
  std::lock_guard<std::recursive_mutex> g(store_mutex());
  uint32_t bound = 0;
  if (!lx.holds_lazy(s))  // (a lazy lexeme may end inside a token: 0)
    for (auto& [lex, rx] : st.entries) bound = std::max(bound, plain_bound(rx, lx.regex(), 0));
  st.plain_bound.store(bound, std::memory_order_release);
  return bound;
}

int Walker::slice_level(StateId s) {
  int8_t known = slice_levels_[s].load(std::memory_order_acquire);
  if (known != kSliceUnknown) return known;
  // level k holds the plain tokens of at most kSliceLengths[k] bytes: usable from s when every
  // plain string that long stays inside the lexeme (no token of the slice needs walking)
  uint32_t max_len = vocab_->max_plain_len();
  int level = -1;
  // Most states outside strings die on the plain byte 'a': no level then (a sound structural
  // bound would be 0), without asking the lexemes' structure.
  if (max_len > 0) {
    const StateId t = lexer_->next(s, 'a');
    if (t == DEAD || lexer_->accepts_lazy(t)) {
      slice_levels_[s].store(int8_t(level), std::memory_order_release);
      return level;
    }
  }
  // by structure when the lexemes tell (no successor search), else by the search
  const uint32_t bound = state_plain_bound(s);
  if (bound == kInf) eternal_states.fetch_add(1, std::memory_order_relaxed);
  else if (bound) bounded_states.fetch_add(1, std::memory_order_relaxed);
  uint32_t budget = kSliceBudget;
  // A concrete plain string that dies settles a level at once: the search would first prove
  // every shorter string safe (a maxLength-100 string's search built ~450 lexer states, one
  // per count and UTF-8 position, before failing at its 101st byte).
  auto witness_dies = [&](uint32_t depth) {
    LexerDFA& lx = *lexer_;
    StateId t = s;
    for (uint32_t i = 0; i < depth; i++) {
      t = lx.next(t, 'a');
      if (t == DEAD || lx.accepts_lazy(t)) return true;
    }
    return false;
  };
  for (int k = 0; k < kSliceLevels; k++) {
    uint32_t depth = std::min(kSliceLengths[k], max_len);
    if (depth > kSliceMaxDepth) break;
    if (depth > bound && (witness_dies(depth) || survives_all(s, depth, budget) != Survival::Yes)) break;
    level = k;
  }
  slice_levels_[s].store(int8_t(level), std::memory_order_release);
  return level;
}

std::shared_ptr<Walk> Walker::compute(StateId s0, uint32_t lo, uint32_t hi, int trie_id, uint32_t reach) {
  const Range r{lo, hi};
  return compute_ranges(s0, &r, 1, trie_id, reach);
}

std::shared_ptr<Walk> Walker::compute_ranges(StateId s0, const Range* ranges, size_t n_ranges, int trie_id,
                                             uint32_t reach) {
  const TokenTrie& trie = vocab_->trie(trie_id);
  LexerDFA& lx = *lexer_;
  auto w = std::make_shared<Walk>();
  w->trie_id = uint8_t(trie_id);
  // The walk's lists grow in this thread's scratch vectors and are copied out at their final
  // size: grown in place, each doubling would take (and fault in) fresh memory again.
  thread_local WalkScratch scratch;
  std::unique_ptr<WalkScratch> own;  // (a walk inside a walk on this thread: none today)
  WalkScratch& sc = scratch.busy ? *(own = std::make_unique<WalkScratch>()) : scratch;
  sc.busy = true;
  struct Release {
    WalkScratch& sc;
    ~Release() { sc.busy = false; }
  } release{sc};  // (also when a lexer limit throws)
  sc.ids.clear();
  sc.boundaries.clear();
  // per depth: the state before that depth's byte and its row (a row never moves; next_from
  // moves a state's entry from the shared unknown row to the state's own)
  sc.stack.assign(size_t(trie.max_depth()) + 2, DEAD);
  sc.rows.assign(sc.stack.size(), nullptr);
  std::vector<StateId>& stack = sc.stack;
  std::vector<const ClassRow*>& rows = sc.rows;
  std::vector<uint32_t>& ids = sc.ids;
  std::vector<Boundary>& boundaries = sc.boundaries;
  // Inside tokens go to an id list until there are more of them than the bitmask has words,
  // then straight into the bitmask (growing a list of ~vocabulary size, then converting it,
  // cost as much as a root walk itself).
  uint32_t n_words = vocab_->n_words();
  uint32_t* bits = nullptr;
  auto add = [&](const uint32_t* tb, const uint32_t* te) {
    if (tb == te) return;
    if (bits) {
      for (const uint32_t* q = tb; q != te; ++q) set_bit(bits, *q);
      return;
    }
    for (const uint32_t* q = tb; q != te; ++q) ids.push_back(*q);  // (mostly one id: no memmove call)
    if (ids.size() > n_words) {  // a bitmask is smaller and ORs faster
      w->words.assign(n_words, 0);
      bits = w->words.data();
      for (uint32_t id : ids) set_bit(bits, id);
      ids.clear();
    }
  };
  // A state holding no lazy lexeme reaches none (its successors hold residuals of its
  // lexemes), so its walk skips the lazy-end test at every node.
  const bool lazy = lx.holds_lazy(s0);
  uint64_t loop_subtrees = 0, run_subtrees = 0, plain_subtrees = 0, visited = 0;
  for (size_t r = 0; r < n_ranges; r++) {
    const uint32_t lo = ranges[r].lo, hi = ranges[r].hi;
    if (lo >= hi) continue;
    const uint32_t d0 = trie.depth(lo) - 1u;
    stack[d0] = s0;
    rows[d0] = lx.row_of(s0);
    uint32_t p = lo;
    while (p < hi) {
      // plain tokens within reach stay inside the lexeme: no lexer step, no boundary below p
      if (reach != 0 && trie.plain_len(p) <= reach) {
        const uint32_t sz = trie.size(p);
        add(trie.tokens_begin(p), trie.tokens_begin(p + sz));
        plain_subtrees++;
        p += sz;
        continue;
      }
      uint32_t d = trie.depth(p);
      // single transitions: deep states see few distinct bytes, a whole row would waste
      // one derivative per byte class
      StateId t = lx.next_from(stack[d - 1], rows[d - 1], trie.byte(p));
      if (t == DEAD) {
        if (lx.accepts(stack[d - 1])) boundaries.push_back({p, stack[d - 1], BoundaryKind::Before});
        p += trie.size(p);
        continue;
      }
      if (lazy && lx.accepts_lazy(t)) {
        boundaries.push_back({p, t, BoundaryKind::After});
        p += trie.size(p);
        continue;
      }
      if (!(p + 1 < hi && trie.depth(p + 1) > d)) {  // a leaf: no child reads t's row
        add(trie.tokens_begin(p), trie.tokens_end(p));
        p++;
        continue;
      }
      const ClassRow* row = lx.row_of(t);
      // A subtree whose bytes all lead from t back to t: every token in it stays in t (inside
      // the lexeme, no lazy end, no boundary), so take them all without visiting it. Tried when
      // the first child's byte loops (the node and transition the walk reads next anyway, so a
      // state that does not loop costs no extra memory read). Likewise a subtree whose tokens
      // are no longer than t's run on the buckets below it (a counted repetition: every token
      // of those bytes steps from count to count, inside the lexeme): tried for large subtrees
      // whose first child's byte lives, since the run costs the rows along it.
      const uint32_t sz = trie.size(p);
      const StateId t1 = sz >= kLoopWalkNodes ? lx.next_from(t, row, trie.byte(p + 1)) : DEAD;
      if (t1 == t && (trie.below(p) & ~lx.loop_buckets(t)) == 0) {
        add(trie.tokens_begin(p), trie.tokens_begin(p + sz));
        loop_subtrees++;
        p += sz;
        continue;
      }
      if (t1 != DEAD && t1 != t && sz >= kRunWalkNodes && !lx.accepts_lazy(t1) &&
          (trie.below(p) & ~lx.run_buckets(t, trie.height(p))) == 0) {
        add(trie.tokens_begin(p), trie.tokens_begin(p + sz));
        run_subtrees++;
        p += sz;
        continue;
      }
      add(trie.tokens_begin(p), trie.tokens_end(p));
      stack[d] = t;
      rows[d] = row;
      p++;
    }
    visited += p - lo;
  }
  nodes_walked.fetch_add(visited, std::memory_order_relaxed);
  if (loop_subtrees) loop_walks.fetch_add(loop_subtrees, std::memory_order_relaxed);
  if (run_subtrees) run_walks.fetch_add(run_subtrees, std::memory_order_relaxed);
  if (plain_subtrees) plain_walks.fetch_add(plain_subtrees, std::memory_order_relaxed);
  w->ids.assign(ids.begin(), ids.end());
  w->boundaries.assign(boundaries.begin(), boundaries.end());
  return w;
}

std::shared_ptr<const std::vector<TriePiece>> Walker::pieces(int trie_id) {
  std::lock_guard<std::mutex> g(mu_);
  auto& p = pieces_[trie_id];
  if (!p) {
    uint32_t n = vocab_->trie(trie_id).n_nodes();
    p = std::make_shared<const std::vector<TriePiece>>(
        split_trie(vocab_->trie(trie_id), std::max(n / kSplitWalkPieces, kSplitWalkNodes / 2)));
  }
  return p;
}

std::shared_ptr<Walk> Walker::compute_root(StateId s0, int trie_id, uint32_t reach) {
  const TokenTrie& trie = vocab_->trie(trie_id);
  // split only inside a fill_masks call: among its crew, or, when it has one new mask and
  // may use more threads, on the engine's pool if that is free (a Matcher's own mask on the
  // pool was measured no faster, bench/jsonschema.py on Gemma 3: waking the pool between
  // masks costs what the split saves; within a batch its threads are awake)
  Crew* crew = Crew::current();
  const bool crew_splits = crew && crew->size() >= 2;
  std::unique_lock<std::mutex> busy;  // held while the pool runs this walk's pieces
  if (!crew_splits && crew && crew->allowed() >= 2 && trie.n_nodes() >= kSplitWalkNodes)
    busy = std::unique_lock<std::mutex>(engine_pool_busy(), std::try_to_lock);
  // (busy first: while a job runs, asking the pool anything would wait for the job)
  const bool pool_splits = busy.owns_lock() && engine_pool().size() >= 2;
  if (trie.n_nodes() < kSplitWalkNodes || !(crew_splits || pool_splits))
    return compute(s0, 1, trie.n_nodes(), trie_id, reach);
  std::shared_ptr<const std::vector<TriePiece>> plan = pieces(trie_id);
  std::vector<std::shared_ptr<Walk>> parts(plan->size());
  LexerDFA& lx = *lexer_;
  split_walks.fetch_add(1, std::memory_order_relaxed);
  auto piece_walk = [&](size_t i) {
    const TriePiece& piece = (*plan)[i];
    StateId s = s0;
    for (uint8_t b : piece.path) {  // the serial walk skips the subtree where this dies
      s = lx.next(s, b);
      if (s == DEAD || lx.accepts_lazy(s)) return;
    }
    parts[i] = compute(s, piece.lo, piece.hi, trie_id, reach);  // (its tokens are strings from s0)
  };
  if (crew_splits) {
    crew->share(plan->size(), piece_walk);
  } else {
    engine_pool().run(int64_t(plan->size()), 0, [&](int64_t i) { piece_walk(size_t(i)); });
  }
  // concatenated in order: the serial walk's ids and boundaries (its bitmask once the ids
  // outnumber the mask's words)
  auto w = std::make_shared<Walk>();
  w->trie_id = uint8_t(trie_id);
  uint32_t n_words = vocab_->n_words();
  size_t n_ids = 0, n_bounds = 0;
  bool words = false;
  for (auto& part : parts) {
    if (!part) continue;
    n_ids += part->ids.size();
    n_bounds += part->boundaries.size();
    words = words || !part->words.empty();
  }
  words = words || n_ids > n_words;
  if (words) w->words.assign(n_words, 0);
  else w->ids.reserve(n_ids);
  w->boundaries.reserve(n_bounds);
  for (auto& part : parts) {
    if (!part) continue;
    if (words) {
      for (size_t i = 0; i < part->words.size(); i++) w->words[i] |= part->words[i];
      for (uint32_t id : part->ids) set_bit(w->words.data(), id);
    } else {
      w->ids.insert(w->ids.end(), part->ids.begin(), part->ids.end());
    }
    w->boundaries.insert(w->boundaries.end(), part->boundaries.begin(), part->boundaries.end());
  }
  return w;
}

void Walker::inside_end_states(StateId s0, std::vector<uint32_t>& ids, std::vector<StateId>& ends) {
  const TokenTrie& trie = vocab_->trie();
  LexerDFA& lx = *lexer_;
  std::vector<StateId> stack(size_t(trie.max_depth()) + 2, DEAD);
  stack[0] = s0;
  uint32_t p = 1, hi = trie.n_nodes();
  while (p < hi) {
    uint32_t d = trie.depth(p);
    StateId t = lx.next(stack[d - 1], trie.byte(p));
    if (t == DEAD || lx.accepts_lazy(t)) {
      p += trie.size(p);
      continue;
    }
    for (const uint32_t* q = trie.tokens_begin(p); q != trie.tokens_end(p); ++q) {
      ids.push_back(*q);
      ends.push_back(t);
    }
    stack[d] = t;
    p++;
  }
}

std::shared_ptr<const std::vector<InsideGroup>> Walker::inside_groups(StateId s) {
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = inside_.find(s);
    if (it != inside_.end()) return it->second;
  }
  std::vector<uint32_t> ids;
  std::vector<StateId> ends;
  inside_end_states(s, ids, ends);
  std::unordered_map<StateId, size_t> index;
  auto groups = std::make_shared<std::vector<InsideGroup>>();
  for (size_t i = 0; i < ids.size(); i++) {
    auto [it, fresh] = index.emplace(ends[i], groups->size());
    if (fresh) groups->push_back(InsideGroup{ends[i], {}, {}});
    (*groups)[it->second].ids.push_back(ids[i]);
  }
  size_t n_words = vocab_->n_words(), bytes = 64;
  for (InsideGroup& grp : *groups) {
    if (grp.ids.size() >= n_words) {
      grp.words.assign(n_words, 0);
      for (uint32_t id : grp.ids) set_bit(grp.words.data(), id);
      std::vector<uint32_t>().swap(grp.ids);
    }
    bytes += 32 + 4 * (grp.ids.size() + grp.words.size());
  }
  std::lock_guard<std::mutex> g(mu_);
  if (inside_bytes_ + bytes > kWalkCacheBytes / 4) {
    inside_.clear();
    inside_bytes_ = 0;
  }
  inside_bytes_ += bytes;
  return inside_.emplace(s, std::move(groups)).first->second;
}

size_t Walker::n_walks() const {
  size_t n = 0;
  for (size_t i = 0; i < kWalkShards; i++) {
    std::lock_guard<std::mutex> g(shards_[i].mu);
    n += shards_[i].n;
  }
  return n;
}

size_t Walker::memory_bytes() const {
  size_t n = size_t(lexer_->max_states());  // the slice levels
  for (size_t i = 0; i < kWalkShards; i++) {
    std::lock_guard<std::mutex> g(shards_[i].mu);
    n += shards_[i].bytes + shards_[i].slots.capacity() * sizeof(shards_[i].slots[0]);
  }
  std::lock_guard<std::mutex> g(mu_);
  return n + inside_bytes_;
}

// -- MaskEngine -------------------------------------------------------------------------------
MaskEngine::MaskEngine(std::shared_ptr<LexParser> lp, std::shared_ptr<Walker> walker,
                       std::vector<std::pair<int32_t, std::vector<uint32_t>>> token_lexeme_ids)
    : lp_(std::move(lp)), walker_(std::move(walker)), token_lexeme_ids_(std::move(token_lexeme_ids)) {
  uint32_t n = walker_->vocab().n_tokens();
  for (auto& [lex, ids] : token_lexeme_ids_) {
    std::sort(ids.begin(), ids.end());
    for (uint32_t id : ids)
      if (id >= n) throw std::invalid_argument("token id of a token lexeme outside the vocabulary");
  }
  search_ = std::make_unique<CompletionSearch>(*lp_);
}

std::vector<int32_t> MaskEngine::token_lexemes_of(uint32_t token_id) const {
  std::vector<int32_t> out;
  for (auto& [lex, ids] : token_lexeme_ids_)
    if (std::binary_search(ids.begin(), ids.end(), token_id)) out.push_back(lex);
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<ParseState> MaskEngine::advance_token(ParseState st, uint32_t token_id) {
  const Vocab& v = walker_->vocab();
  if (token_id >= v.n_tokens()) return std::nullopt;
  std::vector<int32_t> lexemes = token_lexemes_of(token_id);
  if (!lexemes.empty()) {
    auto r = lp_->advance_token_lexeme(st, lexemes);
    if (r) return r;
  }
  if (v.is_special(token_id)) return std::nullopt;
  std::string_view b = v.bytes(token_id);
  return lp_->advance_bytes(st, reinterpret_cast<const uint8_t*>(b.data()), b.size());
}

size_t MaskEngine::n_cached() const {
  std::lock_guard<std::mutex> g(mu_);
  return cache_.size();
}

size_t MaskEngine::max_cached() const {
  return std::max<size_t>(1024, kMaskCacheBytes / (4 * size_t(walker_->vocab().n_words())));
}

bool MaskEngine::lookup(uint64_t key, CachedMask& c) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = cache_.find(key);
  if (it == cache_.end()) return false;
  hits++;
  c = it->second;
  return true;
}

void MaskEngine::write(const CachedMask& c, uint32_t* out) const {
  const size_t n = walker_->vocab().n_words();
  if (c.words) {
    std::memcpy(out, c.words->data(), n * 4);
    return;
  }
  std::memset(out, 0, n * 4);
  for (uint32_t id : *c.ids) set_bit(out, id);
}

std::shared_ptr<const std::vector<uint32_t>> MaskEngine::expand(const CachedMask& c) const {
  return c.words ? c.words : walker_->buffers().take_bits(c.ids);
}

std::shared_ptr<const std::vector<uint32_t>> MaskEngine::cached_mask(ParseState st) {
  CachedMask c;
  return lookup(st.key(), c) ? expand(c) : nullptr;
}

bool MaskEngine::fill_cached(ParseState st, uint32_t* out) {
  CachedMask c;
  if (!lookup(st.key(), c)) return false;
  write(c, out);
  return true;
}

void MaskEngine::fill(ParseState st, uint32_t* out) {
  if (fill_cached(st, out)) return;
  auto m = compute_cached(st);
  std::memcpy(out, m->data(), m->size() * 4);
}

std::shared_ptr<const std::vector<uint32_t>> MaskEngine::mask(ParseState st) {
  CachedMask c;
  return lookup(st.key(), c) ? expand(c) : compute_cached(st);
}

std::shared_ptr<const std::vector<uint32_t>> MaskEngine::compute_cached(ParseState st) {
  const uint64_t key = st.key();
  const uint32_t n_words = walker_->vocab().n_words();
  MaskBuilder out(walker_->buffers(), n_words);
  compute(st, out);
  // at most n_words / 16 ids: their list is at most a sixteenth of the words
  const size_t max_ids = n_words / 16;
  CachedMask c;
  std::shared_ptr<std::vector<uint32_t>> m;
  if (!out.is_dense()) {  // few ids, never a bitmask: no scan
    std::vector<uint32_t>& ids = out.ids();
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    if (ids.size() <= max_ids) {
      c.ids = std::make_shared<const std::vector<uint32_t>>(std::move(ids));
      m = walker_->buffers().take_bits(c.ids);
    } else {
      out.dense();  // (the ids, sorted, into a bitmask)
      c.words = m = walker_->buffers().share(std::move(out.buffer()));
    }
  } else {
    m = std::move(out.buffer());
    // (blocks of 16 words: a mask of few tokens is mostly zero blocks, skipped with one OR each)
    std::vector<uint32_t> ids;
    const uint32_t* mw = m->data();
    for (size_t b = 0; b < n_words && ids.size() <= max_ids; b += 16) {
      const size_t e = std::min<size_t>(b + 16, n_words);
      uint32_t any = 0;
      for (size_t w = b; w < e; w++) any |= mw[w];
      if (any == 0) continue;
      for (size_t w = b; w < e && ids.size() <= max_ids; w++)
        for (uint32_t bits = mw[w]; bits != 0 && ids.size() <= max_ids; bits &= bits - 1)
          ids.push_back(uint32_t(w * 32 + unsigned(__builtin_ctz(bits))));
    }
    if (ids.size() <= max_ids) c.ids = std::make_shared<const std::vector<uint32_t>>(std::move(ids));
    else c.words = m = walker_->buffers().share(std::move(m));
  }
  std::lock_guard<std::mutex> g(mu_);
  misses++;
  if (cache_.emplace(key, std::move(c)).second) {
    order_.push_back(key);
    const size_t max_masks = max_cached();
    while (cache_.size() > max_masks && order_head_ < order_.size()) cache_.erase(order_[order_head_++]);
    if (order_head_ > order_.size() / 2 && order_head_ > 1024) {
      order_.erase(order_.begin(), order_.begin() + long(order_head_));
      order_head_ = 0;
    }
  }
  return m;  // (the same words as another thread's entry for st, if it was first)
}

void MaskEngine::compute(ParseState st, MaskBuilder& out) {
  const Vocab& v = walker_->vocab();
  std::lock_guard<std::recursive_mutex> g(lp_->mu());
  LexerDFA& lx = lp_->lexer();
  int32_t set_id = st.set_id;
  StateId s = st.lexer_state;
  if (s != DEAD && !st.pending && lx.accepts_lazy(s)) std::tie(set_id, s) = lp_->finish(set_id, s);
  if (set_id != DEAD_SET && s != DEAD) collect(set_id, s, 1, v.trie().n_nodes(), 0, out, 0);
  if (!token_lexeme_ids_.empty())  // (a grammar without token lexemes skips the parser query)
    for (int32_t lex : lp_->expected_token_lexemes(st))
      for (auto& [l, ids] : token_lexeme_ids_)
        if (l == lex)
          out.set(ids.data(), ids.data() + ids.size());
  if (lp_->is_accepting(st)) out.set(v.eos_ids().data(), v.eos_ids().data() + v.eos_ids().size());
}

void MaskEngine::collect(int32_t set_id, StateId s, uint32_t lo, uint32_t hi, uint32_t chain, MaskBuilder& out,
                         int trie_id) {
  if (lo >= hi) return;
  assemble(set_id, *walker_->walk(s, lo, hi, trie_id), chain, out);
}

void MaskEngine::assemble(int32_t set_id, const Walk& w, uint32_t chain, MaskBuilder& out) {
  if (w.slice >= 0) out.or_words(walker_->vocab().slice_words(w.slice).data());
  if (!w.words.empty()) out.or_words(w.words.data());
  else out.set(w.ids.data(), w.ids.data() + w.ids.size());
  const int tid = w.trie_id;  // a sliced root walk's boundaries are nodes of its own trie
  const TokenTrie& trie = walker_->vocab().trie(tid);
  boundaries += w.boundaries.size() + w.starts.size();
  // Before the first node of a range the restart state read no byte: its node is read again
  // from the state after the next lexeme end (an empty lexeme), a chain bounded one by one.
  for (const Boundary& bd : w.starts) {
    auto [set2, s2] = lp_->finish(set_id, bd.state);
    if (set2 == DEAD_SET) continue;
    if (chain + 1 > kMaxEmptyLexemes) {
      lp_->chain_limit_hits++;
      continue;
    }
    if (s2 != DEAD) collect(set2, s2, bd.node, bd.node + trie.size(bd.node), chain + 1, out, tid);
  }
  for (uint32_t g = 0; g < w.groups.size(); g++) {
    const BoundaryGroup& grp = w.groups[g];
    auto [set2, s2] = lp_->finish(set_id, grp.state);  // (never DEAD)
    if (set2 == DEAD_SET) continue;
    const Boundary* first = w.boundaries.data() + grp.begin;
    const Boundary* last = w.boundaries.data() + grp.end;
    if (grp.kind == BoundaryKind::After)  // a lazy lexeme ended with the node's byte
      for (const Boundary* bd = first; bd != last; ++bd)
        out.set(trie.tokens_begin(bd->node), trie.tokens_end(bd->node));
    if (grp.nodes <= direct_walk_nodes) {
      for (const Boundary* bd = first; bd != last; ++bd) {
        const uint32_t end = bd->node + trie.size(bd->node);
        if (bd->kind == BoundaryKind::Before) walk_direct(ParseState{set2, s2, true}, bd->node, end, out, trie);
        else if (bd->node + 1 < end) walk_direct(ParseState{set2, s2, false}, bd->node + 1, end, out, trie);
      }
      continue;
    }
    // after a lazy lexeme ended, a lazy lexeme matching the empty string ends before the next byte
    if (grp.kind == BoundaryKind::After && s2 != DEAD && lp_->lexer().accepts_lazy(s2)) {
      std::tie(set2, s2) = lp_->finish(set2, s2);
      if (set2 == DEAD_SET) continue;
    }
    if (s2 == DEAD) continue;
    assemble(set2, *walker_->group_walk(w, g, s2), 0, out);
  }
}

// One byte from st (LexParser::step_unlocked): compute() and the budget searches hold the
// grammar's lock.
bool MaskEngine::step(ParseState& st, unsigned b) { return lp_->step_unlocked(st, b); }

void MaskEngine::walk_direct(ParseState st0, uint32_t lo, uint32_t hi, MaskBuilder& out, const TokenTrie& trie) {
  ParseState stack[kMaxTokenBytes + 2];
  uint32_t d0 = trie.depth(lo) - 1u;
  stack[d0] = st0;
  uint32_t p = lo;
  while (p < hi) {
    uint32_t d = trie.depth(p);
    ParseState st = stack[d - 1];
    direct_nodes++;
    if (!step(st, trie.byte(p))) {
      p += trie.size(p);
      continue;
    }
    out.set(trie.tokens_begin(p), trie.tokens_end(p));
    stack[d] = st;
    p++;
  }
}

template <class T>
void mask_logits(T* logits, size_t n_cols, size_t row_stride, const uint32_t* bitmask, size_t n_words,
                 const int64_t* rows, size_t n_rows, T neg_inf) {
  size_t covered = std::min(n_cols, n_words * 32);
  for (size_t i = 0; i < n_rows; i++) {
    T* row = logits + size_t(rows[i]) * row_stride;
    const uint32_t* words = bitmask + i * n_words;
    size_t t = 0;
    for (; t + 32 <= covered; t += 32) {
      uint32_t w = words[t >> 5];
      if (w == UINT32_MAX) continue;
      if (w == 0) {
        std::fill(row + t, row + t + 32, neg_inf);
        continue;
      }
      for (unsigned b = 0; b < 32; b++) {  // branch-free, so that it vectorises
        T keep = T(T(0) - T((w >> b) & 1u));  // all ones where the token is allowed
        row[t + b] = T((row[t + b] & keep) | (neg_inf & T(~keep)));
      }
    }
    for (; t < covered; t++)
      if (!((words[t >> 5] >> (t & 31)) & 1u)) row[t] = neg_inf;
    std::fill(row + covered, row + n_cols, neg_inf);
  }
}

template void mask_logits<uint32_t>(uint32_t*, size_t, size_t, const uint32_t*, size_t, const int64_t*,
                                    size_t, uint32_t);
template void mask_logits<uint16_t>(uint16_t*, size_t, size_t, const uint32_t*, size_t, const int64_t*,
                                    size_t, uint16_t);

}  // namespace lexguide
