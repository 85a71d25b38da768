// The shared lazy lexer DFA; see lexer.h.
#include "engine/lexer.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

namespace lexguide {

namespace {
using Entries = std::vector<std::pair<uint32_t, NodeId>>;

std::atomic<uint64_t> g_alive{0};

uint64_t next_serial() {
  static std::atomic<uint64_t> n{0};
  g_alive.fetch_add(1);
  return ++n;
}

}  // namespace

LexerDFA::LexerDFA(uint32_t max_states) : LexerDFA(RegexStore(), max_states) {}

LexerDFA::LexerDFA(RegexStore rx, uint32_t max_states)
    : rx_(std::move(rx)),
      serial_(next_serial()),
      max_states_(max_states),
      states_(new std::unique_ptr<LexerState>[max_states]),
      rows_(new std::atomic<ClassRow*>[max_states]),
      has_row_(new std::atomic<bool>[max_states]),
      flags_(new uint8_t[max_states]()),
      loops_(new std::atomic<uint32_t>[max_states]),
      live_(new uint8_t[max_states]()) {
  std::lock_guard<std::recursive_mutex> g(store_mutex());
  uint8_t* zeros = static_cast<uint8_t*>(slab_alloc(256));  // one class: every byte's label 0
  std::fill(zeros, zeros + 256, uint8_t(0));
  unknown_row_ = new_row(zeros, 1, MISSING);
  dead_row_ = new_row(zeros, 1, DEAD);
  for (uint32_t i = 0; i < max_states; i++) {
    rows_[i].store(unknown_row_, std::memory_order_relaxed);
    has_row_[i].store(false, std::memory_order_relaxed);
    loops_[i].store(kLoopsUnknown, std::memory_order_relaxed);
  }
  loops_[DEAD].store(0, std::memory_order_relaxed);  // (it loops on every byte, but is no lexeme)
  intern({});  // DEAD
  rows_[DEAD].store(dead_row_, std::memory_order_release);
  has_row_[DEAD].store(true, std::memory_order_release);
}

uint32_t LexerDFA::lexeme_id(NodeId rx, bool lazy, int64_t max_tokens) {
  std::lock_guard<std::recursive_mutex> g(store_mutex());
  uint64_t key = (uint64_t(rx) << 33) ^ (uint64_t(lazy) << 32) ^ uint64_t(uint32_t(max_tokens + 1));
  // distinct keys could collide only past 2^31 regex nodes; check the fields anyway
  auto it = lexeme_ids_.find(key);
  if (it != lexeme_ids_.end() && lexeme_rx_[it->second] == rx && lexeme_lazy_[it->second] == lazy &&
      lexeme_budget_[it->second] == max_tokens)
    return it->second;
  uint32_t id = uint32_t(lexeme_rx_.size());
  lexeme_rx_.push_back(rx);
  lexeme_lazy_.push_back(lazy);
  lexeme_budget_.push_back(max_tokens);
  any_lazy_ |= lazy;
  lexeme_ids_[key] = id;
  return id;
}

StateId LexerDFA::find_state(const Entries& entries, uint64_t h) const {
  if (id_slots_.empty()) return MISSING;
  const size_t mask = id_slots_.size() - 1;
  const uint64_t tag = h >> 32;
  for (size_t i = size_t(h) & mask;; i = (i + 1) & mask) {
    const uint64_t v = id_slots_[i];
    if (v == 0) return MISSING;
    const StateId s = StateId(uint32_t(v) - 1);
    if ((v >> 32) == tag && states_[s]->entries == entries) return s;
  }
}

void LexerDFA::index_state(StateId s, uint64_t h) {
  if (2 * (n_ids_ + 1) > id_slots_.size()) {  // grow: the states' hashes again
    std::vector<uint64_t> old;
    old.swap(id_slots_);
    id_slots_.assign(std::max<size_t>(1024, 2 * old.size()), 0);
    n_ids_ = 0;
    for (uint64_t v : old)
      if (v != 0) {
        const StateId t = StateId(uint32_t(v) - 1);
        index_state(t, EntriesHash()(states_[t]->entries));
      }
  }
  const size_t mask = id_slots_.size() - 1;
  size_t i = size_t(h) & mask;
  while (id_slots_[i] != 0) i = (i + 1) & mask;
  id_slots_[i] = (h >> 32 << 32) | (uint64_t(s) + 1);
  n_ids_++;
}

StateId LexerDFA::intern(Entries entries) {
  const uint64_t h = EntriesHash()(entries);
  if (StateId found = find_state(entries, h); found != MISSING) return found;
  uint32_t sid = n_states_.load(std::memory_order_relaxed);
  if (sid >= max_states_)
    throw LimitError("max_dfa_states", max_states_,
                     "resource limit max_dfa_states=" + std::to_string(max_states_) +
                         " exceeded: the lexer automaton is too large (a regex with a large counted "
                         "repetition, or &/~ blow-up?)");
  RegexStore& rs = rx_;
  auto st = std::make_unique<LexerState>();
  for (auto& [lex, x] : entries)
    if (rs.nullable(x)) {
      st->accepting.push_back(lex);
      if (lexeme_lazy_[lex]) st->lazy_accept = true;
    }
  entry_bytes_ += entries.size() * sizeof(entries[0]) + st->accepting.size() * sizeof(uint32_t);
  bool holds_lazy = false;
  for (auto& [lex, x] : entries) holds_lazy = holds_lazy || lexeme_lazy_[lex];
  flags_[sid] = uint8_t((st->accepting.empty() ? 0 : kAccepts) | (st->lazy_accept ? kLazyAccept : 0) |
                        (holds_lazy ? kHoldsLazy : 0));
  st->entries = std::move(entries);
  states_[sid] = std::move(st);  // (its row: unknown_row_ since the DFA was made)
  index_state(sid, h);
  n_states_.store(sid + 1, std::memory_order_release);
  return sid;
}

StateId LexerDFA::start(std::vector<uint32_t> lexemes) {
  std::sort(lexemes.begin(), lexemes.end());
  lexemes.erase(std::unique(lexemes.begin(), lexemes.end()), lexemes.end());
  std::lock_guard<std::recursive_mutex> g(store_mutex());
  if (const StateId* known = start_cache_.find(lexemes)) return *known;
  Entries e;
  for (uint32_t l : lexemes) {
    if (l >= lexeme_rx_.size()) throw std::out_of_range("lexeme index out of range");
    if (lexeme_rx_[l] != NOTHING) e.emplace_back(l, lexeme_rx_[l]);
  }
  StateId s = intern(std::move(e));
  start_cache_.emplace(lexemes, s);
  return s;
}

LexerDFA::~LexerDFA() { g_alive.fetch_sub(1); }

uint64_t LexerDFA::n_alive() { return g_alive.load(); }

bool LexerDFA::is_live(StateId t) {
  if (t == DEAD) return true;
  if (live_[t]) return live_[t] == kLive;
  RegexStore& rs = rx_;
  const Entries& e = states_[t]->entries;
  bool ok = false;
  for (auto& p : e)  // regexes without & or ~ answer at once
    if (!rs.has_boolean(p.second)) { ok = true; break; }
  if (!ok)
    for (auto& p : e)
      if (rs.nonempty(p.second)) { ok = true; break; }
  live_[t] = ok ? kLive : kDeadEnd;
  return ok;
}

const Entries& LexerDFA::stepping_entries(StateId s, Entries& buf) const {
  const Entries& e = states_[s]->entries;  // stable: states are never moved or freed
  if (!any_lazy_) return e;
  const RegexStore& rs = rx_;
  buf.clear();
  for (auto& p : e)
    if (!(lexeme_lazy_[p.first] && rs.nullable(p.second))) buf.push_back(p);
  return buf;
}

StateId LexerDFA::successor(const Entries& entries, unsigned b) {
  RegexStore& rs = rx_;
  scratch_.clear();
  for (auto& [lex, x] : entries) {
    NodeId d = rs.derivative(x, b);
    if (d != NOTHING) scratch_.emplace_back(lex, d);
  }
  StateId t = find_state(scratch_, EntriesHash()(scratch_));  // most exist already: no allocation
  if (t == MISSING) t = intern(scratch_);
  return is_live(t) ? t : DEAD;
}

uint32_t LexerDFA::partition_of(const Entries& e) {
  RegexStore& rs = rx_;
  uint32_t pid = rs.partition_id(e[0].second);
  for (size_t i = 1; i < e.size(); i++) pid = rs.refine(pid, rs.partition_id(e[i].second));
  return pid;
}

void* LexerDFA::slab_alloc(size_t bytes) {
  bytes = (bytes + 7) & ~size_t(7);
  if (bytes > slab_left_) {
    // 64 KiB slabs: a row is at most 8 + 256 * 4 bytes, so at most ~1.6% of a slab is left over
    constexpr size_t kSlab = size_t(64) << 10;
    slabs_.emplace_back(new char[kSlab]);
    slab_next_ = slabs_.back().get();
    slab_left_ = kSlab;
    slab_bytes_ += kSlab;
  }
  void* p = slab_next_;
  slab_next_ += bytes;
  slab_left_ -= bytes;
  return p;
}

ClassRow* LexerDFA::new_row(const uint8_t* label, uint32_t n_classes, uint32_t fill) {
  void* p = slab_alloc(sizeof(ClassRow) + n_classes * sizeof(std::atomic<uint32_t>));
  ClassRow* r = new (p) ClassRow{label};
  std::atomic<uint32_t>* cells = r->cells();
  for (uint32_t i = 0; i < n_classes; i++) new (&cells[i]) std::atomic<uint32_t>(fill);
  return r;
}

ClassRow* LexerDFA::own_row(StateId s, const Entries& stepping) {
  ClassRow* r = rows_[s].load(std::memory_order_relaxed);  // (only written under the lock)
  if (r != unknown_row_) return r;
  const uint32_t pid = partition_of(stepping);
  if (labels_.size() <= pid) labels_.resize(size_t(pid) + 1, nullptr);
  const Partition& part = rx_.partition(pid);
  if (!labels_[pid]) {  // a copy that never moves (the store's partitions do as they grow)
    uint8_t* l = static_cast<uint8_t*>(slab_alloc(256));
    std::copy(part.label.begin(), part.label.end(), l);
    labels_[pid] = l;
  }
  r = new_row(labels_[pid], uint32_t(part.reps.size()), MISSING);
  rows_[s].store(r, std::memory_order_release);
  return r;
}

StateId LexerDFA::next_slow(StateId s, unsigned b) {
  std::lock_guard<std::recursive_mutex> g(store_mutex());
  uint32_t t = row_of(s)->at(b);
  if (t != MISSING) return t;
  Entries buf;
  const Entries& e = stepping_entries(s, buf);
  if (e.empty()) {  // nothing alive: every byte dies
    rows_[s].store(dead_row_, std::memory_order_release);
    return DEAD;
  }
  // the whole class of b at once: its bytes have the same derivative in every entry, and a
  // walk that comes back to s mostly reads other bytes of the class
  ClassRow* r = own_row(s, e);
  t = successor(e, b);
  r->cells()[r->label[b]].store(t, std::memory_order_release);
  return t;
}

void LexerDFA::compute_row(StateId s) {
  std::lock_guard<std::recursive_mutex> g(store_mutex());
  if (has_row_[s].load(std::memory_order_acquire)) return;
  Entries buf;
  const Entries& e = stepping_entries(s, buf);
  if (e.empty()) {  // nothing alive: every byte dies
    rows_[s].store(dead_row_, std::memory_order_release);
  } else {
    ClassRow* r = own_row(s, e);
    std::atomic<uint32_t>* cells = r->cells();
    for (unsigned b = 0; b < 256; b++) {  // each class from its first byte
      std::atomic<uint32_t>& c = cells[r->label[b]];
      if (c.load(std::memory_order_relaxed) == MISSING) c.store(successor(e, b), std::memory_order_release);
    }
  }
  has_row_[s].store(true, std::memory_order_release);
}

size_t LexerDFA::memory_bytes() const {
  size_t n = n_states();
  // per state: its descriptor and flags; the fixed tables of max_states_; the slabs of the
  // rows and label maps; the id table
  size_t per_state = sizeof(LexerState) + 1;
  size_t fixed = size_t(max_states_) * (2 * sizeof(void*) + sizeof(std::atomic<bool>) + 1 + 4 + 1);
  return fixed + n * per_state + slab_bytes_ + slabs_.capacity() * sizeof(void*) + labels_.capacity() * sizeof(void*) +
         id_slots_.size() * sizeof(uint64_t) + entry_bytes_ + start_cache_.memory_bytes() + lexeme_rx_.size() * 48;
}

uint32_t LexerDFA::loop_buckets(StateId s) {
  uint32_t known = loops_[s].load(std::memory_order_acquire);
  if (known != kLoopsUnknown) return known;
  const ClassRow* r = row(s);
  uint32_t leaves = 0;  // buckets with a byte that leads elsewhere
  for (unsigned b = 0; b < 256; b++)
    if (r->at(b) != s) leaves |= bucket_bit(b);
  uint32_t loops = ((uint32_t(1) << kByteBuckets) - 1) & ~leaves;
  loops_[s].store(loops, std::memory_order_release);
  return loops;
}

uint32_t LexerDFA::run_buckets(StateId s, uint32_t len) {
  if (s == DEAD) return 0;
  const LexerState& st = *states_[s];
  if (!st.has_run.load(std::memory_order_acquire)) compute_run(s);
  const LexerRun& r = st.run;
  for (int j = 0; j < kRunPoints && r.set[j]; j++)
    if (r.len[j] == kRunForever || len <= r.len[j]) return r.set[j];
  return 0;
}

// One step of a run from s over the bytes of the buckets `among`: the successor most of
// those bytes lead to among the buckets whose bytes all lead to it (alive, no lazy lexeme
// ending), and those buckets (0: no step).
std::pair<StateId, uint32_t> LexerDFA::run_step(StateId s, uint32_t among) {
  uint32_t succ[kByteBuckets];
  std::fill(succ, succ + kByteBuckets, DEAD);
  uint32_t mixed = ~among;
  for (unsigned b = 0; b < 256; b++) {
    uint32_t k = kByteBucket[b];
    if (mixed >> k & 1) continue;
    StateId t = next(s, b);  // one derivative per byte class, on first use
    if (t == DEAD || (flags_[t] & kLazyAccept)) mixed |= uint32_t(1) << k;
    else if (succ[k] == DEAD) succ[k] = t;
    else if (succ[k] != t) mixed |= uint32_t(1) << k;
  }
  // the distinct successors of uniform buckets, with their bytes and buckets
  StateId ds[kByteBuckets];
  uint32_t dbytes[kByteBuckets], dset[kByteBuckets];
  int nd = 0;
  for (int k = 0; k < kByteBuckets; k++) {
    if ((mixed >> k & 1) || succ[k] == DEAD) continue;
    int i = 0;
    while (i < nd && ds[i] != succ[k]) i++;
    if (i == nd) ds[nd] = succ[k], dbytes[nd] = 0, dset[nd] = 0, nd++;
    dbytes[i] += kBucketBytes[size_t(k)];
    dset[i] |= uint32_t(1) << k;
  }
  StateId best = DEAD;
  uint32_t best_bytes = 0, best_set = 0;
  for (int i = 0; i < nd; i++)
    if (dbytes[i] > best_bytes || (dbytes[i] == best_bytes && ds[i] < best))
      best = ds[i], best_bytes = dbytes[i], best_set = dset[i];
  return {best, best_set};
}

namespace {
// Whether x holds a counted repetition (x{lo,hi}, lo or a finite hi above 1) where its next bytes
// are read: in a concatenation's head, an alternative, an intersection's operand. Only such
// states get a run: a run derives every ASCII byte class of the state and of each step after
// it, which the walks of other states (key prefixes, literals) never need (a first version
// that gave every state a run, deriving whole rows, took 8% more instructions on the
// 40-schema first-use loop of docs/engine.md).
bool counts_next(const RegexStore& rs, NodeId x, int depth) {
  if (depth > 8) return false;
  const uint32_t* a = rs.children(x);
  switch (rs.kind(x)) {
    case K_REPEAT: return a[1] > 1 || (a[2] != kInf && a[2] > 1);
    case K_CONCAT: return counts_next(rs, a[0], depth + 1);
    case K_ALT:
    case K_AND:
      for (uint32_t i = 0; i < rs.n_children(x); i++)
        if (counts_next(rs, a[i], depth + 1)) return true;
      return false;
    default: return false;
  }
}
}  // namespace

void LexerDFA::compute_run(StateId s0) {
  std::lock_guard<std::recursive_mutex> g(store_mutex());
  if (states_[s0]->has_run.load(std::memory_order_acquire)) return;
  bool counted = false;
  for (auto& [lex, x] : states_[s0]->entries) counted = counted || counts_next(rx_, x, 0);
  if (!counted) {  // no run
    states_[s0]->has_run.store(true, std::memory_order_release);
    return;
  }
  // The chain s0 -> t1 -> ... (step i keeps the buckets of step i - 1 whose bytes all lead on
  // to one state; ASCII buckets only: a byte above 0x7F starts or continues a UTF-8
  // character, whose successor is never the one ASCII bytes share, and deriving them would
  // build those side states for every count), up to a state whose run is known, a state
  // without a step, a loop, a cycle or kRunSteps states. Then the runs back to front: the
  // chain's states get theirs too (a count's run is the next count's, one byte longer).
  std::vector<StateId> chain;
  std::vector<uint32_t> sets;
  uint32_t among = kAsciiBuckets;
  StateId s = s0;
  LexerRun tail;  // the run of the state after the chain's last step
  bool loops = false, cut = false;
  while (true) {
    if (s != s0 && states_[s]->has_run.load(std::memory_order_acquire)) {
      tail = states_[s]->run;
      break;
    }
    if (chain.size() >= kRunSteps || std::find(chain.begin(), chain.end(), s) != chain.end()) {
      cut = true;
      break;
    }
    auto [t, set] = run_step(s, among);
    if (!set) {
      if (s != s0) states_[s]->has_run.store(true, std::memory_order_release);  // no run
      break;
    }
    chain.push_back(s);
    sets.push_back(set);
    if (t == s) {
      loops = true;
      break;
    }
    among = set;
    s = t;
  }
  // a cut chain's last states know little beyond it: they are left to their own first use
  size_t keep = cut ? chain.size() - std::min<size_t>(chain.size() - 1, kRunSteps / 4) : chain.size();
  LexerRun next = tail;
  for (size_t i = chain.size(); i-- > 0;) {
    LexerRun out;
    out.len[0] = loops && i + 1 == chain.size() ? kRunForever : 1;
    out.set[0] = sets[i];
    if (out.len[0] != kRunForever) {
      int n = 0;
      for (int j = 0; j < kRunPoints && next.set[j]; j++) {
        uint32_t set = sets[i] & next.set[j];
        if (!set) break;
        uint16_t len = next.len[j] == kRunForever ? kRunForever
                                                  : uint16_t(std::min<uint32_t>(next.len[j] + 1u, kRunForever - 1));
        if (set == out.set[n]) {
          out.len[n] = len;
        } else if (n + 1 < kRunPoints) {
          out.len[++n] = len;
          out.set[n] = set;
        } else {
          break;  // more change points than kept: shorter strings only
        }
      }
    }
    if (i < keep || i == 0) {
      states_[chain[i]]->run = out;
      states_[chain[i]]->has_run.store(true, std::memory_order_release);
    }
    next = out;
  }
  if (chain.empty()) states_[s0]->has_run.store(true, std::memory_order_release);
}

bool LexerDFA::can_extend(StateId s) {
  if (s == DEAD) return false;
  const ClassRow* r = row(s);
  for (unsigned b = 0; b < 256; b++)
    if (r->at(b) != DEAD) return true;
  return false;
}

StateId LexerDFA::without_extensions(StateId s, const std::vector<uint32_t>& lexemes) {
  std::lock_guard<std::recursive_mutex> g(store_mutex());
  RegexStore& rs = rx_;
  Entries out;
  for (auto& [lex, x] : states_[s]->entries) {
    bool capped = std::find(lexemes.begin(), lexemes.end(), lex) != lexemes.end();
    if (!capped) out.emplace_back(lex, x);
    else if (rs.nullable(x)) out.emplace_back(lex, EPSILON);
  }
  return intern(std::move(out));
}

}  // namespace lexguide
